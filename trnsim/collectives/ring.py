"""Ring and KangaRing (R-CC).

Ring: the group's ranks in a cycle (the chips in a Hamiltonian cycle of the fabric, the ranks
of a chip one after another), `k` such cycles at once sharing no link (`Topology.rings`), each
carrying 1/k of every unit. Reduce-scatter: at step t, the rank at position i sends its share
of the unit of position i - t - 1 to position i + 1, which adds it to its own (in `slices`
pieces, the reduction of one overlapping the move of the next); after n - 1 steps every rank
holds its unit reduced over the group. All-gather: at step t, position i passes on the unit of
position i - t. All-reduce = reduce-scatter + all-gather: 2(n - 1) steps of S/(k n) bytes.

KangaRing: the ranks of each chip in pairs (local 2i, 2i + 1), only the pairs' primaries in the
cycle, so the ring has n/2 positions, each owning its pair's two units. A primary adds an
incoming share together with its own and its secondary's (one pass, 4 HBM accesses where two
ring hops take 6), and in all-gather writes each incoming share to its secondary too
(duplication: 1 read, 2 writes). Before the ring, each primary adds its secondary's share of
the unit it sends first (reduce-scatter) or the pair swap their units (all-gather); after a
reduce-scatter the primary copies the secondary its unit. Only for groups holding every rank
of each chip, with an even number of ranks a chip.
"""

from __future__ import annotations

from trnsim.collectives.context import Context
from trnsim.collectives.schedule import Regions, Steps, merge, split_regions
from trnsim.errors import TrnsimError


def ring_orders(ctx: Context, members: list[int], k: int) -> list[list[int]]:
    """Up to `k` cycles of `members`: the fabric's rings through their chips, a chip's
    members consecutive."""
    by_chip = ctx.by_chip(members)
    cycles = ctx.topology.rings(list(by_chip), k)
    return [[r for c in cyc for r in by_chip[c]] for cyc in cycles]


def _shares(units: list[Regions], k: int) -> list[list[Regions]]:
    """shares[m][j]: member m's unit's piece for ring j."""
    return [split_regions(u, k) for u in units]


def ring_rs(st: Steps, orders, unit_of, ctx: Context, others_of=None, slices=1) -> None:
    """Reduce-scatter over `orders` (cycles of members); `unit_of[m]`: the regions member m
    ends up owning; `others_of[m]`: ranks whose buffers m adds with each incoming share."""
    k = len(orders)
    shares = {m: split_regions(unit_of[m], k) for m in unit_of}
    n = len(orders[0])
    for t in range(n - 1):
        for j, order in enumerate(orders):
            for i, m in enumerate(order):
                nxt = order[(i + 1) % n]
                owner = order[(i - t - 1) % n]
                extra = others_of[nxt] if others_of else ()
                for lo, hi in shares[owner][j]:
                    st.reduce(m, nxt, lo, hi, channel=j, others=extra, slices=slices)
        st.next()


def ring_ag(st: Steps, orders, unit_of, dsts_of=None) -> None:
    """All-gather over `orders`; `dsts_of[m]`: where a share sent to m is written (m and, with
    duplication, its secondary)."""
    k = len(orders)
    shares = {m: split_regions(unit_of[m], k) for m in unit_of}
    n = len(orders[0])
    for t in range(n - 1):
        for j, order in enumerate(orders):
            for i, m in enumerate(order):
                nxt = order[(i + 1) % n]
                owner = order[(i - t) % n]
                dsts = dsts_of[nxt] if dsts_of else (nxt,)
                for lo, hi in shares[owner][j]:
                    st.copy(m, dsts, lo, hi, channel=j)
        st.next()


def ring(kind: str, st: Steps, members: list[int], units: list[Regions], ctx: Context) -> int:
    """Ring reduce-scatter ("rs") or all-gather ("ag") of `members` owning `units`; returns
    the number of rings used."""
    orders = ring_orders(ctx, members, ctx.rings)
    unit_of = dict(zip(members, units))
    if len(members) < 2:
        return 0
    if kind == "rs":
        ring_rs(st, orders, unit_of, ctx, slices=ctx.slices)
    else:
        ring_ag(st, orders, unit_of)
    return len(orders)


def kangaring_applies(ctx: Context, members) -> str:
    """Why KangaRing cannot run on `members` ("" when it can)."""
    if ctx.ranks_per_chip % 2:
        return f"{ctx.ranks_per_chip} ranks a chip cannot be paired"
    if not ctx.whole_chips(members):
        return "the group does not hold every rank of each chip"
    if len(ctx.by_chip(members)) < 2:
        return "the group is on one chip"
    return ""


def kangaring(kind: str, st: Steps, members: list[int], units: list[Regions], ctx: Context) -> int:
    """KangaRing reduce-scatter or all-gather (module docstring); returns the rings used."""
    why = kangaring_applies(ctx, members)
    if why:
        raise TrnsimError(f"kangaring cannot run here: {why}")
    unit_of = dict(zip(members, units))
    secondary, primaries = {}, []
    for ranks in ctx.by_chip(members).values():
        ranks = sorted(ranks)
        for p, s in zip(ranks[0::2], ranks[1::2]):
            primaries.append(p)
            secondary[p] = s
    pair_unit = {p: merge(unit_of[p] + unit_of[secondary[p]]) for p in primaries}
    orders = ring_orders(ctx, primaries, 64)  # every ring the fabric has
    k = len(orders)
    n = len(primaries)
    if kind == "rs":
        # the unit each primary sends first, with its secondary's share added in
        for j, order in enumerate(orders):
            for i, p in enumerate(order):
                first = split_regions(pair_unit[order[(i - 1) % n]], k)[j]
                for lo, hi in first:
                    st.reduce(secondary[p], p, lo, hi, channel=k + j)
        st.next()
        others = {p: (secondary[p],) for p in primaries}
        ring_rs(st, orders, pair_unit, ctx, others, ctx.slices)
        for p in primaries:  # the secondary's unit, reduced, from its primary
            for lo, hi in unit_of[secondary[p]]:
                st.copy(p, secondary[p], lo, hi, channel=k)
        st.next()
    else:
        for p in primaries:  # the pair swap units: both then hold the pair's
            s = secondary[p]
            for lo, hi in unit_of[s]:
                st.copy(s, p, lo, hi, channel=k)
            for lo, hi in unit_of[p]:
                st.copy(p, s, lo, hi, channel=k)
        st.next()
        dup = ctx.duplication
        dsts = {p: (p, secondary[p]) if dup else (p,) for p in primaries}
        if dup:
            ring_ag(st, orders, pair_unit, dsts)
        else:  # without duplication the primary copies each share on to its secondary
            ring_ag(st, orders, pair_unit)
            for p in primaries:
                for q in primaries:
                    if q != p:
                        for lo, hi in pair_unit[q]:
                            st.copy(p, secondary[p], lo, hi, channel=k)
            st.next()
    return k
