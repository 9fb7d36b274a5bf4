"""How a lowering walks an HBM tensor in blocks that one DMA moves into one SBUF tile.

DMA copies in flat element order and lets the two sides' shapes differ (the element counts must
agree), so a block is any part of a tensor that one index expression names (ints and slices),
moved into a tile whose partitions take its elements in that order.

Row blocks (`row_blocks`, `row_groups`): runs of whole rows (all dims but the last), a slice of
the first dim when the rows under one first index fit, else one first index and the blocks of
the dims below it; a block lands in a tile of [rows, last dim] (row softmax, norms).

Flat blocks (`flat_blocks`, for elementwise ops, which do not care which element sits on which
partition): whatever the rank, a tensor is walked as a flat run of elements laid out 128
partitions wide, in blocks of [128, f] with f up to a free-size limit F (2048 elements: 4 to
8 KiB a partition, where DMA runs at full rate), the few elements that do not fill 128
partitions in a small tile of their own. A block must be one index expression, so the walk
follows the dims: the items of a dim (the sub-arrays under one index) are grouped q at a time,
q the fewest whose elements fill whole partitions, as many groups as fit [128, F], as evenly as
the count allows ([4096, 4096] in blocks of 64 rows, [1048576, 16] of 16384 rows, a vector of
2^24 in runs of 128 x 2048); when q items are more than a block, items go one to a partition,
each cut in even runs of at most F ([4097, 4095]: 128 rows by 2048 and 2047 columns), unless
there are fewer items than partitions and each is large ([16, 2^20]): then each item is walked
on its own, and the pieces that fill fewer partitions are taken for several items at once;
so is an item left over from the groups (the last row of [4097, 4095]) when that is cheaper;
fewer items than partitions that would go one to a partition in several pieces are one block
when their elements make one of at most [128, F] (`_one_block`).

LNC 2: a core's share of the rows (`core_rows`, the same for every op of a kernel, so a core
reads back only what it wrote) gives its flat elements, except where the rows split unevenly
(a vector is one row; 128 rows are all one core's) and no op of the kernel but elementwise ones
touches tensors of that shape (`flat_split`): those are cut in even flat shares
(`flat_share`), or, for the out of a row broadcast over few long rows, in the same columns of
every row (`by_columns`, `flat_ranges`), so that each core reads only its half of the row.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

__all__ = [
    "row_blocks", "row_groups", "flat_blocks", "flat_walk", "flat_share", "flat_ranges",
    "flat_cuts", "by_columns", "core_rows", "Share", "Part",
]  # fmt: skip


def row_blocks(
    shape: tuple[int, ...], most: int, rows: tuple[int, int] | None = None
) -> Iterator[tuple[tuple, int]]:
    """(index, rows): consecutive blocks of at most `most` rows (all dims but the last) that
    cover `shape` in order, or only its flattened rows [lo, hi) when `rows` is given (the
    share of one physical core); `index` selects the block (ints and slices, for
    `builder.ap`)."""
    dims = tuple(shape[:-1])
    lo, hi = rows if rows is not None else (0, math.prod(dims))
    if lo < hi:
        yield from _blocks(dims, most, lo, hi)


def row_groups(
    shape: tuple[int, ...], partitions: int, rows: tuple[int, int] | None, *most: int
) -> tuple[int, list[tuple[tuple, int]]]:
    """(per, blocks): `row_blocks` of up to `partitions * per` rows, each `per` rows to a
    partition (a tile [rows / per, per, D]), `per` the largest that is at most each of `most`
    and divides every block's rows (1 when nothing larger does): a power of two, which divides
    the usual counts of rows. Rows fill the partitions before they share one: `per` is at most
    the power of two at or above rows / `partitions` (256 short rows go 2 to each of 128
    partitions, not 64 to 4; 300 go 4 to each of 75)."""
    lo, hi = rows if rows is not None else (0, math.prod(shape[:-1]))
    spread = 1 << (max(1, -(-(hi - lo) // partitions)) - 1).bit_length()
    per = 1 << (max(1, min(*most, spread)).bit_length() - 1)
    while True:
        blocks = list(row_blocks(shape, partitions * per, rows))
        fit = math.gcd(per, *(n for _, n in blocks))
        if fit == per:
            return per, blocks
        per = fit


def row_tiles(
    shape: tuple[int, ...],
    partitions: int,
    rows: tuple[int, int] | None,
    *most: int,
    unit: int = 1,
    pow2: bool = True,
) -> tuple[int, list[tuple[tuple, int, int]]]:
    """(per, blocks): as `row_groups`, but `per` need not divide the rows: each block is
    (index, rows, k), k rows to each of rows / k partitions (a tile [rows / k, k, D]); k = per
    in a block of partitions * per rows, and in a smaller one (the rows left at the end of a
    share, or of an item of the outer dims) the fewest that spread its rows over the
    partitions, its largest multiple of k rows so and the few left (fewer than k) one to a
    partition, each part a block (`_tail`). So a core's share of 21802 rows of 96 goes 16 to a
    partition but for its last 1322 rows (11 to each of 120 partitions, 2 left; `row_groups`'
    common divisor was 2: 8x the instructions, bf16 softmax at 22% of its bound), and 98 rows
    left go one to each of 98 partitions, not 4 to each of 24 (which cost an engine as much
    as 512).

    `per` is a power of two (as `row_groups`'), or with `pow2` false the largest count at most
    each of `most` (and a multiple of `unit` when above it): 12 rows of 80 fp32 to a partition
    within 4 KiB, not 8.

    With `unit` (dividing per), every k is a multiple of it (a block's rows left under k go
    `unit` to a partition) but for the rows left under a multiple of `unit` at the end of a
    block: a share that starts at such a multiple (`core_rows`') and is walked in blocks that
    do (2-D x) has such rows only at x's end, one to a partition however the cores share x. So
    row slot j of every other block holds rows r = j (mod unit), at any LNC (what
    `norms._aligned` asks to give some slots' statistics to ScalarE)."""
    lo, hi = rows if rows is not None else (0, math.prod(shape[:-1]))
    spread = 1 << (max(1, -(-(hi - lo) // partitions)) - 1).bit_length()
    per = max(1, min(*most, spread))
    if pow2:
        per = 1 << (per.bit_length() - 1)
    elif per > unit:
        per -= per % unit
    u = unit if per % unit == 0 else 1
    return per, list(_tail(tuple(shape), partitions, per, u, lo, hi))


def _tail(
    shape: tuple, P: int, per: int, u: int, lo: int, hi: int
) -> Iterator[tuple[tuple, int, int]]:
    """`row_tiles`' blocks of rows [lo, hi): `row_blocks` of P * per rows; one of fewer rows
    (n) goes k to a partition, k = ceil(n / P) up to a multiple of u, and when k does not
    divide n, its first multiple of k rows (walked again: they may span items of the outer
    dims), then of u rows u to a partition, then the rest one to a partition."""
    at = lo
    for index, n in row_blocks(shape, P * per, (lo, hi)):
        spread = -(-n // P)
        k = min(per, -(-spread // u) * u)
        if n % k == 0:
            yield index, n, k
        else:
            cuts = [at, at + n // k * k, at + n // u * u, at + n]
            if cuts[1] > cuts[0]:
                yield from _tail(shape, P, k, u, cuts[0], cuts[1])
            for (a, z), q in zip(zip(cuts[1:], cuts[2:]), (u, 1)):
                for rest, m in row_blocks(shape, P * q, (a, z)) if a < z else ():
                    yield rest, m, q
        at += n


def _blocks(dims: tuple[int, ...], most: int, lo: int, hi: int) -> Iterator[tuple[tuple, int]]:
    """The blocks of rows [lo, hi) (0 <= lo < hi <= prod(dims)) of an array of `dims`."""
    if not dims:
        yield (), 1
        return
    inner = math.prod(dims[1:])
    first, last = lo // inner, (hi - 1) // inner  # the items the range touches
    if first == last and (lo % inner or hi - lo < inner):  # inside one item
        for index, n in _blocks(dims[1:], most, lo - first * inner, hi - first * inner):
            yield (first, *index), n
        return
    full_lo = first + (lo % inner != 0)
    full_hi = last + (hi % inner == 0)  # items [full_lo, full_hi) are whole
    if full_lo > first:  # the leading part of item `first`
        for index, n in _blocks(dims[1:], most, lo - first * inner, inner):
            yield (first, *index), n
    if inner <= most:
        per = max(1, most // inner)
        for i0 in range(full_lo, full_hi, per):
            i1 = min(i0 + per, full_hi)
            yield (slice(i0, i1),), (i1 - i0) * inner
    else:
        for i in range(full_lo, full_hi):
            for index, n in _blocks(dims[1:], most, 0, inner):
                yield (i, *index), n
    if full_hi <= last:  # the trailing part of item `last`
        for index, n in _blocks(dims[1:], most, 0, hi - last * inner):
            yield (last, *index), n


class Part(tuple):
    """Which physical core a program is, (core, cores), and `flat`: the shapes whose tensors
    the kernel's elementwise ops share between the cores by flat elements (`flat_split`), of
    which `columns` are shared by columns (`flat_ranges`)."""

    flat: frozenset
    columns: frozenset

    def __new__(cls, core: int, cores: int, flat=frozenset(), columns=frozenset()) -> Part:
        p = super().__new__(cls, (core, cores))
        p.flat = frozenset(flat)
        p.columns = frozenset(columns) & p.flat
        return p


class Share(tuple):
    """One physical core's share of an op's rows: the tuple (lo, hi) of flattened rows, and
    the `part` it is for, which `flat_share` reads."""

    part: tuple[int, int]

    def __new__(cls, lo: int, hi: int, part: tuple[int, int]) -> Share:
        share = super().__new__(cls, (lo, hi))
        share.part = part
        return share


def core_rows(shape: tuple[int, ...], part: tuple[int, int], align: int = 128) -> Share:
    """The flattened rows (all dims but the last) physical core `c` of `n` computes, `part` =
    (c, n): contiguous shares, split at multiples of `align` rows, the same for every op of a
    kernel whose output has this many rows (so a core reads back only rows it wrote)."""
    c, n = part
    total = math.prod(shape[:-1])
    cut = [min(total, round(total * k / n / align) * align) for k in range(n + 1)]
    cut[-1] = total
    return Share(cut[c], max(cut[c], cut[c + 1]), part)


EVEN = 9 / 16  # the most of a tensor's rows one of two cores' shares may hold and count as even


def flat_share(shape: tuple[int, ...], rows: tuple[int, int] | None) -> tuple[int, int]:
    """The flat elements [lo, hi) of a tensor of `shape` that one core's elementwise op
    computes, given its share of the rows (`core_rows`; None: one core computes all): its rows
    times the row length, unless the row split is uneven (a vector is one row; 128 rows or
    fewer are all one core's) and the kernel lets its elementwise ops share this shape by
    elements (`Part.flat`, `flat_split`): then the elements are cut in even shares (`_cut`)."""
    total = math.prod(shape)
    if rows is None:
        return 0, total
    d = shape[-1] if shape else 1
    part = getattr(rows, "part", None)
    if part is None or tuple(shape) not in getattr(part, "flat", ()):
        return rows[0] * d, rows[1] * d
    cuts = flat_cuts(shape, part[1])
    if cuts is None:
        return rows[0] * d, rows[1] * d
    return cuts[part[0]], cuts[part[0] + 1]


COLUMN_ROWS = 8  # a row broadcast over this many rows or fewer may share its columns
COLUMN_PIECE = 128 * 256  # ... when a core's part of a row is at least this many elements


def by_columns(shape: tuple[int, ...], cores: int) -> bool:
    """Whether a row broadcast's out of `shape`, shared by elements, is better cut between the
    `cores` by columns (`flat_ranges`): 2 to COLUMN_ROWS rows, each core's part of a row
    COLUMN_PIECE or more. Cut in flat shares, each core's share of so few rows takes in whole
    rows, so each core reads the whole broadcast row ([3, n / 3]: a third of the tensor, read
    twice); by columns each reads its columns' part of it."""
    if len(shape) < 2:
        return False
    rows = math.prod(shape[:-1])
    return 2 <= rows <= COLUMN_ROWS and shape[-1] // cores >= COLUMN_PIECE


def flat_ranges(shape: tuple[int, ...], rows: tuple[int, int] | None) -> list[tuple[int, int]]:
    """The runs [lo, hi) of flat elements of `shape` that one core's elementwise op computes:
    its `flat_share`, or for a shape the kernel shares by columns (`Part.columns`) the same
    columns [c0, c1) of every row (cut at a multiple of 128 near the even share)."""
    part = getattr(rows, "part", None)
    if part is None or tuple(shape) not in getattr(part, "columns", ()):
        lo, hi = flat_share(shape, rows)
        return [(lo, hi)] if lo < hi else []
    d, (c, n) = shape[-1], part
    cut = [min(d, round(d * k / n / 128) * 128) for k in range(n + 1)]
    cut[-1] = d
    c0, c1 = cut[c], cut[c + 1]
    return [(r * d + c0, r * d + c1) for r in range(math.prod(shape[:-1]))] if c0 < c1 else []


def flat_cuts(shape: tuple[int, ...], n: int) -> list[int] | None:
    """Where `flat_share` cuts a tensor of `shape` between `n` cores when its elementwise ops
    may share it by elements: None when the row split is even enough (at most EVEN of the rows
    on a core of two), else n + 1 flat positions from 0 to the size (`_cut`)."""
    total = math.prod(shape)
    nrows = total // (shape[-1] if shape else 1)
    if max(hi - lo for lo, hi in (core_rows(shape, (c, n)) for c in range(n))) <= EVEN * nrows:
        return None
    return [0, *(_cut(shape, total * k // n) for k in range(1, n)), total]


def _cut(shape: tuple[int, ...], at: int) -> int:
    """A flat position near `at` on the coarsest grid of `shape` that keeps it within 1/16 of
    the tensor: whole items of the outer dims where it can, so each share is few blocks."""
    total = math.prod(shape)
    for k in range(len(shape)):
        step = math.prod(shape[k + 1 :])
        if k == len(shape) - 1:
            step = 128 if total >= 128 * 16 else 1
        c = min(total, round(at / step) * step)
        if abs(c - at) * 16 <= total or step == 1:
            return c
    return at


def flat_blocks(
    shape: tuple[int, ...], partitions: int, most_free: int, rows: tuple[int, int] | None = None
) -> list[tuple]:
    """(index, partitions, free): blocks covering a core's elements of `shape` (`flat_ranges` of
    `rows`; all of them when None), each a [partitions, free] tile's worth that one DMA moves:
    `index` selects the block (ints and slices, for `builder.ap`; the tile takes its elements in
    the index's flat order). Elementwise ops do not care which element sits on which partition,
    so whatever the rank and size, blocks fill all partitions with up to `most_free` elements
    each (module doc, "Flat blocks"); every element is in exactly one block."""
    if not shape:
        return [((), 1, 1)]
    if 0 in shape:
        return []  # no element: nothing to move
    runs = flat_ranges(tuple(shape), rows)
    return [blk for lo, hi in runs for blk in _flat(tuple(shape), lo, hi, partitions, most_free)]


def flat_walk(dims: tuple[int, ...], lo: int, hi: int, partitions: int, most_free: int) -> list:
    """`flat_blocks`' blocks of the elements [lo, hi) of an array of `dims` (whose elements may
    be rows of a larger tensor: `broadcast` groups rows so)."""
    return list(_flat(tuple(dims), lo, hi, partitions, most_free)) if lo < hi else []


def _flat(dims: tuple[int, ...], lo: int, hi: int, P: int, F: int) -> Iterator[tuple]:
    """The blocks of elements [lo, hi) (0 <= lo < hi <= prod(dims)) of an array of `dims`: the
    part items of dims[0] at either end each on their own, the whole items between by
    `_items`."""
    if not dims:
        yield (), 1, 1
        return
    inner = math.prod(dims[1:])
    first, last = lo // inner, (hi - 1) // inner  # the items the range touches
    if first == last and (lo % inner or hi - lo < inner):  # inside one item
        for index, p, f in _flat(dims[1:], lo - first * inner, hi - first * inner, P, F):
            yield (first, *index), p, f
        return
    full_lo = first + (lo % inner != 0)
    full_hi = last + (hi % inner == 0)  # items [full_lo, full_hi) are whole
    if full_lo > first:
        for index, p, f in _flat(dims[1:], lo - first * inner, inner, P, F):
            yield (first, *index), p, f
    yield from _items(dims, full_lo, full_hi, P, F)
    if full_hi <= last:
        for index, p, f in _flat(dims[1:], 0, hi - last * inner, P, F):
            yield (last, *index), p, f


def _items(dims: tuple[int, ...], a: int, b: int, P: int, F: int) -> Iterator[tuple]:
    """The blocks of whole items [a, b) of dims[0] (module doc, "Flat blocks")."""
    inner = math.prod(dims[1:])
    q = P // math.gcd(inner, P)  # items whose elements fill whole partitions
    if q * inner <= P * F:  # groups of q items, as even as can be, into [P, f] tiles
        groups, most = (b - a) // q, P * F // (q * inner)
        if groups:
            per = -(-groups // -(-groups // most)) * q
            for i in range(a, a + groups * q, per):
                k = min(per, a + groups * q - i)
                yield (slice(i, i + k),), P, k * inner // P
        a += groups * q
    else:  # items one to a partition, P at a time
        yield from _on_partitions(dims, a, a + (b - a) // P * P, P, F)
        a += (b - a) // P * P
    yield from _few(dims, a, b, P, F)


def _few(dims: tuple[int, ...], a: int, b: int, P: int, F: int) -> Iterator[tuple]:
    """The blocks of whole items [a, b) of dims[0], fewer than fill P partitions: one item to
    a partition (`_one_each`) when each item is shorter than a walk of it on its own would
    cost in fixed costs (FIXED) and its pieces cost less (`_key`), else each item walked on
    its own (`_each`); or all the items
    together by pieces of their sub-items (`_across`, `_across_runs`), or whole items several
    to a block (`_packed`), when that costs less (`_cost`)."""
    inner, r = math.prod(dims[1:]), b - a
    if r <= 0:
        return
    walk = _each(dims, a, b, P, F)
    if r * (inner // P + FIXED) >= inner:  # unless the pieces one to a partition cost more
        one = _one_each(dims, a, b, P, F)  # (an item of 129 with F = 1: 129 blocks of [1, 1])
        walk = min(one, walk, key=lambda w: _key(dims, w))
    best, cost = walk, _key(dims, walk)
    others = (_across(dims, a, b, P, F), _across_runs(dims, a, b, P, F), _packed(dims, a, b, P, F))
    for other in others:
        if other is not None and (c := _key(dims, other)) < cost:
            best, cost = other, c
    yield from best


def _key(dims: tuple[int, ...], blocks: list[tuple]) -> tuple[int, int]:
    """`_cost`, ties broken for the blocks whose partitions are fuller (the larger sum of p
    squared): a broadcast walks rows with F = 1 and folds a block of up to 64 rows onto more
    partitions, so [126, 1] and [24, 1] rows beat [100, 1] and [50, 1]."""
    return _cost(dims, blocks), -sum(p * p for _, p, _ in blocks)


FIXED = 256  # a block's fixed cost in element-steps a partition: VectorE's 144 cycles and a
# DMA's setup (an assumption, as `_few` weighed it before)
DESCRIPTOR = 16  # a DMA descriptor's cost in element-steps a partition (an assumption: the
# config's 2 ns a descriptor on an engine serving 8 partitions at 23 B/ns, 11 to 23 elements)


def _cost(dims: tuple[int, ...], blocks: list[tuple]) -> int:
    """Element-steps a partition the blocks of an array of `dims` take: each block FIXED more,
    and DESCRIPTOR more for each contiguous run of HBM a partition's f elements take in
    (`_run`). The partitions move in parallel (a DMA engine serves 8 of them in turn, so a
    block on fewer takes as long)."""
    return sum(f + FIXED + DESCRIPTOR * -(-f // min(f, _run(dims, ix))) for ix, _, f in blocks)


def _run(dims: tuple[int, ...], index: tuple) -> int:
    """Elements of the block `index` selects that lie contiguous in memory (as
    `dma.descriptors.run_elements` counts them)."""
    run = 1
    for k in range(len(dims) - 1, -1, -1):
        i = index[k] if k < len(index) else slice(None)
        if isinstance(i, slice):
            n = len(range(*i.indices(dims[k])))
            run *= n
            if n != dims[k]:
                break
        else:
            break
    return run


def _one_each(dims: tuple[int, ...], a: int, b: int, P: int, F: int) -> list[tuple]:
    """Items [a, b) one to a partition in pieces of at most F (`_on_partitions`), or, when
    they are longer than F, one block of their elements when it fits (`_one_block`)."""
    inner = math.prod(dims[1:])
    one = _one_block((b - a) * inner, P, F) if inner > F else None
    if one:  # one block instead of each item cut in pieces one to a partition
        return [((slice(a, b),), *one)]
    return list(_on_partitions(dims, a, b, P, F))


def _each(dims: tuple[int, ...], a: int, b: int, P: int, F: int) -> list[tuple]:
    """Each item walked on its own; a piece that fills fewer partitions taken for several
    items at once."""
    out = []
    for index, p, f in _flat(dims[1:], 0, math.prod(dims[1:]), P, F):
        k = max(1, P // p)
        for i in range(a, b, k):
            j = min(b, i + k)
            out.append(((i, *index), p, f) if k == 1 else ((slice(i, j), *index), p * (j - i), f))
    return out


def _across(dims: tuple[int, ...], a: int, b: int, P: int, F: int) -> list[tuple] | None:
    """The r = b - a items together: one item's elements walked in pieces of g x f (g = P /
    gcd(r, P), so that r pieces fill whole partitions; `_flat` with g partitions), each piece
    taken for all r items at once, a block of [P, r g f / P] (63 items of [4095, 4]: 4 blocks
    of [128, 2016], not 8 of [63, 2048] on half the DMA engines, nor 63 of [128, 128]); a
    remainder piece as [r p, f] or one block (`_one_block`), else for a few items at a time.
    None when r pieces of g elements are more than a block."""
    r = b - a
    g = P // math.gcd(r, P)
    most = P * F // (r * g)  # f of a piece at most
    if r < 2 or most < 1:
        return None
    out = []
    for index, p, f in _flat(dims[1:], 0, math.prod(dims[1:]), g, most):
        n = r * p * f
        if p == g:
            out.append(((slice(a, b), *index), P, n // P))
        elif r * p <= P:
            out.append(((slice(a, b), *index), r * p, f))
        elif one := _one_block(n, P, F):
            out.append(((slice(a, b), *index), *one))
        else:
            k = max(1, P // p)
            for i in range(a, b, k):
                j = min(b, i + k)
                out.append(((slice(i, j), *index), p * (j - i), f))
    return out


def _across_runs(dims: tuple[int, ...], a: int, b: int, P: int, F: int) -> list | None:
    """The r = b - a items together, one item's elements in contiguous runs of sub-items of
    at most P F / r elements, each run taken for all r items at once as one block of [p, f]
    (`_one_block`): 50 items of [125, 1000] as 25 blocks of [125, 2000] (5 rows of each),
    whose HBM runs are 5000 elements, not `_across`'s [128, f] of runs of 81. The run length
    (sub-items a run) the cheapest (`_cost`) of the RUN_TRIES longest whose runs all make a
    block (83 items of [1000, 100]: runs of 30 rows, [125, 1992], where 31 make none); when a
    sub-item is longer than that, its even pieces (`_pieces`). None when r is 1 or no run
    length makes blocks."""
    r = b - a
    if r < 2 or len(dims) < 2:
        return None
    most, d1, inner2 = P * F // r, dims[1], math.prod(dims[2:])
    if inner2 > most:
        tries = [_pieces(dims[1:], most)]
    else:
        top = min(d1 - 1, most // inner2)  # all of each item in one block: `_one_each`'s
        tries = [
            [
                ((slice(i, min(i + per, d1)),), (min(i + per, d1) - i) * inner2)
                for i in range(0, d1, per)
            ]
            for per in range(top, max(0, top - RUN_TRIES), -1)
        ]
    best = cost = None
    for pieces in tries:
        shapes = {m: _one_block(r * m, P, F) for m in {m for _, m in pieces}}
        if not all(shapes.values()):
            continue
        out = [((slice(a, b), *index), *shapes[m]) for index, m in pieces]
        c = _cost(dims, out)
        if best is None or c < cost:
            best, cost = out, c
    return best


def _packed(dims: tuple[int, ...], a: int, b: int, P: int, F: int) -> list | None:
    """Items [a, b) m at a time, each group one block of [p, f] (`_one_block`) that need not
    fill whole partitions: 100 rows of [15] walked with F = 1 (a broadcast's row blocks) as 12
    blocks of [120, 1] and one of [60, 1], not 15 of [100, 1]. m the cheapest (`_cost`) of the
    RUN_TRIES largest whose groups all make a block; None when no m of 2 or more does."""
    inner, r = math.prod(dims[1:]), b - a
    top = min(r - 1, P * F // inner)  # all the items in one block: `_one_each`'s
    best = cost = None
    for m in range(top, max(1, top - RUN_TRIES), -1):
        shapes = {k: _one_block(k * inner, P, F) for k in {m, r % m} if k}
        if not all(shapes.values()):
            continue
        out = [((slice(i, min(i + m, b)),), *shapes[min(m, b - i)]) for i in range(a, b, m)]
        c = _cost(dims, out)
        if best is None or c < cost:
            best, cost = out, c
    return best


RUN_TRIES = 32  # run lengths `_across_runs` tries at most


def _one_block(n: int, P: int, F: int) -> tuple[int, int] | None:
    """(p, f), p x f = n, p <= P and f <= F, f the least that fits: n elements as one block,
    or None when n has no such divisor. Items few and small but longer than F (a broadcast's
    row groups walked with F = 1: [2, 3, 5] rows went as 15 blocks of [2, 1]) fill more
    partitions in one block than one to a partition in pieces."""
    for p in range(min(P, n), 0, -1):
        if n % p == 0:
            return (p, n // p) if n // p <= F else None
    return None


def _on_partitions(dims: tuple[int, ...], a: int, b: int, P: int, F: int) -> Iterator[tuple]:
    """Items [a, b) of dims[0] one to a partition, up to P at a time, each in even pieces of
    at most F elements (`_pieces`)."""
    if a >= b:
        return
    pieces = _pieces(dims[1:], F)
    for i in range(a, b, P):
        p = min(P, b - i)
        for index, f in pieces:
            yield (slice(i, i + p), *index), p, f


def _pieces(dims: tuple[int, ...], most: int) -> list[tuple[tuple, int]]:
    """(index, elements): one item of `dims` cut in order into runs of at most `most` elements
    that one index names, as even as the item's dims allow."""
    n = math.prod(dims)
    if n <= most:
        return [((), n)]
    inner = math.prod(dims[1:])
    if inner > most:
        return [((i, *ix), m) for i in range(dims[0]) for ix, m in _pieces(dims[1:], most)]
    per = most // inner
    per = -(-dims[0] // -(-dims[0] // per))  # the same count of sub-items in every run
    return [
        ((slice(i, min(i + per, dims[0])),), (min(i + per, dims[0]) - i) * inner)
        for i in range(0, dims[0], per)
    ]
