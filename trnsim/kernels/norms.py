"""`layer_norm` and `rms_norm` over the last dim.

Per block of up to 128 rows (one row per partition, the whole row in the free dim;
`layout.row_blocks`), the passes over the row are spread so that no engine makes many:
- ScalarE: the row sum of x^2 (`activation square` with its `add` reduction), for layer_norm
  the row sum of x over the first c1 columns (`activation copy`, `add`), and rstd = 1 /
  sqrt(sum(x^2) / D - mean^2 + eps) ([rows, 1], `activation rsqrt`);
- VectorE: the row sum of the other columns (`tensor_reduce add`), the mean and eps - mean^2
  ([rows, 1]), and the normalisation as one `tensor_scalar` ((x - mean) * rstd, or x * rstd;
  four elements a cycle for 16-bit data), in place;
- * weight and + bias (`tensor_tensor`, in place) on VectorE for a share of the blocks, on
  GpSimd for the others (whole blocks: the builder orders a tile's accesses tile by tile, so
  two engines on two halves of one tile would wait for each other).
c1 and the share are chosen (`_plan`) to even out the three engines' time per block as their
own cost models give it (`balance.cost_ns`), so the split follows each chip's clocks and fast
modes. The weight and bias ([D]) are loaded once into one partition and spread to all 128 by
TensorE (`broadcast.spread_rows`). Blocks rotate through up to BUFS buffers, and the two
stages (load and row sums; statistics, normalisation, weight and bias, store) are emitted one
block apart, so VectorE and ScalarE take the next block's sums while the previous one is
finished.
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
from trnsim.kernels.layout import row_blocks

__all__ = ["lower_norm"]

BUFS = 6
SBUF_SHARE = 0.75
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
    k.bufs = _fits(cfg, op, tx, to, sum(b.tensors[v].dtype.itemsize for v in affine))
    k.spread = [(spread_rows(b, cfg, v, d), alu) for v, alu in
                ((weight, "multiply"), (bias, "add")) if v is not None]  # fmt: skip
    k.c1, k.share = _plan(k)
    blocks = list(row_blocks(tx.shape, k.P, b.share(tx.shape)))
    k.blocks = len(blocks)
    skew = 1 if k.bufs > 1 else 0  # stage 1 of block n + skew is emitted before stage 2 of n
    for n in range(len(blocks) + skew):
        if n < len(blocks):
            k.sums(n, *blocks[n])
        if n >= skew:
            k.normalize(n - skew, *blocks[n - skew])


def _fits(cfg: ChipConfig, op: str, tx, to, affine_bytes: int) -> int:
    """How many blocks rotate: up to BUFS, fewer for long rows (each holds x, and the output
    when its dtype differs; ScalarE's scratch row and the spread weight and bias are fixed)."""
    d = tx.shape[-1]
    fixed = d * (tx.dtype.itemsize + affine_bytes)
    budget = int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) - fixed
    per = d * (tx.dtype.itemsize + (to.dtype.itemsize if to.dtype != tx.dtype else 0))
    bufs = min(BUFS, budget // per)
    if bufs < 1 or d > cfg.core.vector.dve_max_free_elements:
        raise TraceError(
            f"{op}: rows of {d} elements do not fit a partition's SBUF or one VectorE "
            f"instruction ({cfg.core.vector.dve_max_free_elements} elements); rows this long "
            "are not lowered yet"
        )
    return bufs


class _Norm:
    """One norm's tiles and its two stages per block: `sums` and `normalize`."""

    def __init__(self, b, cfg, op, x, out, d, eps):
        self.b, self.cfg, self.op, self.x, self.out, self.d, self.eps = b, cfg, op, x, out, d, eps
        self.P, self.f32 = cfg.core.sbuf.partitions, dtype("float32")
        self.xdt, self.odt = b.tensors[x].dtype, b.tensors[out].dtype
        self.bufs, self.spread, self.c1, self.share, self.blocks = 1, [], 0, 0, 0
        self.q = dma_queues(cfg, d * self.xdt.itemsize)  # load (and store) queues

    def tile(self, key: str, n: int, shape, dt) -> str:
        full = f"norm.{key}{n % self.bufs}:{dt.name}:{shape}"
        name = self.b.scratch.get(full)
        if name is None:
            name = self.b.scratch[full] = self.b.tile(key, "sbuf", shape, dt)
        return name

    def row(self, key: str, n: int, rows: int, cols=(0, None), dt=None):
        t = self.tile(key, n, (self.P, self.d), dt or self.xdt)
        return ap(t, slice(0, rows), slice(*cols))

    def col(self, key: str, n: int, rows: int):
        return ap(self.tile(key, n, (self.P, 1), self.f32), slice(0, rows))

    def output(self, n: int, rows: int, cols=(0, None)):
        """The block's output tile: x's own (in place) when the dtypes agree."""
        return self.row("x" if self.odt == self.xdt else "o", n, rows, cols, self.odt)

    def sums(self, n: int, index: tuple, rows: int) -> None:
        """Load; sum of x^2 (and of x's first c1 columns) on ScalarE, the other columns' sum
        on VectorE."""
        b, c1 = self.b, self.c1
        xa, src = self.row("x", n, rows), ap(self.x, *index)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=n % self.q)
        junk = self.row("junk", 0, rows)  # ScalarE's elementwise results, never read
        ss = self.col("ss", n, rows)
        b.emit(Activation, [xa], [junk, ss], func="square", src=xa, dst=junk, reduce="add",
               reduce_dst=ss)  # fmt: skip
        if self.op != "layer_norm":
            return
        if c1:
            xs, js, s1 = self.row("x", n, rows, (0, c1)), self.row("junk", 0, rows, (0, c1)), \
                self.col("s1", n, rows)  # fmt: skip
            b.emit(Activation, [xs], [js, s1], func="copy", src=xs, dst=js, reduce="add",
                   reduce_dst=s1)  # fmt: skip
        if c1 < self.d:
            xv, s2 = self.row("x", n, rows, (c1, None)), self.col("s2", n, rows)
            b.emit(TensorReduce, [xv], [s2], alu="add", src=xv, dst=s2)

    def normalize(self, n: int, index: tuple, rows: int) -> None:
        """The statistics, (x - mean) * rstd, * weight and + bias, store."""
        b, xa = self.b, self.row("x", n, rows)
        o, (m, rstd) = self.output(n, rows), self.stats(n, rows)
        if m is not None:
            b.emit(TensorScalar, [xa, m, rstd], [o], src=xa, dst=o, op0="subtract", operand0=m,
                   op1="multiply", operand1=rstd)  # fmt: skip
        else:
            b.emit(TensorScalar, [xa, rstd], [o], src=xa, dst=o, op0="multiply", operand0=rstd)
        # VectorE's share of the blocks, spread evenly counting from the last block (rounded to
        # the nearest: from half the blocks on, the last is VectorE's, which is done sooner)
        m = self.blocks - 1 - n
        vector = ((2 * m + 2) * self.share + STEPS) // (2 * STEPS) > (
            (2 * m * self.share + STEPS) // (2 * STEPS)
        )
        for t, alu in self.spread:  # in place: o * weight, + bias
            tt = ap(t, slice(0, rows))
            b.emit(TensorTensor, [o, tt], [o], alu=alu, src0=o, src1=tt, dst=o,
                   engine=Engine.VECTOR if vector else Engine.GPSIMD)  # fmt: skip
        dst = ap(self.out, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=8 + n % self.q)

    def stats(self, n: int, rows: int):
        """(mean or None, rstd) as [rows, 1] columns on VectorE: rstd = (ss / D - mean^2 + eps)
        ^ -0.5 (ScalarE, which could take it as one `rsqrt`, would then wait for VectorE)."""
        b, ss, rstd = self.b, self.col("ss", n, rows), self.col("rstd", n, rows)
        m, bias = None, self.eps
        if self.op == "layer_norm":
            m, bias = self.mean(n, rows), self.col("c", n, rows)
            b.emit(TensorScalar, [m], [bias], src=m, dst=bias, op0="multiply", operand0=m,
                   op1="subtract", operand1=self.eps, reverse1=True)  # fmt: skip
        v, reads = self.col("v", n, rows), [ss, bias] if m is not None else [ss]
        b.emit(TensorScalar, reads, [v], src=ss, dst=v, op0="multiply", operand0=1.0 / self.d,
               op1="add", operand1=bias)  # fmt: skip
        b.emit(TensorScalar, [v], [rstd], src=v, dst=rstd, op0="pow", operand0=-0.5)
        return m, rstd

    def mean(self, n: int, rows: int):
        """The row mean from ScalarE's and VectorE's partial sums."""
        m, parts = self.col("m", n, rows), []
        if self.c1:
            parts.append(self.col("s1", n, rows))
        if self.c1 < self.d:
            parts.append(self.col("s2", n, rows))
        s, more = parts[0], parts[1:]
        ops = dict(op0="add", operand0=more[0], op1="multiply", operand1=1.0 / self.d) if more \
            else dict(op0="multiply", operand0=1.0 / self.d)  # fmt: skip
        self.b.emit(TensorScalar, [s, *more], [m], src=s, dst=m, **ops)
        return m


def _plan(k: _Norm) -> tuple[int, int]:
    """(c1, share): the columns whose row sum ScalarE takes (layer_norm; VectorE the rest), and
    how many STEPS-ths of the blocks VectorE multiplies by the weight and adds the bias to
    (GpSimd the rest), evening out the engines' estimated time per block of 128 rows (their
    cost models, `balance.cost_ns`)."""
    b, cfg, d, P = k.b, k.cfg, k.d, k.P
    x, o, col = k.row("x", 0, P), k.output(0, P), k.col("ss", 0, P)

    def cost(cls, cols=(0, d), engine=None, **fields) -> float:
        if cols[0] == cols[1]:
            return 0.0
        cut = {f: ap(v.name, slice(0, P), slice(*cols)) for f, v in fields.items()
               if hasattr(v, "name") and v.name != col.name}  # fmt: skip
        return cost_ns(b, cfg, cls, engine, **{**fields, **cut})

    scalar = cost(Activation, func="square", src=x, dst=x, reduce="add", reduce_dst=col)
    small = cost_ns(b, cfg, TensorScalar, after=True, src=col, dst=col, op0="multiply",
                    operand0=1.0)  # fmt: skip
    vector = cost(TensorScalar, src=x, dst=o, op0="multiply", operand0=col) + 2 * small
    c1s = [0]
    if k.op == "layer_norm":
        vector += 2 * small
        c1s = sorted({min(d, math.ceil(d * i / STEPS)) for i in range(STEPS + 1)})
    sums = {
        c: (cost(Activation, (0, c), func="copy", src=x, dst=x, reduce="add", reduce_dst=col),
            cost(TensorReduce, (c, d), alu="add", src=x, dst=col) if k.op == "layer_norm" else 0)
        for c in c1s
    }  # fmt: skip
    # each reads the result of the one before it on its engine (the first on GpSimd waits for
    # VectorE's normalisation instead)
    aff = {e: sum(cost(TensorTensor, engine=e, waits=e == Engine.GPSIMD and not i,
                       after=e == Engine.VECTOR or i > 0, alu=alu, src0=o, src1=ap(t), dst=o)
                  for i, (t, alu) in enumerate(k.spread))
           for e in (Engine.VECTOR, Engine.GPSIMD)}  # fmt: skip
    return min(
        ((max(scalar + sums[c][0], vector + sums[c][1] + aff[Engine.VECTOR] * i / STEPS,
              aff[Engine.GPSIMD] * (STEPS - i) / STEPS), c, i)
         for c in c1s for i in range(STEPS + 1)),
    )[1:]  # fmt: skip
