"""`softmax` and `log_softmax` over the last dim.

The kernel, per block of up to 128 rows (one row per partition, the whole row in the free
dim; `layout.row_blocks`): load; the row maximum on VectorE (`tensor_reduce max`); its negation
(`tensor_scalar`); exp(x - max) on ScalarE with the row sum accumulated by the same instruction
(`activation exp, bias = -max, reduce add`); then
- softmax: e * (1 / sum), the reciprocal on VectorE ([rows, 1]), the product on VectorE
  (`tensor_scalar multiply` by the column) and ScalarE (`activation copy`, scale = the column)
  in turn, so neither engine carries all the full-row passes;
- log_softmax: log(sum) on ScalarE, -(max + log(sum)) on VectorE ([rows, 1]), and x plus
  that on ScalarE (`activation identity` with the column as bias);
and store. Blocks rotate through up to BUFS buffers (fewer for rows too long for three), so
loads, the engines and stores overlap.
Rows longer than what fits one partition's share of SBUF are refused (not lowered yet).
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import Activation, DmaCopy, TensorReduce, TensorScalar, TensorTensor
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks

__all__ = ["lower_softmax"]

BUFS = 3
SBUF_SHARE = 0.75


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
    f32 = dtype("float32")
    per_row = d * (tx.dtype.itemsize + to.dtype.itemsize)
    bufs = min(BUFS, int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) // per_row)
    if bufs < 1 or d > cfg.core.vector.dve_max_free_elements:
        raise TraceError(
            f"{name}: rows of {d} elements do not fit a partition's SBUF or one VectorE "
            f"instruction ({cfg.core.vector.dve_max_free_elements} elements); rows this long "
            "are not lowered yet"
        )
    P = cfg.core.sbuf.partitions
    for n, (index, rows) in enumerate(row_blocks(tx.shape, P, b.share(to.shape))):
        slot = n % bufs
        xt = _tile(b, f"x{slot}", (P, d), tx.dtype)
        ot = _tile(b, f"o{slot}", (P, d), to.dtype)
        mx, nmx, sm = (_tile(b, f"{k}{slot}", (P, 1), f32) for k in ("mx", "nmx", "sum"))
        r = slice(0, rows)
        src, xa = ap(x, *index), ap(xt, r)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=n % 4)
        m, nm, s, o = ap(mx, r), ap(nmx, r), ap(sm, r), ap(ot, r)
        e = o  # exp(x - max) goes to the output tile, then is scaled there
        b.emit(TensorReduce, [xa], [m], alu="max", src=xa, dst=m)
        b.emit(TensorScalar, [m], [nm], src=m, dst=nm, op0="multiply", operand0=-1.0)
        b.emit(
            Activation,
            [xa, nm],
            [e, s],
            func="exp",
            src=xa,
            dst=e,
            bias=nm,
            reduce="add",
            reduce_dst=s,
        )
        if log:
            ls = ap(_tile(b, f"ls{slot}", (P, 1), f32), r)
            b.emit(Activation, [s], [ls], func="log", src=s, dst=ls)
            shift = ap(_tile(b, f"sh{slot}", (P, 1), f32), r)  # -(max + log(sum))
            b.emit(TensorTensor, [nm, ls], [shift], alu="subtract", src0=nm, src1=ls, dst=shift)
            b.emit(Activation, [xa, shift], [o], func="identity", src=xa, dst=o, bias=shift)
        else:
            rs = ap(_tile(b, f"rs{slot}", (P, 1), f32), r)
            b.emit(
                TensorScalar, [s], [rs], src=s, dst=rs, op0="divide", operand0=1.0, reverse0=True
            )
            if n % 2:
                b.emit(Activation, [e, rs], [o], func="copy", src=e, dst=o, scale=rs)
            else:
                b.emit(TensorScalar, [e, rs], [o], src=e, dst=o, op0="multiply", operand0=rs)
        dst = ap(out, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=8 + n % 4)


def _tile(b: KernelBuilder, key: str, shape: tuple[int, int], dt) -> str:
    key = f"softmax.{key}:{dt.name}:{shape}"
    name = b.scratch.get(key)
    if name is None:
        name = b.scratch[key] = b.tile(key.split(":")[0].split(".")[1], "sbuf", shape, dt)
    return name
