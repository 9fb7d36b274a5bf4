"""`argmax` over the last dim of short rows (under `argmax.CHUNK_ROWS`), several to a
partition: one instruction for many rows wherever no per-row operand is needed.

A block is [p, per, d] (`layout.row_groups`, up to ROW_ELEMENTS a partition). Per block:
- the rows' maxima m: one VectorE `tensor_reduce` over the innermost axis (in x's dtype when
  16-bit: exact, two elements a cycle);
- per row slot j, the candidates c = -1 where x < m, else 0: ScalarE's sign(x - m) (the bias
  -m a per-partition operand), or `tensor_scalar` (x != m) x -1 on GpSimd or VectorE: the
  only per-row pass, its slots shared between the three engines;
- c + R, R[i] = (d - i) / 2^e (2^e > d, a constant tile made once): the max positions get
  R[i] in (0, 1), the others below 0 (in bf16, exact, for d up to 256; fp32 beyond): one
  `tensor_tensor` over the block, its row slots shared between VectorE and GpSimd;
- the rows' largest key (one `tensor_reduce max` over the innermost axis): R of the first
  maximum, as PyTorch gives; the index d - 2^e key (GpSimd, exact), cast and stored.
The shares are chosen by the engines' cost models so the busiest engine's time per block is
least; blocks are staggered so VectorE reduces block n + 1 while the others finish block n."""

from __future__ import annotations

import itertools
import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import (
    Activation,
    DmaCopy,
    Engine,
    Iota,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.balance import cost_ns, dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_groups
from trnsim.kernels.queues import Queues
from trnsim.kernels.schedule import Scheduled

__all__ = ["lower_argmax_rows"]

V, S, G = Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD
ROW_ELEMENTS = 2048  # short rows are grouped up to this many elements a partition
BUFS = 4


def lower_argmax_rows(b: KernelBuilder, cfg: ChipConfig, x: str, out: str,
                      rows: tuple[int, int]) -> None:  # fmt: skip
    """out = argmax(x, -1) over rows [lo, hi) of x (this core's) (module doc)."""
    if rows[0] >= rows[1]:
        return
    tx, P = b.tensors[x], cfg.core.sbuf.partitions
    d = tx.shape[-1]
    per, blocks = row_groups(tuple(tx.shape), P, rows, max(1, ROW_ELEMENTS // d))
    k = _Rows(b, cfg, x, out, d, per)
    k.plan()
    # three stages, a block apart: load and maxima (VectorE), candidates and keys, the keys'
    # maxima and the store; each engine's queue then holds work of different blocks
    got: dict = {}
    with Scheduled(b, cfg):
        _stages(k, blocks, got)


def _stages(k, blocks, got) -> None:
    for n in range(len(blocks) + 2):
        if n < len(blocks):
            got[n] = k.first((n, blocks[n]))
        if 0 <= n - 1 < len(blocks):
            got[n - 1] = k.mid((n - 1, blocks[n - 1]), got[n - 1])
        if 0 <= n - 2 < len(blocks):
            k.last((n - 2, blocks[n - 2]), got.pop(n - 2))


def _double(b: KernelBuilder, tile: str, k: int, n: int) -> None:
    """Fill slots k.. n of `tile`'s second dim by copying its first k, doubling each time."""
    while k < n:
        w = min(k, n - k)
        src, dst = ap(tile, slice(None), slice(0, w)), ap(tile, slice(None), slice(k, k + w))
        b.emit(TensorCopy, [src], [dst], src=src, dst=dst)
        k += w


class _Rows:
    def __init__(self, b: KernelBuilder, cfg: ChipConfig, x: str, out: str, d: int, per: int):
        self.b, self.cfg, self.x, self.out, self.d, self.per = b, cfg, x, out, d, per
        tx = b.tensors[x]
        self.P, self.f32, self.xdt = cfg.core.sbuf.partitions, dtype("float32"), tx.dtype
        self.low = tx.dtype if tx.dtype.itemsize == 2 and tx.dtype.is_float else self.f32
        # the keys: bf16 (exact) for rows up to 256, and for rows of 512 as two halves of 256
        # (`last`); else fp32
        self.H = 2 if d == 512 else 1
        self.L = d // self.H  # a key row's length
        self.kdt = dtype("bfloat16") if self.L <= 256 else self.f32
        self.scale = float(2 ** math.ceil(math.log2(self.L + 1)))  # 2^e > L
        q, qs = dma_queues(cfg, per * d * tx.dtype.itemsize), Queues(cfg)
        self.loads, self.stores = qs.loads().take(q), qs.stores(0, 1 / 2)
        self.made = False

    def tile(self, key: str, n: int, shape, dt=None, bufs: int = BUFS) -> str:
        return self.b.scratch_tile(f"amr.{key}{n % bufs}", key, shape, dt or self.f32)

    def plan(self) -> None:
        """The row slots each engine compares (ScalarE `sv[0]`, GpSimd `sv[1]`, VectorE the
        rest) and those whose key add VectorE takes (`tv`, GpSimd the rest), making the
        busiest engine's time per block least (the engines' cost models, `balance.cost_ns`)."""
        c, cfg, P, per, d = KernelBuilder({}), self.cfg, self.P, self.per, self.d
        x = ap(c.tile("x", "sbuf", (P, d), self.xdt))
        xb = ap(c.tile("xb", "sbuf", (P, per * d), self.xdt))
        kx = ap(c.tile("k", "sbuf", (P, d), self.kdt))
        col = ap(c.tile("c", "sbuf", (P, 1), self.f32))
        m = ap(c.tile("m", "sbuf", (P, per), self.low))
        cmp = {S: cost_ns(c, cfg, Activation, waits=False, func="sign", src=x, dst=kx, bias=col)}
        for e in (G, V):
            cmp[e] = cost_ns(c, cfg, TensorScalar, engine=e, waits=False, src=x, dst=kx,
                             op0="not_equal", operand0=col, op1="multiply",
                             operand1=-1.0)  # fmt: skip
        vmax = cost_ns(c, cfg, TensorReduce, alu="max", src=xb, dst=m)
        nk, L = per * self.H, self.L  # key rows

        def red(n):  # VectorE's max of n key rows
            if not n:
                return 0.0
            t = ap(c.tile(f"kb{n}", "sbuf", (P, n, L), self.kdt))
            r = ap(c.tile(f"kr{n}", "sbuf", (P, n), self.kdt))
            return cost_ns(c, cfg, TensorReduce, alu="max", src=t, dst=r)

        vreds = [red(n) for n in range(nk + 1)]
        kl = ap(c.tile("kl", "sbuf", (P, L), self.kdt))
        smax = cost_ns(c, cfg, Activation, waits=False, func="copy", src=kl, dst=kl,
                       reduce="max", reduce_dst=col)  # fmt: skip

        def add(e, n):
            if not n:
                return 0.0
            t = ap(c.tile(f"a{n}", "sbuf", (P, n * d), self.kdt))
            return cost_ns(c, cfg, TensorTensor, engine=e, alu="add", src0=t, src1=t, dst=t)

        adds = {e: [add(e, n) for n in range(per + 1)] for e in (V, G)}
        best = None
        for js, jg, tv in itertools.product(range(per + 1), range(per + 1), range(per + 1)):
            if js + jg > per:
                continue
            jv = per - js - jg
            v = vmax + jv * cmp[V] + adds[V][tv]
            sc, g = js * cmp[S], jg * cmp[G] + adds[G][per - tv]
            # the key rows whose max ScalarE takes (none where it reduces by add only: NC-v2)
            for ks in range(nk + 1 if cfg.core.scalar.reduce_max else 1):
                busy = (v + vreds[nk - ks], sc + ks * smax, g)
                key = (max(busy), sum(busy))
                if best is None or key < best[0]:
                    best = (key, (js, jg), tv, ks)
        _, self.sv, self.tv, self.ks = best

    def consts(self) -> None:
        """R [P, per H, L]: (L - i) / 2^e, an iota for the first key row, doubled by copies;
        for halves, each half's offset in its row [P, per, H] the same way."""
        if self.made:
            return
        self.made = True
        b, P, per, H, L = self.b, self.P, self.per, self.H, self.L
        self.rev = b.scratch_tile(f"amr.rev{per}.{self.d}", "rev", (P, per * H, L), self.kdt)
        first = ap(self.rev, slice(None), slice(0, 1))
        b.emit(Iota, [], [first], dst=first, start=L / self.scale, step=-1.0 / self.scale,
               partition_step=0)  # fmt: skip
        _double(b, self.rev, 1, per * H)
        if H > 1:
            self.hoff = b.scratch_tile(f"amr.hoff{per}.{H}", "hoff", (P, per, H), self.f32)
            first = ap(self.hoff, slice(None), slice(0, 1))
            b.emit(Iota, [], [first], dst=first, start=0, step=float(L), partition_step=0)
            _double(b, self.hoff, 1, per)

    def first(self, item):
        """Block n: its load and the rows' maxima (VectorE)."""
        n, (index, rows) = item
        self.consts()
        b, P, per, d = self.b, self.P, self.per, self.d
        p = rows // per
        xa = ap(self.tile("x", n, (P, per, d), self.xdt), slice(0, p))
        src = ap(self.x, *index)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=self.loads[n])
        m = ap(self.tile("m", n, (P, per), self.low), slice(0, p))
        b.emit(TensorReduce, [xa], [m], alu="max", src=xa, dst=m)
        nm = None
        if self.sv[0]:  # -m, ScalarE's bias
            nm = ap(self.tile("nm", n, (P, per)), slice(0, p))
            b.emit(TensorScalar, [m], [nm], src=m, dst=nm, op0="multiply", operand0=-1.0,
                   engine=G)  # fmt: skip
        return xa, m, nm

    def mid(self, item, got):
        """Block n: the candidates row slot by row slot, + R."""
        n, (index, rows) = item
        xa, m, nm = got
        b, P, per = self.b, self.P, self.per
        rr = slice(0, rows // per)
        js, jg = self.sv
        H = self.H
        key = ap(self.tile("k", n, (P, per * H, self.L), self.kdt, 3), rr)
        for j in range(per):
            xj, mj = ap(xa.name, rr, j), ap(m.name, rr, slice(j, j + 1))
            kj = ap(key.name, rr, slice(j * H, (j + 1) * H))
            if j < js:
                nj = ap(nm.name, rr, slice(j, j + 1))
                b.emit(Activation, [xj, nj], [kj], func="sign", src=xj, dst=kj, bias=nj)
            else:
                b.emit(TensorScalar, [xj, mj], [kj], src=xj, dst=kj, op0="not_equal",
                       operand0=mj, op1="multiply", operand1=-1.0,
                       engine=G if j < js + jg else V)  # fmt: skip
        for lo, hi, e in ((0, self.tv, V), (self.tv, per, G)):
            if lo < hi:
                kk = ap(key.name, rr, slice(lo * H, hi * H))
                rv = ap(self.rev, rr, slice(lo * H, hi * H))
                b.emit(TensorTensor, [kk, rv], [kk], alu="add", src0=kk, src1=rv, dst=kk,
                       engine=e)  # fmt: skip
        return key

    def last(self, item, key):
        """Block n: the rows' largest key, the indices stored."""
        n, (index, rows) = item
        b, P, per, d = self.b, self.P, self.per, self.d
        rr = slice(0, rows // per)
        H, L = self.H, self.L
        top = ap(self.tile("top", n, (P, per * H), self.kdt), rr)
        for r in range(self.ks):  # ScalarE's share of the keys' maxima, a key row each
            kr, tr = ap(key.name, rr, r), ap(top.name, rr, slice(r, r + 1))
            junk = ap(self.tile("junk", 0, (P, L), self.kdt, 1), rr)
            b.emit(Activation, [kr], [junk, tr], func="copy", src=kr, dst=junk, reduce="max",
                   reduce_dst=tr)  # fmt: skip
        if self.ks < per * H:
            kv, tv = ap(key.name, rr, slice(self.ks, None)), ap(top.name, rr,
                                                                slice(self.ks, None))  # fmt: skip
            b.emit(TensorReduce, [kv], [tv], alu="max", src=kv, dst=tv)
        to = b.tensors[self.out]
        res = ap(self.tile("r", n, (P, per), to.dtype), rr)
        if H == 1:  # the index d - 2^e key
            b.emit(TensorScalar, [top], [res], src=top, dst=res, op0="multiply",
                   operand0=-self.scale, op1="add", operand1=float(d), engine=G)  # fmt: skip
        else:  # each half's index h L + L - 2^e key (past the row where the half has no max:
            # its keys are at most -1/2), the row's least
            ih = ap(self.tile("ih", n, (P, per, H)), rr)
            b.emit(TensorScalar, [top], [ih], src=top, dst=ih, op0="multiply",
                   operand0=-self.scale, op1="add", operand1=float(L), engine=G)  # fmt: skip
            ho = ap(self.hoff, rr)
            b.emit(TensorTensor, [ih, ho], [ih], alu="add", src0=ih, src1=ho, dst=ih, engine=G)
            low = ap(self.tile("lo", n, (P, per)), rr)
            b.emit(TensorReduce, [ih], [low], alu="min", src=ih, dst=low)
            b.emit(TensorCopy, [low], [res], src=low, dst=res, engine=S)
        dst = ap(self.out, *index) if to.shape else ap(self.out)
        b.emit(DmaCopy, [res], [dst], src=res, dst=dst, queue=self.stores[n])
