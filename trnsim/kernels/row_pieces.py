"""Long rows cut in pieces over the partitions, for the row kernels (`softmax`, `norms`,
`rows`): a row too long for one partition (or so long that few rows would leave most
partitions idle) is cut in k pieces of F contiguous elements, one a partition.

**Layout.** D = k F. When k divides 128, a tile [128, F] holds g = 128 / k whole rows (row r,
piece i on partition r k + i): the rows r0 .. r0 + g are one run of HBM, so one DMA moves the
tile (it copies in flat order). A row longer than one tile's share of SBUF (k > 128) is cut in
T segments of 128 F contiguous elements, each a [128, F] tile of its own (g = 1): such a row
is read again for a second pass where the op needs one (softmax and the norms: their
statistics first, then the output; a reduction needs one pass).

**Statistics across the pieces.** Each partition reduces its piece along the free dim (one
instruction for the whole tile, every row at once); the partials of a row's k partitions meet
on TensorE (`Groups`): a sum by one matmul with a block-diagonal ones matrix as the stationary
operand (each partition gets its row's sum, in PSUM), a max by a transpose into PSUM, a
`tensor_reduce` over [g, k] and a matmul that spreads each row's max back over its k
partitions. Per-row values then act as per-partition scalars, so every later pass (the exp
with its bias, the normalisation) is one instruction per tile whatever the row count.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import (
    AffineSelect,
    Engine,
    Matmul,
    Memset,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    Transpose,
)
from trnsim.kernels.builder import KernelBuilder, ap

__all__ = ["PieceLayout", "layout", "Groups"]

_G = Engine.GPSIMD


@dataclass(frozen=True)
class PieceLayout:
    """Rows of d elements as k pieces of f, g rows a [128, f] tile (k <= 128), or t
    segments of a row, each a [128, f] tile (k = 128 t, g = 1)."""

    d: int
    f: int
    k: int
    g: int
    t: int

    def tiles(self, rows: tuple[int, int]):
        """(row, rows in the tile, segment, partitions) of each tile covering rows [lo, hi)."""
        lo, hi = rows
        if self.t > 1:
            for r in range(lo, hi):
                for s in range(self.t):
                    yield r, 1, s, 128
            return
        for r in range(lo, hi, self.g):
            n = min(self.g, hi - r)
            yield r, n, 0, n * self.k


def layout(d: int, most: int, partitions: int = 128) -> PieceLayout | None:
    """How rows of d elements go in pieces of at most `most` elements (a tile's share of a
    partition), or None when d is not a multiple of `partitions`, or when its even segments
    would be narrow (the callers then take the remainder-column layout, `ragged`, whose
    segments need not be even): k the fewest pieces (a power of two, up to `partitions`) that
    fit, so a tile holds as many rows as it can; a row longer than `partitions` pieces of
    `most` in t segments (t the fewest that divide it evenly), each at least half of `most`
    wide (rows of 128 x 1187 fp32, 1187 prime, went in 1187 segments of one element a
    partition: 150x the time of the rows of 128 x 1002 next to them)."""
    if d % partitions:
        return None
    m = d // partitions  # a partition's elements when a row fills them all
    if m <= most:
        k = 1
        while d // k > most:
            k *= 2
        return PieceLayout(d, d // k, k, partitions // k, 1)
    t = next(t for t in range(2, m + 1) if m % t == 0 and m // t <= most)
    if 2 * (m // t) < most:
        return None
    return PieceLayout(d, m // t, partitions * t, 1, t)


class Groups:
    """Per-row values from per-partition partials of a piece layout (module doc), on TensorE:
    `sums` (each partition gets its row's sum, PSUM), `maxes` (its row's max, SBUF), and the
    rows' own sums or maxima in row order (`row_sums`, `row_maxes`) for a reduction's output.
    Its constant matrices are made once, on GpSimd and TensorE."""

    def __init__(self, b: KernelBuilder, cfg: ChipConfig, k: int):
        self.b, self.cfg, self.k = b, cfg, k
        self.P = cfg.core.sbuf.partitions
        self.g = self.P // k if k <= self.P else 1
        self.kk = min(k, self.P)  # partitions a row spans within a tile
        self.f32 = dtype("float32")
        self._e = self._sum = self._et = self._first = None
        self._scaled: dict[float, str] = {}
        self.psum: list[str] = []
        self.turn = 0

    def _ps(self, shape) -> str:
        """The next of two PSUM tiles of `shape` (callers address them by slices)."""
        key = tuple(shape)
        found = [t for t in self.psum if self.b.tiles[t].shape == key]
        if len(found) < 2:
            t = self.b.psum("grp", key, self.f32)
            self.psum.append(t)
            found.append(t)
        self.turn += 1
        return found[self.turn % len(found)]

    @property
    def e(self) -> str:
        """E [g, P]: E[r, m] = 1 where partition m is in row r (m // k == r)."""
        if self._e is None:
            b, g, k, P = self.b, self.g, self.kk, self.P
            e = b.tile("grp_e", "sbuf", (g, P), self.f32)
            a = ap(e)
            b.emit(Memset, [], [a], dst=a, value=1.0, engine=_G)
            # m - r k >= 0, then r k + k - 1 - m >= 0
            b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=0.0, cmp="greater_equal",
                   start=0, step=1, partition_step=-k, engine=_G)  # fmt: skip
            b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=0.0, cmp="greater_equal",
                   start=k - 1, step=-1, partition_step=k, engine=_G)  # fmt: skip
            self._e = e
        return self._e

    @property
    def et(self) -> str:
        """E^T [P, g]: 1 where partition p is in row r."""
        if self._et is None:
            b, g, k, P = self.b, self.g, self.kk, self.P
            e = b.tile("grp_et", "sbuf", (P, g), self.f32)
            a = ap(e)
            b.emit(Memset, [], [a], dst=a, value=1.0, engine=_G)
            b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=0.0, cmp="greater_equal",
                   start=0, step=-k, partition_step=1, engine=_G)  # fmt: skip
            b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=0.0, cmp="greater_equal",
                   start=k - 1, step=k, partition_step=-1, engine=_G)  # fmt: skip
            self._et = e
        return self._et

    @property
    def sum_matrix(self) -> str:
        """[P, P]: 1 where partitions p and m are in one row (E^T E), made once."""
        if self._sum is None:
            b, P = self.b, self.P
            s = b.tile("grp_sum", "sbuf", (P, P), self.f32)
            ps = ap(self._ps((P, P)), slice(0, P), slice(0, P))  # (a larger tile reused)
            e = ap(self.e)
            b.emit(Matmul, [e, e], [ps], stationary=e, moving=e, dst=ps)
            b.emit(TensorCopy, [ps], [ap(s)], src=ps, dst=ap(s))
            self._sum = s
        return self._sum

    def scaled(self, scale: float) -> str:
        """`sum_matrix` times `scale`, made once."""
        if scale not in self._scaled:
            b, P = self.b, self.P
            s = b.tile("grp_sum", "sbuf", (P, P), self.f32)
            src, dst = ap(self.sum_matrix), ap(s)
            b.emit(TensorScalar, [src], [dst], src=src, dst=dst, op0="multiply", operand0=scale)
            self._scaled[scale] = s
        return self._scaled[scale]

    def sums(self, part, p: int, c: int = 1, scale: float = 1.0, dst=None,
             accumulate: bool = False):  # fmt: skip
        """PSUM [p, c]: each partition's row's sum of `part` ([p, c], fp32, SBUF) times
        `scale` (by a matrix of `scale`s: the same values where it is a power of two), into
        `dst` if given (added to what it holds: `accumulate`)."""
        ps = dst if dst is not None else ap(self._ps((self.P, c)), slice(0, p), slice(0, c))
        st = ap(self.sum_matrix if scale == 1.0 else self.scaled(scale), slice(0, p),
                slice(0, p))  # fmt: skip
        self.b.emit(Matmul, [st, part], [ps], stationary=st, moving=part, dst=ps,
                    accumulate=accumulate)  # fmt: skip
        return ps

    def maxes(self, part, p: int, c: int, dst, alu: str = "max", negated: bool = False):
        """dst ([p, c], SBUF) = each partition's row's max (or min) of `part` ([p, c], SBUF,
        fp32): turned into PSUM [c, rows, k], reduced over k, turned back ([rows, c]) and
        spread over each row's partitions by E; `negated`: -max, by the copy out of PSUM
        (softmax's bias, one instruction fewer in its chain)."""
        b, k, rows = self.b, self.kk, p // self.kk
        tp = self._ps((c, self.g, k))
        t = ap(tp, slice(0, c), slice(0, rows), slice(None))
        b.emit(Transpose, [part], [t], src=part, dst=t)
        m = ap(b.scratch_tile(f"grp.m{c}", "grp_m", (c, self.g), self.f32), slice(0, c),
               slice(0, rows))  # fmt: skip
        b.emit(TensorReduce, [t], [m], alu=alu, src=t, dst=m)
        back = ap(self._ps((self.g, c)), slice(0, rows), slice(0, c))
        b.emit(Transpose, [m], [back], src=m, dst=back)
        mt = ap(b.scratch_tile(f"grp.mt{c}", "grp_mt", (self.g, c), self.f32), slice(0, rows),
                slice(0, c))  # fmt: skip
        b.emit(TensorCopy, [back], [mt], src=back, dst=mt)
        spread = ap(self._ps((self.P, c)), slice(0, p), slice(0, c))
        e = ap(self.e, slice(0, rows), slice(0, p))
        b.emit(Matmul, [e, mt], [spread], stationary=e, moving=mt, dst=spread)
        if negated:
            b.emit(TensorScalar, [spread], [dst], src=spread, dst=dst, op0="multiply",
                   operand0=-1.0)  # fmt: skip
        else:
            b.emit(TensorCopy, [spread], [dst], src=spread, dst=dst)

    def firsts(self, col, p: int, dst=None):
        """PSUM [p, 1]: each partition's row's value of `col` ([p, 1], fp32) on the row's
        first partition (F1 [P, P], 1 where m = (n // k) k, the stationary operand), into
        `dst` if given."""
        if self._first is None:
            b, g, k, P = self.b, self.g, self.kk, self.P
            s1 = b.tile("grp_s1", "sbuf", (g, P), self.f32)  # 1 where m = r k
            a = ap(s1)
            b.emit(Memset, [], [a], dst=a, value=0.0, engine=_G)
            b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=1.0, cmp="not_equal",
                   start=0, step=1, partition_step=-k, engine=_G)  # fmt: skip
            first = b.tile("grp_first", "sbuf", (P, P), self.f32)
            ps, e = ap(self._ps((P, P)), slice(0, P), slice(0, P)), ap(self.e)
            b.emit(Matmul, [a, e], [ps], stationary=a, moving=e, dst=ps)
            b.emit(TensorCopy, [ps], [ap(first)], src=ps, dst=ap(first))
            self._first = first
        ps = dst if dst is not None else ap(self._ps((self.P, 1)), slice(0, p), slice(0, 1))
        st = ap(self._first, slice(0, p), slice(0, p))
        self.b.emit(Matmul, [st, col], [ps], stationary=st, moving=col, dst=ps)
        return ps

    def row_sums(self, part, p: int):
        """PSUM [1, rows]: each row's sum of `part` ([p, 1], fp32), in row order."""
        rows = max(1, p // self.kk)
        ps = ap(self._ps((1, self.g)), slice(0, 1), slice(0, rows))
        et = ap(self.et, slice(0, p), slice(0, rows))
        self.b.emit(Matmul, [part, et], [ps], stationary=part, moving=et, dst=ps)
        return ps

    def row_maxes(self, part, p: int, alu: str = "max"):
        """SBUF [1, rows]: each row's max (or min) of `part` ([p, 1], fp32), in row order."""
        b, k, rows = self.b, self.kk, max(1, p // self.kk)
        tp = self._ps((1, self.g, k))
        t = ap(tp, slice(0, 1), slice(0, rows), slice(0, min(k, p)))
        b.emit(Transpose, [part], [t], src=part, dst=t)
        m = ap(b.scratch_tile("grp.rm", "grp_rm", (1, self.g), self.f32), slice(0, 1),
               slice(0, rows))  # fmt: skip
        b.emit(TensorReduce, [t], [m], alu=alu, src=t, dst=m)
        return m

    def done(self) -> None:
        self.b.release(*self.psum)
