"""Run a whole Program on the device API: allocate its tensors, run each of its streams as a host
thread, report.

This is what `trnsim run` does, as a library call: `run_program(load("x.yaml"), load_chip("trn2"))`.
"""

from __future__ import annotations

import math
from copy import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import simpy

from trnsim.config import ChipConfig
from trnsim.errors import TrnsimError
from trnsim.gcpause import no_gc
from trnsim.isa import Ap
from trnsim.kernels import lower_cores
from trnsim.kernels.check import compare, expected_outputs
from trnsim.kernels.roofline import op_rows
from trnsim.memory.buffer import Buffer, bind
from trnsim.memory.init import initial_values
from trnsim.report.files import replacing
from trnsim.report.summary import summarize
from trnsim.runtime.device import Device
from trnsim.runtime.estimate import Estimated, Writes
from trnsim.runtime.event import Event
from trnsim.runtime.memory import TensorView
from trnsim.runtime.multichip import CollectiveCall
from trnsim.runtime.reuse import ReuseConflict, ReuseState
from trnsim.runtime.reuse import enabled as reuse_enabled
from trnsim.trace.ops import OPS
from trnsim.trace.program import Program


@dataclass
class RunResult:
    """What a run produced: the device of logical core 0 (its chip's clock and recorder), the
    summary dict and the program's tensors, by name. On a system: the device of the first
    rank that ran, its tensors, every rank's (`ranks`: rank -> tensors) and the
    `SystemContext` (`system`: its chips' recorders, its collectives)."""

    device: Device
    summary: dict
    program: Program
    tensors: dict[str, Buffer]
    ranks: dict[int, dict[str, Buffer]] | None = None
    system: object = None

    @property
    def total_ps(self) -> int:
        return self.device.env.now

    def tensor(self, name: str, rank: int | None = None) -> np.ndarray:
        """A tensor's final values (functional mode); on a system, rank `rank`'s copy (default:
        the first rank's)."""
        tensors = self.tensors
        if rank is not None:
            if not self.ranks or rank not in self.ranks:
                raise TrnsimError(f"tensor {name}: rank {rank} ran no stream of this run")
            tensors = self.ranks[rank]
        arr = tensors[name].array
        if arr is None:
            raise TrnsimError(f"tensor {name} has no values: the run was timing-only")
        return arr

    def tile(self, kernel: str, name: str, core: int = 0) -> np.ndarray:
        """A tile's values after the last launch of `kernel` on physical core `core`."""
        tiles = self.device.ctx.kernel_tiles.get((kernel, core))
        if tiles is None or name not in tiles:
            raise TrnsimError(f"no tile {name} of kernel {kernel} on core {core}")
        if tiles[name].array is None:
            raise TrnsimError(f"tile {name} has no values: the run was timing-only")
        return tiles[name].array


def home_cores(program: Program) -> dict[str, int]:
    """The logical core whose HBM stack each tensor lives on: the first stream core using it."""
    used: dict[str, list[str]] = {}  # kernel -> operand names, in order
    for name, k in program.kernels.items():
        seen: dict[str, None] = {}
        for prog in k.per_core:
            for ins in prog.instructions:
                for v in ins.op_getter()(ins):
                    if type(v) is Ap:
                        seen[v.name] = None
        for op in k.ops:  # cat's tensors, split's outs too
            for _, v, _ in OPS[op.op].accesses(op.args, program.tensors):
                seen[v] = None
        used[name] = list(seen)
    homes: dict[str, int] = {}
    core_of = {s.name: s.core for s in program.streams}
    for stream in program.streams:
        for step in stream.steps:
            core = core_of.get(step.stream, stream.core)
            if step.kind == "copy":
                names = [a.name if isinstance(a, Ap) else a for a in step.arg]
            else:
                names = used[step.arg] if step.kind == "launch" else []
            for n in names:
                homes.setdefault(n, core)
    return homes


def _devices(
    program: Program, cfg: ChipConfig, mode: str, lnc: int | None
) -> tuple[list[Device], dict[str, Buffer]]:
    """The chip's devices, and the program's tensors allocated through them: each HBM tensor on
    its home core's stack, each host tensor a numpy array. Errors about the trace's `lnc:` or
    a tensor's allocation carry its line."""
    single_chip(program)
    if lnc is None and program.lnc is not None and program.lnc not in cfg.lnc_allowed:
        raise TrnsimError(
            f"{program.source}:{program.lines.get('lnc', 0)}: lnc {program.lnc} is not "
            f"supported on {cfg.name}; expected one of {', '.join(map(str, cfg.lnc_allowed))}"
        )
    dev0 = Device(cfg, 0, mode, lnc if lnc is not None else program.lnc, program.seed,
                  program.source)  # fmt: skip
    ctx = dev0.ctx
    devs = [dev0] + [Device(ctx, i) for i in range(1, ctx.chip.logical_cores)]
    for stream in program.streams:
        if not 0 <= stream.core < len(devs):
            raise TrnsimError(
                f"{program.source}:{stream.line}: streams.{stream.name}.core: {stream.core} does "
                f"not exist; expected a logical core 0..{len(devs) - 1} ({cfg.name} at lnc "
                f"{ctx.chip.lnc})"
            )
    homes = home_cores(program)
    return devs, allocate_tensors(program, lambda name: devs[homes.get(name, 0)])


def single_chip(program: Program) -> None:
    """Raise a TrnsimError at the line of a `rank:` or a `collective:` step: on one chip (no
    `system:`, no `--system`) there is no rank and no collective."""
    hint = "system: NAME in the trace, or trnsim run --system NAME"
    if program.system is not None:
        hint = (f"a run on the trace's system ({program.system}): trnsim run, or "
                f"trnsim.runtime.system_run.run_on_system")  # fmt: skip
    for i, st in enumerate(program.streams):
        if st.rank is not None:
            raise TrnsimError(f"{program.source}:{st.lines.get('rank', st.line)}: streams[{i}]"
                              f".rank: a rank needs a system of chips; expected {hint} (or "
                              f"core: on one chip)")  # fmt: skip
        for j, step in enumerate(st.steps):
            if step.kind == "collective":
                raise TrnsimError(f"{program.source}:{step.line}: streams[{i}].do[{j}]."
                                  f"collective: a collective needs a system of chips; expected "
                                  f"{hint}")  # fmt: skip


def allocate_tensors(program: Program, device_of, rng=None) -> dict[str, Buffer]:
    """The program's tensors, by name: each HBM tensor allocated on `device_of(name)`'s home
    stack, each host tensor a numpy array, views bound to their tensors; random inits drawn
    from `rng` (default: the device's chip's). Errors name the tensor's line."""
    tensors: dict[str, Buffer] = {}
    views: dict[str, TensorView] = {}
    for t in program.tensors.values():
        if t.view is not None:
            continue
        try:
            buf = _allocate(t, device_of(t.name), tensors, rng)
        except TrnsimError as e:
            raise type(e)(f"{program.source}:{t.line}: tensors.{t.name}: {e}") from None
        if buf is None:
            continue
        v = views[t.name] = buf.view(t.dtype, t.shape)
        tensors[t.name] = v.bound(t.name)
    for t in program.tensors.values():
        if t.view is None:
            continue
        if t.view in views:
            v = views[t.name] = _view(views[t.view], t)
            tensors[t.name] = v.bound(t.name)
        else:
            base = tensors[t.view]
            arr = base.array.reshape(t.shape) if base.array is not None else None
            tensors[t.name] = Buffer(t.name, base.memory, t.shape, t.dtype, arr, base.offset)
    return tensors


def _view(base: TensorView, t) -> TensorView:
    """Tensor `t`, a view of `base`: the same elements in another shape, or a strided view
    (`strides`, `offset` in elements of its dtype, which may differ from base's)."""
    if t.strides is None:
        return base.view(t.shape)
    return base.buffer.view(t.dtype, t.shape, t.strides, base.offset + t.offset * t.dtype.itemsize)


def _allocate(t, dev: Device, tensors: dict[str, Buffer], rng=None):
    """Tensor `t`: a host tensor goes into `tensors` (None is returned), an HBM tensor is
    allocated on `dev` and its buffer returned; random values from `rng` (default the chip's)."""
    ctx = dev.ctx
    rng = ctx.rng if rng is None else rng
    what = f"tensor {t.name}: {list(t.shape)} {t.dtype.name}"
    if t.on == "host":
        nbytes = math.prod(t.shape) * t.dtype.itemsize
        ctx.reserve_backing(nbytes, what)
        arr = initial_values(t.init, t.shape, t.dtype, rng, f"tensor {t.name}")
        tensors[t.name] = Buffer(t.name, "host", t.shape, t.dtype, arr)
        return None
    return dev._malloc(
        math.prod(t.shape) * t.dtype.itemsize,
        what,
        t.name,
        lambda t=t: initial_values(t.init, t.shape, t.dtype, rng, f"tensor {t.name}"),
    )


def check_fits(program: Program, cfg: ChipConfig, lnc: int | None = None) -> None:
    """Raise the error a run would give when the program's tensors do not fit (HBM, the lnc,
    this machine's memory for host values), allocating nothing: shapes only. `trnsim run`
    calls it before its race check lowers any op, so a [10^12, 10^12] tensor is refused at
    once instead of lowered."""
    _devices(program, cfg, "timing", lnc)


def check_program(program: Program, cfg: ChipConfig, lnc: int | None = None) -> int:
    """Check everything a run would check before the clock starts (tensors fit in HBM, tiles in
    SBUF/PSUM, every instruction's operands, shapes and limits), without simulating. Returns the
    number of instructions checked."""
    devs, tensors = _devices(program, cfg, "timing", lnc)
    ctx = devs[0].ctx
    program = lowered(program, cfg, ctx.chip.lnc)
    count = 0
    for stream in program.streams:
        cores = ctx.chip.physical(stream.core)
        for step in stream.steps:
            if step.kind != "launch":
                continue
            kernel = program.kernels[step.arg]
            if kernel.estimate is not None:
                continue
            devs[stream.core].bind_tensors(kernel, tensors, False)
            for core, prog in zip(cores, kernel.per_core):
                core.prepare(kernel.name, prog, tensors, ctx.rng, program.source)
                count += len(prog.instructions)
    return count


def run_program(
    program: Program,
    cfg: ChipConfig,
    mode: str | None = None,
    lnc: int | None = None,
    progress=None,
    check: bool = False,
) -> RunResult:
    """Simulate `program` on a chip described by `cfg` and summarise the run.

    Each stream of the program is a host thread issuing its steps, in order, through the device
    API (`_host_thread`). `progress(now_ps, events)` is called now and then during long runs.
    High-level kernels (`ops:`) are lowered by the kernel library (`lowered`). `check`
    compares each op's output with its numpy reference (`trnsim.kernels.check`): the summary's
    `check` maps each op compared to {ok, max_abs_err, max_rel_err}, and `check_note` says why
    when nothing could be compared.
    """
    mode = mode or program.mode
    reuse = ReuseState() if reuse_enabled() else None
    with no_gc():
        while True:
            try:
                return _run(program, cfg, mode, lnc, progress, check, reuse)
            except ReuseConflict as e:  # a replay overlapped other work: again, without it
                if e.ordinal in reuse.deny or len(reuse.deny) >= MAX_REUSE_RESTARTS:
                    reuse = None
                else:
                    reuse.deny.add(e.ordinal)
                    reuse.restart()


# A run whose replays keep overlapping other streams' work is simulated plainly after this many
# restarts (each restart simulates the whole run again, up to the next conflict).
MAX_REUSE_RESTARTS = 3


def _run(
    program: Program,
    cfg: ChipConfig,
    mode: str,
    lnc: int | None,
    progress,
    check: bool,
    reuse: ReuseState | None = None,
) -> RunResult:
    devs, tensors = _devices(program, cfg, mode, lnc)
    ctx = devs[0].ctx
    ctx.progress = progress
    ctx.reuse = reuse
    env = ctx.env
    written = program
    program = lowered(program, cfg, ctx.chip.lnc)
    initial = (
        {n: b.array.copy() for n, b in tensors.items() if b.array is not None}
        if check and mode == "functional"
        else None
    )
    events: dict[str, Event] = {}
    recorded: dict[str, simpy.Event] = {}  # event name -> fires when some stream records it
    for s in program.streams:
        for step in s.steps:
            if step.kind in ("record", "wait") and step.arg not in events:
                events[step.arg] = devs[s.core].event(enable_timing=True, name=step.arg)
                recorded[step.arg] = env.event()
    threads = []
    streams = {s.name: devs[s.core].stream(s.name) for s in program.streams}
    one = bind_program(program, ctx, tensors)
    bound = dict.fromkeys(streams, one)
    for s in program.streams:
        thread = ctx.thread(f"stream {s.name}")
        run = _host_thread(ctx, thread, streams, s, program, bound, events, recorded)
        threads.append(env.process(run))
    ctx.run_until(env.all_of(threads))
    ctx.run_all()
    ctx.host = ctx.threads[0]  # later calls on the result's devices come from the main thread
    ctx.host.now = env.now
    summary = summarize(
        ctx.recorder,
        cfg,
        env.now,
        trace=program.name,
        mode=mode,
        timing=program.timing,
        lnc=ctx.chip.lnc,
        ops=_op_rows(written, program, cfg, ctx.chip.lnc),
    )
    if check:
        summary["check"], note = _check(written, tensors, initial)
        if note:
            summary["check_note"] = note
    return RunResult(devs[0], summary, program, tensors)


def bind_program(program: Program, ctx, tensors: dict, rank: int | None = None) -> Bound:
    """The program's estimated ops and recorded writes bound to `tensors` on `ctx`'s chip."""
    estimates = {n: Estimated(k, ctx, tensors) for n, k in program.kernels.items() if k.estimate}
    writes = {
        n: Writes(k, k.writes, ctx, tensors)
        for n, k in program.kernels.items()
        if k.writes and ctx.functional
    }
    return Bound(tensors, estimates, writes, rank)


def lowered(program: Program, cfg: ChipConfig, lnc: int = 1) -> Program:
    """`program` with each high-level kernel (`ops:`) lowered by the kernel library to a
    low-level kernel over the `lnc` physical cores of a logical core (`kernels.lower_cores`;
    the same program when it has none). A TraceError of the library names the trace file and
    the op's line."""
    if all(k.low_level or k.estimate for k in program.kernels.values()):
        return program
    key = (id(program), id(cfg), lnc, _fingerprint(program))
    last = _LOWERED.get("last")
    if last is not None and last[0] == key:
        return last[1]  # `trnsim run` lowers for its race check, then to run: once
    kernels = {}
    done: dict[tuple, list] = {}  # the kernels' content -> its lowering, in this program
    for name, k in program.kernels.items():
        if k.low_level or k.estimate:
            kernels[name] = k
        else:
            n = min(lnc, k.cores or lnc)  # `cores:` a recorded op too small to split ran on
            content = (n, tuple((op.op, repr(op.args), op.line) for op in k.ops))
            cores = done.get(content) if SHARE_LOWERINGS else None
            if cores is None:
                cores = done[content] = lower_cores(k.ops, program.tensors, cfg, n,
                                                    program.source)  # fmt: skip
            else:  # the same ops on the same tensors: the same programs (a rank file's copies)
                cores = [copy(p) for p in cores]  # objects of its own (`Core.prepare`'s cache)
            kernels[name] = replace(k, per_core=cores)  # its ops, cores and writes kept
    out = replace(program, kernels=kernels)
    _LOWERED["last"] = (key, out, program, cfg)  # program and cfg kept: their ids stay theirs
    return out


_LOWERED: dict[str, tuple] = {}  # the last lowering: (key, lowered program, program, config)

# Kernels of one program whose ops are the same (op, arguments and line: the copies of a kernel
# in the rank files of `trnsim ranks replicate`, merged into one program over the same tensors)
# are lowered once (`lowered`); the others get copies of its CoreProgram objects. A 64-rank
# replay of a DDP step lowers its 241 kernels once instead of 64 times (docs/distributed.md).
# False lowers every kernel on its own (tests compare the two).
SHARE_LOWERINGS = True


def _fingerprint(program: Program) -> tuple:
    """What a lowering depends on beyond the program's identity, should it be changed in place:
    its tensors' shapes and dtypes, and its kernels' ops and their arguments."""
    return (
        tuple((n, t.shape, t.dtype.name) for n, t in program.tensors.items()),
        tuple(
            (n, tuple((op.op, tuple(op.args.items())) for op in k.ops))
            for n, k in program.kernels.items()
        ),
    )


def _op_rows(written: Program, program: Program, cfg: ChipConfig, lnc: int) -> dict:
    """For the per-op report: each high-level kernel -> (its op rows with their rooflines on
    the `lnc` cores, `kernels.roofline.op_rows`, and the plan its lowering named, if any,
    `KernelBuilder.plan`; per physical core, its instructions' row tags)."""
    out = {}
    for name, k in written.kernels.items():
        if k.low_level or k.estimate:
            continue
        cores = program.kernels[name].per_core
        rows = op_rows(k.ops, written.tensors, cfg, lnc)
        for i, row in enumerate(rows):
            plan = next((p.plans[i] for p in cores if i in p.plans), None)
            if plan is not None:
                row["plan"] = plan
        out[name] = (rows, [p.op_of for p in cores])
    return out


def _check(program: Program, tensors: dict, initial: dict | None) -> tuple[dict, str | None]:
    """--check: ({op key: {ok, max_abs_err, max_rel_err}}, None) (`trnsim.kernels.check`), or
    ({}, why nothing could be compared)."""
    if all(k.low_level or k.estimate for k in program.kernels.values()):
        return {}, "the trace has no high-level ops (ops:) to compare"
    if initial is None:
        return {}, "a timing-mode run computes no values (use --mode functional)"
    dtypes = {n: b.dtype for n, b in tensors.items()}
    expected, why = expected_outputs(program, initial, dtypes)
    if why:
        return {}, why
    return {
        key: compare(values, tensors[t].array, dtypes[t].name, op)
        for key, (t, values, op) in expected.items()
    }, None


class Bound(NamedTuple):
    """What a stream's steps act on: its rank's tensors (name -> Buffer), estimated ops and
    recorded writes (`estimate`), and its rank (None on one chip, where every stream shares
    one set)."""

    tensors: dict
    estimates: dict
    writes: dict
    rank: int | None = None


def _host_thread(ctx, thread, streams, spec, program, bound, events, recorded):
    """One trace stream as a host thread: its steps are API calls, in order, each at the
    thread's clock, on its stream (or the stream a step names), with that stream's `Bound`
    tensors (`bound`: stream name -> Bound). `wait: e` blocks the thread until some stream has
    recorded `e`, then calls `wait_event`; `synchronize` blocks it until the stream is done. An
    estimate kernel is launched by its duration (`Estimated`); a kernel's recorded `writes:`
    are written when it ends (`Writes`); a collective is the stream's rank's part of it."""
    env = ctx.env
    for step in spec.steps:
        kind, arg = step.kind, step.arg
        name = step.stream or spec.name
        stream, b = streams[name], bound[name]
        if kind == "synchronize":
            if stream._idle is not None:
                thread.waiting = f"its stream {stream.name} to finish"
                yield stream._idle
                thread.waiting = None
            thread.wait_until("stream.synchronize", env.now, stream.name)
            continue
        if kind == "wait" and not recorded[arg].triggered:
            thread.waiting = f"event '{arg}', which no stream has recorded"
            yield recorded[arg]
            thread.waiting = None
            thread.wait_until("wait for a record", env.now, arg)
        stream.ctx.host = thread
        if kind == "launch" and arg in b.estimates:
            e = b.estimates[arg]
            stream.launch_timed(arg, e.duration_ps, e)
        elif kind == "launch":
            stream.launch(program.kernels[arg], b.tensors)
            if arg in b.writes:
                stream.launch_host_func(b.writes[arg])
        elif kind == "copy":
            src, dst = (
                _operand(b.tensors, a, f"stream {spec.name}: copy {key}")
                for a, key in zip(arg, ("src", "dst"))
            )
            stream.memcpy_async(dst, src)
        elif kind == "record":
            stream.record_event(events[arg])
        elif kind == "wait":
            stream.wait_event(events[arg])
        elif kind == "collective":
            stream.collective(collective_call(arg, b, program.source))
        if thread.now > env.now:
            yield env.timeout(thread.now - env.now)
        if kind == "record" and not recorded[arg].triggered:
            recorded[arg].succeed()


def collective_call(c, b: Bound, source: str) -> CollectiveCall:
    """A trace's placed `collective:` step as its rank's call, on the rank's tensors; its label
    names the trace file (not its folder: reports stay the same wherever the file lies), the
    line, the op and the tensor."""
    label = f"{Path(c.source or source).name}:{c.line} {c.op}" + (
        f" {c.tensor}" if c.tensor else ""
    )
    src = b.tensors[c.tensor] if c.tensor else None
    dst = b.tensors[c.out] if c.out else None
    return CollectiveCall(b.rank, c.op, c.group, c.nbytes, c.dtype, c.reduce_op, c.algorithm,
                          c.root or 0, c.pairs, src, dst, label, counts=c.counts)  # fmt: skip


def _operand(tensors: dict[str, Buffer], a, where: str):
    """A copy step's operand (a tensor name, possibly sliced) bound to the program's tensor."""
    ap = a if isinstance(a, Ap) else Ap(a, (), a)
    if ap.name not in tensors:
        raise TrnsimError(f"{where}: no tensor {ap.name}")
    return bind(ap, tensors[ap.name], where)


def save_outputs(result: RunResult, out_dir: str | Path) -> list[Path]:
    """Save the program's `outputs:` (all HBM tensors when none are listed) as .npy files; on a
    system, each rank's in a folder of its own (`DIR/rank3/y.npy`).

    numpy's .npy format has no bfloat16 or fp8 types (they would load as raw bytes), so those
    tensors are saved as float32, which holds each of their values exactly."""
    if result.ranks is not None:
        return [
            p for r in sorted(result.ranks) for p in _save(result, Path(out_dir, f"rank{r}"), r)
        ]
    return _save(result, Path(out_dir), None)


def _save(result: RunResult, out: Path, rank: int | None) -> list[Path]:
    prog = result.program
    names = prog.outputs or [n for n, t in prog.tensors.items() if t.on == "hbm"]
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for n in names:
        p = out / f"{n}.npy"
        values = result.tensor(n, rank)
        dt = prog.tensors[n].dtype
        if dt.is_float and dt.name not in ("float32", "float16"):
            values = values.astype(np.float32)
        with replacing(p, "wb") as fh:
            np.save(fh, values)
        paths.append(p)
    return paths
