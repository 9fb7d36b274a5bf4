"""Edge-disjoint Hamiltonian cycles of a torus: the rings that Ring and KangaRing run on.

A torus of `d` dimensions of size >= 3 is 2d-regular, and a product of cycles decomposes into
d edge-disjoint (undirected) Hamiltonian cycles (Kotzig for d = 2; products of cycles in
general). Each undirected cycle is two directed rings (one per direction) that share no
directed link, so the torus carries up to 2d directed rings at full link rate at once: on the
4x4 torus of a trn2.48xlarge, 2 cycles, 4 rings, every chip's 4 outgoing links busy.

The cycles are found by depth-first search (fewest onward choices first, ties broken by a
seeded random priority, so the result is always the same), the last one as the complement of
the others when that is a single cycle; tries that fail draw new priorities; after many, a
greedy search keeps the cycles it finds. Results are cached per shape.
"""

from __future__ import annotations

from functools import lru_cache
from random import Random

_BUDGET = 5_000  # DFS nodes per try before drawing another
_SEEDS = 200  # tries before settling for a greedy search


def coords_of(index: int, dims: tuple[int, ...]) -> tuple[int, ...]:
    """Coordinates of node `index` (the first dimension varies fastest)."""
    out = []
    for n in dims:
        out.append(index % n)
        index //= n
    return tuple(out)


def index_of(coords: tuple[int, ...], dims: tuple[int, ...]) -> int:
    i, scale = 0, 1
    for c, n in zip(coords, dims):
        i += c * scale
        scale *= n
    return i


def _neighbours(dims: tuple[int, ...]) -> list[list[int]]:
    """Each node's distinct neighbours on the torus, in a fixed order (dimension, +, -)."""
    n = 1
    for d in dims:
        n *= d
    out = []
    for i in range(n):
        c = coords_of(i, dims)
        seen: list[int] = []
        for k, size in enumerate(dims):
            for step in (1, -1):
                if size < 2:
                    continue
                cc = list(c)
                cc[k] = (c[k] + step) % size
                j = index_of(tuple(cc), dims)
                if j != i and j not in seen:
                    seen.append(j)
        out.append(seen)
    return out


def _edge(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


def _hamiltonian(adj: list[list[int]], used: set, budget: int, rng: Random) -> list[int] | None:
    """A Hamiltonian cycle through node 0 avoiding `used` edges (a list of nodes), or None
    after `budget` search nodes. Warnsdorff's rule (fewest onward choices first), ties broken
    by a priority per node drawn from `rng` (seeded: the same cycle every time)."""
    n = len(adj)
    path, on = [0], [False] * n
    on[0] = True
    pri = [rng.random() for _ in range(n)]
    left = [budget]

    def free(a):
        return [b for b in adj[a] if _edge(a, b) not in used]

    def dfs() -> bool:
        left[0] -= 1
        if left[0] < 0:
            return False
        a = path[-1]
        if len(path) == n:
            return 0 in free(a)
        options = [b for b in free(a) if not on[b]]
        options.sort(key=lambda b: (sum(1 for x in free(b) if not on[x]), pri[b]))
        for b in options:
            path.append(b)
            on[b] = True
            if dfs():
                return True
            path.pop()
            on[b] = False
        return False

    return list(path) if dfs() else None


def _edges(c) -> set:
    return {_edge(c[i], c[(i + 1) % len(c)]) for i in range(len(c))}


def _single_cycle(adj: list[list[int]], used: set) -> list[int] | None:
    """The edges not in `used` as one Hamiltonian cycle, if they are exactly that."""
    n = len(adj)
    rest = [[b for b in adj[a] if _edge(a, b) not in used] for a in range(n)]
    if any(len(r) != 2 for r in rest):
        return None
    cycle, prev = [0], -1
    while True:
        a = cycle[-1]
        b = rest[a][0] if rest[a][0] != prev else rest[a][1]
        if b == 0:
            break
        cycle.append(b)
        prev = a
        if len(cycle) > n:
            return None
    return cycle if len(cycle) == n else None


@lru_cache(maxsize=64)
def hamiltonian_cycles(dims: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Edge-disjoint undirected Hamiltonian cycles of the torus `dims` (node lists starting at
    node 0): one per dimension of size >= 3 when the search finds them (a 1-D ring: itself),
    else as many as a greedy search gets."""
    n = 1
    for d in dims:
        n *= d
    if n < 3:
        return ()
    big = [d for d in dims if d >= 3]
    if len(big) <= 1 and all(d == 1 or d >= 3 for d in dims):
        return (tuple(range(n)),)
    adj = _neighbours(dims)
    want = max(1, len(big))
    degree = len(adj[0])
    for seed in range(
        _SEEDS if degree == 2 * want else 0
    ):  # the first cycles drawn, the last the complement of the others
        found, used = [], set()
        for i in range(want - 1):
            c = _hamiltonian(adj, used, _BUDGET, Random(seed * 1000 + i))
            if c is None:
                break
            found.append(tuple(c))
            used |= _edges(c)
        else:
            last = _single_cycle(adj, used) if want > 1 else None
            if last is not None:
                return tuple(found) + (tuple(last),)
            if want == 1:
                c = _hamiltonian(adj, used, _BUDGET * 10, Random(seed))
                if c is not None:
                    return (tuple(c),)
    found, used = [], set()  # no decomposition found: greedy
    for i in range(want):
        c = _hamiltonian(adj, used, _BUDGET * 10, Random(i))
        if c is None:
            break
        found.append(tuple(c))
        used |= _edges(c)
    return tuple(found)


def _line(dims: tuple[int, ...]) -> list[int]:
    """The nodes of a torus with at most one dimension >= 3 (and others of size 1) in ring
    order."""
    n = 1
    for d in dims:
        n *= d
    return list(range(n))


def directed_rings(dims: tuple[int, ...], k: int) -> list[list[int]]:
    """Up to `k` directed Hamiltonian rings of the torus sharing no directed link: each
    undirected cycle forward, then backward, then the next cycle."""
    rings: list[list[int]] = []
    for c in hamiltonian_cycles(tuple(dims)):
        rings.append(list(c))
        rings.append([c[0]] + list(reversed(c[1:])))
    return rings[: max(1, k)] if rings else []


def sub_torus(chips: list[int], dims: tuple[int, ...]) -> tuple[tuple[int, ...], list[int]] | None:
    """If `chips` (of one torus `dims`) are a full sub-torus (every coordinate along some
    dimensions, one along the others), its dims and the chip at each of its node indices."""
    coords = [coords_of(c, dims) for c in chips]
    values = [sorted({c[k] for c in coords}) for k in range(len(dims))]
    sub = tuple(len(v) if len(v) > 1 else 1 for v in values)
    if any(len(v) not in (1, n) for v, n in zip(values, dims)):
        return None
    expected = 1
    for s in sub:
        expected *= s
    if expected != len(set(chips)):
        return None
    mapping = [0] * expected
    for chip, c in zip(chips, coords):
        sc = tuple(values[k].index(c[k]) for k in range(len(dims)))
        mapping[index_of(sc, sub)] = chip
    return sub, mapping
