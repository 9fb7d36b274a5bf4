"""Rows too long for one partition whose length is not a multiple of the 128 partitions
(`row_pieces.layout` takes only multiples): the pieces' layout with a remainder column.

**Layout.** A row spans k partitions (a power of two; g = 128 / k rows a tile, row j on
partitions [j k, (j + 1) k)). Its d = k m + r elements (r < k): the first k m as k contiguous
runs of m, one a partition (one DMA moves a tile's g rows of them, in flat order), and the
last r (the **remainder**) one a partition down an extra column: element k m + i on the row's
partition i < r (a small DMA a row). A row longer than 128 partitions of `most` columns (k =
128, g = 1) is t segments, each a tile of its own: segment s the main columns [c_s, c_(s+1))
(c_s = m s / t, cut evenly), the remainder column in the last. So every partition holds the
same count of its row's elements in the main columns (statistics there need no weights), and
only the remainder column's partitions from r on (of each row) hold no element: `mask` sets
them to a neutral value (the most negative fp32 for a max, 0 for a sum) after the column's
loads, by GpSimd's `affine_select` (one row a tile: keep p < r, any r: the column starts at
partition 0) or VectorE's `select` by a 0/1 column made once (several rows: p mod k < r), and
the stores write the rows' elements only.

Everything else is the pieces' (`row_pieces`): each partition reduces its columns, a row's k
partials meet on TensorE (`Groups`)."""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.dtypes import dtype
from trnsim.isa import AffineSelect, DmaCopy, Engine, Memset, Select, TensorReduce
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks
from trnsim.kernels.queues import Queues
from trnsim.kernels.reduce import _unravel

__all__ = ["RaggedLayout", "ragged_layout", "units", "Small"]


@dataclass(frozen=True)
class RaggedLayout:
    """Rows of d = k m + r elements over k partitions each, g = P / k rows a tile, or (k = P)
    in t segments (module doc)."""

    d: int
    t: int
    k: int = 128
    P: int = 128

    @property
    def g(self) -> int:
        return self.P // self.k

    @property
    def m(self) -> int:
        return self.d // self.k

    @property
    def r(self) -> int:
        return self.d % self.k

    def cols(self, s: int) -> tuple[int, int]:
        """Segment s's main columns [c_s, c_(s+1)) of the row's m."""
        return self.m * s // self.t, self.m * (s + 1) // self.t

    def main(self, s: int) -> int:
        """Segment s's main columns (its elements a partition, the remainder column aside)."""
        lo, hi = self.cols(s)
        return hi - lo

    def width(self, s: int) -> int:
        """Segment s's tile columns: its main columns, and the remainder column (last)."""
        return self.main(s) + (1 if s == self.t - 1 and self.r else 0)

    @property
    def f(self) -> int:
        """The widest segment's tile columns."""
        return max(self.width(s) for s in range(self.t))

    def _hbm(self, b: KernelBuilder, name: str, unit, lo: int, hi: int):
        """Columns [lo, hi) of the rows of `unit` ((index, first flattened row), `units`)."""
        index = unit[0]
        nd = len(b.tensors[name].shape)
        return ap(name, *index, *(slice(None),) * (nd - 1 - len(index)), slice(lo, hi))

    def _rows(self, b: KernelBuilder, name: str, unit, n: int):
        """Each row's remainder in HBM and its partitions of the column (w its index)."""
        shape = b.tensors[name].shape[:-1]
        for j in range(n):
            src = ap(name, *_unravel(unit[1] + j, shape), slice(self.k * self.m, self.d))
            yield src, slice(j * self.k, j * self.k + self.r)

    def load(self, b: KernelBuilder, x: str, unit, n: int, s: int, tile: str, queues,
             small=None) -> None:  # fmt: skip
        """Segment s of the n rows of `unit` ((index, first flattened row)) of x into `tile`
        ([P, width(s)]): the main columns (one DMA), each row's remainder (one DMA each), on
        `queues` (a callable giving the next queue; the remainders on `small`'s, if given: a
        transfer of a few elements is its setup, which queues of their own overlap)."""
        lo, hi = self.cols(s)
        w = hi - lo
        src = self._hbm(b, x, unit, self.k * lo, self.k * hi)
        dst = ap(tile, slice(0, n * self.k), slice(0, w))
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=queues())
        if s == self.t - 1 and self.r:
            for src, parts in self._rows(b, x, unit, n):
                dst = ap(tile, parts, slice(w, w + 1))
                b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=(small or queues)())

    def store(self, b: KernelBuilder, out: str, unit, n: int, s: int, tile: str, queues,
              small=None) -> None:  # fmt: skip
        """Segment s of `tile` to the n rows of `unit` of out: the main columns and each row's
        remainder (on `small`'s queues, if given: `load`)."""
        lo, hi = self.cols(s)
        w = hi - lo
        src = ap(tile, slice(0, n * self.k), slice(0, w))
        dst = self._hbm(b, out, unit, self.k * lo, self.k * hi)
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=queues())
        if s == self.t - 1 and self.r:
            for hbm, parts in self._rows(b, out, unit, n):
                src = ap(tile, parts, slice(w, w + 1))
                b.emit(DmaCopy, [src], [hbm], src=src, dst=hbm, queue=(small or queues)())

    def mask(self, b: KernelBuilder, tile: str, value: float, p: int, dst=None) -> None:
        """The remainder column of the last segment's `tile` (its first p partitions) with
        `value` where no element is, in place or into `dst` (a [p, 1] column): GpSimd's
        `affine_select` (keep r - 1 - p >= 0) for a row a tile, else VectorE's `select` by
        `valid`."""
        w = self.main(self.t - 1)
        col = ap(tile, slice(0, p), slice(w, w + 1))
        self.mask_col(b, col, value, p, dst)

    def mask_col(self, b: KernelBuilder, col, value: float, p: int, dst=None) -> None:
        """`mask` of a [p, 1] column laid out as the remainder column."""
        out = col if dst is None else dst
        if self.g == 1:
            b.emit(AffineSelect, [col], [out], on_true=col, dst=out, on_false=value,
                   cmp="greater_equal", start=self.r - 1, step=0, partition_step=-1,
                   engine=Engine.GPSIMD)  # fmt: skip
            return
        pred = ap(self.valid(b), slice(0, p))
        b.emit(Select, [pred, col], [out], predicate=pred, on_true=col, on_false=value, dst=out)

    def valid(self, b: KernelBuilder) -> str:
        """[P, 1] fp32, made once: 1 on the partitions whose remainder column holds an element
        (p mod k < r), else 0: a [P, g] tile of 1 where p is row j's partition j k + i, i < r
        (two `affine_select`s), summed over j."""
        key = f"ragged.valid{self.k}.{self.r}"
        full = f"{key}:float32:{(self.P, 1)}"
        new = full not in b.scratch
        out = b.scratch_tile(key, "valid", (self.P, 1), dtype("float32"))
        if new:
            g = self.g
            t = b.scratch_tile(f"ragged.rows{self.k}.{self.r}", "vrows", (self.P, g),
                               dtype("float32"))  # fmt: skip
            a = ap(t)
            b.emit(Memset, [], [a], dst=a, value=1.0, engine=Engine.GPSIMD)
            # p - j k >= 0, then j k + r - 1 - p >= 0
            b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=0.0, cmp="greater_equal",
                   start=0, step=-self.k, partition_step=1, engine=Engine.GPSIMD)  # fmt: skip
            b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=0.0, cmp="greater_equal",
                   start=self.r - 1, step=self.k, partition_step=-1,
                   engine=Engine.GPSIMD)  # fmt: skip
            b.emit(TensorReduce, [a], [ap(out)], alu="add", src=a, dst=ap(out))
        return out


def ragged_layout(d: int, most: int, partitions: int = 128) -> RaggedLayout:
    """Rows of d elements (not a multiple of `partitions`) over the fewest partitions k (a
    power of two) whose main columns are at most `most` (the remainder column one more: the
    multiple of 128 next to d then has the same k); past `partitions`, in the fewest segments
    that fit (module doc)."""
    k = 1
    while k < partitions and d // k > most:
        k *= 2
    if d // k <= most:
        return RaggedLayout(d, 1, k, partitions)
    t = -(-(d // partitions) // most)
    return RaggedLayout(d, t, partitions, partitions)


def units(shape, lay: RaggedLayout, rows: tuple[int, int]) -> list[tuple[tuple, int]]:
    """((index, first flattened row), rows): x's rows [lo, hi) in tiles of up to g rows."""
    out, r = [], rows[0]
    for index, n in row_blocks(tuple(shape), lay.g, rows):
        out.append(((index, r), n))
        r += n
    return out


class Small:
    """The remainders' queues (`RaggedLayout.load`, `store`): the load queues from fraction
    `first` of them (the last quarter by default) and the last half of the store queues, each
    stream taken in turn (a callable each)."""

    def __init__(self, cfg, first: float = 3 / 4):
        qs = Queues(cfg)
        self._loads, self._stores = qs.loads(first, 1), qs.stores(1 / 2, 1)
        self.nl = self.ns = 0

    def load(self) -> int:
        self.nl += 1
        return self._loads[self.nl - 1]

    def store(self) -> int:
        self.ns += 1
        return self._stores[self.ns - 1]
