"""How a lowering walks an HBM tensor in blocks that one DMA moves into one SBUF tile.

DMA copies in flat element order and lets the two sides' shapes differ (the element counts must
agree), so a block is any run of whole rows that one index expression of the tensor names: a
slice of the first dim when the rows under one first index fit, else one first index and the
blocks of the dims below it. Rows are all dims but the last; a row block lands in a tile of
[rows, last dim] (row softmax, norms) or, for elementwise ops, of [128, elements / 128].
"""

from __future__ import annotations

import math
from collections.abc import Iterator

__all__ = ["row_blocks", "row_groups", "flat_blocks", "core_rows"]


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


def core_rows(shape: tuple[int, ...], part: tuple[int, int], align: int = 128) -> tuple[int, int]:
    """The flattened rows (all dims but the last) physical core `c` of `n` computes, `part` =
    (c, n): contiguous shares, split at multiples of `align` rows, the same for every op of a
    kernel whose output has this many rows (so a core reads back only rows it wrote)."""
    c, n = part
    total = math.prod(shape[:-1])
    cut = [min(total, round(total * k / n / align) * align) for k in range(n + 1)]
    cut[-1] = total
    return cut[c], max(cut[c], cut[c + 1])


def flat_blocks(
    shape: tuple[int, ...], partitions: int, most_free: int, rows: tuple[int, int] | None = None
) -> list[tuple]:
    """(index, partitions, free): blocks covering `shape` in order, each moved into a tile of
    [partitions, free] (the block's elements in flat order). Whole rows are grouped into blocks
    of `partitions * free` elements when every block divides evenly (elementwise ops use all
    partitions whatever the shape); otherwise a block is up to `partitions` rows, one per
    partition, and a row longer than `most_free` is cut into column chunks."""
    if not shape:
        return [((), 1, 1)]
    if 0 in shape:
        return []  # no element: nothing to move
    d = shape[-1]
    if d <= most_free:
        flat = list(row_blocks(shape, max(1, partitions * most_free // d), rows))
        if all((r * d) % partitions == 0 for _, r in flat):
            return [(index, partitions, r * d // partitions) for index, r in flat]
    out = []
    for index, n in row_blocks(shape, partitions, rows):
        if d <= most_free:
            out.append((index, n, d))
            continue
        full = index + (slice(None),) * (len(shape) - 1 - len(index))
        for c in range(0, d, most_free):
            out.append(((*full, slice(c, min(c + most_free, d))), n, min(most_free, d - c)))
    return out
