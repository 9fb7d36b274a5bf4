"""Semaphores: the one way engines and DMA queues order each other.

A semaphore is a counter; `signal(i, n)` adds n, `wait(i, v)` returns an event that fires once the
counter is >= v (or None when it already is, so the common case costs no SimPy event).
Semaphores are addressed by small integers; names are mapped once, when a kernel is built.
"""

from __future__ import annotations

import simpy


class Semaphores:
    """One kernel launch's semaphores on one NeuronCore."""

    __slots__ = ("env", "names", "values", "_waiters")

    def __init__(self, env: simpy.Environment, names: list[str]):
        self.env = env
        self.names = names
        self.values = [0] * len(names)
        self._waiters: dict[int, list[tuple[int, simpy.Event]]] = {}

    def wait(self, sem: int, value: int) -> simpy.Event | None:
        """None if `sem` already holds >= value, else an event that fires when it does."""
        if self.values[sem] >= value:
            return None
        ev = self.env.event()
        self._waiters.setdefault(sem, []).append((value, ev))
        return ev

    def signal(self, sem: int, n: int) -> None:
        """Add n to `sem` and wake every waiter whose threshold is now met, in arrival order."""
        v = self.values[sem] = self.values[sem] + n
        waiters = self._waiters.get(sem)
        if waiters:
            keep = []
            for threshold, ev in waiters:
                if threshold <= v:
                    ev.succeed()
                else:
                    keep.append((threshold, ev))
            self._waiters[sem] = keep
