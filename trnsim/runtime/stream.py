"""Streams: in-order queues of device work on one logical NeuronCore, with CUDA's semantics.

A host call (launch, copy, event record or wait) costs its host thread time and enqueues an item
stamped with the host clock after the call: the item cannot start before then, nor before the
items ahead of it in the stream finish. Kernels on one logical core run one at a time; copies
and kernels of different streams overlap when they use different hardware.

A stream runs a SimPy process only while it has work, so an idle stream holds nothing. An item
that fails (a host function raising, an error planning or running a launch) is dropped and its
error kept for the next synchronizing call (`ChipContext.fail`); the stream goes on.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import simpy

from trnsim.errors import TrnsimError
from trnsim.runtime.event import Event
from trnsim.runtime.reuse import ReuseConflict

LAUNCH, COPY, RECORD, WAIT, TIMED = "launch", "copy", "record", "wait", "timed"
HOST_FUNC, COLLECTIVE = "host_func", "collective"


class TimedKernel(NamedTuple):
    """A kernel whose device time is already known (measured once, replayed by duration): it
    holds its logical core for `duration_ps` and computes nothing. `launch_timed` enqueues it."""

    name: str
    duration_ps: int
    estimate: object = None  # an `estimate.Estimated` op: reported, its values written, at its end


class Stream:
    """An in-order queue of device work bound to a logical NeuronCore (`Device.stream()`)."""

    def __init__(self, device, name: str = ""):
        self.device, self.core = device, device.index
        self.ctx = device.ctx
        self.name = name or f"stream{self.ctx.stream_count}"
        self.ctx.stream_count += 1
        self._queue: deque = deque()  # (kind, not_before_ps, args)
        self._idle: simpy.Event | None = None  # fires when the queue empties; None when idle
        self._proc: simpy.Process | None = None  # the process draining the queue
        self._capture = None  # the Graph capturing this stream's calls
        self.blocked_on: str | None = None

    # -- host calls ----------------------------------------------------------------------------

    def launch(self, kernel, tensors=None, timing_only: bool = False):
        """Launch `kernel` on this stream with its tensors bound to device memory (`tensors`:
        name -> TensorView); a high-level kernel (`ops`) is lowered by the kernel library
        first (`Device.lower`). A `timing_only` launch takes simulated time but computes no
        values, even on a functional device. Returns the kernel launched (lowered)."""
        if not kernel.low_level:
            kernel = self.device.lower(kernel, tensors)
        args = (kernel, self.device.bind_tensors(kernel, tensors, timing_only), timing_only, 0)
        if self._capture is not None:
            uses = {f"tensor {n}": v for n, v in (tensors or {}).items()}
            self._capture.add(self, LAUNCH, args, uses)
            return kernel
        ctx = self.ctx
        t = ctx.host.call("launch", ctx.costs.launch, kernel.name)
        self.push(LAUNCH, t, args)
        return kernel

    def launch_timed(
        self, name: str, duration_ps: int, estimate=None, copy: bool = False
    ) -> TimedKernel:
        """Launch a kernel known only by its device time (`TimedKernel`): it costs the host a
        launch and holds this stream's logical core for `duration_ps`, like any kernel. For
        callers that measured a kernel once and replay it (the PyTorch device does). `estimate`
        (`trnsim.runtime.estimate.Estimated`): a trace's estimated op, reported when it ends.
        `copy`: a host<->device copy timed by the caller: the host pays a copy call
        (`copy_overhead`, as `memcpy_async`), not a launch.

        Consecutive timed launches share one queue item (`ChipContext.run_timed`), which keeps
        the simulation's cost per launch small. Returns the `TimedKernel` enqueued."""
        kernel = TimedKernel(name, int(duration_ps), estimate)
        if self._capture is not None:
            self._capture.add(self, LAUNCH, (kernel, {}, True, 0))
            return kernel
        ctx = self.ctx
        if copy:
            t = ctx.host.call("memcpy_async", ctx.costs.copy, name)
        else:
            t = ctx.host.call("launch", ctx.costs.launch, name)
        q = self._queue
        if q and q[-1][0] is TIMED:
            q[-1][2].append((t, kernel))
        else:
            self.push(TIMED, t, [(t, kernel)])
        return kernel

    def memcpy_async(self, dst, src) -> None:
        """Copy `src` to `dst` on this stream (see `Device.memcpy_async`)."""
        s, d = self.device.copy_operands(dst, src)
        if self._capture is not None:
            self._capture.add(self, COPY, (s, d), {"dst": dst, "src": src})
            return
        ctx = self.ctx
        t = ctx.host.call("memcpy_async", ctx.costs.copy, f"{s}->{d}")
        self.push(COPY, t, (s, d))

    def record_event(self, event: Event | None = None) -> Event:
        """Record `event` (a new one by default) at this point of the stream; returns it."""
        event = event or self.device.event()
        self._no_capture("record_event")
        ctx = self.ctx
        if event.device.ctx.root is not ctx.root:  # chips of one system share a clock
            raise TrnsimError(f"record_event on stream {self.name}: the event is of another chip")
        t = ctx.host.call("event.record", ctx.costs.event, event.name)
        self.push(RECORD, t, (event, event._new_record()))
        return event

    def launch_host_func(self, fn) -> None:
        """Call `fn()` when the work enqueued so far is done (CUDA's cudaLaunchHostFunc; costs
        the host an event's call); the trace runner writes a kernel's recorded values so."""
        self._no_capture("launch_host_func")
        ctx = self.ctx
        t = ctx.host.call("launch_host_func", ctx.costs.event, getattr(fn, "__name__", ""))
        self.push(HOST_FUNC, t, (fn,))

    def wait_event(self, event: Event) -> None:
        """Make this stream's later work wait for the event's latest record (at call time).
        Waiting on an event never recorded is a no-op, as in CUDA."""
        self._no_capture("wait_event")
        ctx = self.ctx
        if event.device.ctx.root is not ctx.root:
            raise TrnsimError(f"wait_event on stream {self.name}: the event is of another chip")
        t = ctx.host.call("stream.wait_event", ctx.costs.event, event.name)
        if event._done is not None and not event._done.triggered:
            self.push(WAIT, t, (event._done, event.name))

    def collective(self, call) -> None:
        """Enqueue this stream's rank's part of a collective (`multichip.CollectiveCall`,
        checked by `collectives.check_call`): when the stream reaches it, the rank posts it
        on the system's World and the stream's later work waits until it is complete on every
        rank of its group, without holding the logical core (a CC stream). Costs the host an
        event's call; the system's start cost is paid on the device."""
        self._no_capture("collective")
        ctx = self.ctx
        t = ctx.host.call("collective", ctx.costs.event, call.label or call.op)
        self.push(COLLECTIVE, t, (call,))

    def wait_stream(self, other: Stream) -> None:
        """Make this stream's later work wait for all work enqueued on `other` so far."""
        self.wait_event(other.record_event())

    def query(self) -> bool:
        """Is all work enqueued here done at the host's present? Runs the device only up to the
        host's clock; never blocks, never raises."""
        if self._queue:
            self.ctx.advance_to(self.ctx.host.now)
        return not self._queue

    def synchronize(self) -> None:
        """Block the host until all work enqueued here is done. Raises the first error inside
        the device not raised yet (`ChipContext.run_until`)."""
        ctx = self.ctx
        try:
            ctx.run_until(self._idle)
        finally:
            ctx.host.wait_until("stream.synchronize", ctx.env.now, self.name)

    def _no_capture(self, what: str) -> None:
        if self._capture is not None:
            raise TrnsimError(f"{what} on stream {self.name} during graph capture: a graph holds "
                              f"launches and copies only")  # fmt: skip

    # -- the device side -----------------------------------------------------------------------

    def push(self, kind: str, not_before: int, args: tuple) -> None:
        """Enqueue an item that may start at `not_before` ps (the host clock after its call)."""
        q = self._queue
        q.append((kind, not_before, args))
        if len(q) == 1:
            self._idle = self.ctx.env.event()
            self.ctx.busy[self] = None
            self._proc = self.ctx.env.process(self._drain())

    def pending(self) -> str:
        """What the stream is doing or waiting for (deadlock reports)."""
        if self.blocked_on:
            return f"stream {self.name} waits for {self.blocked_on}"
        kind, _, args = self._queue[0]
        what = args[0].name if kind == LAUNCH else f"{args[0]}->{args[1]}" if kind == COPY else ""
        what = args[0][1].name if kind == TIMED else what
        what = args[0].op if kind == COLLECTIVE else what
        return f"stream {self.name} is in {kind} {what}".rstrip()

    def _drain(self):
        ctx, q = self.ctx, self._queue
        env = ctx.env
        while q:
            kind, not_before, args = q[0]
            if not_before > env.now:
                yield env.timeout(not_before - env.now)
            if ctx.reuse is not None:
                ctx.reuse.item_starts(self, env.now)
            try:
                if kind is LAUNCH:
                    yield from ctx.run_launch(self, *args)
                elif kind is TIMED:
                    yield from ctx.run_timed(self, args)
                elif kind is COPY:
                    yield from ctx.run_copy(self, *args)
                elif kind is RECORD:
                    args[0]._fire(args[1], env.now)
                elif kind is HOST_FUNC:
                    args[0]()
                elif kind is COLLECTIVE:
                    yield from ctx.system.run_collective(self, *args)
                elif not args[0].triggered:  # WAIT
                    self.blocked_on = f"event '{args[1]}'"
                    yield args[0]
                    self.blocked_on = None
            except ReuseConflict:  # not an error: the run starts over (`run_program`)
                raise
            except simpy.Interrupt:  # dropped after an error already kept (`_drop_stuck`)
                pass
            except Exception as e:  # dropped, its error kept for the next synchronizing call
                ctx.fail(e)
            q.popleft()
        del ctx.busy[self]
        idle, self._idle = self._idle, None
        self._proc = None
        idle.succeed()

    def __repr__(self) -> str:
        return f"Stream({self.name!r}, core={self.core}, pending={len(self._queue)})"
