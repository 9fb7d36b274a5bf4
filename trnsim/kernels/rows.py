"""Row-wise ops over the last dim: reductions (`sum`, `mean`, `amax`, `amin`), `layer_norm` and
`rms_norm`.

Each walks x in blocks of up to 128 rows (one row per partition, the whole row in the free dim;
`layout.row_blocks`), rotating BUFS buffers so loads, engines and stores overlap:
- a reduction is one VectorE `tensor_reduce` to a [rows, 1] column (`mean` scales it on the
  way), stored to out's matching rows;
- `rms_norm`: the sum of squares on ScalarE (`activation square` with its `add` reduction),
  rstd = (ss / D + eps) ^ -0.5 on VectorE (`tensor_scalar multiply, add`, then `pow`), and
  x * rstd * weight (`tensor_scalar` by the column, `tensor_tensor` by the weight);
- `layer_norm`: the mean (`tensor_reduce add`, scaled), x - mean, the variance as rms_norm's
  sum of squares of that, then (x - mean) * rstd * weight + bias.
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
    Matmul,
    Memset,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks

__all__ = ["REDUCTIONS", "lower_reduction", "lower_norm"]

BUFS = 3
SBUF_SHARE = 0.75
REDUCTIONS = {"sum": "add", "mean": "add", "amax": "max", "amin": "min"}


def lower_reduction(
    b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str, dim=-1, keepdim=False
) -> None:
    """out = op(x, dim=-1, keepdim)."""
    tx, to = b.tensors[x], b.tensors[out]
    want = tuple(tx.shape[:-1]) + ((1,) if keepdim else ())
    if dim not in (-1, len(tx.shape) - 1, [-1], [len(tx.shape) - 1]):
        raise TraceError(f"{op}: dim {dim}; only the last dim (-1) is lowered yet")
    if tuple(to.shape) != want and not (want == () and tuple(to.shape) in ((), (1,))):
        raise TraceError(
            f"{op}: x {list(tx.shape)} reduced over its last dim gives {list(want)}, "
            f"but out is {list(to.shape)}; expected out of shape {list(want)}"
        )
    d = _fits(cfg, op, tx)
    P, f32 = cfg.core.sbuf.partitions, dtype("float32")
    for n, (index, rows) in enumerate(row_blocks(tx.shape, P)):
        slot, r = n % BUFS, slice(0, rows)
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
    d = _fits(cfg, op, tx)
    for k, v in (("weight", weight), ("bias", bias)):
        if v is not None and tuple(b.tensors[v].shape) != (d,):
            raise TraceError(
                f"{op}: {k} {v} has shape {list(b.tensors[v].shape)}; expected [{d}] (x's last dim)"
            )
    P, f32 = cfg.core.sbuf.partitions, dtype("float32")
    w = _spread(b, cfg, weight, d) if weight is not None else None
    bb = _spread(b, cfg, bias, d) if bias is not None else None
    for n, (index, rows) in enumerate(row_blocks(tx.shape, P)):
        slot, r = n % BUFS, slice(0, rows)
        xa = ap(_tile(b, f"x{slot}", (P, d), tx.dtype), r)
        src = ap(x, *index)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=n % 4)
        col = [ap(_tile(b, f"{k}{slot}", (P, 1), f32), r) for k in ("s", "m", "v")]
        y = ap(_tile(b, f"y{slot}", (P, d), f32), r)
        if op == "layer_norm":  # y = x - mean
            b.emit(TensorReduce, [xa], [col[0]], alu="add", src=xa, dst=col[0])
            b.emit(
                TensorScalar,
                [col[0]],
                [col[1]],
                src=col[0],
                dst=col[1],
                op0="multiply",
                operand0=1.0 / d,
            )
            b.emit(TensorScalar, [xa, col[1]], [y], src=xa, dst=y, op0="subtract", operand0=col[1])
            centred = y
        else:
            centred = xa
        sq = ap(_tile(b, f"sq{slot}", (P, d), f32), r)
        b.emit(
            Activation,
            [centred],
            [sq, col[2]],
            func="square",
            src=centred,
            dst=sq,
            reduce="add",
            reduce_dst=col[2],
        )
        b.emit(
            TensorScalar,
            [col[2]],
            [col[0]],
            src=col[2],
            dst=col[0],
            op0="multiply",
            operand0=1.0 / d,
            op1="add",
            operand1=float(eps),
        )
        b.emit(TensorScalar, [col[0]], [col[1]], src=col[0], dst=col[1], op0="pow", operand0=-0.5)
        b.emit(
            TensorScalar,
            [centred, col[1]],
            [y],
            src=centred,
            dst=y,
            op0="multiply",
            operand0=col[1],
        )
        o = ap(_tile(b, f"o{slot}", (P, d), to.dtype), r)
        last = y
        for k, t in (("w", w), ("b", bb)):
            if t is None:
                continue
            nxt = o if (k == "b" or bb is None) else y
            alu = "multiply" if k == "w" else "add"
            tt = ap(t, r)
            b.emit(TensorTensor, [last, tt], [nxt], alu=alu, src0=last, src1=tt, dst=nxt)
            last = nxt
        if last is y:
            b.emit(TensorCopy, [y], [o], src=y, dst=o)
        dst = ap(out, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=8 + n % 4)


def _fits(cfg: ChipConfig, op: str, tx) -> int:
    d = tx.shape[-1]
    if d * (tx.dtype.itemsize + 16) * BUFS > cfg.core.sbuf.partition_bytes * SBUF_SHARE:
        raise TraceError(
            f"{op}: rows of {d} elements do not fit a partition's SBUF; "
            "rows this long are not lowered yet"
        )
    return d


def _spread(b: KernelBuilder, cfg: ChipConfig, name: str, d: int) -> str:
    """A [128, d] fp32 tile holding tensor `name` ([d]) on every partition: loaded into one
    partition, multiplied by a ones column on TensorE (K = 1) into PSUM, copied out."""
    P, f32 = cfg.core.sbuf.partitions, dtype("float32")
    t = b.tensors[name]
    row = b.tile("row", "sbuf", (1, d), t.dtype)
    ones = b.tile("ones", "sbuf", (1, P), t.dtype)
    out = b.tile(f"{name}_rows", "sbuf", (P, d), f32)
    b.emit(Memset, [], [ap(ones)], dst=ap(ones), value=1.0)
    src, dst = ap(name), ap(row)
    b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=0)
    step = min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)
    ps = b.tile("spread", "psum", (P, step), f32)
    for c in range(0, d, step):
        w = min(step, d - c)
        mv, acc = ap(row, slice(None), slice(c, c + w)), ap(ps, slice(None), slice(0, w))
        b.emit(Matmul, [ap(ones), mv], [acc], stationary=ap(ones), moving=mv, dst=acc)
        o = ap(out, slice(None), slice(c, c + w))
        b.emit(TensorCopy, [acc], [o], src=acc, dst=o)
    return out


def _tile(b: KernelBuilder, key: str, shape: tuple[int, int], dt) -> str:
    full = f"rows.{key}:{dt.name}:{shape}"
    name = b.scratch.get(full)
    if name is None:
        name = b.scratch[full] = b.tile(key.rstrip("0123456789"), "sbuf", shape, dt)
    return name
