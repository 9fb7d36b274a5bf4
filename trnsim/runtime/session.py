"""Run a whole Program on a Device: allocate its tensors, replay its streams, report.

This is what `trnsim run` does, as a library call: `run_program(load("x.yaml"), load_chip("trn2"))`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trnsim.config import ChipConfig
from trnsim.errors import TrnsimError
from trnsim.gcpause import no_gc
from trnsim.isa import Ap
from trnsim.memory.buffer import bind
from trnsim.report.summary import summarize
from trnsim.runtime import Device, Event
from trnsim.trace.program import Program


@dataclass
class RunResult:
    """What a run produced: the device (tensors, recorder) and the summary dict."""

    device: Device
    summary: dict
    program: Program

    @property
    def total_ps(self) -> int:
        return self.device.env.now

    def tensor(self, name: str) -> np.ndarray:
        """A tensor's final values (functional mode)."""
        arr = self.device.tensors[name].array
        if arr is None:
            raise TrnsimError(f"tensor {name} has no values: the run was timing-only")
        return arr

    def tile(self, kernel: str, name: str, core: int = 0) -> np.ndarray:
        """A tile's values after the last launch of `kernel` on physical core `core`."""
        tiles = self.device.kernel_tiles.get((kernel, core))
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
        used[name] = list(seen)
    homes: dict[str, int] = {}
    for stream in program.streams:
        for step in stream.steps:
            if step.kind == "copy":
                names = [a.name if isinstance(a, Ap) else a for a in step.arg]
            else:
                names = used[step.arg] if step.kind == "launch" else []
            for n in names:
                homes.setdefault(n, stream.core)
    return homes


def _device(program: Program, cfg: ChipConfig, mode: str, lnc: int | None) -> Device:
    """A device with the program's tensors allocated, each on its home core's HBM stack.
    Errors about the trace's `lnc:` or a tensor's allocation carry its line."""
    if lnc is None and program.lnc is not None and program.lnc not in cfg.lnc_allowed:
        raise TrnsimError(
            f"{program.source}:{program.lines.get('lnc', 0)}: lnc {program.lnc} is not "
            f"supported on {cfg.name}; expected one of {', '.join(map(str, cfg.lnc_allowed))}"
        )
    dev = Device(cfg, mode, lnc if lnc is not None else program.lnc, program.seed, program.source)
    homes = home_cores(program)
    for t in program.tensors.values():
        if t.view is None:
            try:
                dev.malloc(t.name, t.shape, t.dtype, t.init, t.on, homes.get(t.name, 0))
            except TrnsimError as e:
                raise type(e)(f"{program.source}:{t.line}: tensors.{t.name}: {e}") from None
    for t in program.tensors.values():
        if t.view is not None:
            dev.view(t.name, t.view, t.shape)
    return dev


def check_program(program: Program, cfg: ChipConfig, lnc: int | None = None) -> int:
    """Check everything a run would check before the clock starts (tensors fit in HBM, tiles in
    SBUF/PSUM, every instruction's operands, shapes and limits), without simulating. Returns the
    number of instructions checked."""
    dev = _device(program, cfg, "timing", lnc)
    count = 0
    for stream in program.streams:
        cores = dev.chip.physical(stream.core)
        for step in stream.steps:
            if step.kind != "launch":
                continue
            kernel = program.kernels[step.arg]
            dev.check_launch(kernel, stream.core)
            for core, prog in zip(cores, kernel.per_core):
                core.prepare(kernel.name, prog, dev.tensors, dev.rng, program.source)
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

    `progress(now_ps, events)` is called now and then during long runs. `check` compares each
    high-level op's output with its numpy reference (high-level ops are not supported yet, so
    there is nothing to compare and the summary's `check` is empty).
    """
    mode = mode or program.mode
    with no_gc():
        return _run(program, cfg, mode, lnc, progress, check)


def _run(
    program: Program, cfg: ChipConfig, mode: str, lnc: int | None, progress, check: bool
) -> RunResult:
    dev = _device(program, cfg, mode, lnc)
    dev.progress = progress
    events: dict[str, Event] = {}
    streams = {s.name: dev.stream(s.core, s.name) for s in program.streams}
    for s in program.streams:
        st = streams[s.name]
        for step in s.steps:
            if step.kind == "launch":
                st.launch(program.kernels[step.arg])
            elif step.kind == "copy":
                src, dst = (
                    _operand(dev, a, f"stream {s.name}: copy {key}")
                    for a, key in zip(step.arg, ("src", "dst"))
                )
                st.memcpy(dst, src)
            elif step.kind == "record":
                ev = events[step.arg] = events.get(step.arg) or dev.event(step.arg)
                st.record_event(ev)
            elif step.kind == "wait":
                ev = events[step.arg] = events.get(step.arg) or dev.event(step.arg)
                st.wait_event(ev)
    dev.synchronize()
    summary = summarize(
        dev.recorder,
        cfg,
        dev.env.now,
        trace=program.name,
        mode=mode,
        timing=program.timing,
        lnc=dev.chip.lnc,
    )
    if check:
        summary["check"] = {}
    return RunResult(dev, summary, program)


def _operand(dev: Device, a, where: str):
    """A copy step's operand (a tensor name, possibly sliced) bound to the device's tensor."""
    ap = a if isinstance(a, Ap) else Ap(a, (), a)
    if ap.name not in dev.tensors:
        raise TrnsimError(f"{where}: no tensor {ap.name}")
    return bind(ap, dev.tensors[ap.name], where)


def save_outputs(result: RunResult, out_dir: str | Path) -> list[Path]:
    """Save the program's `outputs:` (all HBM tensors when none are listed) as .npy files.

    numpy's .npy format has no bfloat16 or fp8 types (they would load as raw bytes), so those
    tensors are saved as float32, which holds each of their values exactly."""
    prog = result.program
    names = prog.outputs or [n for n, t in prog.tensors.items() if t.on == "hbm"]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for n in names:
        p = out / f"{n}.npy"
        values = result.tensor(n)
        dt = prog.tensors[n].dtype
        if dt.is_float and dt.name not in ("float32", "float16"):
            values = values.astype(np.float32)
        np.save(p, values)
        paths.append(p)
    return paths
