"""Running a Schedule on a System's fluid model, in SimPy.

`Execution` follows the rules of `schedule.py`: a transfer is *ready* when its sender, its
receivers and the ranks whose buffers it adds have arrived and every transfer into any of them
at an earlier step has completed; it *moves* when it is also first on its sender's channel.
A move is one fluid flow (`System.move_uses`); `route latency` after its last byte the payload
is delivered: a copy is done, a reduce starts its reduction flow at the receiver
(`System.reduce_uses`), done when that ends. The channel takes its next move when the previous
one's flow ends (its latency overlaps the next move).

Everything that happens at one instant starts its flows in one fluid update: completions come
from the model's own update, and timed events (arrivals, deliveries) are gathered into one
SimPy timeout per instant that runs them between `hold()` and `release()`.

Values (functional mode): a move takes its payload from the sender's buffer when it starts; a
reduce adds in fp32 (payload, accumulator and others' regions) and rounds to the buffer's
dtype once, as the DMA does (R-CC, N-DMAO).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from trnsim.collectives.schedule import Schedule, Transfer
from trnsim.dtypes import DType, to_dtype
from trnsim.system.system import System
from trnsim.units import seconds_to_ps

REDUCE_OPS: dict[str, Callable] = {
    "sum": np.add,
    "max": np.maximum,
    "min": np.minimum,
    "prod": np.multiply,
}


class Clock:
    """One SimPy timeout per instant for everything due then, run in one fluid update."""

    def __init__(self, system: System):
        self.system = system
        self.env = system.env
        self._due: dict[int, list] = {}
        self._now_list: list | None = None

    def at(self, ps: int, fn: Callable, arg) -> None:
        now = self.env.now
        if ps <= now and self._now_list is not None:
            self._now_list.append((fn, arg))
            return
        ps = max(ps, now)
        due = self._due.get(ps)
        if due is None:
            due = self._due[ps] = []
            self.env.timeout(ps - now, ps).callbacks.append(self._fire)
        due.append((fn, arg))

    def _fire(self, ev) -> None:
        items = self._due.pop(ev.value)
        fluid = self.system.fluid
        fluid.hold()
        self._now_list = items
        try:
            i = 0
            while i < len(items):
                fn, arg = items[i]
                fn(arg)
                i += 1
        finally:
            self._now_list = None
            fluid.release()


class Execution:
    """One collective in progress: `arrive(rank)` for each rank of the group (at the instant
    it starts its part); `on_done(self)` when the last transfer completes."""

    def __init__(
        self,
        system: System,
        clock: Clock,
        sched: Schedule,
        tag: int,
        dtype: DType,
        reduce_op: str,
        buffers: dict[int, list[np.ndarray]] | None,
        on_done: Callable[[Execution], None],
    ):
        self.system, self.clock, self.sched, self.tag = system, clock, sched, tag
        self.dtype, self.itemsize = dtype, dtype.itemsize
        self.op = REDUCE_OPS[reduce_op]
        self.buffers = buffers
        self.on_done = on_done
        self.items: list[tuple[int, Transfer]] = [
            (s, t) for s, step in enumerate(sched.steps) for t in step
        ]
        nsteps = len(sched.steps)
        self.nsteps = nsteps
        ranks = sched.ranks
        self.level = dict.fromkeys(ranks, -1)  # -1 until arrived
        self.arrived_at: dict[int, int] = {}
        self.end_ps = dict.fromkeys(ranks, 0)
        self._pending: dict[int, dict[int, int]] = {r: {} for r in ranks}
        self._in_steps: dict[int, list[int]] = {r: [] for r in ranks}
        self._waiting: dict[int, list[int]] = {r: [] for r in ranks}
        self._channels: dict[tuple[int, int], deque] = {}
        self._busy: set[tuple[int, int]] = set()
        self._ready = [False] * len(self.items)
        self._payload: dict[int, np.ndarray] = {}
        for i, (s, t) in enumerate(self.items):
            for d in t.dsts:
                p = self._pending[d]
                if s not in p:
                    self._in_steps[d].append(s)
                p[s] = p.get(s, 0) + 1
            self._channels.setdefault((t.src, t.channel), deque()).append(i)
        self._ptr = dict.fromkeys(ranks, 0)
        self.left = len(self.items)
        for i, (_, t) in enumerate(self.items):
            self._waiting[t.src].append(i)  # every transfer first waits for its sender
        self.start_ps: int | None = None
        self.done_ps: int | None = None

    # -- arrivals and readiness ----------------------------------------------------------------

    def arrive(self, rank: int) -> None:
        now = self.system.env.now
        self.arrived_at[rank] = now
        self.end_ps[rank] = now
        if self.start_ps is None:
            self.start_ps = now
        self._advance(rank)
        if not self.left and len(self.arrived_at) == len(self.sched.ranks):
            self._finish()

    def _advance(self, rank: int) -> None:
        """Set `rank`'s level (the first step with an incoming transfer not yet complete) and
        wake the transfers waiting for it."""
        steps, p, ptr = self._in_steps[rank], self._pending[rank], self._ptr[rank]
        while ptr < len(steps) and p[steps[ptr]] == 0:
            ptr += 1
        self._ptr[rank] = ptr
        self.level[rank] = steps[ptr] if ptr < len(steps) else self.nsteps
        waiting = self._waiting[rank]
        if waiting:
            self._waiting[rank] = []
            for i in waiting:
                self._check(i)

    def _check(self, i: int) -> None:
        s, t = self.items[i]
        for x in (t.src, *t.dsts, *t.others):
            if self.level[x] < s:
                self._waiting[x].append(i)
                return
        self._ready[i] = True
        self._kick((t.src, t.channel))

    def _kick(self, ch: tuple[int, int]) -> None:
        q = self._channels[ch]
        if ch in self._busy or not q or not self._ready[q[0]]:
            return
        i = q.popleft()
        self._busy.add(ch)
        self._move(i)

    # -- moves and reductions ------------------------------------------------------------------

    def _move(self, i: int) -> None:
        s, t = self.items[i]
        sysm = self.system
        nbytes = t.count * self.itemsize
        uses, links, latency = sysm.move_uses(t.src, t.dsts, t.reduce)
        sysm.count_move(t.src, t.dsts, links, nbytes, t.reduce)
        if self.buffers is not None:
            self._payload[i] = self.buffers[t.src][t.src_buf][
                t.src_off : t.src_off + t.count
            ].copy()
        flow = sysm.start((self.tag, i, 0), nbytes, uses, self._moved, (i, latency))
        if flow is None:
            self.clock.at(sysm.env.now, self._moved_now, (i, latency))

    def _moved_now(self, data) -> None:
        self._after_move(*data)

    def _moved(self, flow) -> None:
        self._after_move(*flow.data)

    def _after_move(self, i: int, latency: float) -> None:
        s, t = self.items[i]
        ch = (t.src, t.channel)
        self._busy.discard(ch)
        self._kick(ch)
        self.end_ps[t.src] = max(self.end_ps[t.src], self.system.env.now)
        self.clock.at(self.system.env.now + seconds_to_ps(latency), self._delivered, i)

    def _delivered(self, i: int) -> None:
        s, t = self.items[i]
        if not t.reduce:
            if self.buffers is not None:
                v = self._payload.pop(i)
                for d in t.dsts:
                    self.buffers[d][t.dst_buf][t.dst_off : t.dst_off + t.count] = v
            self._complete(i)
            return
        sysm = self.system
        d = t.dsts[0]
        uses = sysm.reduce_uses(d, t.others)
        sysm.count_reduce(d, t.others, t.count * self.itemsize)
        flow = sysm.start((self.tag, i, 1), t.count * self.itemsize, uses, self._reduced, i)
        if flow is None:
            self._reduce_values(i)
            self._complete(i)

    def _reduced(self, flow) -> None:
        self._reduce_values(flow.data)
        self._complete(flow.data)

    def _reduce_values(self, i: int) -> None:
        if self.buffers is None:
            return
        s, t = self.items[i]
        d = t.dsts[0]
        lo, hi = t.dst_off, t.dst_off + t.count
        acc = self.buffers[d][t.dst_buf][lo:hi]
        total = self.op(acc.astype(np.float32), self._payload.pop(i).astype(np.float32))
        for o in t.others:
            total = self.op(total, self.buffers[o][t.dst_buf][lo:hi].astype(np.float32))
        acc[...] = to_dtype(total, self.dtype)

    def _complete(self, i: int) -> None:
        s, t = self.items[i]
        now = self.system.env.now
        self.left -= 1
        for d in t.dsts:
            self._pending[d][s] -= 1
            self.end_ps[d] = max(self.end_ps[d], now)
        for d in t.dsts:
            if self.level[d] == s and self._pending[d][s] == 0:
                self._advance(d)
        if not self.left and len(self.arrived_at) == len(self.sched.ranks):
            self._finish()

    def _finish(self) -> None:
        self.done_ps = max(self.end_ps.values())
        self.on_done(self)
