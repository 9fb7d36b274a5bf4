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
and keeps one SimPy timeout for the earliest completion (rounded up to whole ps): it is re-armed
only when that instant moves, and a superseded timeout is ignored. Changes made at one instant
are batched into one update.

An update recomputes only the connected components (groups linked through shared resources) of
the groups that changed. Groups are created and removed far less often than flows start and end
(a group lives as long as any flow with its resources is in progress), so each group caches its
component until the next creation or removal of a group that shares a resource with another
(a group alone in its component links or splits nothing). A group alone is filled without the
heap: its rate is its bound. Within a component, groups
are filled in creation order, so the float sums (and so the rates) do not depend on which change
triggered the update.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from itertools import repeat
from operator import add as _add
from operator import mul as _mul
from operator import sub as _sub
from operator import truediv as _truediv

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

    __slots__ = ("key", "work", "uses", "cap", "on_done", "data", "target", "group", "coefs")

    def __init__(
        self,
        key: tuple,
        work: float,
        uses: tuple[tuple[int, float], ...],
        cap: float,
        on_done: Callable[[Flow], None],
        data=None,
    ):
        self.key = key
        self.work = work
        self.uses = uses
        self.cap = cap
        self.on_done = on_done
        self.data = data
        self.target = 0.0  # the group's progress at which this flow is done
        self.group: _Group | None = None
        self.coefs: tuple[float, ...] = ()  # its coefs, in its group's rids order, once started

    @property
    def rate(self) -> float:
        """Work units per ps now (0 before the flow's first update or after it finished)."""
        return self.group.rate if self.group is not None else 0.0

    def __lt__(self, other: Flow) -> bool:
        return self.key < other.key


class _Group:
    """Flows with the same resources and cap: one rate, one progress counter.

    Progress (work done per member since the group formed) is `base + rate * (t - t_base)`;
    it is rebased whenever the rate or the membership changes. `comp` caches the group's
    component while `topo` matches the model's; `bound` caches the lowest level at which the
    group's cap or one of its private resources (used by no other group of `bound_comp`) stops
    it, until its coefs or its component change.
    """

    __slots__ = (
        "sig",
        "rids",
        "cap",
        "coefs",
        "members",
        "base",
        "t_base",
        "rate",
        "version",
        "order",
        "comp",
        "topo",
        "bound",
        "bound_comp",
        "caps",
        "alone_coefs",
    )

    def __init__(self, sig: tuple, cap: float, now: int, order: int, caps: tuple[float, ...]):
        self.sig = sig
        self.rids: tuple[int, ...] = sig[0]
        self.caps = caps  # its resources' capacities, in rids order
        self.cap = cap
        self.coefs = [0.0] * len(self.rids)
        self.members: list[tuple[float, Flow]] = []  # heap of (target progress, flow)
        self.base = 0.0
        self.t_base = now
        self.rate = 0.0
        self.version = 0  # bumped when the timer entry for the head flow goes stale
        self.order = order  # creation order: fixes the filling order within a component
        self.comp: _Comp | None = None
        self.topo = -1
        self.bound = math.inf
        self.bound_comp: _Comp | None = None
        self.alone_coefs: list[float] | None = None  # the coefs `bound` is for, when alone

    def rebase(self, now: int) -> None:
        self.base += self.rate * (now - self.t_base)
        self.t_base = now

    def head_finish(self) -> float:
        """When the first member finishes at the current rate, in (fractional) ps."""
        return self.t_base + (self.members[0][0] - self.base) / self.rate


def _key(f: Flow) -> tuple:
    return f.key


def _order(g: _Group) -> int:
    return g.order


class _Comp:
    """A connected component of groups, and how their resources are shared, for filling.

    `groups` in creation order; `private[i]` / `shared[i]`: (resource, position in the group's
    rids) for the resources of `groups[i]` that no other group of the component uses / that
    some other one does; `users`: shared resource -> (group index, position) of its users.
    """

    __slots__ = ("groups", "private", "shared", "users")

    def __init__(self, groups: list[_Group], users: dict[int, dict[_Group, None]]):
        self.groups = groups
        self.private: list[tuple[tuple[int, int], ...]] = []
        self.shared: list[tuple[tuple[int, int], ...]] = []
        self.users: dict[int, list[tuple[int, int]]] = {}
        for i, g in enumerate(groups):
            priv, shar = [], []
            for pos, r in enumerate(g.rids):
                if len(users[r]) > 1:
                    shar.append((r, pos))
                    self.users.setdefault(r, []).append((i, pos))
                else:
                    priv.append((r, pos))
            self.private.append(tuple(priv))
            self.shared.append(tuple(shar))


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
        """Called after a recomputation of rates that wrote some load (e.g. to sample them)."""
        self.updates = 0
        """How many times rates were recomputed (for benchmarks)."""
        self.count = 0
        """Flows in progress."""
        self._groups: dict[tuple, _Group] = {}
        self._users: dict[int, dict[_Group, None]] = {}  # resource -> groups using it, in order
        self._timers: list[tuple[float, int, int, _Group]] = []  # (ps, seq, version, group)
        self._tseq = 0
        self._gseq = 0  # groups created so far
        self._topo = 0  # bumped when a group is created or removed: cached components go stale
        self._new: list[Flow] = []
        self._loaded = False  # a load was written since on_change was last called
        self._sigs: dict[int, tuple] = {}  # id(uses) -> (uses, group key, coefs)
        self._gen = 0
        self._armed = -1  # the ps of the live timeout (-1: none)
        self._pending = False
        self._updating = False

    def add_resource(self, capacity: float) -> int:
        """Register a resource of `capacity` units per ps; returns its id."""
        self.capacity.append(capacity)
        return len(self.capacity) - 1

    def start(self, flow: Flow) -> None:
        """Add a flow now; rates are recomputed once all changes of this instant are in."""
        if not flow.uses and flow.cap == math.inf:
            raise ValueError(
                f"flow {flow.key} uses no resource and has no cap: its rate is unbounded"
            )
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
            self._armed = -1
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
            if len(done) > 1:
                done.sort(key=_key)
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
        while timers and timers[0][2] != timers[0][3].version:
            heapq.heappop(timers)
        if timers:
            at = now + max(1, math.ceil(timers[0][0] - now - _DONE_PS))
            if at != self._armed:  # else the live timeout already fires then
                self._gen += 1
                self._armed = at
                self.env.timeout(at - now, self._gen).callbacks.append(self._on_timer)
        elif self._armed >= 0:
            self._gen += 1  # nothing left to finish: the live timeout is void
            self._armed = -1
        if self._loaded and self.on_change is not None:
            self._loaded = False
            self.on_change()

    def _join(self, f: Flow, now: int) -> _Group:
        sig, cs = self._sig(f)
        g = self._groups.get(sig)
        if g is None:
            capacity = self.capacity
            g = self._groups[sig] = _Group(
                sig, f.cap, now, self._gseq, tuple([capacity[r] for r in sig[0]])
            )
            self._gseq += 1
            users = self._users
            if any(r in users for r in g.rids):
                self._topo += 1  # it links components: their cached ones go stale
            for r in g.rids:
                if r in users:
                    users[r][g] = None
                else:
                    users[r] = {g: None}
        else:
            g.rebase(now)
        g.coefs = list(map(_add, g.coefs, cs))
        f.coefs = cs
        g.bound_comp = None
        f.group = g
        f.target = g.base + f.work
        heapq.heappush(g.members, (f.target, f))
        self.count += 1
        return g

    def _sig(self, f: Flow) -> tuple[tuple, tuple[float, ...]]:
        """(group key, coefs) of a flow, cached per `uses` object (callers share one per
        distinct copy; keyed by identity, as hashing the tuple of floats costs more than
        splitting it; the cache entry keeps `uses` alive so its id is not reused)."""
        uses = f.uses
        hit = self._sigs.get(id(uses))
        if hit is None or hit[0] is not uses or hit[1][1] != f.cap:
            hit = self._sigs[id(uses)] = (
                uses,
                (tuple([r for r, _ in uses]), f.cap),
                tuple([c for _, c in uses]),
            )
        return hit[1], hit[2]

    def _leave(self, f: Flow) -> None:
        g = f.group
        g.coefs = list(map(_sub, g.coefs, f.coefs))
        g.bound_comp = None
        f.group = None
        f.target = -1.0
        self.count -= 1

    def _component(self, g: _Group) -> _Comp:
        """The groups linked to `g` through shared resources, cached until the next creation or
        removal of a group."""
        if g.topo == self._topo:
            return g.comp
        users = self._users
        comp, seen_g, seen_r = [g], {g}, set()
        i = 0
        while i < len(comp):
            h = comp[i]
            i += 1
            for r in h.rids:
                if r not in seen_r:
                    seen_r.add(r)
                    for k in users[r]:
                        if k not in seen_g:
                            seen_g.add(k)
                            comp.append(k)
        comp.sort(key=_order)
        c = _Comp(comp, users)
        for h in comp:
            h.comp, h.topo = c, self._topo
        return c

    def _refill(self, dirty: dict[_Group, None], now: int) -> None:
        """Recompute the rates of the component(s) of the changed groups; re-arm their timers."""
        users, load = self._users, self.load
        seeds: dict[_Group, None] = {}
        for g in dirty:
            if g.members:
                seeds[g] = None
                continue
            # empty: forget it; its resources' other users are what changed
            del self._groups[g.sig]
            g.version += 1
            g.comp = None
            linked = False
            for r in g.rids:
                others = users[r]
                del others[g]
                if others:
                    linked = True
                    for k in others:
                        seeds[k] = None
                else:
                    del users[r]
                    load.pop(r, None)
                    self._loaded = True
            if linked:  # its component splits or shrinks: cached ones go stale
                self._topo += 1
        if not seeds:
            return
        self.updates += 1
        timers = self._timers
        done: set[_Group] = set()
        for s in seeds:
            if s in done or not s.members:  # not s.members: removed after it was seeded
                continue
            component = s.comp if s.topo == self._topo else self._component(s)
            if not component.users:  # a group alone (the usual case): no heap, no lists
                old_rate = s.rate
                s.rebase(now)
                self._fill_alone(component)
                if (old_rate != s.rate or s in dirty) and s.rate > 0:
                    s.version += 1
                    self._tseq += 1
                    heapq.heappush(timers, (s.head_finish(), self._tseq, s.version, s))
                continue
            comp = component.groups
            done.update(comp)
            old = [g.rate for g in comp]
            for g in comp:
                g.rebase(now)
            self._fill(component)
            for g, rate in zip(comp, old):
                if (rate != g.rate or g in dirty) and g.rate > 0:
                    g.version += 1
                    self._tseq += 1
                    heapq.heappush(timers, (g.head_finish(), self._tseq, g.version, g))

    def _fill(self, comp: _Comp) -> None:
        """Progressive filling over a component's groups: set each one's max-min fair rate,
        and the load of their resources.

        Each resource would saturate at level (capacity - use by frozen groups) / (summed
        coefs of its unfrozen groups); a heap yields the lowest, whose groups freeze there,
        which raises the projections of their other resources. A resource that only one group
        uses (a core's engines, when the other groups are other cores' transfers; all of them
        for a group alone) saturates at capacity / coef whatever the others do: it acts as a cap
        on that group (`_Group.bound`, kept while the group's coefs stay) and stays out of the
        heap.
        """
        cap, load, groups, users = self.capacity, self.load, comp.groups, comp.users
        fresh: list[bool] = []  # per group: bound recomputed (its coefs or component changed)
        olds = [g.rate for g in groups]
        for i, g in enumerate(groups):
            g.rate = -1.0  # not frozen yet
            if g.bound_comp is comp:
                fresh.append(False)
                continue
            bound, gc = g.cap, g.coefs
            for rid, pos in comp.private[i]:
                c = gc[pos]
                if c > 0:
                    lvl = cap[rid] / c
                    if lvl < bound:
                        bound = lvl
            g.bound, g.bound_comp, g.alone_coefs = bound, comp, None
            fresh.append(True)
        if not users:  # one group: its bound is its rate
            g = groups[0]
            g.rate = g.bound
        else:
            self._fill_shared(comp)
        for i, g in enumerate(groups):
            rate = g.rate
            if fresh[i] or rate != olds[i]:
                gc = g.coefs
                for rid, pos in comp.private[i]:
                    load[rid] = gc[pos] * rate
                self._loaded = True

    def _fill_alone(self, comp: _Comp) -> None:
        """`_fill` for a component of one group: its rate is its bound, the lowest of its cap
        and its resources' capacity / coef (min is exact: the same floats as `_fill`'s loop,
        computed by map and min over the group's resources, all private, in order)."""
        g = comp.groups[0]
        gc = g.coefs
        if g.bound_comp is not comp and gc != g.alone_coefs:
            if gc and min(gc) > 0:
                bound = min(g.cap, min(map(_truediv, g.caps, gc)))
            else:  # no resource, or a coef of 0 (its resource is left free: skip it)
                bound = min([g.cap] + [c / k for c, k in zip(g.caps, gc) if k > 0])
            g.bound, g.alone_coefs = bound, gc
        elif g.bound == g.rate:
            return  # same rate, same coefs: same loads
        g.bound_comp = comp
        g.rate = rate = g.bound
        self.load.update(zip(g.rids, map(_mul, gc, repeat(rate))))
        self._loaded = True

    def _fill_shared(self, comp: _Comp) -> None:
        """The heap part of `_fill`, for a component whose groups share resources."""
        cap, load, groups, users = self.capacity, self.load, comp.groups, comp.users
        coefs: dict[int, float] = {}
        heap = []
        for rid, us in users.items():
            c = sum([groups[i].coefs[pos] for i, pos in us])
            coefs[rid] = c
            heap.append((cap[rid] / c if c > 0 else math.inf, rid, 0))
        heap += [(g.bound, -1 - i, 0) for i, g in enumerate(groups)]
        heapq.heapify(heap)
        used = dict.fromkeys(users, 0.0)
        version = dict.fromkeys(users, 0)
        active = {rid: len(us) for rid, us in users.items()}  # unfrozen groups per resource
        shared, left_groups = comp.shared, len(groups)
        while left_groups:
            level, rid, ver = heapq.heappop(heap)
            if rid < 0:
                frozen = (-1 - rid,)
            elif ver != version[rid]:
                continue
            else:
                frozen = [i for i, _ in users[rid]]
            for i in frozen:
                g = groups[i]
                if g.rate >= 0.0:
                    continue
                g.rate = level
                left_groups -= 1
                gc = g.coefs
                for r, pos in shared[i]:
                    c = gc[pos]
                    used[r] += c * level
                    left = coefs[r] = coefs[r] - c
                    n = active[r] = active[r] - 1
                    if r != rid:
                        v = version[r] = version[r] + 1
                        if n:  # a resource whose groups are all frozen needs no projection
                            lvl = (cap[r] - used[r]) / left if left > 0 else math.inf
                            heapq.heappush(heap, (max(level, lvl), r, v))
        load.update(used)
        self._loaded = True
