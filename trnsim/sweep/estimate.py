"""Asking before a big sweep: above `CONFIRM_ABOVE` points to run, `run_sweep` runs the first few
points here to time them (their rows are kept, not run again) and asks its `confirm` callback
whether to run the rest, so a grid that multiplied out larger than meant costs seconds, not
hours."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from trnsim.sweep import execute

__all__ = ["CONFIRM_ABOVE", "ESTIMATE_POINTS", "ESTIMATE_SECONDS", "Estimate", "Confirm", "first"]

CONFIRM_ABOVE = 10_000
"""A sweep with more points to run than this asks before running them (`trnsim sweep` asks on a
terminal, or needs --yes). Points already in the --out table, and points that fail before
running (a bad value, an unreadable trace), do not count: they cost nothing."""
ESTIMATE_POINTS = 3
ESTIMATE_SECONDS = 2.0
"""The estimate times the first ESTIMATE_POINTS points, or fewer if ESTIMATE_SECONDS have
passed (one point at least)."""


@dataclass(frozen=True)
class Estimate:
    """The first `measured` points took `seconds` (`failed` of them failed); `left` points are
    still to run."""

    measured: int
    seconds: float
    failed: int
    left: int

    @property
    def each(self) -> float:
        """Seconds a point, on one process."""
        return self.seconds / self.measured if self.measured else 0.0

    def seconds_left(self, processes: int = 1) -> float:
        """The rest's time at the first points' rate, `processes` points at a time."""
        return self.each * self.left / max(processes, 1)


Confirm = Callable[[int, Callable[[], Estimate]], bool]
"""confirm(points to run, estimate) -> run them? `estimate()` runs the first points (once; later
calls return the same Estimate); a callback that decides without it (an answer known already)
runs nothing."""


def first(tasks: list[tuple[int, tuple]], finish) -> Estimate:
    """Run the first of `tasks` in this process, handing each to `finish` as the sweep does."""
    start = time.perf_counter()
    failed = 0

    def timed(i: int, res: dict) -> None:
        nonlocal failed
        failed += res["error"] is not None
        finish(i, res)

    def enough(done: int) -> bool:
        return done >= ESTIMATE_POINTS or time.perf_counter() - start >= ESTIMATE_SECONDS

    done = execute.in_process(tasks, timed, until=enough)
    return Estimate(done, time.perf_counter() - start, failed, len(tasks) - done)
