"""`argmax` over the last dim: the first index of each row's maximum, as PyTorch gives.

Per block of up to 128 rows (one row per partition): the row max (VectorE `tensor_reduce`, in
x's dtype when it is 16-bit: exact, at the 16-bit rate); (x != max) x BIG into an fp32 tile
(VectorE, one `tensor_scalar`, BIG a power of two above twice the row length); plus the column
index, in place (a GpSimd `iota`, made once; the add on GpSimd); the row minimum
of that (as the maximum of its negation, by ScalarE's activation reduction; VectorE's
`tensor_reduce min` on NC-v2, whose ScalarE reduces by add only), cast to out's dtype (int32,
or a float: the simulator has no int64) and stored. The blocks are staggered
(`reduce.staggered`): VectorE works on block n + 2 while GpSimd and ScalarE finish block n.
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
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
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks
from trnsim.kernels.reduce import Reduce, on_last_dim, staggered

__all__ = ["lower_argmax"]

BUFS = 3
SBUF_SHARE = 0.75


def lower_argmax(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, dim=-1, keepdim=False):
    """out = argmax(x, dim, keepdim) over the last dim (module doc)."""
    tx, to = b.tensors[x], b.tensors[out]
    nd = len(tx.shape)
    if nd == 0 or not (on_last_dim(dim, nd) and (dim is not None or nd == 1)):
        raise TraceError(
            f"argmax: dim {dim!r} of x {list(tx.shape)}; only the last dim is lowered yet"
        )
    want = list(tx.shape[:-1]) + ([1] if keepdim else [])
    if list(to.shape) != want and not (want == [] and list(to.shape) == [1]):
        raise TraceError(
            f"argmax: x {list(tx.shape)} over its last dim gives {want}, but out is "
            f"{list(to.shape)}; expected out of shape {want}"
        )
    P, d, f32 = cfg.core.sbuf.partitions, tx.shape[-1], dtype("float32")
    low = tx.dtype if tx.dtype.itemsize == 2 and tx.dtype.is_float else f32  # exact
    per_row = d * (tx.dtype.itemsize + 4)  # x, and the candidates (fp32: exact indices)
    fixed = d * (4 + 2)  # the iota, the scratch of ScalarE's results
    bufs = min(BUFS, (int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) - fixed) // per_row)
    if bufs < 1 or d > cfg.core.vector.dve_max_free_elements:
        raise TraceError(
            f"argmax: rows of {d} elements do not fit a partition's SBUF or one VectorE "
            f"instruction ({cfg.core.vector.dve_max_free_elements} elements); not lowered yet"
        )
    on_scalar = cfg.core.scalar.reduce_max
    big = float(2 ** math.ceil(math.log2(2 * d + 2)))  # a power of 2: exact in bf16
    r = Reduce(b, cfg, "amax", x, out, 1.0)
    iota = r.tile("iota", (P, d))
    b.emit(Iota, [], [ap(iota)], dst=ap(iota), start=0, step=1, partition_step=0)

    def first(item):
        n, (index, rows) = item
        slot, rr = n % bufs, slice(0, rows)
        xa = ap(r.tile(f"x{slot}", (P, d), tx.dtype), rr)
        src = ap(x, *index)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=n % 4)
        mx = ap(r.tile(f"mx{slot}", (P, 1), low), rr)
        b.emit(TensorReduce, [xa], [mx], alu="max", src=xa, dst=mx)
        cand = ap(r.tile(f"i{slot}", (P, d)), rr)  # big where x is not the max, else 0
        b.emit(TensorScalar, [xa, mx], [cand], src=xa, dst=cand, op0="not_equal", operand0=mx,
               op1="multiply", operand1=big)  # fmt: skip
        io = ap(iota, rr)  # + the column index, in place
        b.emit(TensorTensor, [cand, io], [cand], alu="add", src0=cand, src1=io, dst=cand,
               engine=Engine.GPSIMD)  # fmt: skip
        return cand

    def second(item, cand):
        n, (index, rows) = item
        slot, rr = n % bufs, slice(0, rows)
        col = ap(r.tile(f"c{slot}", (P, 1)), rr)
        res = ap(r.tile(f"r{slot}", (P, 1), to.dtype), rr)
        if on_scalar:  # max(-cand) = -min(cand), the elementwise results unread
            junk = ap(r.tile("junk", (P, d), dtype("bfloat16")), rr)
            b.emit(Activation, [cand], [junk, col], func="copy", src=cand, dst=junk, scale=-1.0,
                   reduce="max", reduce_dst=col)  # fmt: skip
            b.emit(TensorScalar, [col], [res], src=col, dst=res, op0="multiply", operand0=-1.0)
        else:
            b.emit(TensorReduce, [cand], [col], alu="min", src=cand, dst=col)
            b.emit(TensorCopy, [col], [res], src=col, dst=res)
        dst = ap(out, *index)
        b.emit(DmaCopy, [res], [dst], src=res, dst=dst, queue=8 + n % 4)

    blocks = enumerate(row_blocks(tx.shape, P, b.share(tx.shape)))
    staggered(blocks, first, second, bufs - 1)
