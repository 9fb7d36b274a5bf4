"""Hierarchical collectives (R-CC): the group split into islands of equal size (nodes, or the
UltraServer's instances, or chips), an intra-island and an inter-island algorithm.

With islands I_0..I_{X-1} of Y ranks each and J_j the ranks at position j of every island:
- all-gather = inter all-gather in each J_j (every rank gathers the units of its J_j), then
  intra all-gather in each island of what they gathered;
- reduce-scatter = intra reduce-scatter in each island (position j collects, summed over its
  island, the units of all of J_j), then inter reduce-scatter in each J_j;
- all-reduce = intra reduce-scatter of the buffer in Y regions, inter all-reduce of region j
  in J_j, intra all-gather.
Any intra/inter pair of Ring, Mesh, RDH and KangaRing. The islands (and the J_j) run in
parallel: their steps are merged step by step.
"""

from __future__ import annotations

from collections.abc import Callable

from trnsim.collectives.context import Context
from trnsim.collectives.mesh import mesh, rdh
from trnsim.collectives.ring import kangaring, ring
from trnsim.collectives.schedule import Regions, Steps, merge, split_regions
from trnsim.errors import TrnsimError

Builder = Callable[[str, Steps, list, list, Context], int]

KINDS: dict[str, Builder] = {"ring": ring, "mesh": mesh, "rdh": None, "kangaring": kangaring}


def run_kind(alg: str, kind: str, st: Steps, members: list[int], units, ctx: Context) -> int:
    """Reduce-scatter ("rs") or all-gather ("ag") of `members` owning `units` by `alg`;
    RDH with several ranks a chip goes between chips among same-index ranks, with a Mesh
    stage inside the chips. Returns the rings used."""
    if len(members) < 2:
        return 0
    if alg == "rdh":
        groups = ctx.by_chip(members)
        if max(len(v) for v in groups.values()) > 1 and len(groups) > 1:
            return compose(kind, st, members, units, ctx, list(groups.values()), "mesh", "rdh")
        return rdh(kind, st, members, units, ctx)
    return KINDS[alg](kind, st, members, units, ctx)


def _parallel(st: Steps, jobs: list[Callable[[Steps], int]]) -> int:
    """Build each job into its own steps and merge them step by step into `st`."""
    built, rings = [], 0
    for job in jobs:
        sub = Steps()
        rings = max(rings, job(sub) or 0)
        built.append(sub.done())
    st.next()
    for i in range(max((len(b) for b in built), default=0)):
        for b in built:
            if i < len(b):
                st.steps[-1].extend(b[i])
        st.next()
    return rings


def compose(
    kind: str,
    st: Steps,
    members: list[int],
    units: list[Regions],
    ctx: Context,
    islands: list[list[int]],
    intra: str,
    inter: str,
) -> int:
    """Hierarchical reduce-scatter, all-gather or all-reduce ("ar") over `islands`."""
    sizes = {len(i) for i in islands}
    if len(sizes) != 1:
        raise TrnsimError(
            f"hierarchical needs islands of equal size; the group has {sorted(sizes)} ranks "
            f"in its {len(islands)} islands"
        )
    y = sizes.pop()
    unit_of = dict(zip(members, units))
    cols = [[isl[j] for isl in islands] for j in range(y)]  # J_j
    rings = 0

    def col_unit(j: int) -> Regions:  # the units of all of J_j
        return merge([r for m in cols[j] for r in unit_of[m]])

    if kind == "ag":
        rings = _parallel(st, [_job(inter, "ag", c, [unit_of[m] for m in c], ctx) for c in cols])
        jobs = [_job(intra, "ag", isl, [col_unit(j) for j in range(y)], ctx) for isl in islands]
        rings = max(rings, _parallel(st, jobs))
    elif kind == "rs":
        jobs = [_job(intra, "rs", isl, [col_unit(j) for j in range(y)], ctx) for isl in islands]
        rings = _parallel(st, jobs)
        jobs = [_job(inter, "rs", c, [unit_of[m] for m in c], ctx) for c in cols]
        rings = max(rings, _parallel(st, jobs))
    else:  # all-reduce: `units` is the whole buffer as one unit per member
        whole = merge([r for u in units for r in u])
        regions = split_regions(whole, y)
        jobs = [_job(intra, "rs", isl, regions, ctx) for isl in islands]
        rings = _parallel(st, jobs)
        x = len(islands)
        inner = [split_regions(regions[j], x) for j in range(y)]
        rings = max(
            rings, _parallel(st, [_job(inter, "rs", c, inner[j], ctx) for j, c in enumerate(cols)])
        )
        _parallel(st, [_job(inter, "ag", c, inner[j], ctx) for j, c in enumerate(cols)])
        _parallel(st, [_job(intra, "ag", isl, regions, ctx) for isl in islands])
    return rings


def _job(alg, kind, members, units, ctx):
    return lambda sub: run_kind(alg, kind, sub, members, list(units), ctx)
