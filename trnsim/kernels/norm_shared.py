"""A layer_norm's last tile of rows in pieces (`norms._lower_pieces`) shared by both cores of
an LNC 2 logical core, where it would be the one tile more of the later core: x's rows cut
between the cores at a multiple of g (a tile's rows; `norms._share`), the later core's last
tile holds r < g rows and the earlier core has a tile fewer (trn2, 16 MiB, bf16 rows of
128256: 65 rows, 16 tiles of 2 and 16 and a lone row; the later core ended 3.1 us later, its
engines busy ~2.9 us a tile each). Each core loads the tile and takes its rows' statistics
(the same instructions, so the same values), and weights, biases and stores half of its lanes
(`lanes`: core c the lanes i = c mod 2), so each has about half a tile more, not one and none.

At LNC 1 the tile is x's last (the cut a multiple of g), in one tile as well: its rows' values
are the same at LNC 1 and 2 (a lane's passes are by element, the statistics the whole row's)."""

from __future__ import annotations

import math

from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.layout import row_blocks

__all__ = ["shared_blocks"]


def shared_blocks(b: KernelBuilder, tx, lay, rows: tuple[int, int], lanes: int,
                  cut: int) -> tuple[list, dict]:  # fmt: skip
    """(this core's blocks, {block: the lanes it weights, biases and stores}) for its share
    `rows` of a layer_norm's rows in pieces `lay`, x's rows cut at `cut` between the two cores
    (the first core's share [0, cut)): the later core's last, partial tile on both cores
    (module doc) where it applies, else its blocks in `rows` and no lanes' filter."""
    blocks = list(row_blocks(tx.shape, lay.g, rows))
    total, (c, n) = math.prod(tx.shape[:-1]), b.part
    r = (total - cut) % lay.g
    if (n != 2 or lanes < 2 or lay.t != 1 or not r or cut % lay.g or cut <= 0
            or -(-(total - cut) // lay.g) != cut // lay.g + 1):  # fmt: skip
        return blocks, {}
    tail = list(row_blocks(tx.shape, lay.g, (total - r, total)))
    if c == 0:
        blocks += tail
    mine = {i for i in range(lanes) if i % 2 == c}
    return blocks, {len(blocks) - 1: mine}
