"""The op timer: every op on the `neuron` device launched by its measured time, counted, told.

Each aten op (and copy) the kernels run reaches `OpTimer`: it asks the measurement service
(`measure.Measurements`: one measurement per op signature) what the op costs, launches it on the
current stream by that duration (`Stream.launch_timed`: host launch cost included, the logical
core held as by any kernel; in `timing="simulate"` the lowered program itself, timing-only),
keeps the per-op statistics for the report, and tells the chip's listeners
(`listeners.Listeners`: the profiler, a recording). An op or copy that reads or writes a tensor
a collective still in flight writes (`after`: torch.distributed's backend, `distributed`) first
makes its stream wait for the collective's end. While a compiled graph captures
(`Listeners.capture`), ops go to the capturing listener instead and nothing launches. Views,
metadata ops and scalar reads launch nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trnsim.torch import state
from trnsim.torch.listeners import OpRun
from trnsim.torch.measure import Measurements

Tensor = torch.Tensor

# ops that launch nothing: metadata, views are handled by their schema (no launch either)
FREE = {
    "empty", "empty_strided", "resize_", "set_", "_local_scalar_dense", "is_set_to",
    "_has_same_storage_numel", "is_pinned", "_pin_memory", "lift_fresh", "_copy_from",
    "_copy_from_and_resize", "_to_copy",
}  # fmt: skip


def launches(name: str, all_views: bool) -> bool:
    """Does aten op `name` (with overload) run work on the device?"""
    return not all_views and name.partition(".")[0] not in FREE


@dataclass
class OpStats:
    """What ran of one aten op: launches, device time (ps) and whether it was modelled."""

    count: int = 0
    device_ps: int = 0
    modelled: int = 0
    estimated: int = 0
    estimated_ps: int = 0  # the device time of the estimated launches

    def add(self, duration_ps: int, modelled: bool) -> None:
        self.count += 1
        self.device_ps += duration_ps
        self.modelled += modelled
        self.estimated += not modelled
        if not modelled:
            self.estimated_ps += duration_ps


class OpTimer:
    """Launches ops on the chip's current stream by their measured time; keeps the per-op
    statistics for the report; tells the listeners."""

    def __init__(self, chip):
        self.chip = chip
        self.measure = Measurements(chip)
        self.listeners = chip.listeners
        self.simulate = chip.timing == "simulate"
        self.stats: dict[str, OpStats] = {}
        self.copies = OpStats()
        self.copy_bytes = 0
        # storage address -> the runtime event ending a collective in flight that writes it
        self.after: dict[int, object] = {}
        # the timed collectives (torch.distributed's backend: the `info` listeners are told)
        self.collectives: list[dict] = []
        self.steps = None  # report.StepLog: launches and optimizer steps, from the first one

    def collective(self, info: dict) -> None:
        """torch.distributed's backend timed a collective (`info`: what listeners are told):
        kept for the report, whose per-step log starts with the job's first collective."""
        self.collectives.append(info)
        if self.steps is None:
            from trnsim.torch.report import StepLog

            self.steps = StepLog(self.chip, info["arrival_ps"])

    @property
    def refused(self) -> dict[str, str]:
        """Per aten op, why the library's lowering was not used (the first reason)."""
        return self.measure.refused

    def stream(self):
        """The runtime stream ops launch on: the current `torch.neuron.Stream`'s."""
        chip = self.chip
        s = chip.streams[chip.index]
        return s.rt if s is not None else chip.devices[chip.index].default_stream

    def count(self, name: str, duration_ps: int, modelled: bool) -> None:
        """Count a launch of `name` in the statistics (a compiled graph's kernels too)."""
        st = self.stats.get(name)
        if st is None:
            st = self.stats[name] = OpStats()
        st.add(duration_ps, modelled)

    def __call__(self, name: str, args, kwargs, r) -> None:
        """Op `name` ran (its CPU results `r`): launch it by its device time."""
        listeners = self.listeners
        if listeners.capturing is not None:
            return listeners.capturing.op(OpRun(name, args, kwargs, r, None, None, None, None,
                                                0, 0))  # fmt: skip
        host = self.chip.devices[0].ctx.host
        start = host.now
        key, m = self.measure.op(name, args, kwargs, r)
        stream = self.stream()
        if self.after:
            self._depend(stream, args, kwargs.values())
        kernel = self._launch(stream, name, m, False)
        self.count(name, m.duration_ps, m.modelled)
        if listeners:
            listeners.op(OpRun(name, args, kwargs, r, m, key, stream, kernel, start, host.now))

    def copy(self, src: Tensor, dst: Tensor, non_blocking: bool = False) -> None:
        """A copy to, from or within the device (`Measurements.copy`); the host waits for a
        copy to the host, as a blocking `.cpu()` does, unless `non_blocking` (its values are
        there already: the host goes on, as CUDA's does after a copy into pinned memory)."""
        listeners = self.listeners
        if listeners.capturing is not None:
            return listeners.capturing.copy(OpRun("copy", (src, dst), {}, dst, None, None, None,
                                                  None, 0, 0))  # fmt: skip
        nbytes = dst.numel() * dst.element_size()
        self.copies.count += 1
        self.copy_bytes += nbytes
        if src.is_cpu and dst.is_cpu:
            return
        host = self.chip.devices[0].ctx.host
        start = host.now
        key, m = self.measure.copy(src, dst)
        if key is not None:  # on the device
            self.copies.modelled += m.modelled
            self.copies.estimated += not m.modelled
        self.copies.device_ps += m.duration_ps
        stream = self.stream()
        if self.after:
            self._depend(stream, (src, dst))
        # the host pays a copy call for a host copy, as memcpy_async does
        kernel = self._launch(stream, "copy", m, src.is_cpu or dst.is_cpu)
        wait = dst.is_cpu and not non_blocking
        if wait:
            stream.synchronize()  # the host waits for the copy (told after it)
        if listeners:
            run = OpRun("copy", (src, dst), {}, dst, m, key, stream, kernel, start, host.now)
            listeners.copy(run)
            if wait:
                listeners.synchronize(stream)

    def _depend(self, stream, *arg_lists) -> None:
        """`stream` waits for the collectives in flight that write a tensor among `arg_lists`
        (the op's CPU views or device tensors: one storage address)."""
        after = self.after
        for args in arg_lists:
            for a in args:
                ts = (a,) if isinstance(a, Tensor) else a if type(a) in (list, tuple) else ()
                for t in ts:
                    if isinstance(t, Tensor):
                        ev = after.pop(t.untyped_storage().data_ptr(), None)
                        if ev is not None:
                            stream.wait_event(ev)
                            if self.listeners:
                                self.listeners.wait_event(stream, ev)

    def _launch(self, stream, name: str, m, host_copy: bool):
        if m.kernel is not None and self.simulate:
            return stream.launch(m.kernel, self.measure.buffers(m), timing_only=True)
        return stream.launch_timed(name, m.duration_ps, copy=host_copy)

    def wait(self) -> None:
        """The host waits for the current stream (a value read back)."""
        stream = self.stream()
        stream.synchronize()
        if self.listeners:
            self.listeners.synchronize(stream)


def timer() -> OpTimer:
    """The chip's op timer (made on first use)."""
    chip = state._chip or state.get()
    if chip.ops is None:
        chip.ops = OpTimer(chip)
    return chip.ops


def record(name: str, args, kwargs, r) -> None:
    """An op ran on the device (called by every aten kernel)."""
    chip = state._chip
    t = chip.ops if chip is not None else None
    (t or timer())(name, args, kwargs, r)
