"""`argmax` over the last dim of rows longer than 128 partitions of a segment and not a
multiple of 128, streamed a segment at a time, so that a row of any length lowers in one pass
over x and a gather: `argmax_ragged` kept three whole rows and an index tile per segment
resident (bf16 [3, 5000011] needed 403 KB a partition of SBUF's 224 KiB).

**Layout.** A row's d = 128 m + r elements: segments of W main columns a partition (W =
PIECE_BYTES of x; the last one's the m - (t - 1) W left, and the remainder column of the r
last elements, `ragged`): element s 128 W + p W + c on partition p, column c of segment s <
t - 1. The first t - 1 segments are then rows of W in x's flat order (row s 128 + p), which a
gather reads by index.

Per row:
- each segment loaded (rotating buffers), each partition's max (VectorE, in x's dtype when
  16-bit: exact) into column s of the row's [P, t] maxima: the only pass over the whole row;
  the last segment kept;
- the row's max M (the columns', then the partitions' on TensorE, `Groups.maxes`);
- per partition its first segment s_p < t - 1 whose max is M ((mx != M) x BIG + s, its
  minimum on ScalarE), and that piece of W gathered again from HBM (row s_p 128 + p; s_p
  clamped to t - 2 where no such segment: its piece then holds no M and loses);
- the key (x != M) + i / BIG of the gathered piece and of the last segment (GpSimd's
  `scalar_tensor_tensor`, i the element's index within its segment, p W + c: BIG a power of
  two above the row's length, so the key is below 1 exactly where x is M), minus each
  partition's smallest (ScalarE: the max of -key), the segments' first index / BIG taken off
  (exact in fp32: every index is below 2^24 up to rows of 2^24), the larger of the two, the
  row's max over its partitions (TensorE), times -BIG: the first index of the max, as PyTorch.
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
from trnsim.kernels.ragged import RaggedLayout, ragged_layout, units
from trnsim.kernels.reduce import _runs
from trnsim.kernels.schedule import Scheduled

__all__ = ["lower_argmax_stream", "SegmentLayout", "segment_layout", "streams"]

G = Engine.GPSIMD
RING = 4  # segments of x in flight


@dataclass(frozen=True)
class SegmentLayout(RaggedLayout):
    """`RaggedLayout` (k = 128, one row a tile) in segments of W main columns, the last one's
    what is left (module doc)."""

    W: int = 1

    def cols(self, s: int) -> tuple[int, int]:
        return s * self.W, min(self.m, (s + 1) * self.W)


def segment_layout(d: int, most: int, partitions: int = 128) -> SegmentLayout:
    """Rows of d in segments of `most` main columns a partition (at least two)."""
    m = d // partitions
    w = min(most, max(1, -(-m // 2)))
    return SegmentLayout(d, -(-m // w), partitions, partitions, w)


def streams(cfg: ChipConfig, tx) -> bool:
    """Whether rows of x (not a multiple of 128) go here: those `argmax_ragged` would cut in
    segments (longer than 128 partitions of its PIECE_BYTES)."""
    P = cfg.core.sbuf.partitions
    return ragged_layout(tx.shape[-1], max(1, PIECE_BYTES // tx.dtype.itemsize), P).t > 1


def lower_argmax_stream(b: KernelBuilder, cfg: ChipConfig, x: str, out: str,
                        rows: tuple[int, int]) -> None:  # fmt: skip
    """out = argmax(x, -1) over this core's flattened rows [lo, hi) (module doc)."""
    tx = b.tensors[x]
    most = max(1, PIECE_BYTES // tx.dtype.itemsize)
    rag = segment_layout(tx.shape[-1], most, cfg.core.sbuf.partitions)
    todo = units(tx.shape, rag, rows)
    if not todo:
        return
    k = _Stream(b, cfg, x, out, rag)
    with Scheduled(b, cfg, shared_dma=True):
        for n in range(len(todo) + 1):  # a row's pass ahead of the last one's search
            if n < len(todo):
                k.first(n, *todo[n])
            if n >= 1:
                k.second(n - 1, *todo[n - 1])
    k.groups.done()


class _Stream(_Argmax):
    def __init__(self, b, cfg, x, out, rag: SegmentLayout):
        super().__init__(b, cfg, x, out, rag)
        self.gathers = Queues(cfg).loads(1 / 2, 1)
        self.nx = 0

    def consts(self) -> None:
        """The index tiles over BIG (a whole segment's, p W + c; the last's, its remainder
        column k m + p less the segment's first) and [P, 1] columns: p, and the segments'
        numbers 0 .. t - 2."""
        if self.idx:
            return
        b, rag, P, f32 = self.b, self.rag, self.P, self.f32
        last = rag.t - 1
        lo, hi = rag.cols(last)
        for w, rest in ((rag.W, 0), (hi - lo, rag.r)):
            t = b.scratch_tile(f"ams.idx{w}.{rest}", "idx", (P, w + (1 if rest else 0)), f32)
            main = ap(t, slice(None), slice(0, w))
            b.emit(Iota, [], [main], dst=main, start=0, step=1, partition_step=w)
            if rest:
                col = ap(t, slice(None), slice(w, w + 1))
                b.emit(Iota, [], [col], dst=col, start=rag.k * (rag.m - lo), step=0,
                       partition_step=1)  # fmt: skip
            # over BIG on ScalarE (GpSimd makes the iotas)
            b.emit(Activation, [ap(t)], [ap(t)], func="copy", src=ap(t), dst=ap(t),
                   scale=1.0 / self.big)  # fmt: skip
            self.idx.append(t)
        self.prow = b.scratch_tile("ams.prow", "prow", (P, 1), f32)
        b.emit(Iota, [], [ap(self.prow)], dst=ap(self.prow), start=0, step=0, partition_step=1)
        self.segs = b.scratch_tile(f"ams.segs{last}", "segs", (P, last), f32)
        b.emit(Iota, [], [ap(self.segs)], dst=ap(self.segs), start=0, step=1, partition_step=0)

    def xtile(self, n: int, s: int) -> str:
        """Segment s's x tile: the row's last segment's (kept to the search), or the ring's."""
        if s == self.rag.t - 1:
            return self.b.scratch_tile(f"ams.xl{n % 2}", "xl", (self.P, self.rag.f), self.xdt)
        self.nx += 1
        key = f"ams.x{self.nx % RING}"
        return self.b.scratch_tile(key, "xs", (self.P, self.rag.W), self.xdt)

    def first(self, n: int, unit, rows: int) -> None:
        """Each partition's max per segment; the row's max M."""
        self.consts()
        b, rag, P = self.b, self.rag, self.P
        mx = self.col("mx", n, rag.t)
        for s in range(rag.t):
            t, w = self.xtile(n, s), rag.width(s)
            rag.load(b, self.x, unit, rows, s, t, self._load_q, self.small.load)
            if s == rag.t - 1 and rag.r:
                rag.mask(b, t, LOWEST, P)
            xa, m = ap(t, slice(None), slice(0, w)), ap(mx, slice(None), slice(s, s + 1))
            red = m
            if self.low is not self.f32:  # 16-bit: the max at two elements a cycle, exact
                red = ap(b.scratch_tile(f"amr.m16{s % 2}", "m16", (P, 1), self.low))
            b.emit(TensorReduce, [xa], [red], alu="max", src=xa, dst=red)
            if red is not m:
                b.emit(TensorCopy, [red], [m], src=red, dst=m, engine=G)
        mp = ap(self.col("mp", n))
        b.emit(TensorReduce, [ap(mx)], [mp], alu="max", src=ap(mx), dst=mp)
        self.groups.maxes(mp, P, 1, ap(self.col("M", n)))

    def search(self, xa, big, idx, dst, w: int, engine) -> None:
        """dst = minus each partition's smallest key (x != M) + idx of xa ([P, w]), the keys
        on `engine`."""
        b, P = self.b, self.P
        key = ap(b.scratch_tile(f"ams.key{w}", "key", (P, w), self.f32))
        b.emit(ScalarTensorTensor, [xa, big, idx], [key], data=xa, op0="not_equal",
               operand0=big, op1="add", operand1=idx, dst=key, engine=engine)  # fmt: skip
        self.neg_min(key, dst, w, P)

    def second(self, n: int, unit, rows: int) -> None:
        """Each partition's first segment holding M gathered and searched, and the last
        segment; the row's first index, stored."""
        b, rag, P, W, last = self.b, self.rag, self.P, self.rag.W, self.rag.t - 1
        mx, big = ap(self.col("mx", n, rag.t)), ap(self.col("M", n))
        # s_p: the first segment (of the first t - 1) whose max is M, clamped to t - 2
        key = ap(b.scratch_tile(f"ams.sk{last}", "sk", (P, last), self.f32))
        segs = ap(mx.name, slice(None), slice(0, last))
        b.emit(TensorScalar, [segs, big], [key], src=segs, dst=key, op0="not_equal",
               operand0=big, op1="multiply", operand1=self.big, engine=G)  # fmt: skip
        b.emit(TensorTensor, [key, ap(self.segs)], [key], alu="add", src0=key,
               src1=ap(self.segs), dst=key, engine=G)  # fmt: skip
        ns = ap(self.col("ns", n))
        self.neg_min(key, ns, last, P)
        sp = ap(self.col("sp", n))
        b.emit(TensorScalar, [ns], [sp], src=ns, dst=sp, op0="multiply", operand0=-1.0,
               op1="min", operand1=float(last - 1), engine=G)  # fmt: skip
        pos = ap(b.scratch_tile(f"ams.pos{n % 2}", "pos", (P, 1), dtype("int32")))
        b.emit(TensorScalar, [sp, ap(self.prow)], [pos], src=sp, dst=pos, op0="multiply",
               operand0=float(P), op1="add", operand1=ap(self.prow), engine=G)  # fmt: skip
        src = rag._hbm(b, self.x, unit, 0, last * P * W)  # the first t - 1 segments
        gt = ap(b.scratch_tile(f"ams.g{n % 2}", "g", (P, W), self.xdt))
        b.emit(DmaCopy, [src, pos], [gt], src=src, dst=gt, indices=pos,
               queue=self.gathers[n])  # fmt: skip
        kk = self.col("kmin", n, 2)  # -(index / BIG): the gathered piece's, the last's
        k0, k1 = (ap(kk, slice(None), slice(j, j + 1)) for j in range(2))
        self.search(gt, big, ap(self.idx[0]), k0, W, G)
        b.emit(TensorScalar, [sp, k0], [k0], src=sp, dst=k0, op0="multiply",
               operand0=-P * W / self.big, op1="add", operand1=k0, engine=G)  # fmt: skip
        w = rag.width(last)
        xl = ap(self.xtile(n, last), slice(None), slice(0, w))
        # the last segment's keys on VectorE, beside the gathered piece's on GpSimd (its pass
        # of maxima is done: bf16 [3, 1000003] at LNC 2 38.7 -> 37.6 us)
        self.search(xl, big, ap(self.idx[1]), k1, w, Engine.VECTOR)
        b.emit(TensorScalar, [k1], [k1], src=k1, dst=k1, op0="add",
               operand0=-P * rag.cols(last)[0] / self.big, engine=G)  # fmt: skip
        kp = ap(self.col("kp", n))
        b.emit(TensorReduce, [ap(kk)], [kp], alu="max", src=ap(kk), dst=kp)
        first = self.groups.row_maxes(kp, P, alu="max")  # [1, 1]: -(the row's first) / BIG
        to = b.tensors[self.out]
        res = ap(b.scratch_tile(f"ams.res{n % 2}", "res", (1, 1), to.dtype))
        b.emit(TensorScalar, [first], [res], src=first, dst=res, op0="multiply",
               operand0=-self.big)  # fmt: skip
        r0 = unit[1]
        for index, cnt, o in _runs(list(to.shape) or [1], r0, r0 + rows, rows):
            dst = ap(self.out, *index) if to.shape else ap(self.out)
            src = ap(res.name, slice(0, 1), slice(o, o + cnt))
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.stores[self.ns])
            self.ns += 1
