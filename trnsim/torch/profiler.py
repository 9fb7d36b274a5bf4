"""`torch.neuron.profiler`: what ran on the `neuron` device while a profile was open, in the
shape of `torch.profiler.profile` (docs/torch.md, "Profiling").

A profile is a listener of the device (`listeners.Listener`): each aten op (and copy) the op
timer tells it of becomes an `OpEvent`: its simulated host time (the host thread's clock around
the call) and the device span of the launch it made (told by `launched` when the launch has
run). A lowered op's instructions come from the one timing-only simulation of its signature
(`measure.Measurements.instructions`: its spans relative to the launch's start), placed at each
launch's device start; after `detail_launches` launches of a signature the rest are summarised
(one span each). The writers are in `profiler_export`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import deque
from dataclasses import dataclass

import torch

from trnsim.torch import state
from trnsim.torch.listeners import Listener, OpRun
from trnsim.torch.measure import Detail
from trnsim.torch.timing import timer

__all__ = ["Detail", "OpEvent", "profile"]

DETAIL_LAUNCHES = 3  # launches of one op signature shown instruction by instruction
MAX_EVENTS = 300_000  # instruction, DMA and HBM events placed in all (about 60 MB of JSON)
_KEEP: dict[str, bool] = {}  # file -> are its frames the caller's (not the shim's, torch's)
_SKIP_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch, state, contextlib)
)


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


class profile(Listener):  # noqa: N801 - torch.profiler.profile's name
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
        self._timer = self._ctx = self._listeners = None
        self._recording = False
        self._ran: dict = {}  # id(kernel) -> (kernel, start, end): ran before the op was told

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        chip = state.get()
        self._timer, self._ctx, self._listeners = timer(), chip.devices[0].ctx, chip.listeners
        self.chip_name = chip.cfg.name
        if any(isinstance(x, profile) and x._recording for x in self._listeners.all):
            raise RuntimeError("torch.neuron.profiler.profile: another profile is recording")
        self._recording = True
        self._timer.measure.keep_details = True  # each new signature's instructions, kept
        self._listeners.add(self)

    def stop(self) -> None:
        """Stop recording ops; launches already made get their device span when they run."""
        if self._recording:
            self._recording = False
            self._timer.measure.keep_details = False
            if not self._pending:
                self._listeners.remove(self)
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    # -- what the device tells (listeners.Listener) --------------------------------------------

    def op(self, run: OpRun) -> None:
        if self._recording:
            base, _, overload = run.name.partition(".")
            self._event(run, f"aten::{base}", overload, [*run.args, *run.kwargs.values()])

    def copy(self, run: OpRun) -> None:
        if self._recording:
            self._event(run, "aten::copy_", "", list(run.args))

    def launched(self, stream, kernel, start_ps: int, end_ps: int) -> None:
        q = self._pending.get(id(kernel))
        if not q:
            if self._recording:  # perhaps the launch of the op about to be told
                self._ran[id(kernel)] = kernel, start_ps, end_ps
            return
        ev = q.popleft()
        ev.start_ps, ev.end_ps = start_ps, end_ps
        if not q:
            del self._pending[id(kernel)]
            if not self._pending and not self._recording:
                self._listeners.remove(self)  # stopped, and every launch has run

    def _event(self, run: OpRun, name: str, overload: str, args: list) -> None:
        ev = OpEvent(len(self.op_events), name, overload, run.host_start, run.host_end)
        if self.record_shapes:
            ts = [a for a in args if isinstance(a, torch.Tensor)]
            ev.shapes = [list(a.shape) for a in ts]
            ev.dtypes = [str(a.dtype).removeprefix("torch.") for a in ts]
        if self.with_stack:
            ev.stack = _stack()
        self.op_events.append(ev)
        m, kernel, stream = run.measurement, run.kernel, run.stream
        ev.measured_ps, ev.modelled = m.duration_ps, m.modelled
        ran, self._ran = self._ran.get(id(kernel)), {}
        ev.key, ev.launched = run.key, True
        ev.cores = tuple(c.index for c in self._ctx.chip.physical(stream.core))
        if ran is not None and ran[0] is kernel:  # it ran before the op was told
            ev.start_ps, ev.end_ps = ran[1:]
        elif stream._capture is None:
            self._pending.setdefault(id(kernel), deque()).append(ev)
        if not ev.modelled:
            return
        if ev.key not in self.details:
            self.details[ev.key] = self._timer.measure.instructions(m)
        d = self.details[ev.key]
        if d is None:
            return
        cost = len(d.spans) + sum(len(x.engines) for x in d.moves) + len(d.hbm)
        shown = self._shown.get(ev.key, 0)
        ev.detailed = shown < self.detail_launches and self._placed + cost <= self.max_events
        ev.summarised = not ev.detailed
        if ev.detailed:
            self._shown[ev.key] = shown + 1
            self._placed += cost

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
