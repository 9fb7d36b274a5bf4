"""Who watches the `neuron` device: one explicit list of listeners per chip.

The device tells its listeners what happened, in the order the host did it: an aten op ran
(`op`), a copy (`copy`), the host waited (`synchronize`, `event_synchronize`), a stream recorded
or waited for an event (`record_event`, `wait_event`, `wait_stream`), the allocator handed out
a block (`alloc`), a collective was issued (`collective`, for torch.distributed), and, on the
device's side, a launch ran (`launched`: its span on the simulated clock). The profiler
(`trnsim.torch.profiler`) and a recording (`trnsim.torch.record`) subscribe with
`Listeners.add` and leave with `remove`; nothing else observes the device.

A compiled graph's first run is a capture, as CUDA's stream capture is: while `capture` holds
a listener, ops and copies are handed to it alone and the device launches nothing (the graph
launches its planned kernels afterwards).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass


@dataclass
class OpRun:
    """An op (or copy) the device ran: what the host called, what it measured, what launched.

    `name` is the aten op with its overload ("mm.default", or "copy"); `args`, `kwargs` and
    `result` as the kernel saw them (for a copy: `args` = (src, dst)); `measurement` the op's
    (`trnsim.torch.measure.Measurement`) and `key` its signature; `stream` the runtime stream
    and `kernel` the launch it made (None: nothing launched, a host-to-host copy); host times
    in ps of the simulated host clock around the call."""

    name: str
    args: tuple
    kwargs: dict
    result: object
    measurement: object
    key: tuple | None
    stream: object
    kernel: object
    host_start: int
    host_end: int


class Listener:
    """What a listener may be told; each method a no-op here, overridden where it matters."""

    def op(self, run: OpRun) -> None:
        """An aten op ran on the device."""

    def copy(self, run: OpRun) -> None:
        """A copy to, from or on the device (`run.args` = (src, dst))."""

    def synchronize(self, stream) -> None:
        """The host waited for runtime stream `stream` (None: for the whole device)."""

    def record_event(self, stream, event) -> None:
        """Runtime stream `stream` recorded runtime event `event`."""

    def wait_event(self, stream, event) -> None:
        """Runtime stream `stream` waits for runtime event `event`."""

    def wait_stream(self, stream, other) -> None:
        """Runtime stream `stream` waits for what runtime stream `other` has issued so far."""

    def event_synchronize(self, event) -> None:
        """The host waited for runtime event `event`."""

    def alloc(self, block, nbytes: int) -> None:
        """The allocator handed out `block` (a `trnsim.torch.allocator.Block`) for a request
        of `nbytes`."""

    def collective(self, op: str, stream, tensors, info: dict) -> None:
        """A collective was issued on `stream` (torch.distributed's backend)."""

    def launched(self, stream, kernel, start_ps: int, end_ps: int) -> None:
        """A launch ran on the device from `start_ps` to `end_ps`."""


class Listeners:
    """The chip's listeners, told in the order they subscribed; `ctx` is the runtime's
    `ChipContext`, whose `on_launch` is set only while someone listens (it costs a call per
    launch)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.all: list[Listener] = []
        self.capturing: Listener | None = None

    def __bool__(self) -> bool:
        return bool(self.all)

    def add(self, listener: Listener) -> None:
        if listener not in self.all:
            self.all.append(listener)
        self.ctx.on_launch = self.launched

    def remove(self, listener: Listener) -> None:
        if listener in self.all:
            self.all.remove(listener)
        if not self.all:
            self.ctx.on_launch = None

    @contextlib.contextmanager
    def capture(self, listener: Listener):
        """Hand ops and copies to `listener` alone inside the block; nothing launches."""
        prev, self.capturing = self.capturing, listener
        try:
            yield listener
        finally:
            self.capturing = prev

    # -- telling -------------------------------------------------------------------------------

    def op(self, run: OpRun) -> None:
        for x in list(self.all):
            x.op(run)

    def copy(self, run: OpRun) -> None:
        for x in list(self.all):
            x.copy(run)

    def synchronize(self, stream) -> None:
        for x in list(self.all):
            x.synchronize(stream)

    def record_event(self, stream, event) -> None:
        for x in list(self.all):
            x.record_event(stream, event)

    def wait_event(self, stream, event) -> None:
        for x in list(self.all):
            x.wait_event(stream, event)

    def wait_stream(self, stream, other) -> None:
        for x in list(self.all):
            x.wait_stream(stream, other)

    def event_synchronize(self, event) -> None:
        for x in list(self.all):
            x.event_synchronize(event)

    def alloc(self, block, nbytes: int) -> None:
        for x in list(self.all):
            x.alloc(block, nbytes)

    def collective(self, op: str, stream, tensors, info: dict) -> None:
        for x in list(self.all):
            x.collective(op, stream, tensors, info)

    def launched(self, stream, kernel, start_ps: int, end_ps: int) -> None:
        for x in list(self.all):
            x.launched(stream, kernel, start_ps, end_ps)
