"""A fluid model of flows sharing resources: max-min fair rates, recomputed only on change.

Generic over resources (DMA engines, HBM stacks, the host link are just capacities here).
A flow has an amount of `work` and uses resources: for each, `coef` units of the resource per
unit of work. Its progress rate `r` (work units per ps) is at most its `cap`, and for every
resource `R`: sum over flows of coef * r <= capacity(R) (resource units per ps).

Rates are the max-min fair allocation, found by progressive filling: all unfrozen flows rise
together; when a resource saturates (or a flow reaches its cap) the flows using it freeze at
that level; repeat with the rest. A flow's rate is thus the level at which the first of its
resources saturated, whatever its coefs: flows with the same resources and cap always share
one rate. So flows are kept in groups keyed by (resources, cap); filling works on groups (their
summed coefs), and each group keeps one progress counter (work done per member since the group
formed) and a heap of its members' finishing points: with G groups and F flows an update costs
O(G x resources-per-group x log) plus O(log F) per flow started or finished.

Time never ticks: rates change only when a flow starts or ends, so after each change the model
advances every group's progress by rate x elapsed ps, retires finished flows, recomputes rates,
and sets one SimPy timeout for the earliest completion (rounded up to whole ps); a superseded
timeout is ignored. Changes made at one instant are batched into one update.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import simpy

# a flow is done when what is left would take it less than this many ps
_DONE_PS = 1e-3


class Flow:
    """One unit of work moving through resources.

    `key` orders flows for tie-breaks (flows completing at the same ps are reported in key
    order, so keys must be unique and comparable); `uses` is a tuple of (resource id, coef)
    with distinct ids; `cap` bounds the rate (math.inf: only the resources do; a flow needs a
    finite cap or a resource with a positive coef); `on_done(flow)` is called at completion.
    """

    __slots__ = ("key", "work", "uses", "cap", "on_done", "data", "target", "group")

    def __init__(self, key: tuple, work: float, uses: tuple[tuple[int, float], ...],
                 cap: float, on_done: Callable[[Flow], None], data=None):
        self.key = key
        self.work = work
        self.uses = uses
        self.cap = cap
        self.on_done = on_done
        self.data = data
        self.target = 0.0  # the group's progress at which this flow is done
        self.group: _Group | None = None

    @property
    def rate(self) -> float:
        """Work units per ps now (0 before the flow's first update or after it finished)."""
        return self.group.rate if self.group is not None else 0.0

    def __lt__(self, other: Flow) -> bool:
        return self.key < other.key


class _Group:
    """Flows with the same resources and cap: one rate, one progress counter.

    Progress (work done per member since the group formed) is `base + rate * (t - t_base)`;
    it is rebased whenever the rate or the membership changes.
    """

    __slots__ = ("sig", "rids", "cap", "coefs", "members", "base", "t_base", "rate", "version")

    def __init__(self, sig: tuple, cap: float, now: int):
        self.sig = sig
        self.rids: tuple[int, ...] = sig[0]
        self.cap = cap
        self.coefs = [0.0] * len(self.rids)
        self.members: list[tuple[float, Flow]] = []  # heap of (target progress, flow)
        self.base = 0.0
        self.t_base = now
        self.rate = 0.0
        self.version = 0  # bumped when the timer entry for the head flow goes stale

    def rebase(self, now: int) -> None:
        self.base += self.rate * (now - self.t_base)
        self.t_base = now

    def head_finish(self) -> float:
        """When the first member finishes at the current rate, in (fractional) ps."""
        return self.t_base + (self.members[0][0] - self.base) / self.rate


class FluidModel:
    """Flows on resources, driven by a SimPy environment whose clock counts picoseconds.

    An update touches only the connected component (groups linked through shared resources)
    of what changed, and the timer heap: with tensors on their cores' home stacks, a change on
    one stack does not recompute the others.
    """

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.capacity: list[float] = []
        self.load: dict[int, float] = {}
        """Resource id -> units per ps in use at the current rates (only resources in use)."""
        self.on_change: Callable[[], None] | None = None
        """Called after every recomputation of rates (e.g. to sample resource loads)."""
        self.updates = 0
        """How many times rates were recomputed (for benchmarks)."""
        self.count = 0
        """Flows in progress."""
        self._groups: dict[tuple, _Group] = {}
        self._users: dict[int, dict[_Group, None]] = {}  # resource -> groups using it, in order
        self._timers: list[tuple[float, int, int, _Group]] = []  # (ps, seq, version, group)
        self._tseq = 0
        self._new: list[Flow] = []
        self._gen = 0
        self._pending = False
        self._updating = False

    def add_resource(self, capacity: float) -> int:
        """Register a resource of `capacity` units per ps; returns its id."""
        self.capacity.append(capacity)
        return len(self.capacity) - 1

    def start(self, flow: Flow) -> None:
        """Add a flow now; rates are recomputed once all changes of this instant are in."""
        if not flow.uses and flow.cap == math.inf:
            raise ValueError(f"flow {flow.key} uses no resource and has no cap: its rate is "
                             f"unbounded")
        self._new.append(flow)
        if not self._updating and not self._pending:
            self._pending = True
            self.env.timeout(0).callbacks.append(self._on_request)

    def remaining(self, flow: Flow) -> float:
        """Work the flow has left now (its full work before it starts, 0 once finished)."""
        g = flow.group
        if g is None:  # not started yet, or finished (target set to -1)
            return 0.0 if flow.target < 0 else flow.work
        return flow.target - g.base - g.rate * (self.env.now - g.t_base)

    def _on_request(self, _ev) -> None:
        self._pending = False
        self._update()

    def _on_timer(self, ev) -> None:
        if ev.value == self._gen:
            self._update()

    def _update(self) -> None:
        """Retire finished flows, add new ones, refill what they touch, set the timer."""
        now = self.env.now
        timers, dirty = self._timers, {}
        done: list[Flow] = []
        while timers and timers[0][0] <= now + _DONE_PS:
            _, _, ver, g = heapq.heappop(timers)
            if ver != g.version:
                continue
            dirty[g] = None
            while g.members and g.head_finish() <= now + _DONE_PS:
                done.append(heapq.heappop(g.members)[1])
        if done:
            done.sort(key=lambda f: f.key)
            for f in done:
                self._leave(f)
            self._updating = True
            try:
                for f in done:
                    f.on_done(f)  # may start flows: they join self._new
            finally:
                self._updating = False
        if self._new:
            new, self._new = self._new, []
            for f in new:
                dirty[self._join(f, now)] = None
        if dirty:
            self._refill(dirty, now)
        self._gen += 1
        while timers and timers[0][2] != timers[0][3].version:
            heapq.heappop(timers)
        if timers:
            delay = max(1, math.ceil(timers[0][0] - now - _DONE_PS))
            self.env.timeout(delay, self._gen).callbacks.append(self._on_timer)
        if dirty and self.on_change is not None:
            self.on_change()

    def _join(self, f: Flow, now: int) -> _Group:
        sig = (tuple(r for r, _ in f.uses), f.cap)
        g = self._groups.get(sig)
        if g is None:
            g = self._groups[sig] = _Group(sig, f.cap, now)
            for r in g.rids:
                self._users.setdefault(r, {})[g] = None
        else:
            g.rebase(now)
        for i, (_, c) in enumerate(f.uses):
            g.coefs[i] += c
        f.group = g
        f.target = g.base + f.work
        heapq.heappush(g.members, (f.target, f))
        self.count += 1
        return g

    def _leave(self, f: Flow) -> None:
        g = f.group
        for i, (_, c) in enumerate(f.uses):
            g.coefs[i] -= c
        f.group = None
        f.target = -1.0
        self.count -= 1

    def _refill(self, dirty: dict[_Group, None], now: int) -> None:
        """Recompute the rates of the component(s) of the changed groups; re-arm their timers."""
        users = self._users
        for g in dirty:
            if not g.members:  # empty: forget it (its resources still seed the search)
                del self._groups[g.sig]
                for r in g.rids:
                    del users[r][g]
                g.version += 1
        seen_r: dict[int, None] = {}  # dicts, not sets: iteration order must be reproducible
        seen_g: dict[_Group, None] = {}
        comp: list[_Group] = []
        todo = [r for g in dirty for r in g.rids]
        while todo:
            r = todo.pop()
            if r in seen_r:
                continue
            seen_r[r] = None
            for g in users.get(r, ()):
                if g not in seen_g:
                    seen_g[g] = None
                    comp.append(g)
                    todo.extend(g.rids)
        old = [g.rate for g in comp]
        for g in comp:
            g.rebase(now)
        used = self._fill(comp)
        for r in seen_r:
            if r in used:
                self.load[r] = used[r]
            else:
                self.load.pop(r, None)
        self.updates += 1
        for g, rate in zip(comp, old):
            if (rate != g.rate or g in dirty) and g.rate > 0:
                g.version += 1
                self._tseq += 1
                heapq.heappush(self._timers, (g.head_finish(), self._tseq, g.version, g))

    def _fill(self, groups: list[_Group]) -> dict[int, float]:
        """Progressive filling over groups: set each group's max-min fair rate.

        Each resource would saturate at level (capacity - use by frozen groups) / (summed
        coefs of its unfrozen groups); a heap yields the lowest, whose groups freeze there,
        which raises the projections of their other resources. Returns each resource's use.
        """
        cap = self.capacity
        users: dict[int, list[_Group]] = {}
        coefs: dict[int, float] = {}
        for g in groups:
            g.rate = -1.0  # not frozen yet
            for rid, c in zip(g.rids, g.coefs):
                if rid in users:
                    users[rid].append(g)
                    coefs[rid] += c
                else:
                    users[rid] = [g]
                    coefs[rid] = c
        used = dict.fromkeys(users, 0.0)
        version = dict.fromkeys(users, 0)
        heap = [(cap[rid] / c if c > 0 else math.inf, rid, 0) for rid, c in coefs.items()]
        heap += [(g.cap, -1 - i, 0) for i, g in enumerate(groups) if g.cap < math.inf]
        heapq.heapify(heap)
        while heap:
            level, rid, ver = heapq.heappop(heap)
            if rid < 0:
                frozen = (groups[-1 - rid],)
            elif ver != version[rid]:
                continue
            else:
                frozen = users[rid]
            for g in frozen:
                if g.rate >= 0.0:
                    continue
                g.rate = level
                for r, c in zip(g.rids, g.coefs):
                    used[r] += c * level
                    left = coefs[r] = coefs[r] - c
                    if r != rid:
                        v = version[r] = version[r] + 1
                        lvl = (cap[r] - used[r]) / left if left > 0 else math.inf
                        heapq.heappush(heap, (max(level, lvl), r, v))
        return used
