"""`argmax` over the last dim of rows too long for a partition: in pieces over the partitions
(`row_pieces`), each partition's max and the index of its first maximum found as `argmax`
finds a row's, then combined over each row's pieces on TensorE (`row_pieces.Groups`): the
row's max M, each piece's candidate (its index plus the piece's offset in the row where its max
is M, else BIG), and the row's smallest candidate (the first maximum, as PyTorch gives)."""

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
    Select,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks
from trnsim.kernels.queues import Queues
from trnsim.kernels.row_pieces import Groups, PieceLayout

__all__ = ["lower_argmax_pieces"]

BUFS = 4
X_BYTES = 65536  # what the rotating tiles of x may take of a partition
G = Engine.GPSIMD


def lower_argmax_pieces(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, lay: PieceLayout):
    """out = argmax(x, -1) over rows laid out as `lay` (t = 1: a row in one tile)."""
    tx, to = b.tensors[x], b.tensors[out]
    P, f32, f = cfg.core.sbuf.partitions, dtype("float32"), lay.f
    share = b.share(tx.shape)  # by rows, as every op of the kernel (the record's split)
    rows = (share[0], share[1]) if share is not None else (0, math.prod(tx.shape[:-1]))
    if rows[0] >= rows[1]:
        return
    gr, k = Groups(b, cfg, lay.k), lay.k
    low = tx.dtype if tx.dtype.itemsize == 2 and tx.dtype.is_float else f32
    big = float(2 ** math.ceil(math.log2(2 * lay.d + 2)))  # exact in fp32 with the indices
    iota = b.scratch_tile(f"amp.iota{f}", "iota", (P, f), f32)
    b.emit(Iota, [], [ap(iota)], dst=ap(iota), start=0, step=1, partition_step=0)
    # each partition's offset in its row: p f - (p // k) k f = p f - sum_r E[r, p] r d
    off = b.scratch_tile(f"amp.off{k}", "off", (P, 1), f32)
    b.emit(Iota, [], [ap(off)], dst=ap(off), start=0, step=0, partition_step=f)
    base = b.scratch_tile("amp.base", "base", (gr.g, 1), f32)
    b.emit(Iota, [], [ap(base)], dst=ap(base), start=0, step=0, partition_step=-lay.d)
    ps = ap(gr._ps((P, 1)))
    b.emit(Matmul, [ap(gr.e), ap(base)], [ps], stationary=ap(gr.e), moving=ap(base), dst=ps)
    b.emit(TensorTensor, [ap(off), ps], [ap(off)], alu="add", src0=ap(off), src1=ps,
           dst=ap(off))  # fmt: skip
    bufs = max(2, min(BUFS, X_BYTES // (f * tx.dtype.itemsize)))
    q, qs = dma_queues(cfg, f * tx.dtype.itemsize), Queues(cfg)
    loads, stores = qs.loads().take(max(2, q)), qs.stores(0, 1 / 2)
    for n, (index, nrows) in enumerate(row_blocks(tx.shape, lay.g, rows)):
        p = nrows * k
        xa = ap(b.scratch_tile(f"amp.x{n % bufs}", "x", (P, f), tx.dtype), slice(0, p))
        src = ap(x, *index)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=loads[n])
        m = ap(b.scratch_tile(f"amp.m{n % 2}", "m", (P, 1), low), slice(0, p))
        b.emit(TensorReduce, [xa], [m], alu="max", src=xa, dst=m)
        cand = ap(b.scratch_tile(f"amp.c{n % 2}", "c", (P, f), f32), slice(0, p))
        b.emit(TensorScalar, [xa, m], [cand], src=xa, dst=cand, op0="not_equal", operand0=m,
               op1="multiply", operand1=big)  # fmt: skip
        io = ap(iota, slice(0, p))
        b.emit(TensorTensor, [cand, io], [cand], alu="add", src0=cand, src1=io, dst=cand,
               engine=G)  # fmt: skip
        i = ap(b.scratch_tile(f"amp.i{n % 2}", "i", (P, 1), f32), slice(0, p))
        if cfg.core.scalar.reduce_max:  # max(-cand) = -min(cand), the elementwise unread
            junk = ap(b.scratch_tile("amp.junk", "junk", (P, f), dtype("bfloat16")),
                      slice(0, p))  # fmt: skip
            b.emit(Activation, [cand], [junk, i], func="copy", src=cand, dst=junk, scale=-1.0,
                   reduce="max", reduce_dst=i)  # fmt: skip
            b.emit(TensorScalar, [i], [i], src=i, dst=i, op0="multiply", operand0=-1.0)
        else:
            b.emit(TensorReduce, [cand], [i], alu="min", src=cand, dst=i)
        m32 = ap(b.scratch_tile(f"amp.m32{n % 2}", "m32", (P, 1), f32), slice(0, p))
        b.emit(TensorCopy, [m], [m32], src=m, dst=m32, engine=G)
        row_max = ap(b.scratch_tile(f"amp.M{n % 2}", "M", (P, 1), f32), slice(0, p))
        gr.maxes(m32, p, 1, row_max)
        hit = ap(b.scratch_tile(f"amp.h{n % 2}", "h", (P, 1), f32), slice(0, p))
        b.emit(TensorTensor, [m32, row_max], [hit], alu="equal", src0=m32, src1=row_max,
               dst=hit)  # fmt: skip
        b.emit(TensorTensor, [i, ap(off, slice(0, p))], [i], alu="add", src0=i,
               src1=ap(off, slice(0, p)), dst=i)  # fmt: skip
        b.emit(Select, [hit, i], [i], predicate=hit, on_true=i, on_false=big * 2, dst=i)
        first = gr.row_maxes(i, p, "min")  # SBUF [1, rows]
        res = ap(b.scratch_tile(f"amp.r{n % 2}", "r", (1, gr.g), to.dtype), slice(0, 1),
                 slice(0, nrows))  # fmt: skip
        b.emit(TensorCopy, [first], [res], src=first, dst=res)
        dst = ap(out, *index) if to.shape else ap(out)
        b.emit(DmaCopy, [res], [dst], src=res, dst=dst, queue=stores[n])
    gr.done()
