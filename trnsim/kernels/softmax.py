"""`softmax` and `log_softmax` over the last dim.

The kernel, per block of up to 128 rows (one row per partition, the whole row in the free
dim; `layout.row_blocks`): load; the row maximum on VectorE (`tensor_reduce max`, into a column
of x's dtype, which holds it exactly and lets a bf16 row reduce at two elements a cycle); its
negation on GpSimd ([rows, 1]); exp(x - max) on ScalarE with the row sum accumulated by the same
instruction (`activation exp, bias = -max, reduce add`); then
- softmax: 1 / sum on GpSimd ([rows, 1]) and e * (1 / sum) on VectorE (`tensor_scalar`, four
  elements a cycle for 16-bit data), in place;
- log_softmax: log(sum) on ScalarE, -(max + log(sum)) on GpSimd ([rows, 1]), and x plus that on
  VectorE (`tensor_scalar add`);
and store. So each engine makes at most one pass over a row (ScalarE the exp, VectorE the max
and the scale, at less than a pass's cost each), and the [rows, 1] steps go to the otherwise
idle GpSimd. Blocks rotate through up to BUFS buffers (fewer for rows too long), and the
stages are emitted one block apart (block n + 1's load and max before block n's exp and
scale), so VectorE takes the next block's max while ScalarE computes this one's exp.
Rows longer than what fits one partition's share of SBUF are refused (not lowered yet).
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import Activation, DmaCopy, Engine, TensorReduce, TensorScalar, TensorTensor
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks

__all__ = ["lower_softmax"]

BUFS = 4
SBUF_SHARE = 0.75
GPSIMD = Engine.GPSIMD


def lower_softmax(
    b: KernelBuilder, cfg: ChipConfig, x: str, out: str, dim: int = -1, log: bool = False
) -> None:
    """out = softmax(x, dim) (or log_softmax); dim must be the last."""
    tx, to = b.tensors[x], b.tensors[out]
    name = "log_softmax" if log else "softmax"
    if tuple(tx.shape) != tuple(to.shape):
        raise TraceError(
            f"{name}: x {list(tx.shape)} and out {list(to.shape)} differ; expected one shape"
        )
    if dim not in (-1, len(tx.shape) - 1):
        raise TraceError(f"{name}: dim {dim}; only the last dim (-1) is lowered yet")
    d = tx.shape[-1]
    in_place = tx.dtype == to.dtype and not log  # e and the result overwrite x
    per_row = d * (tx.dtype.itemsize + (0 if in_place else to.dtype.itemsize))
    budget = int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) - (d * tx.dtype.itemsize if log else 0)
    bufs = min(BUFS, budget // per_row)
    if bufs < 1 or d > cfg.core.vector.dve_max_free_elements:
        raise TraceError(
            f"{name}: rows of {d} elements do not fit a partition's SBUF or one VectorE "
            f"instruction ({cfg.core.vector.dve_max_free_elements} elements); rows this long "
            "are not lowered yet"
        )
    P = cfg.core.sbuf.partitions
    blocks = list(row_blocks(tx.shape, P, b.share(to.shape)))
    k = _Kernel(b, x, out, tx.dtype, to.dtype, d, P, bufs, in_place, log)
    k.q = dma_queues(cfg, d * tx.dtype.itemsize)  # load (and store) queues
    skew = 1 if bufs > 1 else 0  # stage 1 of block n + skew is emitted before stage 2 of n
    for n in range(len(blocks) + skew):
        if n < len(blocks):
            k.first(n, *blocks[n])
        if n >= skew:
            k.second(n - skew, *blocks[n - skew])


class _Kernel:
    """The two stages of a block: `first` (load, max, -max) and `second` (exp with the row sum,
    the scale or shift, store); tiles per buffer slot."""

    def __init__(self, b, x, out, xdt, odt, d, P, bufs, in_place, log):
        self.b, self.x, self.out, self.d, self.P, self.bufs = b, x, out, d, P, bufs
        self.xdt, self.odt, self.in_place, self.log = xdt, odt, in_place, log
        self.f32, self.q = dtype("float32"), 1

    def tile(self, key: str, n: int, shape, dt) -> str:
        full = f"softmax.{key}{n % self.bufs}:{dt.name}:{shape}"
        name = self.b.scratch.get(full)
        if name is None:
            name = self.b.scratch[full] = self.b.tile(key, "sbuf", shape, dt)
        return name

    def col(self, key: str, n: int, rows: int, dt=None):
        return ap(self.tile(key, n, (self.P, 1), dt or self.f32), slice(0, rows))

    def first(self, n: int, index: tuple, rows: int) -> None:
        b, r = self.b, slice(0, rows)
        xa, src = ap(self.tile("x", n, (self.P, self.d), self.xdt), r), ap(self.x, *index)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=n % self.q)
        m, nm = self.col("mx", n, rows, self.xdt), self.col("nmx", n, rows)
        b.emit(TensorReduce, [xa], [m], alu="max", src=xa, dst=m)
        b.emit(TensorScalar, [m], [nm], src=m, dst=nm, op0="multiply", operand0=-1.0,
               engine=GPSIMD)  # fmt: skip

    def second(self, n: int, index: tuple, rows: int) -> None:
        b, r = self.b, slice(0, rows)
        xa = ap(self.tile("x", n, (self.P, self.d), self.xdt), r)
        nm, s = self.col("nmx", n, rows), self.col("sum", n, rows)
        o = xa if self.in_place else ap(self.tile("o", n, (self.P, self.d), self.odt), r)
        # exp(x - max): in place (softmax), or into a scratch tile of ScalarE's (log_softmax)
        e = ap(self.tile("e", 0, (self.P, self.d), self.xdt), r) if self.log else o
        b.emit(Activation, [xa, nm], [e, s], func="exp", src=xa, dst=e, bias=nm, reduce="add",
               reduce_dst=s)  # fmt: skip
        if self.log:
            ls, shift = self.col("ls", n, rows), self.col("sh", n, rows)  # -(max + log(sum))
            b.emit(Activation, [s], [ls], func="log", src=s, dst=ls)
            b.emit(TensorTensor, [nm, ls], [shift], alu="subtract", src0=nm, src1=ls, dst=shift,
                   engine=GPSIMD)  # fmt: skip
            b.emit(TensorScalar, [xa, shift], [o], src=xa, dst=o, op0="add", operand0=shift)
        else:
            rs = self.col("rs", n, rows)
            b.emit(TensorScalar, [s], [rs], src=s, dst=rs, op0="divide", operand0=1.0,
                   reverse0=True, engine=GPSIMD)  # fmt: skip
            b.emit(TensorScalar, [o, rs], [o], src=o, dst=o, op0="multiply", operand0=rs)
        dst = ap(self.out, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=8 + n % self.q)
