"""Row-wise ops over the last dim: reductions (`sum`, `mean`, `amax`, `amin`), `layer_norm` and
`rms_norm`.

Each walks x in blocks of up to 128 rows (one row per partition, the whole row in the free dim;
`layout.row_blocks`), rotating BUFS buffers so loads, engines and stores overlap:
- a reduction is one VectorE `tensor_reduce` to a [rows, 1] column (`mean` scales it on the
  way), stored to out's matching rows;
- `rms_norm` and `layer_norm`: the row sums of x and of x^2 on ScalarE (`activation` with its
  `add` reduction), mean, variance and rstd = (var + eps) ^ -0.5 as [rows, 1] columns on
  VectorE, the normalisation as one ScalarE pass (`activation identity`, scale = rstd, bias =
  -mean * rstd) into the output tile, then * weight and + bias in place on VectorE.
The weight and bias ([D]) are loaded once into one partition and spread to all 128 by TensorE
(a ones column times the row: `matmul` with K = 1), as NKI kernels broadcast along partitions.
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import (
    Activation,
    DmaCopy,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.broadcast import spread_rows
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks
from trnsim.kernels.reduce import lower_any, on_last_dim

__all__ = ["REDUCTIONS", "lower_reduction", "lower_norm", "rows_fit"]

BUFS = 3
SBUF_SHARE = 0.75
REDUCTIONS = {"sum": "add", "mean": "add", "amax": "max", "amin": "min"}


def lower_reduction(
    b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str, dim=-1, keepdim=False
) -> None:
    """out = op(x, dim, keepdim): over the last dim here (rows that fit), over other dims
    (or rows too long) in `reduce.lower_any`."""
    tx, to = b.tensors[x], b.tensors[out]
    if not tx.shape or not on_last_dim(dim, len(tx.shape)) or not rows_fit(cfg, tx):
        lower_any(b, cfg, op, x, out, dim, keepdim)
        return
    want = tuple(tx.shape[:-1]) + ((1,) if keepdim else ())
    if tuple(to.shape) != want and not (want == () and tuple(to.shape) in ((), (1,))):
        raise TraceError(
            f"{op}: x {list(tx.shape)} reduced over its last dim gives {list(want)}, "
            f"but out is {list(to.shape)}; expected out of shape {list(want)}"
        )
    d, bufs = _fits(cfg, op, tx)
    P, f32 = cfg.core.sbuf.partitions, dtype("float32")
    for n, (index, rows) in enumerate(row_blocks(tx.shape, P, b.share(tx.shape))):
        slot, r = n % bufs, slice(0, rows)
        xa = ap(_tile(b, f"x{slot}", (P, d), tx.dtype), r)
        src = ap(x, *index)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=n % 4)
        col = ap(_tile(b, f"c{slot}", (P, 1), f32), r)
        b.emit(TensorReduce, [xa], [col], alu=REDUCTIONS[op], src=xa, dst=col)
        res = ap(_tile(b, f"r{slot}", (P, 1), to.dtype), r)
        if op == "mean":
            b.emit(TensorScalar, [col], [res], src=col, dst=res, op0="multiply", operand0=1.0 / d)
        else:
            b.emit(TensorCopy, [col], [res], src=col, dst=res)
        dst = ap(out, *index)
        b.emit(DmaCopy, [res], [dst], src=res, dst=dst, queue=8 + n % 4)


def lower_norm(
    b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str, weight=None, bias=None, eps=1e-5
) -> None:
    """out = layer_norm(x, [D], weight, bias, eps) or rms_norm(x, [D], weight, eps)."""
    tx, to = b.tensors[x], b.tensors[out]
    if tuple(tx.shape) != tuple(to.shape):
        raise TraceError(f"{op}: x {list(tx.shape)} and out {list(to.shape)} differ")
    d, bufs = _fits(cfg, op, tx)
    for k, v in (("weight", weight), ("bias", bias)):
        if v is not None and tuple(b.tensors[v].shape) != (d,):
            raise TraceError(
                f"{op}: {k} {v} has shape {list(b.tensors[v].shape)}; expected [{d}] (x's last dim)"
            )
    P = cfg.core.sbuf.partitions
    spread = [spread_rows(b, cfg, v, d) if v is not None else None for v in (weight, bias)]
    for n, (index, rows) in enumerate(row_blocks(tx.shape, P, b.share(tx.shape))):
        slot, r = n % bufs, slice(0, rows)
        xa = ap(_tile(b, f"x{slot}", (P, d), tx.dtype), r)
        src = ap(x, *index)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=n % 4)
        o = ap(_tile(b, f"o{slot}", (P, d), to.dtype), r)
        _normalize(b, op, xa, o, slot, r, d, float(eps))
        for k, t in enumerate(spread):  # in place: o * weight, + bias
            if t is not None:
                tt = ap(t, r)
                alu = "add" if k else "multiply"
                b.emit(TensorTensor, [o, tt], [o], alu=alu, src0=o, src1=tt, dst=o)
        dst = ap(out, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=8 + n % 4)


def _normalize(b: KernelBuilder, op: str, xa, y, slot: int, r: slice, d: int, eps: float):
    """y = (x - mean) * rstd (layer_norm) or x * rstd (rms_norm): the row sums on ScalarE
    (activation reductions; their elementwise results go to y, overwritten later on ScalarE),
    the [rows, 1] statistics on VectorE, the normalisation as one ScalarE pass (scale = rstd,
    bias = -mean * rstd)."""
    f32, rows = dtype("float32"), b.tiles[xa.name].shape[0]
    s, ss, m, v, nb = (ap(_tile(b, f"{k}{slot}", (rows, 1), f32), r) for k in "sqmvn")
    b.emit(
        Activation,
        [xa],
        [y, ss],
        func="square",
        src=xa,
        dst=y,
        reduce="add",
        reduce_dst=ss,
    )
    if op == "layer_norm":
        b.emit(Activation, [xa], [y, s], func="copy", src=xa, dst=y, reduce="add", reduce_dst=s)
        b.emit(TensorScalar, [s], [m], src=s, dst=m, op0="multiply", operand0=1.0 / d)
        b.emit(TensorTensor, [m, m], [v], alu="multiply", src0=m, src1=m, dst=v)  # mean^2
        # var + eps = ss / d - mean^2 + eps
        b.emit(
            TensorScalar,
            [ss],
            [s],
            src=ss,
            dst=s,
            op0="multiply",
            operand0=1.0 / d,
            op1="add",
            operand1=eps,
        )
        b.emit(TensorTensor, [s, v], [v], alu="subtract", src0=s, src1=v, dst=v)
    else:
        b.emit(
            TensorScalar,
            [ss],
            [v],
            src=ss,
            dst=v,
            op0="multiply",
            operand0=1.0 / d,
            op1="add",
            operand1=eps,
        )
    b.emit(TensorScalar, [v], [s], src=v, dst=s, op0="pow", operand0=-0.5)  # rstd
    if op == "layer_norm":
        b.emit(TensorTensor, [m, s], [nb], alu="multiply", src0=m, src1=s, dst=nb)
        b.emit(TensorScalar, [nb], [nb], src=nb, dst=nb, op0="multiply", operand0=-1.0)
        b.emit(Activation, [xa, s, nb], [y], func="identity", src=xa, dst=y, scale=s, bias=nb)
    else:
        b.emit(Activation, [xa, s], [y], func="identity", src=xa, dst=y, scale=s)


def rows_fit(cfg: ChipConfig, tx) -> bool:
    """Whether x's rows fit the row kernels (`_fits`)."""
    try:
        _fits(cfg, "", tx)
    except TraceError:
        return False
    return True


def _fits(cfg: ChipConfig, op: str, tx) -> tuple[int, int]:
    """(D, buffers): the row length and how many blocks rotate (up to BUFS, fewer for long
    rows: each needs x and the output; the spread weight and bias are fixed)."""
    d = tx.shape[-1]
    budget = int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) - 8 * d
    bufs = min(BUFS, budget // (d * (tx.dtype.itemsize + 4)))
    if bufs < 1 or d > cfg.core.vector.dve_max_free_elements:
        raise TraceError(
            f"{op}: rows of {d} elements do not fit a partition's SBUF or one VectorE "
            f"instruction ({cfg.core.vector.dve_max_free_elements} elements); rows this long "
            "are not lowered yet"
        )
    return d, bufs


def _tile(b: KernelBuilder, key: str, shape: tuple[int, int], dt) -> str:
    full = f"rows.{key}:{dt.name}:{shape}"
    name = b.scratch.get(full)
    if name is None:
        name = b.scratch[full] = b.tile(key.rstrip("0123456789"), "sbuf", shape, dt)
    return name
