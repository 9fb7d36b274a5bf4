"""`argmax` over the last dim of rows too long for one partition whose length is not a
multiple of 128: the pieces with a remainder column (`ragged`), its empty partitions set to
the most negative fp32.

Per unit (g rows a tile, or a row of t segments), in three stages a unit apart (in a list
schedule's order, `schedule.Scheduled`): each partition's max over its columns (VectorE, in
x's dtype when 16-bit: exact); the row's max M over its partitions (`Groups.maxes`, spread
back over them), then per tile one pass (x != M) + idx / BIG (`scalar_tensor_tensor`, GpSimd:
idx each element's index in its row, made once a segment, BIG a power of two above the row's
length, so the key is below 1 exactly where x is M, and its fraction the index, exact in fp32)
and each partition's smallest key (ScalarE: the max of -key); the row's smallest over its
partitions (TensorE: a transpose and one `tensor_reduce`), times BIG: the first index of the
max, as PyTorch. Three passes over x where `argmax_chunks`' chunk maxima take one and a gather:
such rows were refused before."""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import (
    Activation,
    DmaCopy,
    Engine,
    Iota,
    Matmul,
    ScalarTensorTensor,
    TensorCopy,
    TensorReduce,
    TensorScalar,
)
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues
from trnsim.kernels.ragged import RaggedLayout, Small, ragged_layout, units
from trnsim.kernels.reduce import _runs
from trnsim.kernels.row_pieces import Groups
from trnsim.kernels.schedule import Scheduled

__all__ = ["lower_argmax_ragged"]

G, V = Engine.GPSIMD, Engine.VECTOR
PIECE_BYTES = 4096  # a tile's main columns' bytes a partition at most
BUFS = 6  # units resident, at most (fewer where a unit's x would not fit: `_bufs`)
SBUF_SHARE = 0.9  # of a partition's SBUF for x's units, the keys and the indices
LAG = 2  # units between a unit's maxima and its keys, and between those and its indices
LOWEST = -3.4028234663852886e38


def lower_argmax_ragged(b: KernelBuilder, cfg: ChipConfig, x: str, out: str,
                        rows: tuple[int, int]) -> None:  # fmt: skip
    """out = argmax(x, -1) over this core's flattened rows [lo, hi) (module doc)."""
    tx = b.tensors[x]
    rag = ragged_layout(tx.shape[-1], max(1, PIECE_BYTES // tx.dtype.itemsize),
                        cfg.core.sbuf.partitions)  # fmt: skip
    todo = units(tx.shape, rag, rows)
    if not todo:
        return
    k = _Argmax(b, cfg, x, out, rag)
    # three stages, LAG units apart (the maxima, the keys, the rows' indices), the latest
    # unit's last: each engine's queue then takes the work whose inputs are ready soonest
    # first, none waiting in order behind another engine's pass of a later stage
    lags = (2 * LAG, LAG, 0)
    with Scheduled(b, cfg, shared_dma=True):
        for n in range(len(todo) + 2 * LAG):
            for stage, late in zip((k.finish, k.second, k.first), lags):
                if 0 <= n - late < len(todo):
                    stage(n - late, *todo[n - late])
    k.groups.done()


def _bufs(cfg: ChipConfig, rag: RaggedLayout, itemsize: int) -> int:
    """Units of x resident: BUFS, or as many as SBUF_SHARE of a partition holds beside the
    indices and the two units' keys (fp32, a row's width each) where a unit is long, at least
    LAG + 1 (a unit's x is read LAG units after its load). Rows of more than one segment go to
    `argmax_stream` instead (a row of 10^6 fp32, 31 KiB a partition, six units and the rest
    overflowed SBUF here before this cap; rows of 2 * 10^6 bf16 overflowed even at LAG + 1)."""
    width = sum(rag.width(s) for s in range(rag.t))  # a unit's columns a partition
    room = int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) - 3 * 4 * width
    return max(LAG + 1, min(BUFS, room // max(1, width * itemsize)))


class _Argmax:
    def __init__(self, b, cfg, x, out, rag: RaggedLayout):
        self.b, self.cfg, self.x, self.out, self.rag = b, cfg, x, out, rag
        self.P, self.f32, self.xdt = cfg.core.sbuf.partitions, dtype("float32"), b.tensors[x].dtype
        self.low = self.xdt if self.xdt.itemsize == 2 and self.xdt.is_float else self.f32
        self.big = float(2 ** math.ceil(math.log2(2 * rag.d + 2)))  # above any index
        self.groups = Groups(b, cfg, rag.k)
        qs, q = Queues(cfg), dma_queues(cfg, rag.f * self.xdt.itemsize)
        self.loads, self.stores = qs.loads().take(max(2, q)), qs.stores(0, 1 / 2)
        self.small = Small(cfg)
        self.nl = self.ns = 0
        self.idx: list[str] = []
        self.bufs = _bufs(cfg, rag, self.xdt.itemsize)

    def _load_q(self):
        self.nl += 1
        return self.loads[self.nl - 1]

    def tile(self, key: str, n: int, s: int, w: int, dt) -> str:
        return self.b.scratch_tile(f"amr.{key}{n % self.bufs}.{s}", key, (self.P, w), dt)

    def col(self, key: str, n: int, w: int = 1) -> str:
        return self.b.scratch_tile(f"amr.{key}{n % self.bufs}", key, (self.P, w), self.f32)

    def indices(self) -> None:
        """Per segment [P, width]: each element's index in its row over BIG (module doc): main
        column c of partition p of segment s holds element k c_s + (p mod k) w_s + c (g = 1:
        128 c_s + p w_s + c), the remainder column k m + (p mod k)."""
        if self.idx:
            return
        b, rag, P, f32 = self.b, self.rag, self.P, self.f32
        offs = {}
        if rag.g > 1:  # (p // k) k step: each partition's row's first, by E^T on TensorE
            for step in (rag.k, rag.k * rag.m):
                offs[step] = self.offset(step)
        for s in range(rag.t):
            lo, hi = rag.cols(s)
            w = hi - lo
            t = b.scratch_tile(f"amr.idx.{s}", "idx", (P, rag.width(s)), f32)
            main = ap(t, slice(None), slice(0, w))
            b.emit(Iota, [], [main], dst=main, start=rag.k * lo, step=1, partition_step=w)
            if offs:  # p m + c less (p // k) k m
                off = offs[rag.k * rag.m]
                b.emit(TensorScalar, [main, off], [main], src=main, dst=main, op0="subtract",
                       operand0=off, engine=G)  # fmt: skip
            if s == rag.t - 1 and rag.r:
                col = ap(t, slice(None), slice(w, w + 1))
                b.emit(Iota, [], [col], dst=col, start=rag.k * rag.m, step=0, partition_step=1)
                if offs:  # k m + p less (p // k) k
                    off = offs[rag.k]
                    b.emit(TensorScalar, [col, off], [col], src=col, dst=col, op0="subtract",
                           operand0=off, engine=G)  # fmt: skip
            whole = ap(t)
            b.emit(TensorScalar, [whole], [whole], src=whole, dst=whole, op0="multiply",
                   operand0=1.0 / self.big, engine=G)  # fmt: skip
            self.idx.append(t)

    def offset(self, step: int):
        """[P, 1]: (p // k) step, each partition's row's number times `step` (E^T times an
        iota of the rows, on TensorE: exact)."""
        b, gr, f32 = self.b, self.groups, self.f32
        base = b.scratch_tile(f"amr.base{step}", "base", (gr.g, 1), f32)
        b.emit(Iota, [], [ap(base)], dst=ap(base), start=0, step=0, partition_step=step)
        ps = ap(gr._ps((self.P, 1)))
        b.emit(Matmul, [ap(gr.e), ap(base)], [ps], stationary=ap(gr.e), moving=ap(base),
               dst=ps)  # fmt: skip
        off = ap(b.scratch_tile(f"amr.off{step}", "off", (self.P, 1), f32))
        b.emit(TensorCopy, [ps], [off], src=ps, dst=off)
        return off

    def first(self, n: int, unit, rows: int) -> None:
        """Load; each partition's max over each segment (column s of mx)."""
        self.indices()
        b, rag = self.b, self.rag
        p = rows * rag.k
        mx = self.col("mx", n, rag.t)
        for s in range(rag.t):
            t = self.tile("x", n, s, rag.width(s), self.xdt)
            rag.load(b, self.x, unit, rows, s, t, self._load_q, self.small.load)
            if s == rag.t - 1 and rag.r:
                rag.mask(b, t, LOWEST, p)
            xa, m = ap(t, slice(0, p)), ap(mx, slice(0, p), slice(s, s + 1))
            if self.low is not self.f32:  # 16-bit: the max at two elements a cycle, exact
                m16 = ap(self.b.scratch_tile(f"amr.m16{n % self.bufs}", "m16", (self.P, 1),
                                             self.low), slice(0, p))  # fmt: skip
                b.emit(TensorReduce, [xa], [m16], alu="max", src=xa, dst=m16)
                b.emit(TensorCopy, [m16], [m], src=m16, dst=m, engine=G)
            else:
                b.emit(TensorReduce, [xa], [m], alu="max", src=xa, dst=m)

    def neg_min(self, key, dst, w: int, p: int) -> None:
        """dst = minus each partition's smallest key: ScalarE's max reduction of -key (its
        elementwise results unread), or VectorE's min negated where ScalarE reduces by add
        only (NC-v2)."""
        b = self.b
        if self.cfg.core.scalar.reduce_max:
            junk = ap(b.scratch_tile(f"amr.junk{w}", "junk", (self.P, w), dtype("bfloat16")),
                      slice(0, p))  # fmt: skip
            b.emit(Activation, [key], [junk, dst], func="copy", src=key, dst=junk, scale=-1.0,
                   reduce="max", reduce_dst=dst)  # fmt: skip
            return
        b.emit(TensorReduce, [key], [dst], alu="min", src=key, dst=dst)
        b.emit(TensorScalar, [dst], [dst], src=dst, dst=dst, op0="multiply", operand0=-1.0,
               engine=G)  # fmt: skip

    def second(self, n: int, unit, rows: int) -> None:
        """The row's max; the keys and their smallest per partition."""
        b, rag, P = self.b, self.rag, self.P
        p = rows * rag.k
        mx = ap(self.col("mx", n, rag.t), slice(0, p))
        mp = mx
        if rag.t > 1:
            mp = ap(self.col("mp", n), slice(0, p))
            b.emit(TensorReduce, [mx], [mp], alu="max", src=mx, dst=mp)
        big = ap(self.col("M", n), slice(0, p))
        self.groups.maxes(mp, p, 1, big)
        kmin = ap(self.col("kmin", n, rag.t), slice(0, p))
        for s in range(rag.t):
            w = rag.width(s)
            xa = ap(self.tile("x", n, s, w, self.xdt), slice(0, p))
            key = ap(self.b.scratch_tile(f"amr.key{n % 2}.{s}", "key", (P, w), self.f32),
                     slice(0, p))  # fmt: skip
            idx = ap(self.idx[s], slice(0, p))
            b.emit(ScalarTensorTensor, [xa, big, idx], [key], data=xa, op0="not_equal",
                   operand0=big, op1="add", operand1=idx, dst=key, engine=G)  # fmt: skip
            km = ap(kmin.name, slice(0, p), slice(s, s + 1))  # -min: the max of -key
            self.neg_min(key, km, w, p)

    def finish(self, n: int, unit, rows: int) -> None:
        """The rows' smallest keys over their partitions, their indices stored."""
        b, rag = self.b, self.rag
        p = rows * rag.k
        kmin = ap(self.col("kmin", n, rag.t), slice(0, p))
        kp = kmin
        if rag.t > 1:
            kp = ap(self.col("kp", n), slice(0, p))
            b.emit(TensorReduce, [kmin], [kp], alu="max", src=kmin, dst=kp)
        first = self.groups.row_maxes(kp, p, alu="max")  # [1, rows]: -(the rows' min keys)
        to = b.tensors[self.out]
        res = ap(b.scratch_tile(f"amr.res{n % self.bufs}", "res", (1, rag.g), to.dtype),
                 slice(0, 1), slice(0, rows))  # fmt: skip
        self.store(first, res, unit[1], rows)

    def store(self, first, res, r0: int, rows: int) -> None:
        """out's rows [r0, r0 + rows) = -first * BIG (first: minus the rows' smallest keys,
        [1, rows]), cast into `res` and stored."""
        b, to = self.b, self.b.tensors[self.out]
        b.emit(TensorScalar, [first], [res], src=first, dst=res, op0="multiply",
               operand0=-self.big)  # fmt: skip
        for index, cnt, o in _runs(list(to.shape) or [1], r0, r0 + rows, rows):
            dst = ap(self.out, *index) if to.shape else ap(self.out)
            src = ap(res.name, slice(0, 1), slice(o, o + cnt))
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.stores[self.ns])
            self.ns += 1
