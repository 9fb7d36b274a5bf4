"""The chips of a System under the device API, and the collectives their streams run.

A `SystemContext` puts a `SystemConfig`'s chips on one SimPy clock and one fluid model
(`trnsim.system.System`), with a `World` (`trnsim.collectives`) that runs collectives on them.
Each chip gets a `ChipContext` when first used (the first chip's is the root: the clock is
run, errors kept and deadlocks reported there); `device(rank)` is the `Device` of a rank: its
chip's logical core (docs/systems.md, "Ranks").

A collective is an item of a stream (`Stream.collective`, the trace's `collective:` step, a
`Communicator` call): when the stream reaches it, its rank posts it on the World
(`World.post`: the k-th collective a rank posts on a group meets the k-th of every other rank
of the group) and the stream waits for it without holding its logical core (`run_collective`):
kernels of the rank's other streams run meanwhile, as on a CC stream. In functional mode its
input is read from device memory when it is posted and its result written when it completes;
the World reduces in fp32 and rounds once per hop, as the DMA does. Each completed collective
is kept (`records`: its `Result`, the bytes each link carried for it) and each rank's part is
a span of its chip's recorder (`Recorder.collectives`), for the report and the timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from trnsim.collectives import OPS, Result, Settings, World, build, select
from trnsim.collectives.run import REDUCE_OPS
from trnsim.collectives.schedule import chunk_units
from trnsim.config import SystemConfig
from trnsim.dtypes import DTYPES, DType
from trnsim.errors import TrnsimError
from trnsim.memory.buffer import Buffer
from trnsim.report.recorder import CollectiveSpan
from trnsim.runtime.collective_check import check_collective
from trnsim.runtime.context import MAX_BACKING_BYTES, ChipContext
from trnsim.runtime.device import Device
from trnsim.runtime.errors import InvalidValueError
from trnsim.system.system import System

__all__ = ["SystemContext", "CollectiveCall", "CollectiveRecord"]

COPIES = ("all_gather", "all_to_all", "all_to_allv", "broadcast", "send_recv", "permute")


class CollectiveCall(NamedTuple):
    """One rank's part of a collective, as a stream item holds it: the World's arguments
    (`nbytes` is each rank's buffer as `World.post` takes it), the rank's input `src` and
    output `dst` in device memory (None: no values; `dst` None with a `src`: in place), and a
    `label` naming it in reports and errors (a trace's file, line and op); `sink`, a list the
    collective's `Result` is appended to when it completes (a `Communicator`'s `Work`);
    `counts`, an all_to_allv's matrix (`nbytes`: its largest row, in bytes: the rank sends
    its row packed at the start of `src` and receives its column packed at the start of
    `dst`, in group order)."""

    rank: int
    op: str
    group: tuple[int, ...]
    nbytes: int
    dtype: DType
    reduce_op: str = "sum"
    algorithm: str | None = None
    root: int = 0
    pairs: tuple[tuple[int, int], ...] = ()
    src: Buffer | None = None
    dst: Buffer | None = None
    label: str = ""
    sink: list | None = None  # receives the `Result` when the collective completes
    counts: tuple[tuple[int, ...], ...] = ()  # all_to_allv: elements from group rank i to j


@dataclass
class CollectiveRecord:
    """A completed collective: its `Result` (times, algorithm, bandwidths), the bytes each link
    carried for it (its schedule's transfers over their routes), the label of the call that
    posted it first, and, with `check`, how its outputs compare with numpy's
    ({ok, max_abs_err, max_rel_err})."""

    seq: int
    label: str
    result: Result
    link_bytes: dict[str, float]
    check: dict | None = None


@dataclass
class _Posted:
    """A collective some ranks posted: rank -> (stream name, call), and their inputs (check)."""

    op: str
    calls: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)
    left: int = 0


class SystemContext:
    """The chips of a system on one clock, and the World running collectives on them."""

    def __init__(self, cfg: SystemConfig, mode: str = "functional", seed: int = 0,
                 source: str = "", check: bool = False):  # fmt: skip
        """`check`: compare each collective's outputs with numpy (functional mode)."""
        if mode not in ("functional", "timing"):
            raise TrnsimError(f"mode '{mode}': expected functional or timing")
        self.cfg, self.mode, self.seed, self.source = cfg, mode, seed, source
        self.functional = mode == "functional"
        self.check = check and self.functional
        self.system = System.from_config(cfg, self.functional)
        self.env = self.system.env
        c = cfg.collectives
        settings = Settings(c.start_cost, c.rings, c.mesh_max, c.rdh_max, c.algorithm, c.slices)
        self.world = World(self.system, settings, cfg.chips_per_node)
        self.root: ChipContext | None = None
        self._contexts: dict[int, ChipContext] = {}
        self._devices: dict[int, object] = {}
        self.root = self.context(0)
        self.root.max_backing_bytes = MAX_BACKING_BYTES
        self._seq: dict[tuple, int] = {}  # (group, rank) -> collectives the rank posted on it
        self._posted: dict[tuple, _Posted] = {}  # (group, seq) -> what its ranks posted
        self.records: list[CollectiveRecord] = []

    # -- chips and ranks -----------------------------------------------------------------------

    def context(self, chip: int) -> ChipContext:
        """The context of chip `chip` (made when first asked for)."""
        ctx = self._contexts.get(chip)
        if ctx is None:
            if not 0 <= chip < len(self.system.chips):
                raise TrnsimError(f"chip {chip} does not exist: {self.cfg.name} has chips "
                                  f"0..{len(self.system.chips) - 1}")  # fmt: skip
            ctx = ChipContext(self.cfg.chip, self.mode, self.cfg.lnc, self.seed, self.source,
                              system=self, chip_index=chip)  # fmt: skip
            self._contexts[chip] = ctx
        return ctx

    def contexts(self) -> list[ChipContext]:
        """The chips' contexts made so far, by chip."""
        return [self._contexts[c] for c in sorted(self._contexts)]

    def device(self, rank: int):
        """The `Device` of `rank`: its logical core of its chip (one Device a rank)."""
        dev = self._devices.get(rank)
        if dev is None:
            chip, core = self.cfg.rank_place(rank)
            dev = self._devices[rank] = Device(self.context(chip), core)
        return dev

    def rank_of(self, ctx: ChipContext, core: int) -> int | None:
        """The rank on logical core `core` of `ctx`'s chip, or None when it holds none."""
        for r in self.cfg.chip_ranks(ctx.chip_index):
            if self.cfg.rank_place(r)[1] == core:
                return r
        return None

    # -- collectives ---------------------------------------------------------------------------

    def dtype(self, name: str, what: str) -> DType:
        """The dtype called `name`, or an InvalidValueError naming `what`."""
        if name not in DTYPES:
            raise InvalidValueError(f"{what}: unknown dtype {name!r}; expected one of "
                                    f"{', '.join(DTYPES)}")  # fmt: skip
        return DTYPES[name]

    @staticmethod
    def engine_bytes(op: str, n: int, src: Buffer, dst: Buffer | None) -> int:
        """The size `World.post` takes for `op` on `n` ranks from the rank's input `src` and
        output `dst` (None: in place): the output of an all_gather, the input otherwise;
        InvalidValueError when their sizes or dtypes do not fit the op."""
        if dst is None:
            return src.nbytes
        if dst.dtype != src.dtype:
            raise InvalidValueError(f"{op}: out is {dst.dtype.name} but the tensor is "
                                    f"{src.dtype.name}; expected one dtype")  # fmt: skip
        want = {"all_gather": src.nbytes * n, "reduce_scatter": src.nbytes / n}.get(op, src.nbytes)
        if dst.nbytes != want:
            raise InvalidValueError(
                f"{op} on {n} ranks: out has {dst.nbytes} bytes and the tensor {src.nbytes}; "
                f"expected an out of {want:g} bytes"
            )
        return dst.nbytes if op == "all_gather" else src.nbytes

    def check_call(self, call: CollectiveCall) -> None:
        """InvalidValueError when `call` cannot run: an unknown op or reduction, a group of
        ranks that do not exist or that the calling rank is not in, a size that is no whole
        number of elements, a root or pairs outside the group."""
        what = f"{call.op} of rank {call.rank}"
        if call.op not in OPS:
            raise InvalidValueError(f"unknown collective {call.op!r}; expected one of "
                                    f"{', '.join(OPS)}")  # fmt: skip
        group, n = call.group, self.cfg.ranks
        if not group or len(set(group)) != len(group) or not all(0 <= r < n for r in group):
            raise InvalidValueError(f"{what}: group {list(group)}: expected distinct ranks of "
                                    f"{self.cfg.name}, 0..{n - 1}")  # fmt: skip
        if call.rank not in group:
            raise InvalidValueError(f"{what}: rank {call.rank} is not in its group "
                                    f"{brief(group)}")  # fmt: skip
        if call.reduce_op not in REDUCE_OPS:
            raise InvalidValueError(f"{what}: unknown reduction {call.reduce_op!r}; expected "
                                    f"one of {', '.join(REDUCE_OPS)}")  # fmt: skip
        if call.nbytes <= 0 or call.nbytes % call.dtype.itemsize:
            raise InvalidValueError(f"{what}: {call.nbytes} bytes is not a whole number of "
                                    f"{call.dtype.name} elements")  # fmt: skip
        if call.op == "broadcast" and call.root not in group:
            raise InvalidValueError(f"{what}: root {call.root} is not in the group")
        if call.op == "send_recv" and len(group) != 2:
            raise InvalidValueError(f"{what}: expected a group of [source, target]")
        if call.op == "permute" and (
            not call.pairs or not all(r in group for p in call.pairs for r in p)
        ):
            raise InvalidValueError(f"{what}: expected pairs of ranks of the group")
        if call.op == "all_to_allv" and (
            len(call.counts) != len(group) or any(len(row) != len(group) for row in call.counts)
        ):
            raise InvalidValueError(f"{what}: expected counts, a {len(group)} x {len(group)} "
                                    f"matrix of element counts")  # fmt: skip

    def run_collective(self, stream, call: CollectiveCall):
        """The stream item of `call` (`Stream.collective`): posted now, on `call.rank`; the
        stream waits for it without holding its logical core. A World error (ranks issuing
        a group's collectives in different orders) fails the item, as any item's error."""
        env = self.env
        seq_key = (call.group, call.rank)
        seq = self._seq.get(seq_key, 0)
        data = self._input(call) if self.functional and call.src is not None else None
        h = self.world.post(call.rank, call.op, call.group, call.nbytes, call.dtype.name,
                            call.reduce_op, call.algorithm, data=data, root=call.root,
                            pairs=call.pairs, counts=call.counts)  # fmt: skip
        self._seq[seq_key] = seq + 1
        key = (call.group, seq)
        p = self._posted.get(key)
        if p is None:
            p = self._posted[key] = _Posted(call.op, left=len(call.group))
        p.calls[call.rank] = (stream.name, call)
        if self.check and data is not None:
            p.inputs[call.rank] = np.array(data, copy=True)
        start = env.now
        if not h.event.triggered:
            stream.blocked_on = f"collective {call.op} #{seq} on group {brief(call.group)}"
            yield h.event
            stream.blocked_on = None
        res = h.result
        if call.sink is not None:
            call.sink.append(res)
        if self.functional and call.src is not None:
            self._output(call, res, p)
        ctx = stream.ctx
        core = ctx.chip.physical(stream.core)[0].index
        ctx.recorder.collective(CollectiveSpan(
            core, stream.name, call.rank, call.op, res.algorithm, len(call.group), call.nbytes,
            call.dtype.name, seq, start, env.now, call.label))  # fmt: skip
        p.left -= 1
        if p.left == 0:
            del self._posted[key]
            self.records.append(self._record(seq, p, res))

    def _input(self, call: CollectiveCall) -> np.ndarray:
        """The rank's input, flat: its unit of the tensor for an in-place all_gather."""
        flat = call.src.array.reshape(-1)
        if call.op == "all_gather" and call.dst is None:
            n = call.nbytes // call.dtype.itemsize
            ((lo, hi),) = chunk_units(n, len(call.group))[call.group.index(call.rank)]
            return flat[lo:hi]
        return flat

    def _output(self, call: CollectiveCall, res: Result, p: _Posted) -> None:
        """Write the rank's result into `dst` (or in place): only the target of a send_recv
        and the targets of a permute receive anything."""
        i = call.group.index(call.rank)
        if call.op == "send_recv" and i != 1:
            return
        if call.op == "permute" and call.rank not in {d for _, d in call.pairs}:
            return
        out = res.outputs[i]
        dst = (call.dst if call.dst is not None else call.src).array.reshape(-1)
        if call.op == "all_to_allv":  # its column, packed at the start of out
            received = sum(row[i] for row in call.counts)
            out, dst = out[:received], dst[:received]
        if call.op == "reduce_scatter" and call.dst is None:  # in place: the rank's unit
            n = call.nbytes // call.dtype.itemsize
            ((lo, hi),) = chunk_units(n, len(call.group))[i]
            dst = dst[lo:hi]
        dst[...] = out
        if self.check:
            p.outputs[call.rank] = np.array(dst, copy=True)

    def _record(self, seq: int, p: _Posted, res: Result) -> CollectiveRecord:
        first = min(p.calls)
        call = p.calls[first][1]
        check = None
        if self.check and len(p.inputs) == len(call.group):
            check = check_collective(call, p.inputs, p.outputs)
        return CollectiveRecord(seq, call.label, res, self._link_bytes(call), check)

    def _link_bytes(self, call: CollectiveCall) -> dict[str, float]:
        """Bytes each link carries for the collective: its schedule's moves over their routes
        (the schedule is the one the World ran: `build` caches it)."""
        w = self.world
        alg = select(call.op, call.group, call.nbytes, w.ctx, w.settings, call.algorithm)
        sched = build(call.op, call.group, call.nbytes // call.dtype.itemsize, w.ctx, alg,
                      call.root, call.pairs, tuple(map(tuple, call.counts)))  # fmt: skip
        topo = self.system.topology
        chip = self.system.chip_of
        out: dict[str, float] = {}
        for step in sched.steps:
            for t in step:
                route = topo.route(chip(t.src), chip(t.dsts[0]))
                for lid in route.links:
                    name = topo.links[lid].name
                    out[name] = out.get(name, 0.0) + t.count * call.dtype.itemsize
        return out

    def stuck(self) -> list[str]:
        """For a deadlock report: each collective posted by some ranks of its group and not
        complete: the ranks that never reached it and those waiting for it (their streams)."""
        parts = []
        for (group, seq), p in sorted(self._posted.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            missing = [r for r in group if r not in p.calls]
            waiting = sorted(p.calls)
            streams = ", ".join(p.calls[r][0] for r in waiting)
            if missing:
                parts.append(
                    f"collective {p.op} #{seq} on group {brief(group)}: ranks {brief(missing)} "
                    f"never reached it; ranks {brief(waiting)} wait for them (streams {streams})"
                )
            else:
                parts.append(f"collective {p.op} #{seq} on group {brief(group)} did not complete")
        return parts


def brief(ranks) -> str:
    """A group in errors: `(0, 1, 2)`, or its first 8 ranks and its size."""
    ranks = list(ranks)
    if len(ranks) > 8:
        return "(" + ", ".join(map(str, ranks[:8])) + f", ... {len(ranks)} ranks)"
    return "(" + ", ".join(map(str, ranks)) + ")"
