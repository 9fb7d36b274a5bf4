"""`argmax` over the last dim of rows longer than 128 partitions of a segment and not a
multiple of 128, streamed a segment at a time, so that a row of any length lowers in one pass
over x and a gather: `argmax_ragged` kept three whole rows and an index tile per segment
resident (bf16 [3, 5000011] needed 403 KB a partition of SBUF's 224 KiB).

**Layout.** A row's d elements: the main part, 128 partitions of mm columns (mm the largest
multiple of C, the chunk, with 128 mm <= d), in segments of W columns a partition (a
multiple of C: 4 KiB of x; the last one's what is left), and the tail of the d - 128 mm <
128 C last elements (`RaggedLayout` of one segment: a columns a partition and a remainder
column, `ragged`). Chunk j of segment s on partition p is then row (128 lo_s + p w_s) / C + j
of the main part in x's flat order, rows of C: a gather reads it by that number.

Per row:
- each segment loaded (rotating buffers), its chunks' maxima (VectorE, one `tensor_reduce`
  over [P, w / C, C], in x's dtype when 16-bit: exact, two elements a cycle) into the row's
  [P, mm / C] columns: the only pass over the whole row; the tail loaded, kept, and its max;
- the row's max M (the columns' and the tail's, then the partitions' on TensorE, `Groups`);
- per partition its first chunk holding M: the key (cm != M) + row / BIG over the columns
  (GpSimd's `scalar_tensor_tensor`, the rows' numbers a constant tile; BIG a power of two above
  twice the row's length, so the key is below 1 exactly where the chunk's max is M), its
  minimum (ScalarE: the max of -key), times BIG: the chunk's row, clamped to the last (a
  partition holding no M then finds no M, or a later one: the first is its own partition's);
- that chunk of C gathered again from HBM (`dma_copy` with `indices`) and the first M in it
  the same way ((x != M) + c / BIG), and the tail's ((x != M) + its index / BIG); the earlier
  of the two per partition, and the row's over its partitions (TensorE), times BIG: the first
  index of the max, as PyTorch. Every index is exact in fp32 up to rows of 2^24.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import (
    Activation,
    DmaCopy,
    Engine,
    Iota,
    ScalarTensorTensor,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.argmax_ragged import LOWEST, PIECE_BYTES, _Argmax
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues
from trnsim.kernels.ragged import RaggedLayout, Small, ragged_layout, units
from trnsim.kernels.row_pieces import Groups
from trnsim.kernels.schedule import Scheduled

__all__ = ["lower_argmax_stream", "StreamLayout", "stream_layout", "streams"]

G, V = Engine.GPSIMD, Engine.VECTOR
RING = 4  # segments of x in flight
C = 64  # a chunk's elements (a gather's row: 128 B of bf16, 256 of fp32)


@dataclass(frozen=True)
class StreamLayout:
    """Rows of d: 128 partitions of mm columns in segments of W, and a tail (module doc)."""

    d: int
    W: int  # a segment's columns a partition (a multiple of C)
    P: int = 128
    g: int = 1  # rows a unit (`ragged.units`)

    @property
    def mm(self) -> int:
        return self.d // (self.P * C) * C

    @property
    def t(self) -> int:
        return -(-self.mm // self.W)

    def cols(self, s: int) -> tuple[int, int]:
        return s * self.W, min(self.mm, (s + 1) * self.W)

    @property
    def tail(self) -> RaggedLayout | None:
        """The last d - P mm elements: one segment of a columns and a remainder column."""
        rest = self.d - self.P * self.mm
        return RaggedLayout(rest, 1, self.P, self.P) if rest else None


def stream_layout(d: int, itemsize: int, partitions: int = 128) -> StreamLayout:
    """Rows of d in segments of PIECE_BYTES of x a partition (a multiple of C)."""
    return StreamLayout(d, max(C, PIECE_BYTES // itemsize // C * C), partitions)


def streams(cfg: ChipConfig, tx) -> bool:
    """Whether rows of x (not a multiple of 128) go here: those `argmax_ragged` would cut in
    segments (longer than 128 partitions of its PIECE_BYTES)."""
    P = cfg.core.sbuf.partitions
    return ragged_layout(tx.shape[-1], max(1, PIECE_BYTES // tx.dtype.itemsize), P).t > 1


def lower_argmax_stream(b: KernelBuilder, cfg: ChipConfig, x: str, out: str,
                        rows: tuple[int, int]) -> None:  # fmt: skip
    """out = argmax(x, -1) over this core's flattened rows [lo, hi) (module doc)."""
    tx = b.tensors[x]
    lay = stream_layout(tx.shape[-1], tx.dtype.itemsize, cfg.core.sbuf.partitions)
    todo = units(tx.shape, lay, rows)
    if not todo:
        return
    k = _Stream(b, cfg, x, out, lay)
    with Scheduled(b, cfg, shared_dma=True):
        for n in range(len(todo) + 1):  # a row's pass ahead of the last one's search
            if n < len(todo):
                k.first(n, *todo[n])
            if n >= 1:
                k.second(n - 1, *todo[n - 1])
    k.groups.done()


class _Stream:
    neg_min, store = _Argmax.neg_min, _Argmax.store

    def __init__(self, b, cfg, x, out, lay: StreamLayout):
        self.b, self.cfg, self.x, self.out, self.lay = b, cfg, x, out, lay
        self.P, self.f32, self.xdt = cfg.core.sbuf.partitions, dtype("float32"), b.tensors[x].dtype
        self.low = self.xdt if self.xdt.itemsize == 2 and self.xdt.is_float else self.f32
        self.big = float(2 ** (2 * lay.d + 2).bit_length())  # a power of two above 2 d + 2
        self.groups = Groups(b, cfg, self.P)
        qs = Queues(cfg)
        self.loads, self.gathers = qs.loads().take(1), qs.loads(1 / 2, 1)
        self.stores, self.small = qs.stores(0, 1 / 2), Small(cfg)
        self.nx = self.nl = self.ns = 0
        self.made = False

    def _load_q(self):
        self.nl += 1
        return self.loads[self.nl - 1]

    def col(self, key: str, n: int, w: int = 1, dt=None) -> str:
        """The row's [P, w] `key` (two rows' in turn)."""
        dt = dt or self.f32
        return self.b.scratch_tile(f"ams.{key}{n % 2}", key, (self.P, w), dt)

    def scaled_iota(self, dst, start: int, partition_step: int):
        """dst ([P, w] fp32) = (start + p partition_step + c) / BIG (the iota on GpSimd, the
        scale on ScalarE)."""
        b = self.b
        b.emit(Iota, [], [dst], dst=dst, start=start, step=1, partition_step=partition_step)
        b.emit(Activation, [dst], [dst], func="copy", src=dst, dst=dst, scale=1.0 / self.big)

    def consts(self) -> None:
        """Made once: the chunks' rows over BIG ([P, mm / C]: segment s's columns start at 128
        lo_s / C, step w_s / C a partition), a chunk's element indices over BIG, the tail's
        (p a + c; its remainder column 128 a + p)."""
        if self.made:
            return
        self.made = True
        lay, P = self.lay, self.P
        rows = self.b.scratch_tile(f"ams.rows{lay.mm}", "rows", (P, lay.mm // C), self.f32)
        for s in range(lay.t):
            lo, hi = lay.cols(s)
            dst = ap(rows, slice(None), slice(lo // C, hi // C))
            self.scaled_iota(dst, P * lo // C, (hi - lo) // C)
        self.rows = ap(rows)
        self.ic = ap(self.b.scratch_tile(f"ams.ic{C}", "idx", (P, C), self.f32))
        self.scaled_iota(self.ic, 0, 0)
        tail = lay.tail
        if tail is not None:
            a = tail.m
            t = self.b.scratch_tile(f"ams.it{tail.d}", "idx", (P, tail.width(0)), self.f32)
            if a:
                self.b.emit(Iota, [], [ap(t, slice(None), slice(0, a))],
                            dst=ap(t, slice(None), slice(0, a)), start=0, step=1,
                            partition_step=a)  # fmt: skip
            if tail.r:
                rc = ap(t, slice(None), slice(a, a + 1))
                self.b.emit(Iota, [], [rc], dst=rc, start=P * a, step=0, partition_step=1)
            self.b.emit(Activation, [ap(t)], [ap(t)], func="copy", src=ap(t), dst=ap(t),
                        scale=1.0 / self.big)  # fmt: skip
            self.it = ap(t)

    def first(self, n: int, unit, rows: int) -> None:
        """The chunks' maxima per segment, the tail's max; the row's max M."""
        self.consts()
        b, lay, P = self.b, self.lay, self.P
        cm = self.col("cm", n, lay.mm // C, self.low)
        for s in range(lay.t):
            lo, hi = lay.cols(s)
            nch = (hi - lo) // C
            self.nx += 1
            xt = b.scratch_tile(f"ams.x{self.nx % RING}", "xs", (P, lay.W // C, C), self.xdt)
            xa = ap(xt, slice(None), slice(0, nch))
            src = ap(self.x, *unit[0], *self._full(unit), slice(P * lo, P * hi))
            b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=self._load_q())
            dst = ap(cm, slice(None), slice(lo // C, hi // C))
            b.emit(TensorReduce, [xa], [dst], alu="max", src=xa, dst=dst)
        mp = ap(self.col("mp", n, 1, self.low))
        b.emit(TensorReduce, [ap(cm)], [mp], alu="max", src=ap(cm), dst=mp)
        mf = ap(self.col("mf", n))
        tail = lay.tail
        if tail is None:
            b.emit(TensorCopy, [mp], [mf], src=mp, dst=mf, engine=G)
        else:
            tl = self.col("tail", n, tail.width(0), self.xdt)
            self.load_tail(unit, tl)
            if tail.r:
                tail.mask(b, tl, LOWEST, P)
            tm = ap(self.col("tm", n, 1, self.low))
            b.emit(TensorReduce, [ap(tl)], [tm], alu="max", src=ap(tl), dst=tm)
            b.emit(TensorTensor, [mp, tm], [mf], alu="max", src0=mp, src1=tm, dst=mf, engine=G)
        self.groups.maxes(mf, P, 1, ap(self.col("M", n)))

    def load_tail(self, unit, tl: str) -> None:
        """The tail's a columns a partition (one DMA) and its remainder column (partitions
        0 .. r - 1, on a small-transfer queue)."""
        b, lay, P = self.b, self.lay, self.P
        tail, base = lay.tail, P * lay.mm
        a, full = tail.m, self._full(unit)
        if a:
            src, dst = (
                ap(self.x, *unit[0], *full, slice(base, base + P * a)),
                ap(tl, slice(None), slice(0, a)),
            )
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self._load_q())
        if tail.r:
            src = ap(self.x, *unit[0], *full, slice(base + P * a, lay.d))
            dst = ap(tl, slice(0, tail.r), slice(a, a + 1))
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.small.load())

    def _full(self, unit) -> tuple:
        """Full slices of x's dims between the unit's index and the last (`ragged._hbm`)."""
        nd = len(self.b.tensors[self.x].shape)
        return (slice(None),) * (nd - 1 - len(unit[0]))

    def second(self, n: int, unit, rows: int) -> None:
        """Each partition's first chunk holding M gathered and searched, and the tail; the
        row's first index, stored."""
        b, lay, P = self.b, self.lay, self.P
        cm, big = ap(self.col("cm", n, lay.mm // C, self.low)), ap(self.col("M", n))
        key = ap(self.col("key", n, lay.mm // C))
        b.emit(ScalarTensorTensor, [cm, big, self.rows], [key], data=cm, op0="not_equal",
               operand0=big, op1="add", operand1=self.rows, dst=key, engine=G)  # fmt: skip
        nr = ap(self.col("nr", n))
        self.neg_min(key, nr, lay.mm // C, P)
        row = ap(self.col("row", n))  # the chunk's row, clamped to the last
        b.emit(TensorScalar, [nr], [row], src=nr, dst=row, op0="multiply", operand0=-self.big,
               op1="min", operand1=float(P * lay.mm // C - 1), engine=G)  # fmt: skip
        pos = ap(self.col("pos", n, 1, dtype("int32")))
        b.emit(TensorCopy, [row], [pos], src=row, dst=pos, engine=G)
        src = ap(self.x, *unit[0], *self._full(unit), slice(0, P * lay.mm))
        gt = ap(self.col("g", n, C, self.xdt))
        b.emit(DmaCopy, [src, pos], [gt], src=src, dst=gt, indices=pos,
               queue=self.gathers[n])  # fmt: skip
        two = lay.tail is not None
        kk = self.col("kmin", n, 2 if two else 1)  # -(index / BIG): the chunk's, the tail's
        k0 = ap(kk, slice(None), slice(0, 1))
        self.search(gt, big, self.ic, k0, C, G)
        b.emit(TensorScalar, [row, k0], [k0], src=row, dst=k0, op0="multiply",
               operand0=-C / self.big, op1="add", operand1=k0, engine=G)  # fmt: skip
        kp = k0
        if two:
            k1 = ap(kk, slice(None), slice(1, 2))
            tl = ap(self.col("tail", n, lay.tail.width(0), self.xdt))
            self.search(tl, big, self.it, k1, lay.tail.width(0), V)
            b.emit(TensorScalar, [k1], [k1], src=k1, dst=k1, op0="add",
                   operand0=-P * lay.mm / self.big, engine=G)  # fmt: skip
            kp = ap(self.col("kp", n))
            b.emit(TensorReduce, [ap(kk)], [kp], alu="max", src=ap(kk), dst=kp)
        first = self.groups.row_maxes(kp, P, alu="max")  # [1, 1]: -(the row's first) / BIG
        to = b.tensors[self.out]
        res = ap(b.scratch_tile(f"ams.res{n % 2}", "res", (1, 1), to.dtype))
        self.store(first, res, unit[1], rows)

    def search(self, xa, big, idx, dst, w: int, engine) -> None:
        """dst = minus each partition's smallest key (x != M) + idx of xa ([P, w]), the keys
        on `engine`."""
        b, P = self.b, self.P
        key = ap(b.scratch_tile(f"ams.key{w}", "key", (P, w), self.f32))
        b.emit(ScalarTensorTensor, [xa, big, idx], [key], data=xa, op0="not_equal",
               operand0=big, op1="add", operand1=idx, dst=key, engine=engine)  # fmt: skip
        self.neg_min(key, dst, w, P)
