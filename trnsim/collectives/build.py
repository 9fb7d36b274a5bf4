"""Schedules of every collective op by every algorithm, cached like kernel lowerings.

Ops and their buffers (`count` elements of buffer 0 a rank; units in group order):
- all_reduce: buffer 0 in, reduced in place (single-step Mesh: into buffer 1);
- all_gather: buffer 0 out, rank i's input in unit i;
- reduce_scatter: buffer 0 in, rank i's output is unit i;
- all_to_all: buffer 0 in (unit j goes to rank j), buffer 1 out (unit i from rank i);
  all_to_allv: `counts[i][j]` elements from rank i to rank j, packed in rank order both sides;
- broadcast: buffer 0 of `root` copied to every rank's buffer 0 (one step);
- send_recv: buffer 0 of the first rank to the second's buffer 0;
- permute: `pairs` (source, target): each source's buffer 0 to its target's buffer 1; the pairs
  must form rings over direct links (each target a neighbour of its source on the fabric, or
  on its chip; a source and a target at most once each), as the runtime requires.

Algorithms: ring, mesh, mesh1 (all_reduce only), rdh, kangaring, hierarchical (a pair
"hierarchical:INTRA+INTER", e.g. "hierarchical:kangaring+rdh"); all_to_all, broadcast,
send_recv and permute have one ("direct").
"""

from __future__ import annotations

from trnsim.collectives.context import Context
from trnsim.collectives.hierarchical import compose, run_kind
from trnsim.collectives.mesh import mesh1_all_reduce, rdh_applies
from trnsim.collectives.ring import kangaring_applies
from trnsim.collectives.schedule import Schedule, Steps, chunk_units
from trnsim.errors import TrnsimError
from trnsim.system.topology import Switch

OPS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "all_to_allv",
    "broadcast",
    "send_recv",
    "permute",
)
REDUCING = ("all_reduce", "all_gather", "reduce_scatter")
ALGORITHMS = ("ring", "mesh", "mesh1", "rdh", "kangaring", "hierarchical")

_CACHE: dict[tuple, Schedule] = {}
_CACHE_MAX = 256


def applies(algorithm: str, op: str, ranks: tuple[int, ...], ctx: Context) -> str:
    """Why `algorithm` cannot run `op` on `ranks` ("" when it can)."""
    base, _, pair = algorithm.partition(":")
    if op not in REDUCING:
        return "" if base == "direct" else f"{op} has one algorithm, direct"
    if base == "mesh1":
        return "" if op == "all_reduce" else "single-step mesh is an all_reduce algorithm"
    if base == "rdh":
        return rdh_applies(list(ctx.by_chip(ranks)) if ctx.ranks_per_chip > 1 else ranks) or (
            "" if _equal_per_chip(ranks, ctx) else "ranks are not spread evenly over the chips"
        )
    if base == "kangaring":
        return kangaring_applies(ctx, ranks)
    if base == "hierarchical":
        islands = ctx.islands(ranks)
        if islands is None:
            return "the group is on one node (and not over an UltraServer's instances)"
        if len({len(i) for i in islands}) != 1:
            return "the group's islands hold different numbers of ranks"
        intra, inter = _pair(pair)
        return applies(intra, op, tuple(islands[0]), ctx) or applies(
            inter, op, tuple(i[0] for i in islands), ctx
        )
    if base in ("ring", "mesh"):
        return ""
    return f"unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}"


def _equal_per_chip(ranks, ctx: Context) -> bool:
    return len({len(v) for v in ctx.by_chip(ranks).values()}) == 1


def _pair(pair: str) -> tuple[str, str]:
    if not pair:
        return "kangaring", "rdh"
    intra, _, inter = pair.partition("+")
    if not inter:
        raise TrnsimError(f"hierarchical:{pair}: expected hierarchical:INTRA+INTER")
    return intra, inter


def build(
    op: str,
    ranks: tuple[int, ...],
    count: int,
    ctx: Context,
    algorithm: str,
    root: int = 0,
    pairs: tuple[tuple[int, int], ...] = (),
    counts: tuple[tuple[int, ...], ...] = (),
) -> Schedule:
    """The schedule of `op` on `ranks` (global ranks, group order) of `count` elements a rank
    by `algorithm` (checked with `applies`); cached."""
    key = (op, ranks, count, ctx.key, algorithm, root, pairs, counts)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    why = applies(algorithm, op, ranks, ctx)
    if why:
        raise TrnsimError(f"{algorithm} cannot run {op} on {len(ranks)} ranks: {why}")
    sched = _build(op, ranks, count, ctx, algorithm, root, pairs, counts)
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = sched
    return sched


def _build(op, ranks, count, ctx, algorithm, root, pairs, counts) -> Schedule:
    st = Steps()
    members = list(ranks)
    n = len(members)
    out, rings = 0, 0
    base, _, pair = algorithm.partition(":")
    detail = base
    if op in REDUCING:
        units = chunk_units(count, n)
        if base == "mesh1":
            mesh1_all_reduce(st, members, count)
            out = count
        elif base == "hierarchical":
            intra, inter = _pair(pair)
            detail = f"hierarchical:{intra}+{inter}"
            kind = {"all_reduce": "ar", "all_gather": "ag", "reduce_scatter": "rs"}[op]
            if kind == "ar":
                units = [((0, count),)] * n
            rings = compose(kind, st, members, units, ctx, ctx.islands(ranks), intra, inter)
        elif op == "all_reduce":
            rings = run_kind(base, "rs", st, members, units, ctx)
            run_kind(base, "ag", st, members, units, ctx)
        else:
            kind = "ag" if op == "all_gather" else "rs"
            rings = run_kind(base, kind, st, members, units, ctx)
    elif op in ("all_to_all", "all_to_allv"):
        out = _all_to_all(st, members, count, counts)
        if counts:
            count = max(sum(row) for row in counts)
    elif op == "broadcast":
        if root not in members:
            raise TrnsimError(f"broadcast root {root} is not in the group")
        for ch, b in enumerate(members):
            if b != root:
                st.copy(root, b, 0, count, channel=ch)
    elif op == "send_recv":
        if n != 2:
            raise TrnsimError(f"send_recv takes 2 ranks (source, target), got {n}")
        st.copy(members[0], members[1], 0, count)
    elif op == "permute":
        _check_pairs(pairs, members, ctx)
        for s, d in pairs:
            st.copy(s, d, 0, count, dst_buf=1)
        out = count
    else:
        raise TrnsimError(f"unknown collective {op!r}; expected one of {', '.join(OPS)}")
    return Schedule(op, detail, tuple(ranks), count, st.done(), out, rings)


def _all_to_all(st: Steps, members, count, counts) -> int:
    n = len(members)
    if counts:
        if len(counts) != n or any(len(row) != n for row in counts):
            raise TrnsimError(f"all_to_allv counts must be {n} x {n}")
        send = [[sum(row[:j]) for j in range(n)] for row in counts]
        recv = [[sum(counts[k][j] for k in range(i)) for i in range(n)] for j in range(n)]
        for i, a in enumerate(members):
            for j, b in enumerate(members):
                if i != j:
                    st.copy(a, b, send[i][j], send[i][j] + counts[i][j], j, recv[j][i], 0, 1)
        for i, a in enumerate(members):  # its own part, locally
            st.copy(a, a, send[i][i], send[i][i] + counts[i][i], i, recv[i][i], 0, 1)
        return max(sum(counts[k][j] for k in range(n)) for j in range(n))
    b = chunk_units(count, n)
    for i, a in enumerate(members):
        for j, dst in enumerate(members):
            (lo, hi), (olo, _) = b[j][0], b[i][0]
            st.copy(a, dst, lo, hi, j, olo, 0, 1)
    return count


def _check_pairs(pairs, members, ctx: Context) -> None:
    srcs, dsts = [s for s, _ in pairs], [d for _, d in pairs]
    if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
        raise TrnsimError("permute: a rank is a source (or a target) more than once")
    for s, d in pairs:
        if s not in members or d not in members:
            raise TrnsimError(f"permute pair ({s}, {d}) is not in the group")
        if isinstance(ctx.topology, Switch):
            continue  # a switched fabric joins every pair of its chips directly (one hop)
        route = ctx.topology.route(ctx.chip(s), ctx.chip(d))
        if len(route.links) > 1 and ctx.topology.unit_of(ctx.chip(s)) == ctx.topology.unit_of(
            ctx.chip(d)
        ):
            raise TrnsimError(
                f"permute pair ({s}, {d}): chips {ctx.chip(s)} and {ctx.chip(d)} are not "
                f"neighbours ({len(route.links)} hops); permute needs source-target pairs that "
                f"form rings over direct links"
            )
