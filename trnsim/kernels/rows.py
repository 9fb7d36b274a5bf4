"""Row-wise reductions over the last dim: `sum`, `mean`, `amax`, `amin` (`layer_norm` and
`rms_norm` are in `norms`).

Each walks x in blocks of up to 128 rows (one row per partition, the whole row in the free dim;
`layout.row_blocks`), rotating BUFS buffers so loads, engines and stores overlap:
- a reduction is one VectorE `tensor_reduce` to a [rows, 1] column (`mean` scales it on the
  way), stored to out's matching rows;
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import (
    DmaCopy,
    TensorCopy,
    TensorReduce,
    TensorScalar,
)
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks
from trnsim.kernels.queues import Queues
from trnsim.kernels.reduce import lower_any, on_last_dim

__all__ = ["REDUCTIONS", "lower_reduction", "rows_fit"]

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
    P, f32, qs = cfg.core.sbuf.partitions, dtype("float32"), Queues(cfg)
    loads, stores = qs.loads(0, 1 / 2), qs.stores(0, 1 / 2)
    for n, (index, rows) in enumerate(row_blocks(tx.shape, P, b.share(tx.shape))):
        slot, r = n % bufs, slice(0, rows)
        xa = ap(_tile(b, f"x{slot}", (P, d), tx.dtype), r)
        src = ap(x, *index)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=loads[n])
        col = ap(_tile(b, f"c{slot}", (P, 1), f32), r)
        b.emit(TensorReduce, [xa], [col], alu=REDUCTIONS[op], src=xa, dst=col)
        res = ap(_tile(b, f"r{slot}", (P, 1), to.dtype), r)
        if op == "mean":
            b.emit(TensorScalar, [col], [res], src=col, dst=res, op0="multiply", operand0=1.0 / d)
        else:
            b.emit(TensorCopy, [col], [res], src=col, dst=res)
        dst = ap(out, *index)
        b.emit(DmaCopy, [res], [dst], src=res, dst=dst, queue=stores[n])


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
    return b.scratch_tile(f"rows.{key}", key.rstrip("0123456789"), shape, dt)
