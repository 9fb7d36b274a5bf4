"""16-bit layer_norm rows in pieces whose length d no power of two k divides evenly enough to
fill the partitions (`norms._any_divisor` would leave some empty: bf16 rows of 50257, 29 pieces
of 1733, 4 rows a tile on 116 of the 128): k pieces of f = ceil(d / k), the row's last piece
`pad` = k f - d elements short (`padded`). Engine time goes by a tile's columns, so the 128
partitions' pieces of 1571 cost 9% less a row than 116 partitions' of 1733.

Rows in pieces go in lanes (`NormStages`, `piece_lanes`): lane [lo, hi) of a row's f columns
holds its elements [lo k, hi k), partition i of the row's k the run [lo k + i w, lo k + (i + 1)
w) (w = hi - lo). Only the last lane's last partition of a row is short: its last `pad` columns
hold zeros (copied from a zero tile at a buffer's first load; after, the weighting, in place,
leaves them 0, the weight's own being 0), so TensorE's sum of x is the row's; every squared
distance from the row mean M summed over a row's columns counts pad M^2 more, which the
statistics take off (`correct`). The last lane's loads and stores go a row at a time: the
row's first k - 1 partitions on the block's queues, the short partition on queues of its own
(the half of the load queues a block's parts leave; the other half of the store queues), as
`ragged.Small`'s remainders: a transfer of a few KiB is mostly its setup."""

from __future__ import annotations

import itertools
import math

from trnsim.isa import Activation, DmaCopy, Memset, TensorTensor
from trnsim.kernels.builder import ap
from trnsim.kernels.row_pieces import PieceLayout

__all__ = [
    "padded",
    "pad_of",
    "rows_of",
    "load_main",
    "load_short",
    "load_copy",
    "store_rows",
    "correct",
]

MOST_PAD = 1 / 8  # a row's padding at most this share of a piece (the short partition's lane
# keeps most of its columns)


def padded(d: int, most: int, P: int) -> PieceLayout | None:
    """k pieces of f = ceil(d / k) (k the fewest powers of two whose f is at most `most`), g =
    P / k rows a tile, at least two; None where k divides d or the padding exceeds MOST_PAD of
    a piece."""
    k = 1
    while k < P and -(-d // k) > most:
        k *= 2
    f = -(-d // k)
    if d % k == 0 or P // k < 2 or k * f - d > MOST_PAD * f:
        return None
    return PieceLayout(d, f, k, P // k, 1)


def pad_of(lay) -> int:
    """The elements a row's last piece lacks (0 where the pieces are whole)."""
    return lay.k * lay.f - lay.d if lay is not None and lay.t == 1 else 0


def _zeros(b, dt, pad: int, P: int) -> str:
    """[P, pad] zeros of dtype dt (P: a tile's rows), made once per op."""
    key = f"norm.pad.zeros{pad}"
    new = f"{key}:{dt.name}:{(P, pad)}" not in b.scratch
    t = b.scratch_tile(key, "pad_zeros", (P, pad), dt)
    if new:
        b.emit(Memset, [], [ap(t)], dst=ap(t), value=0.0)
    return t


def rows_of(index: tuple, dims: tuple) -> list[tuple]:
    """The full index (an int a dim of `dims`, x's shape but its last) of each row of a block
    (`layout.row_blocks`' index: ints and slices over its first dims), in order."""
    ranges = [range(*e.indices(n)) if isinstance(e, slice) else (e,) for e, n in zip(index, dims)]
    ranges += [range(n) for n in dims[len(index) :]]
    return list(itertools.product(*ranges))


def load_main(b, src_of, dst_of, lane_lo: int, w: int, lay, slot: int, queue) -> None:
    """Row slot `slot`'s first k - 1 partitions of the last lane (columns [lane_lo, lane_lo +
    w) of each piece; src_of(a, z): the row's elements [a, z); dst_of(p0, p1, step, c0, c1):
    the tile's partitions and columns) on `queue`."""
    k = lay.k
    src = src_of(lane_lo * k, lane_lo * k + (k - 1) * w)
    dst = dst_of(slot * k, slot * k + k - 1, 1, 0, w)
    b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=queue)


def load_short(b, src_of, dst_of, w: int, lay, rows: int, queues, zeros=None) -> None:
    """The short partitions of `rows` row slots (src_of(r): row slot r's elements from the last
    piece's on, w - pad of them), a transfer each on the next of `queues`, and (`zeros`, a
    buffer's first load: the weighting, in place, leaves them 0 after, the weight's own being
    0) their pad columns from the zero tile, a transfer each on the next of `zeros` (each
    transfer a region of its own: a builder orders overlapping writes only on one queue)."""
    k, pad = lay.k, pad_of(lay)
    for r in range(rows):
        p0 = r * k + k - 1
        src, dst = src_of(r), dst_of(p0, p0 + 1, 1, 0, w - pad)
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=queues.next())
        if zeros is None:
            continue
        dst = dst_of(p0, p0 + 1, 1, w - pad, w)
        z = ap(_zeros(b, b.tiles[dst.name].dtype, pad, 1))
        b.emit(DmaCopy, [z], [dst], src=z, dst=dst, queue=zeros.next())


def load_copy(b, v: str, t: str, lane_lo: int, w: int, lay, r: int, queue, small) -> None:
    """Row slot r's copy of the last lane of tensor v ([d]: a weight or bias) into tile t ([P,
    w]): `load_main`'s and `load_short`'s transfers, its pad columns zeros."""
    k = lay.k

    def dst_of(p0, p1, step, c0, c1):
        return ap(t, slice(r * k + p0, r * k + p1, step), slice(c0, c1))

    load_main(b, lambda a, z: ap(v, slice(a, z)), dst_of, lane_lo, w, lay, 0, queue)
    short = ap(v, slice(lane_lo * k + (k - 1) * w, lay.d))
    load_short(b, lambda _: short, dst_of, w, lay, 1, small, small)


def store_rows(b, src_of, dst_of, lane_lo: int, w: int, lay, rows: int, queues, small) -> None:
    """`rows` row slots of the last lane to out: each row's first k - 1 partitions on the next
    of `queues` (src_of(p0, p1, step, c0, c1) a tile's view, dst_of(r, a, z) row slot r's
    elements [a, z)), each short partition on the next of `small` (no padding stored)."""
    k, pad = lay.k, pad_of(lay)
    a = lane_lo * k + (k - 1) * w
    for r in range(rows):
        src, dst = src_of(r * k, r * k + k - 1, 1, 0, w), dst_of(r, lane_lo * k, a)
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=queues.next())
    for r in range(rows):
        src, dst = src_of(r * k + k - 1, r * k + k, 1, 0, w - pad), dst_of(r, a, lay.d)
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=small.next())


def correct(b, d, rm, pad: int, k: int, engine) -> None:
    """d ([p, u]: each partition's sum of squared distances from its row's mean, rm in PSUM)
    less pad / k rm^2 (ScalarE's square of rm scaled, out of PSUM), so the sum over the row's
    k partitions drops the pad zeros' pad rm^2."""
    t = b.tiles[d.name]
    sq = d._replace(name=b.scratch_tile(f"norm.pad.sq{t.shape}", "pad_sq", tuple(t.shape),
                                        t.dtype))  # fmt: skip
    b.emit(Activation, [rm], [sq], func="square", src=rm, dst=sq, scale=math.sqrt(pad / k))
    b.emit(TensorTensor, [d, sq], [d], alu="subtract", src0=d, src1=sq, dst=d, engine=engine)
