"""Progressive filling: the max-min fair rates of one component of flow groups.

All unfrozen groups rise together; when a resource saturates (or a group reaches its bound)
the groups using it freeze at that level; repeat with the rest. Pure functions over a
`flows.Component`: they set each group's `rate` and write the resources' loads (units per ps)
into `load`. Within a component, groups are filled in creation order, so the float sums (and
so the rates) do not depend on which change triggered the update.
"""

from __future__ import annotations

import heapq
import math
from operator import truediv as _truediv

from trnsim.dma.flows import Component


def fill(cap: list[float], load: dict[int, float], comp: Component, watched: set[int]) -> bool:
    """Progressive filling over a component's groups: set each one's max-min fair rate,
    and the load of their `watched` resources (`Group.watch`). Returns whether some load was
    written.

    Each resource would saturate at level (capacity - use by frozen groups) / (summed
    coefs of its unfrozen groups); a heap yields the lowest, whose groups freeze there,
    which raises the projections of their other resources. A resource that only one group
    uses (a core's engines, when the other groups are other cores' transfers; all of them
    for a group alone) saturates at capacity / coef whatever the others do: it acts as a cap
    on that group (`Group.bound`, kept while the group's coefs stay) and stays out of the
    heap.
    """
    groups, users = comp.groups, comp.users
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
    loaded = False
    if not users:  # one group: its bound is its rate
        g = groups[0]
        g.rate = g.bound
    else:
        loaded = fill_shared(cap, load, comp, watched)
    for i, g in enumerate(groups):
        rate = g.rate
        if g.watch and (fresh[i] or rate != olds[i]):
            gc = g.coefs
            for rid, pos in g.watch:
                if rid not in users:  # (a shared one's load is fill_shared's)
                    load[rid] = gc[pos] * rate
                    loaded = True
    return loaded


def fill_alone(load: dict[int, float], comp: Component) -> bool:
    """`fill` for a component of one group: its rate is its bound, the lowest of its cap
    and its resources' capacity / coef (min is exact: the same floats as `fill`'s loop,
    computed by map and min over the group's resources, all private, in order). Returns
    whether the loads were written."""
    g = comp.groups[0]
    gc = g.coefs
    if g.bound_comp is not comp and gc != g.alone_coefs:
        if gc and min(gc) > 0:
            bound = min(g.cap, min(map(_truediv, g.caps, gc)))
        else:  # no resource, or a coef of 0 (its resource is left free: skip it)
            bound = min([g.cap] + [c / k for c, k in zip(g.caps, gc) if k > 0])
        g.bound, g.alone_coefs = bound, gc
    elif g.bound == g.rate:
        return False  # same rate, same coefs: same loads
    g.bound_comp = comp
    g.rate = rate = g.bound
    for rid, pos in g.watch:
        load[rid] = gc[pos] * rate
    return bool(g.watch)


def fill_shared(
    cap: list[float], load: dict[int, float], comp: Component, watched: set[int]
) -> bool:
    """The heap part of `fill`, for a component whose groups share resources; writes the loads
    of the `watched` shared ones, and says whether there were any."""
    groups, users = comp.groups, comp.users
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
    mine = [r for r in used if r in watched]
    for r in mine:
        load[r] = used[r]
    return bool(mine)
