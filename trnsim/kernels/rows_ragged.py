"""Reductions (`sum`, `mean`, `amax`, `amin`) over the last dim of rows too long for one
partition whose length is not a multiple of 128: the pieces with a remainder column
(`ragged`), its partitions without an element set to the reduction's neutral value (0, the
most negative fp32 for a max, the most positive for a min) after the load; then
`rows_pieces`' steps unchanged (each partition's partial, a unit's k partials and a batch's
units meet on TensorE, one store a batch). `reduce.lower_any` took such rows before: a row a
partition in chunks, 26x the time of the multiple of 128 next to it ([8, 50257] fp32)."""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.isa import TensorReduce
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.ragged import RaggedLayout, Small, units
from trnsim.kernels.row_pieces import PieceLayout
from trnsim.kernels.row_plan import Spread
from trnsim.kernels.rows import even_share
from trnsim.kernels.rows_pieces import _Red, batches

__all__ = ["lower_reduction_ragged", "made", "ragged_rows", "last_rows"]

FP32_MAX = 3.4028234663852886e38
NEUTRAL = {"add": 0.0, "max": -FP32_MAX, "min": FP32_MAX}


def lower_reduction_ragged(b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str,
                           rag: RaggedLayout) -> None:  # fmt: skip
    """out = op(x, -1) over rows laid out as `rag` (module doc), this core's share (its last
    rows, too few for a tile, in more pieces: `last_rows`)."""
    k = made(b, cfg, op, x, out, rag)
    rows, tail = last_rows(b, cfg, op, x, out, rag.k if rag.t == 1 else 0,
                           even_share(b, b.tensors[x]))  # fmt: skip
    tail()  # (the last rows first: their chain hidden behind the others' loads)
    ragged_rows(k, rows)


def last_rows(b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str, k: int, rows):
    """(the rows, a callable): rows [lo, hi) in tiles of g = P / k rows of k pieces each (k = 0:
    a tile a row or less) cut before their last n = (hi - lo) % g, which the callable reduces
    (`made` now, its steps then; the callers emit it first, its chain hidden behind the other
    tiles' loads) in P // n pieces each, one tile on more than half the partitions: a tile of
    few rows loads only on the DMA engines its partitions reach, 8 partitions an engine, and
    last it was a batch of its own after the others (16 MiB, trn2 LNC 2: bf16 rows of 100000,
    83 a core in 64 pieces, the last alone on 64 partitions; amax 29.6 -> 27.9 us; of 50257,
    32 pieces, the last three on 96: amax 29.8 -> 27.5)."""
    P = cfg.core.sbuf.partitions
    n = (rows[1] - rows[0]) % (P // k) if k else 0
    if not n:
        return rows, lambda: None
    step = made(b, cfg, op, x, out, RaggedLayout(b.tensors[x].shape[-1], 1, P // n, P))
    step.nl = 1  # (its load on the second queue: the others' first is not behind it)
    return (rows[0], rows[1] - n), lambda: ragged_rows(step, (rows[1] - n, rows[1]))


def made(b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str, rag: RaggedLayout):
    """The steps of `op` over rows laid out as `rag`, for `ragged_rows`; a sum's matrix made
    now (GpSimd is free at the start)."""
    k = _Ragged(b, cfg, op, x, out, rag)
    if k.alu == "add":
        _ = k.groups.et
    return k


def ragged_rows(k: _Ragged, rows: tuple[int, int]) -> None:
    """`k`'s op over the flattened rows [lo, hi) of x."""
    if rows[0] >= rows[1]:
        return
    rag, tx = k.rag, k.b.tensors[k.x]
    todo = units(tx.shape, rag, rows)
    k.spread = Spread(k.shares(), len(todo) * rag.t)
    r0 = rows[0]
    for batch in batches(todo, k.P, rag.g, len(tx.shape)):
        for j, (unit, n) in enumerate(batch):
            k.ragged_unit(j, unit, n)
        # (`_Red.combine`'s units: an index of x's rows, or a row's flat index in segments)
        k.combine([((unit[1],) if rag.t > 1 else unit[0], n) for unit, n in batch], r0)
        r0 += sum(n for _, n in batch)
    k.groups.done()


class _Ragged(_Red):
    """`_Red` over the remainder-column layout: tiles a segment's width, its loads and mask."""

    def __init__(self, b, cfg, op, x, out, rag: RaggedLayout):
        self.rag = rag
        super().__init__(b, cfg, op, x, out, PieceLayout(rag.d, rag.f, rag.k, rag.g, rag.t))
        # the remainders (one small load a row, each a transfer's setup on its queue) on the
        # last half of the load queues: on a quarter they held up bf16 rows of 50257
        self.small = Small(cfg, 1 / 2)

    def _next_load(self):
        q = self.loads[self.nl]
        self.nl += 1
        return q

    def ragged_unit(self, j: int, unit, rows: int) -> None:
        """`_Red.unit` for a unit of the remainder-column layout."""
        b, rag, P = self.b, self.rag, self.P
        p = rows * rag.k
        col = ap(self.parts(), slice(0, p), slice(j, j + 1))
        segs = None
        if rag.t > 1:
            segs = ap(b.scratch_tile(f"rr.segs{j % 2}", "segs", (P, rag.t), self.f32))
        for s in range(rag.t):
            w = rag.width(s)
            slot = self.nl % 6
            t = b.scratch_tile(f"rr.x{slot}.{w}", "x", (P, w), self.xdt)
            rag.load(b, self.x, unit, rows, s, t, self._next_load, self.small.load)
            if s == rag.t - 1 and rag.r:
                rag.mask(b, t, NEUTRAL[self.alu], p)
            dst = col if segs is None else ap(segs.name, slice(0, p), slice(s, s + 1))
            self.partial(ap(t, slice(0, p)), p, dst, w)
        if segs is not None:
            b.emit(TensorReduce, [segs], [col], alu=self.alu, src=segs, dst=col)

    def partial(self, xa, p: int, dst, w: int | None = None) -> None:
        """`_Red.partial` with a scratch of the tile's width."""
        f = self.lay
        if w is not None and w != f.f:
            self.lay = PieceLayout(f.d, w, f.k, f.g, f.t)
        try:
            super().partial(xa, p, dst)
        finally:
            self.lay = f
