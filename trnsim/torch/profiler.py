"""`torch.neuron.profiler`: what ran on the `neuron` device while a profile was open, in the
shape of `torch.profiler.profile` (docs/torch.md, "Profiling").

Each aten op (and copy) that reaches the timer (`timing.OpTimer`) becomes an `OpEvent`: its
simulated host time (the host thread's clock around the call) and the device span of the
launch it made (the runtime calls `ChipContext.on_launch` when the launch has run). A lowered
op's instructions come from the one timing-only simulation of its signature on the timer's
scratch chip (`Detail`: its spans relative to the launch's start), placed at each launch's
device start; after `detail_launches` launches of a signature the rest are summarised (one
span each). The writers are in `profiler_export`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import torch

from trnsim.torch import state
from trnsim.torch.aten import library_ops
from trnsim.torch.timing import timer

DETAIL_LAUNCHES = 3  # launches of one op signature shown instruction by instruction
MAX_EVENTS = 300_000  # instruction, DMA and HBM events placed in all (about 60 MB of JSON)
_KEEP: dict[str, bool] = {}  # file -> are its frames the caller's (not the shim's, torch's)
_SKIP_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch, state, contextlib)
)


class Detail(NamedTuple):
    """One simulation of a lowered op on the scratch chip, relative to its launch's start:
    spans, DMA data phases and HBM samples (times in ps from the start), and the scratch's
    first physical core (cores are counted from it)."""

    spans: list
    moves: list
    hbm: list
    core0: int


@dataclass
class OpEvent:
    """One aten op on the host and the launch it made (times in ps, on the simulated clock)."""

    id: int
    name: str  # "aten::mm"
    overload: str
    host_start: int
    host_end: int
    shapes: list | None = None
    dtypes: list | None = None
    stack: list[str] | None = None
    launched: bool = False
    modelled: bool = False
    measured_ps: int = 0  # the op's device time as the timer measured it
    cores: tuple[int, ...] = ()  # the physical cores of its logical core
    start_ps: int | None = None  # its launch on the device, once it has run
    end_ps: int | None = None
    key: tuple | None = None  # its signature (the timer's memo key)
    detailed: bool = False  # its instructions are placed in the trace
    summarised: bool = False  # a detail existed but the signature had had its detailed launches

    @property
    def host_ps(self) -> int:
        return self.host_end - self.host_start

    @property
    def device_ps(self) -> int:
        return 0 if self.start_ps is None else self.end_ps - self.start_ps


class profile:  # noqa: N801 - torch.profiler.profile's name
    """Record the `neuron` device's ops inside a `with` block, like `torch.profiler.profile`.

    `record_shapes`: keep each op's input shapes and dtypes; `with_stack`: the Python stack of
    the call (the caller's frames); `on_trace_ready`: called with the profile when it stops;
    `detail_launches`: launches of one op signature whose instructions the trace shows before
    it summarises the rest (one span per launch); `max_events`: at most this many instruction,
    DMA and HBM events in all (later launches are summarised), which keeps the trace small.
    `activities` and `profile_memory` are taken for torch's signature (the host's and the
    device's ops are always recorded)."""

    def __init__(
        self,
        *,
        activities=None,
        schedule=None,
        on_trace_ready=None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        detail_launches: int = DETAIL_LAUNCHES,
        max_events: int = MAX_EVENTS,
    ):
        if schedule is not None:
            raise ValueError("torch.neuron.profiler.profile: schedule= is not supported; "
                             "open the profile around the steps to record")  # fmt: skip
        for key, v in (("detail_launches", detail_launches), ("max_events", max_events)):
            if type(v) is not int or v < 0:
                raise ValueError(f"{key}={v!r}: expected a whole number >= 0")
        self.activities, self.profile_memory = activities, profile_memory
        self.record_shapes, self.with_stack = record_shapes, with_stack
        self.on_trace_ready = on_trace_ready
        self.detail_launches, self.max_events = detail_launches, max_events
        self._placed = 0  # instruction, DMA and HBM events of the detailed launches
        self.op_events: list[OpEvent] = []
        self.details: dict = {}  # signature -> Detail, or None (not lowered: one span)
        self.chip_name = ""
        self._pending: dict = {}  # id(kernel) -> deque of OpEvent waiting for it to run
        self._shown: dict = {}  # signature -> detailed launches so far
        self._timer = self._ctx = None
        self._ran: dict = {}  # id(kernel) -> (kernel, start, end): run during the op's own call

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._timer = timer()
        chip = state.get()
        self.chip_name = chip.cfg.name
        self._ctx = chip.devices[0].ctx
        if self._timer.profiler is not None:
            raise RuntimeError("torch.neuron.profiler.profile: another profile is recording")
        self._timer.profiler = self
        _listen(self._ctx, self)

    def stop(self) -> None:
        """Stop recording ops; launches already made get their device span when they run."""
        if self._timer is not None and self._timer.profiler is self:
            self._timer.profiler = None
        if not self._pending:
            _LISTENING.pop(self, None)
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    # -- recording (called by the timer and the runtime) ----------------------------------------

    def op(self, run, name: str, args, kwargs, r) -> None:
        base, _, overload = name.partition(".")
        ev = self._begin(f"aten::{base}", overload, list(args) + list(kwargs.values()))
        t = self._timer
        st = t.stats.get(name)
        before = (st.device_ps, st.modelled) if st else (0, 0)
        scratch = self._mark()
        self._run(run, name, args, kwargs, r)
        st = t.stats[name]
        ev.measured_ps, ev.modelled = st.device_ps - before[0], st.modelled > before[1]
        self._end(ev, scratch, lambda: library_ops(base, overload, args, kwargs, r), name)

    def copy(self, run, src, dst) -> None:
        ev = self._begin("aten::copy_", "", [src, dst])
        c = self._timer.copies
        before = c.device_ps, c.modelled
        scratch = self._mark()
        self._run(run, src, dst)
        ev.measured_ps, ev.modelled = c.device_ps - before[0], c.modelled > before[1]
        self._end(ev, scratch, None, "copy")

    def _begin(self, name: str, overload: str, args: list) -> OpEvent:
        self._ran = {}
        ev = OpEvent(len(self.op_events), name, overload, self._ctx.host.now, 0)
        if self.record_shapes:
            ts = [a for a in args if isinstance(a, torch.Tensor)]
            ev.shapes = [list(a.shape) for a in ts]
            ev.dtypes = [str(a.dtype).removeprefix("torch.") for a in ts]
        if self.with_stack:
            ev.stack = _stack()
        self.op_events.append(ev)
        return ev

    def _run(self, run, *args) -> None:
        try:
            run(*args)
        except BaseException:
            self.op_events.pop()  # the op failed: it ran nothing
            self._timer.last = None
            raise

    def _mark(self):
        """Where the scratch chip's recorder stands (to take a new simulation's spans)."""
        dev = self._timer.scratch
        rec = dev.ctx.recorder
        return dev, rec.span_count, len(rec.dma_moves), len(rec.hbm_samples), len(rec.host_calls)

    def _end(self, ev: OpEvent, scratch, lowered, name: str) -> None:
        ev.host_end = self._ctx.host.now
        last, self._timer.last = self._timer.last, None
        if last is None:
            return  # a host-to-host copy: nothing launched
        ev.key, stream, kernel = last
        ev.launched = True
        ev.cores = tuple(c.index for c in self._ctx.chip.physical(stream.core))
        ran = self._ran.pop(id(kernel), None)
        if ran is not None and ran[0] is kernel:  # the host waited for it (a copy to the host)
            ev.start_ps, ev.end_ps = ran[1:]
        elif stream._capture is None:
            self._pending.setdefault(id(kernel), deque()).append(ev)
        if not ev.modelled:
            return
        if ev.key not in self.details:
            detail = self._take(*scratch)
            if detail is None and lowered is not None:
                detail = self._resimulate(name, lowered)
            self.details[ev.key] = detail
        if self.details[ev.key] is None:
            return
        d = self.details[ev.key]
        cost = len(d.spans) + sum(len(m.engines) for m in d.moves) + len(d.hbm)
        shown = self._shown.get(ev.key, 0)
        ev.detailed = shown < self.detail_launches and self._placed + cost <= self.max_events
        ev.summarised = not ev.detailed
        if ev.detailed:
            self._shown[ev.key] = shown + 1
            self._placed += cost

    def _take(self, dev, n_spans, n_moves, n_hbm, n_calls) -> Detail | None:
        """The spans of the simulation the timer just ran on its scratch chip, if it ran one."""
        if self._timer.scratch is not dev:
            return None  # the simulation failed and the scratch chip was replaced
        rec = dev.ctx.recorder
        launch = [c for c in rec.host_calls[n_calls:] if c.op == "launch"]
        if not launch or rec.span_count == n_spans:
            return None
        t0 = launch[0].end_ps
        spans = [s._replace(start_ps=s.start_ps - t0, end_ps=s.end_ps - t0)
                 for s in rec.recorded[n_spans:]]  # fmt: skip
        moves = [m._replace(start_ps=m.start_ps - t0, end_ps=m.end_ps - t0)
                 for m in rec.dma_moves[n_moves:]]  # fmt: skip
        hbm = [h._replace(ps=h.ps - t0) for h in rec.hbm_samples[n_hbm:]]
        core0 = min(c.index for c in dev.ctx.chip.physical(dev.index))
        return Detail(spans, moves, hbm, core0)

    def _resimulate(self, name: str, lowered) -> Detail | None:
        """Simulate again an op whose signature was measured before the profile began (once
        per signature: its instructions for the trace; its time stays the measured one)."""
        t = self._timer
        try:
            ops = lowered()
            if ops is None:
                return None
            mark = self._mark()
            t._simulate(name, *ops)
        except Exception:  # the lowering failed now: the op shows as one span
            return None
        return self._take(*mark)

    def _launched(self, stream, kernel, start_ps: int, end_ps: int) -> None:
        q = self._pending.get(id(kernel))
        if not q and self._timer.profiler is self:
            self._ran[id(kernel)] = kernel, start_ps, end_ps
        elif q:
            ev = q.popleft()
            ev.start_ps, ev.end_ps = start_ps, end_ps
            if not q:
                del self._pending[id(kernel)]
                if not self._pending and self._timer.profiler is not self:
                    _LISTENING.pop(self, None)  # stopped, and every launch has run

    # -- results ---------------------------------------------------------------------------------

    def finished(self) -> list[OpEvent]:
        """The events, after running the device until every launch they made has run (as
        torch.neuron.synchronize() would, without moving the host's clock)."""
        if self._pending:
            self._ctx.run_all()
        return self.op_events

    def events(self) -> list[OpEvent]:
        """The recorded ops, in the order the host ran them (`finished`)."""
        return self.finished()

    def step(self) -> None:
        """torch's per-step call: a no-op (no schedules; the whole block is recorded)."""

    def key_averages(self, group_by_input_shape: bool = False):
        """Per-op totals (`table()` prints them as torch's profiler does); with
        `group_by_input_shape` (and `record_shapes`), one row per op and input shapes."""
        from trnsim.torch.profiler_export import key_averages

        return key_averages(self.finished(), group_by_input_shape)

    def export_chrome_trace(self, path) -> None:
        """One Chrome/Perfetto JSON trace: the host's aten ops, flow arrows to their launches,
        each NeuronCore's launches, engines, DMA queues and engines, and HBM counters. `path` is
        checked first (TrnsimError: a folder, a missing folder, an unwritable place)."""
        from trnsim.report.files import check_file
        from trnsim.torch.profiler_export import write_trace

        check_file("export_chrome_trace", path)
        write_trace(self, path)

    def export_parquet(self, directory) -> None:
        """Instruction, DmaPacket, DmaPacketAggregated and Summary tables (Neuron Explorer's
        names), one Parquet file each in `directory` (made if missing); needs pyarrow."""
        from trnsim.report.files import check_folder
        from trnsim.torch.profiler_export import write_parquet

        check_folder("export_parquet", directory, make_folders=True)
        write_parquet(self, directory)


_LISTENING: dict = {}  # profiles waiting for launches to run (in the order they started)


def _listen(ctx, prof: profile) -> None:
    _LISTENING[prof] = None
    ctx.on_launch = _launched


def _launched(stream, kernel, start_ps: int, end_ps: int) -> None:
    """`ChipContext.on_launch`: a kernel ran; the profiles waiting for it take its span."""
    for prof in list(_LISTENING):
        prof._launched(stream, kernel, start_ps, end_ps)


def _stack() -> list[str]:
    """The caller's frames, innermost first, without the shim's, PyTorch's and the standard
    library's own."""
    out = []
    f = sys._getframe(3)
    while f is not None:
        code = f.f_code
        path = code.co_filename
        keep = _KEEP.get(path)
        if keep is None:
            keep = _KEEP[path] = not os.path.abspath(path).startswith(_SKIP_DIRS)
        if keep:
            out.append(f"{path}({f.f_lineno}): {code.co_name}")
        f = f.f_back
    return out
