"""`layer_norm` and `rms_norm` over the last dim.

Per block of rows (`per` rows to each of up to 128 partitions, the whole row in the free dim:
short rows go several to a partition, up to ROW_ELEMENTS, `layout.row_groups`), the passes over
the rows are spread so that no engine makes many:
- ScalarE: the row sum of x^2 (`activation square` with its `add` reduction) and, for
  layer_norm, the row sum of x over the first c1 columns (`activation copy`, `add`), row by row;
- VectorE: the row sums of the other columns (one `tensor_reduce add` for the block), the mean
  and rstd = (sum(x^2) / D - mean^2 + eps) ^ -0.5 ([rows per partition] columns, once per
  block), and the normalisation as one `tensor_scalar` per row ((x - mean) * rstd, or x *
  rstd; four elements a cycle for 16-bit data), in place;
- * weight and + bias (`tensor_tensor`, in place) on VectorE for a share of the blocks, on
  GpSimd for the others (whole blocks: the builder orders a tile's accesses tile by tile, so
  two engines on two halves of one tile would wait for each other).
c1 and the share are chosen (`_plan`) to even out the three engines' time per block as their
own cost models give it (`balance.cost_ns`), so the split follows each chip's clocks and fast
modes. ScalarE never waits for another engine (rstd as its one `rsqrt` would make it wait for
VectorE's mean). The weight and bias ([D]) are loaded once into one partition and spread to
all 128 by TensorE (`broadcast.spread_rows`). Blocks rotate through up to BUFS buffers
(within BUFFER_SHARE of SBUF), and the two stages (load and row sums; statistics,
normalisation, weight and bias, store) are emitted one block apart, so VectorE and ScalarE take
the next block's sums while the previous one is finished.
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import Activation, DmaCopy, Engine, TensorReduce, TensorScalar, TensorTensor
from trnsim.kernels.balance import cost_ns, dma_queues
from trnsim.kernels.broadcast import spread_rows
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_groups
from trnsim.kernels.queues import Queues, Stream

__all__ = ["lower_norm"]

BUFS = 6
SBUF_SHARE = 0.75  # rows that need more than this for one buffer are refused
BUFFER_SHARE = 0.45  # what the rotating buffers may take
ROW_ELEMENTS = 4096  # short rows are grouped up to this many elements a partition
STEPS = 32  # the splits tried: multiples of 1 / STEPS of a row's columns or of the blocks


def lower_norm(
    b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str, weight=None, bias=None, eps=1e-5
) -> None:
    """out = layer_norm(x, [D], weight, bias, eps) or rms_norm(x, [D], weight, eps)."""
    tx, to = b.tensors[x], b.tensors[out]
    if tuple(tx.shape) != tuple(to.shape):
        raise TraceError(f"{op}: x {list(tx.shape)} and out {list(to.shape)} differ")
    d = tx.shape[-1]
    for k, v in (("weight", weight), ("bias", bias)):
        if v is not None and tuple(b.tensors[v].shape) != (d,):
            raise TraceError(
                f"{op}: {k} {v} has shape {list(b.tensors[v].shape)}; expected [{d}] (x's last dim)"
            )
    affine = [v for v in (weight, bias) if v is not None]
    k = _Norm(b, cfg, op, x, out, d, float(eps))
    budget, per_row = _fits(cfg, op, tx, to, sum(b.tensors[v].dtype.itemsize for v in affine))
    vmax = cfg.core.vector.dve_max_free_elements
    # buffers within BUFFER_SHARE of SBUF (the kernel's other ops keep their own tiles)
    room = min(budget, int(cfg.core.sbuf.partition_bytes * BUFFER_SHARE))
    k.per, blocks = row_groups(tx.shape, k.P, b.share(tx.shape), min(ROW_ELEMENTS, vmax) // d,
                               room // (BUFS * per_row))  # fmt: skip
    k.bufs, k.blocks = max(1, min(BUFS, room // (k.per * per_row))), len(blocks)
    q, qs = dma_queues(cfg, k.per * d * tx.dtype.itemsize), Queues(cfg)  # load (and store) queues
    k.loads, k.stores = qs.loads().take(q), qs.stores().take(q)
    k.spread = [(spread_rows(b, cfg, v, d), alu) for v, alu in
                ((weight, "multiply"), (bias, "add")) if v is not None]  # fmt: skip
    k.c1, k.share = _plan(k)
    skew = 1 if k.bufs > 1 else 0  # stage 1 of block n + skew is emitted before stage 2 of n
    for n in range(len(blocks) + skew):
        if n < len(blocks):
            k.sums(n, *blocks[n])
        if n >= skew:
            k.normalize(n - skew, *blocks[n - skew])


def _fits(cfg: ChipConfig, op: str, tx, to, affine_bytes: int) -> tuple[int, int]:
    """(bytes, bytes per row): SBUF a partition has for its rows' buffers (ScalarE's scratch
    row and the spread weight and bias set aside), and what each row takes (x, and the output
    when its dtype differs). Refuses rows that do not fit one buffer or one VectorE
    instruction."""
    d = tx.shape[-1]
    fixed = d * (tx.dtype.itemsize + affine_bytes)
    budget = int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) - fixed
    per_row = d * (tx.dtype.itemsize + (to.dtype.itemsize if to.dtype != tx.dtype else 0))
    if budget < per_row or d > cfg.core.vector.dve_max_free_elements:
        raise TraceError(
            f"{op}: rows of {d} elements do not fit a partition's SBUF or one VectorE "
            f"instruction ({cfg.core.vector.dve_max_free_elements} elements); rows this long "
            "are not lowered yet"
        )
    return budget, per_row


class _Norm:
    """One norm's tiles and its two stages per block: `sums` and `normalize`. A block is
    [p, per, D]: `per` rows to each of p partitions."""

    def __init__(self, b, cfg, op, x, out, d, eps):
        self.b, self.cfg, self.op, self.x, self.out, self.d, self.eps = b, cfg, op, x, out, d, eps
        self.P, self.f32 = cfg.core.sbuf.partitions, dtype("float32")
        self.xdt, self.odt = b.tensors[x].dtype, b.tensors[out].dtype
        self.bufs, self.spread, self.c1, self.share, self.blocks = 1, [], 0, 0, 0
        self.per = 1
        self.loads = self.stores = Stream(0, 1)  # the blocks' queues (`lower_norm`)

    def tile(self, key: str, n: int, shape, dt) -> str:
        return self.b.scratch_tile(f"norm.{key}{n % self.bufs}", key, shape, dt)

    def row(self, key: str, n: int, p: int, j=None, cols=(0, None), dt=None):
        """Block n's rows of `key` ([p, per, D]), or its row slot j ([p, D]), over `cols`."""
        t = self.tile(key, n, (self.P, self.per, self.d), dt or self.xdt)
        return ap(t, slice(0, p), slice(None) if j is None else j, slice(*cols))

    def col(self, key: str, n: int, p: int, j=None):
        """Block n's [p, per] statistics `key`, or slot j's [p, 1] column."""
        t = self.tile(key, n, (self.P, self.per), self.f32)
        return ap(t, slice(0, p), slice(None) if j is None else slice(j, j + 1))

    def output(self, n: int, p: int, j=None):
        """The block's output tile: x's own (in place) when the dtypes agree."""
        key = "x" if self.odt == self.xdt else "o"
        return self.row(key, n, p, j, dt=self.odt)

    def sums(self, n: int, index: tuple, rows: int) -> None:
        """Load; sum of x^2 (and of x's first c1 columns) on ScalarE, row by row, the other
        columns' sums on VectorE, all rows at once."""
        b, c1, p = self.b, self.c1, rows // self.per
        xa, src = self.row("x", n, p), ap(self.x, *index)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=self.loads[n])
        junk = ap(self.tile("junk", 0, (self.P, self.d), self.xdt), slice(0, p))  # never read
        for j in range(self.per):
            xj, ss = self.row("x", n, p, j), self.col("ss", n, p, j)
            b.emit(Activation, [xj], [junk, ss], func="square", src=xj, dst=junk, reduce="add",
                   reduce_dst=ss)  # fmt: skip
            if self.op == "layer_norm" and c1:
                xs, js = self.row("x", n, p, j, (0, c1)), ap(junk.name, slice(0, p), slice(0, c1))
                s1 = self.col("s1", n, p, j)
                b.emit(Activation, [xs], [js, s1], func="copy", src=xs, dst=js, reduce="add",
                       reduce_dst=s1)  # fmt: skip
        if self.op == "layer_norm" and c1 < self.d:
            xv, s2 = self.row("x", n, p, None, (c1, None)), self.col("s2", n, p)
            b.emit(TensorReduce, [xv], [s2], alu="add", src=xv, dst=s2)

    def normalize(self, n: int, index: tuple, rows: int) -> None:
        """The statistics, (x - mean) * rstd, * weight and + bias, store."""
        b, p = self.b, rows // self.per
        m, rstd = self.stats(n, p)
        # VectorE's share of the blocks, spread evenly counting from the last block (rounded to
        # the nearest: from half the blocks on, the last is VectorE's, which is done sooner)
        last = self.blocks - 1 - n
        vector = ((2 * last + 2) * self.share + STEPS) // (2 * STEPS) > (
            (2 * last * self.share + STEPS) // (2 * STEPS)
        )
        for j in range(self.per):
            xj, oj, rj = self.row("x", n, p, j), self.output(n, p, j), self.col("rstd", n, p, j)
            if m is not None:
                mj = self.col("m", n, p, j)
                b.emit(TensorScalar, [xj, mj, rj], [oj], src=xj, dst=oj, op0="subtract",
                       operand0=mj, op1="multiply", operand1=rj)  # fmt: skip
            else:
                b.emit(TensorScalar, [xj, rj], [oj], src=xj, dst=oj, op0="multiply", operand0=rj)
        for j in range(self.per):
            oj = self.output(n, p, j)
            for t, alu in self.spread:  # in place: o * weight, + bias
                tt = ap(t, slice(0, p))
                b.emit(TensorTensor, [oj, tt], [oj], alu=alu, src0=oj, src1=tt, dst=oj,
                       engine=Engine.VECTOR if vector else Engine.GPSIMD)  # fmt: skip
        o, dst = self.output(n, p), ap(self.out, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=self.stores[n])

    def stats(self, n: int, p: int):
        """(mean or None, rstd) as [p, per] tiles on VectorE: rstd = (ss / D - mean^2 + eps) ^
        -0.5 (ScalarE, which could take it as one `rsqrt`, would then wait for VectorE)."""
        ss, v, rstd = self.col("ss", n, p), self.col("v", n, p), self.col("rstd", n, p)
        m = None
        if self.op == "layer_norm":
            m, c = self.col("m", n, p), self.col("c", n, p)
            parts = [self.col(k, n, p) for k, has in (("s1", self.c1), ("s2", self.c1 < self.d))
                     if has]  # fmt: skip
            self.alu(
                m,
                parts[0],
                *((("add", parts[1]),) if parts[1:] else ()),
                ("multiply", 1.0 / self.d),
            )  # fmt: skip  (s1 + s2) / D
            self.alu(c, m, ("multiply", m), ("subtract", self.eps, True))  # eps - m^2
            self.alu(v, ss, ("multiply", 1.0 / self.d), ("add", c))
        else:
            self.alu(v, ss, ("multiply", 1.0 / self.d), ("add", self.eps))
        self.alu(rstd, v, ("pow", -0.5))
        return m, rstd

    def alu(self, dst, src, *ops) -> None:
        """dst = src op0 x0 op1 x1 ... on VectorE, each x a number or a [p, per] tile: in
        `tensor_scalar`s of up to two ops (a tile operand as its per-partition column when a
        partition holds one row), else a `tensor_tensor` for each tile operand."""
        b, pending = self.b, []

        def flush(a):
            fields = {}
            for i, (op, x, *rev) in enumerate(pending):
                fields |= {f"op{i}": op, f"operand{i}": x, f"reverse{i}": bool(rev)}
            reads = [a] + [x for _, x, *_ in pending if not isinstance(x, float)]
            b.emit(TensorScalar, reads, [dst], src=a, dst=dst, **fields)
            pending.clear()
            return dst

        a = src
        for op, x, *rev in ops:
            if isinstance(x, float) or self.per == 1:
                pending.append((op, x, *rev))
                if len(pending) == 2:
                    a = flush(a)
                continue
            if pending:
                a = flush(a)
            s0, s1 = (x, a) if rev else (a, x)
            b.emit(TensorTensor, [s0, s1], [dst], alu=op, src0=s0, src1=s1, dst=dst)
            a = dst
        if pending:
            flush(a)


def _plan(k: _Norm) -> tuple[int, int]:
    """(c1, share): the columns whose row sum ScalarE takes (layer_norm; VectorE the rest), and
    how many STEPS-ths of the blocks VectorE multiplies by the weight and adds the bias to
    (GpSimd the rest), evening out the engines' estimated time per block of 128 x per rows
    (their cost models, `balance.cost_ns`; a row slot's instructions times per)."""
    b, cfg, d, P, per = k.b, k.cfg, k.d, k.P, k.per
    x, o, col = k.row("x", 0, P, 0), k.output(0, P, 0), k.col("ss", 0, P, 0)

    def cost(cls, cols=(0, d), engine=None, **fields) -> float:
        """per x the cost of one row slot's instruction over `cols`."""
        if cols[0] == cols[1]:
            return 0.0
        cut = {f: ap(v.name, *(slice(*i) if isinstance(i, tuple) else i for i in v.index[:-1]),
                     slice(*cols)) for f, v in fields.items()
               if hasattr(v, "name") and v.name != col.name}  # fmt: skip
        return per * cost_ns(b, cfg, cls, engine, **{**fields, **cut})

    scalar = cost(Activation, func="square", src=x, dst=x, reduce="add", reduce_dst=col)
    small = cost_ns(b, cfg, TensorScalar, after=True, src=col, dst=col, op0="multiply",
                    operand0=1.0)  # fmt: skip
    vector = cost(TensorScalar, src=x, dst=o, op0="multiply", operand0=col) + 2 * small
    c1s = [0]
    if k.op == "layer_norm":
        vector += (2 if per == 1 else 5) * small  # the mean and eps - mean^2 (`_Norm.stats`)
        c1s = sorted({min(d, math.ceil(d * i / STEPS)) for i in range(STEPS + 1)})
    sums = {
        c: (cost(Activation, (0, c), func="copy", src=x, dst=x, reduce="add", reduce_dst=col),
            cost(TensorReduce, (c, d), alu="add", src=x, dst=col) if k.op == "layer_norm" else 0)
        for c in c1s
    }  # fmt: skip
    # each reads the result of the one before it on its engine (the first on GpSimd waits for
    # VectorE's normalisation instead)
    aff = {e: sum(cost(TensorTensor, engine=e, waits=e == Engine.GPSIMD and not i,
                       after=e == Engine.VECTOR or i > 0, alu=alu, src0=o,
                       src1=ap(t, slice(0, P), slice(None)), dst=o)
                  for i, (t, alu) in enumerate(k.spread))
           for e in (Engine.VECTOR, Engine.GPSIMD)}  # fmt: skip
    return min(
        ((max(scalar + sums[c][0], vector + sums[c][1] + aff[Engine.VECTOR] * i / STEPS,
              aff[Engine.GPSIMD] * (STEPS - i) / STEPS), c, i)
         for c in c1s for i in range(STEPS + 1)),
    )[1:]  # fmt: skip
