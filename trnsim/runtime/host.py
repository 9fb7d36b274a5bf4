"""The simulated host: threads with their own clock, and what each API call costs them.

The host is modelled like the device: in integer picoseconds. A `HostThread` is one thread of
the program driving the device (the Python caller, or one stream of a trace); each API call
advances its clock by the call's cost (`HostCosts`, from the chip's `host_link` config), and the
device work it enqueues cannot start before the call has returned. So a program of many tiny
launches is launch-bound on the timeline, as on the real chip.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.config import ChipConfig
from trnsim.report.recorder import HostCall
from trnsim.units import seconds_to_ps


@dataclass(frozen=True)
class HostCosts:
    """Host time of each API call, in picoseconds (`host_link.*_overhead`)."""

    launch: int
    """One kernel launch, or one graph replay."""
    copy: int
    """Enqueueing one memcpy_async."""
    event: int
    """Recording an event, or enqueueing a wait for one."""
    graph_launch: int
    """Device time before each kernel of a replayed graph (no host call per kernel)."""

    @classmethod
    def from_config(cls, cfg: ChipConfig) -> HostCosts:
        h = cfg.host_link
        return cls(
            seconds_to_ps(h.launch_overhead),
            seconds_to_ps(h.copy_overhead),
            seconds_to_ps(h.event_overhead),
            seconds_to_ps(h.graph_launch_overhead),
        )


class HostThread:
    """A simulated host thread: its clock `now` (ps) and the calls it made.

    `now` only moves forward: by a call's cost (`call`), or to the moment something it waited for
    completed (`wait_until`)."""

    def __init__(self, name: str, calls: list[HostCall], now: int = 0):
        self.name, self.now = name, now
        self._calls = calls
        self.waiting: str | None = None  # what a blocked thread waits for (deadlock reports)

    def call(self, op: str, cost_ps: int, detail: str = "") -> int:
        """Spend `cost_ps` on call `op`; returns the clock after it (when its work may start)."""
        start = self.now
        self.now = end = start + cost_ps
        self._calls.append(HostCall(self.name, op, start, end, detail))
        return end

    def wait_until(self, op: str, t_ps: int, detail: str = "") -> None:
        """Block in call `op` until `t_ps` (no-op when that is already past)."""
        start = self.now
        if t_ps > start:
            self.now = t_ps
        self._calls.append(HostCall(self.name, op, start, self.now, detail))

    def __repr__(self) -> str:
        return f"HostThread({self.name!r}, now={self.now} ps)"
