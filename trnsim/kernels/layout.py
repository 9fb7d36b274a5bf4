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

__all__ = ["row_blocks", "flat_blocks"]


def row_blocks(shape: tuple[int, ...], most: int) -> Iterator[tuple[tuple, int]]:
    """(index, rows): consecutive blocks of at most `most` rows (all dims but the last) that
    cover `shape` in order; `index` selects the block (ints and slices, for `builder.ap`)."""
    yield from _blocks(tuple(shape[:-1]), most)


def _blocks(dims: tuple[int, ...], most: int) -> Iterator[tuple[tuple, int]]:
    if not dims:
        yield (), 1
        return
    inner = math.prod(dims[1:])
    if inner <= most:
        per = max(1, most // inner)
        for i0 in range(0, dims[0], per):
            i1 = min(i0 + per, dims[0])
            yield (slice(i0, i1),), (i1 - i0) * inner
        return
    for i in range(dims[0]):
        for index, rows in _blocks(dims[1:], most):
            yield (i, *index), rows


def flat_blocks(shape: tuple[int, ...], partitions: int, most_free: int) -> list[tuple]:
    """(index, partitions, free): blocks covering `shape` in order, each moved into a tile of
    [partitions, free] (the block's elements in flat order). Whole rows are grouped into blocks
    of `partitions * free` elements when every block divides evenly (elementwise ops use all
    partitions whatever the shape); otherwise a block is up to `partitions` rows, one per
    partition, and a row longer than `most_free` is cut into column chunks."""
    if not shape:
        return [((), 1, 1)]
    d = shape[-1]
    if d <= most_free:
        flat = list(row_blocks(shape, max(1, partitions * most_free // d)))
        if all((r * d) % partitions == 0 for _, r in flat):
            return [(index, partitions, r * d // partitions) for index, r in flat]
    out = []
    for index, rows in row_blocks(shape, partitions):
        if d <= most_free:
            out.append((index, rows, d))
            continue
        full = index + (slice(None),) * (len(shape) - 1 - len(index))
        for c in range(0, d, most_free):
            out.append(((*full, slice(c, min(c + most_free, d))), rows, min(most_free, d - c)))
    return out
