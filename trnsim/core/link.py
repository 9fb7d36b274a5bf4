"""The two physical cores of an LNC 2 logical core meeting at `core_barrier` (isa.md 8.6).

Each core writes the other's semaphore, then waits for its own: core A, reaching its nth barrier
at t_A, goes on at max(t_A, t_B + L), where t_B is when core B reached its nth barrier and L
the config's `core.barrier_latency` (a semaphore write crossing to the peer). The nth barrier
of one core meets the nth of the other; a launch's barriers are numbered after those of the
earlier launches of the same core.
"""

from __future__ import annotations

import simpy

__all__ = ["CoreLink"]


class CoreLink:
    """The cross-core semaphores of one pair of physical cores (`cores`: their indices)."""

    def __init__(self, env: simpy.Environment, cores: tuple[int, int], latency_ps: int):
        self.env, self.cores, self.latency = env, cores, latency_ps
        self.begun = [0, 0]  # per side: barriers of the launches started so far
        self.reached = [0, 0]  # per side: barriers reached so far
        self.first: list[dict[int, tuple[int, simpy.Event]]] = [{}, {}]  # side -> waiting ones

    def side(self, core: int) -> int:
        return self.cores.index(core)

    def begin(self, core: int, barriers: int) -> int:
        """A launch of `barriers` barriers starts on `core`: the number of its first one."""
        s = self.side(core)
        first = self.begun[s]
        self.begun[s] += barriers
        return first

    def arrive(self, core: int, n: int) -> simpy.Event | None:
        """`core` reaches barrier n now and signals its peer: the event that fires when the
        peer's signal has arrived (None if it already has). The first to arrive waits."""
        s, now, env = self.side(core), self.env.now, self.env
        self.reached[s] += 1
        peer = self.first[1 - s].pop(n, None)
        if peer is None:
            ev = env.event()
            self.first[s][n] = (now, ev)
            return ev
        t_peer, wake = peer
        env.timeout(self.latency).callbacks.append(lambda _e: wake.succeed())
        left = t_peer + self.latency - now
        return env.timeout(left) if left > 0 else None

    def stuck(self, core: int, n: int) -> str:
        """What `core`, waiting at barrier n, waits for (deadlock reports)."""
        other = 1 - self.side(core)
        return (
            f"core{self.cores[other]} to reach core_barrier {n + 1} (it reached "
            f"{self.reached[other]})"
        )
