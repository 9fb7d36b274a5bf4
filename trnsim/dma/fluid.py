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
only when that instant moves, and a superseded timeout is ignored. A flow started from a
completion's callback joins that completion's update, and flows started between `hold()` and
`release()` share one update; any other start updates at once (a zero-delay event to batch the
starts of an instant would cost an event per start where they seldom share one; a second update
at the same instant advances nothing, and the tests of the bundled traces check that the order
of updates within an instant moves no completion). Times inside the model count from the start
of its current busy period (the first flow started while nothing was in progress), in float ps:
so a busy period plays out the same, to the last bit, wherever it falls on the clock (a launch
replayed from an earlier one's timeline, `trnsim.runtime.reuse`, is what a fresh simulation
would give).

A completion callback that raises (a gather's index out of range, found as its values are
copied) does not cut the update short: the other completions' callbacks run, the rates and the
timer are set, and only then is the first error raised, by an event of its own at the same ps
(out of `env.run`/`env.step`, never out of the `start()` of a flow that merely began at that
instant). So the model is as consistent as after any update, and the simulation can go on (the
runtime keeps the error for the next synchronize).

An update recomputes only the connected components (groups linked through shared resources) of
the groups that changed. Groups are created and removed far less often than flows start and end
(a group lives as long as any flow with its resources is in progress), so each group caches its
component until the next creation or removal of a group that shares a resource with another
(a group alone in its component links or splits nothing). A group alone is filled without the
heap: its rate is its bound. Within a component, groups are filled in creation order, so the
float sums (and so the rates) do not depend on which change triggered the update.

`flows` holds the flow, group and component records; `filling` the progressive filling; this
module the model that starts flows, advances time and re-arms the timer.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from operator import add as _add
from operator import sub as _sub

import simpy

from trnsim.dma.filling import fill, fill_alone
from trnsim.dma.flows import DONE_PS, Component, Flow, Group, creation_order, flow_key

__all__ = ["Flow", "FluidModel"]


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
        """Resource id -> units per ps in use at the current rates (only watched resources in
        use: the others' loads are read by nobody, and writing them cost a tenth of a run)."""
        self._watched: set[int] = set()
        self.on_change: Callable[[], None] | None = None
        """Called after a recomputation of rates that wrote some load (e.g. to sample them)."""
        self.updates = 0
        """How many times rates were recomputed (for benchmarks)."""
        self.count = 0
        """Flows in progress."""
        self._groups: dict[tuple, Group] = {}
        self._users: dict[int, dict[Group, None]] = {}  # resource -> groups using it, in order
        self._timers: list[tuple[float, int, int, Group]] = []  # (ps, seq, version, group)
        self._tseq = 0
        self._gseq = 0  # groups created so far
        self._topo = 0  # bumped when a group is created or removed: cached components go stale
        self._new: list[Flow] = []
        self._held = False  # starts wait for release()
        self._loaded = False  # a load was written since on_change was last called
        self._sigs: dict[int, tuple] = {}  # id(uses) -> (uses, group key, coefs)
        self._statics: dict[tuple, tuple] = {}  # group key -> (capacities, watched, all)
        self._gen = 0
        self._armed = -1  # the ps of the live timeout (-1: none)
        self._updating = False
        self._epoch = 0  # ps: times inside the model count from here (reset when it idles)

    def idle(self) -> bool:
        """No flow in progress or about to start, and no timer armed."""
        return not self.count and not self._new and self._armed == -1

    def add_resource(self, capacity: float, watched: bool = True) -> int:
        """Register a resource of `capacity` units per ps; returns its id. Only a `watched`
        resource's load is kept in `load`."""
        self.capacity.append(capacity)
        if watched:
            self._watched.add(len(self.capacity) - 1)
        return len(self.capacity) - 1

    def start(self, flow: Flow) -> None:
        """Add a flow now; rates are recomputed at once, or by the update in progress, or at
        `release()`."""
        if not flow.uses and flow.cap == math.inf:
            raise ValueError(
                f"flow {flow.key} uses no resource and has no cap: its rate is unbounded"
            )
        if not self._updating and self.idle():
            self._epoch = self.env.now  # a busy period starts: count times from now
            self._timers.clear()  # only stale entries are left
        self._new.append(flow)
        if not self._updating and not self._held:
            self._update()

    def hold(self) -> None:
        """Defer the updates of the flows started from now until `release()`: one update for
        the starts of an instant."""
        self._held = True

    def release(self) -> None:
        self._held = False
        if self._new and not self._updating:
            self._update()

    def remaining(self, flow: Flow) -> float:
        """Work the flow has left now (its full work before it starts, 0 once finished)."""
        g = flow.group
        if g is None:  # not started yet, or finished (target set to -1)
            return 0.0 if flow.target < 0 else flow.work
        return flow.target - g.base - g.rate * (self.env.now - self._epoch - g.t_base)

    def _on_timer(self, ev) -> None:
        if ev.value == self._gen:
            self._armed = -1
            self._update()

    def _update(self) -> None:
        """Retire finished flows, add new ones, refill what they touch, set the timer."""
        now = self.env.now - self._epoch
        timers, dirty = self._timers, {}
        done: list[Flow] = []
        while timers and timers[0][0] <= now + DONE_PS:
            _, _, ver, g = heapq.heappop(timers)
            if ver != g.version:
                continue
            dirty[g] = None
            while g.members and g.head_finish() <= now + DONE_PS:
                done.append(heapq.heappop(g.members)[1])
        failed: Exception | None = None
        if done:
            if len(done) > 1:
                done.sort(key=flow_key)
            for f in done:
                self._leave(f)
            self._updating = True
            try:
                for f in done:
                    try:
                        f.on_done(f)  # may start flows: they join self._new
                    except Exception as e:  # raised after the update (see the end)
                        failed = _first(failed, e)
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
            at = now + max(1, math.ceil(timers[0][0] - now - DONE_PS))
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
        if failed is not None:  # from an event of its own: not out of a caller's start()
            ev = self.env.event()
            ev.callbacks.append(_raise)
            ev.succeed(failed)

    def _join(self, f: Flow, now: int) -> Group:
        sig, cs = self._sig(f)
        g = self._groups.get(sig)
        if g is None:
            static = self._statics.get(sig)
            if static is None:  # capacities, watched and (when alone) private resources, per sig
                capacity, w = self.capacity, self._watched
                static = self._statics[sig] = (
                    tuple([capacity[r] for r in sig[0]]),
                    tuple([(r, pos) for pos, r in enumerate(sig[0]) if r in w]),
                    tuple(zip(sig[0], range(len(sig[0])))),
                )
            g = self._groups[sig] = Group(sig, f.cap, now, self._gseq, static[0])
            g.watch = static[1]
            self._gseq += 1
            users = self._users
            if not users.keys().isdisjoint(g.rids):
                self._topo += 1  # it links components: their cached ones go stale
            else:  # alone: its component is itself, no search needed
                g.comp, g.topo = Component.alone(g, static[2]), self._topo
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

    def _component(self, g: Group) -> Component:
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
        comp.sort(key=creation_order)
        c = Component(comp, users)
        for h in comp:
            h.comp, h.topo = c, self._topo
        return c

    def _refill(self, dirty: dict[Group, None], now: int) -> None:
        """Recompute the rates of the component(s) of the changed groups; re-arm their timers."""
        users, load = self._users, self.load
        seeds: dict[Group, None] = {}
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
                    if r in self._watched:
                        load.pop(r, None)
                        self._loaded = True
            if linked:  # its component splits or shrinks: cached ones go stale
                self._topo += 1
        if not seeds:
            return
        self.updates += 1
        timers = self._timers
        done: set[Group] = set()
        for s in seeds:
            if s in done or not s.members:  # not s.members: removed after it was seeded
                continue
            component = s.comp if s.topo == self._topo else self._component(s)
            if not component.users:  # a group alone (the usual case): no heap, no lists
                old_rate = s.rate
                s.rebase(now)
                if fill_alone(self.load, component):
                    self._loaded = True
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
            if fill(self.capacity, self.load, component, self._watched):
                self._loaded = True
            for g, rate in zip(comp, old):
                if (rate != g.rate or g in dirty) and g.rate > 0:
                    g.version += 1
                    self._tseq += 1
                    heapq.heappush(timers, (g.head_finish(), self._tseq, g.version, g))


def _raise(ev: simpy.Event) -> None:
    raise ev.value


def _first(first: Exception | None, error: Exception) -> Exception:
    """The error an update raises: the first of its completions' (a note names the others)."""
    if first is None:
        return error
    if hasattr(first, "add_note"):  # Python 3.11+
        first.add_note(f"a later completion of the same update failed too: {error!r}")
    return first
