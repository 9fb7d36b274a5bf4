"""Events: points in a stream, with CUDA's semantics.

`record(stream)` captures the work enqueued on the stream so far; the event completes when the
stream reaches it. A later `record` replaces the earlier one (a wait enqueued before it still
waits for the earlier). An event never recorded counts as complete: `query` is True,
`synchronize` returns at once, and `Stream.wait_event` on it is a no-op, as in CUDA.
"""

from __future__ import annotations

import simpy

from trnsim.errors import TrnsimError

RECORD = "record"


class Event:
    """A point in a stream. Create with `Device.event(enable_timing=False)`.

    `elapsed_time(end)` needs both events created with `enable_timing=True`, recorded and
    complete; it gives milliseconds of simulated time."""

    def __init__(self, device, enable_timing: bool = False, name: str = ""):
        self.device, self.enable_timing, self.name = device, enable_timing, name
        self._done: simpy.Event | None = None  # the latest record; its value is the ps it fired

    @property
    def time_ps(self) -> int | None:
        """When the latest record completed (simulated ps), or None if it has not (yet)."""
        done = self._done
        return done.value if done is not None and done.triggered else None

    @property
    def recorded(self) -> bool:
        return self._done is not None

    def record(self, stream=None) -> None:
        """Record the event on `stream` (default: the device's default stream)."""
        stream = stream or self.device.default_stream
        stream.record_event(self)

    def _new_record(self) -> simpy.Event:
        self._done = self.device.env.event()
        return self._done

    def _fire(self, done: simpy.Event, now: int) -> None:
        """The stream reached the record `done` (of this event) at `now`."""
        done.succeed(now)
        if self.name and done is self._done:
            self.device.recorder.event(self.name, now)

    def query(self) -> bool:
        """Has the work before the latest record completed at the host's present? Runs the
        device only up to the host's clock; never blocks and never raises (True when the event
        was never recorded)."""
        done = self._done
        if done is None or done.triggered:
            return True
        ctx = self.device.ctx
        ctx.advance_to(ctx.host.now)
        return done.triggered

    def synchronize(self) -> None:
        """Block the host until the latest record completes (its clock moves to that moment).
        Raises the first error inside the device not raised yet (`ChipContext.run_until`; the
        host's clock then moves to the moment the device stopped)."""
        done = self._done
        ctx = self.device.ctx
        try:
            ctx.run_until(done)
        finally:
            if done is None:
                end = ctx.host.now
            else:
                end = done.value if done.triggered else ctx.env.now
            ctx.host.wait_until("event.synchronize", end, self.name)

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds of simulated time from this event to `end` (CUDA's cudaEventElapsedTime).

        Raises if either event was created without `enable_timing`, was never recorded, or has
        not completed yet (synchronize first)."""
        for e in (self, end):
            label = f"event '{e.name}'" if e.name else "an event"
            if not e.enable_timing:
                raise TrnsimError(f"elapsed_time: {label} was created with enable_timing=False")
            if e._done is None:
                raise TrnsimError(f"elapsed_time: {label} was never recorded")
            if e.time_ps is None:
                raise TrnsimError(f"elapsed_time: {label} has not completed; synchronize it first")
        return (end.time_ps - self.time_ps) / 1e9

    def __repr__(self) -> str:
        state = "unrecorded" if self._done is None else f"time_ps={self.time_ps}"
        return f"Event({self.name!r}, {state})"
