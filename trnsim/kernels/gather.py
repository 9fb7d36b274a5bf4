"""`embedding`: out[..., :] = weight[indices[...], :], as a one-hot matmul on TensorE.

The instruction set has no indirect (gather) DMA: a DMA's addresses are fixed when the program
is built, and the indices are values known only when it runs. So the gather is computed, as
NKI kernels do for small vocabularies: per block of up to 128 indices,
- the indices are loaded into one partition, made fp32 (VectorE), and spread to all 128
  partitions by TensorE (a ones column times the row, K = 1);
- per 128 rows of the table (v0 ..): one VectorE `tensor_scalar` makes the one-hot block
  onehot[v, t] = (index[t] - v0 == v) (v from a GpSimd `iota` down the partitions), the rows
  are loaded (one DMA of [128, D]), and TensorE accumulates onehot^T @ rows into PSUM, up to
  512 columns a bank over half the banks (more columns: the one-hot blocks are made again per
  group);
- PSUM is copied out in out's dtype and stored.
The values are exact (each output is 1.0 x one weight plus zeros, in fp32), and the time is
this kernel's: the whole table is read once per block of 128 indices (V x D per block), so it
costs far more than the N x D bytes a gather by indirect DMA would move. Indices outside
[0, V) give a row of zeros (PyTorch raises). With LNC 2 the blocks alternate between the
cores (the op is isolated: `kernels.ALONE`).
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import DmaCopy, Iota, Matmul, Memset, TensorCopy, TensorScalar
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.reduce import _runs

__all__ = ["lower_embedding"]

BUFS = 2


def lower_embedding(b: KernelBuilder, cfg: ChipConfig, weight: str, indices: str, out: str):
    """out = embedding(indices, weight) (module doc)."""
    tw, ti, to = b.tensors[weight], b.tensors[indices], b.tensors[out]
    if len(tw.shape) != 2:
        raise TraceError(f"embedding: weight {list(tw.shape)}; expected [V, D]")
    V, D = tw.shape
    if list(to.shape) != [*ti.shape, D]:
        raise TraceError(
            f"embedding: indices {list(ti.shape)}, weight {list(tw.shape)} -> out "
            f"{list(to.shape)}; expected out {[*ti.shape, D]}"
        )
    if not ti.shape:
        raise TraceError("embedding: indices is a scalar; expected at least one dim")
    if not tw.dtype.is_float or tw.dtype.itemsize == 1:
        raise TraceError(f"embedding: weight is {tw.dtype.name}; expected a 16- or 32-bit float")
    c = cfg.core
    P, f32, T = c.sbuf.partitions, dtype("float32"), math.prod(ti.shape)
    cols = min(c.tensor.moving_free_max, c.psum.bank_bytes // 4)
    group = cols * max(1, c.psum.banks // 2)  # columns accumulated at once
    ones = b.tile("ones", "sbuf", (1, P), f32)
    b.emit(Memset, [], [ap(ones)], dst=ap(ones), value=1.0)
    pcol = b.tile("pidx", "sbuf", (P, 1), f32)
    b.emit(Iota, [], [ap(pcol)], dst=ap(pcol), start=0, step=0, partition_step=1)
    spread = b.psum("spread", (P, P), f32)
    acc = b.psum("emb", (P, min(group, D)), f32)
    nv = -(-V // P)
    for blk, t0 in enumerate(range(0, T, P)):
        if blk % b.part[1] != b.part[0]:
            continue
        tb, slot = min(P, T - t0), blk % BUFS
        raw = _scratch(b, f"idx{slot}", (1, P), ti.dtype)
        for index, n, off in _runs(list(ti.shape), t0, t0 + tb, P):
            src = ap(indices, *index)
            d = ap(raw, slice(0, 1), slice(off, off + n))
            b.emit(DmaCopy, [src], [d], src=src, dst=d, queue=blk % 4)
        row = _scratch(b, f"row{slot}", (1, P), f32)
        rw, rr = ap(row, slice(0, 1), slice(0, tb)), ap(raw, slice(0, 1), slice(0, tb))
        b.emit(TensorCopy, [rr], [rw], src=rr, dst=rw)
        sp = ap(spread, slice(None), slice(0, tb))
        b.emit(Matmul, [ap(ones), rw], [sp], stationary=ap(ones), moving=rw, dst=sp)
        idx = ap(_scratch(b, f"sp{slot}", (P, P), f32), slice(None), slice(0, tb))
        b.emit(TensorCopy, [sp], [idx], src=sp, dst=idx)
        for g0 in range(0, D, group):
            gw = min(group, D - g0)
            for v in range(nv):
                v0, vb = v * P, min(P, V - v * P)
                oh = ap(_scratch(b, f"oh{v % BUFS}", (P, P), tw.dtype), slice(0, vb),
                        slice(0, tb))  # fmt: skip
                iv, pc = ap(idx.name, slice(0, vb), slice(0, tb)), ap(pcol, slice(0, vb))
                b.emit(TensorScalar, [iv, pc], [oh], src=iv, dst=oh, op0="subtract",
                       operand0=float(v0), op1="equal", operand1=pc)  # fmt: skip
                wt = ap(_scratch(b, f"w{v % 3}", (P, min(group, D)), tw.dtype), slice(0, vb),
                        slice(0, gw))  # fmt: skip
                wsrc = ap(weight, slice(v0, v0 + vb), slice(g0, g0 + gw))
                b.emit(DmaCopy, [wsrc], [wt], src=wsrc, dst=wt, queue=4 + v % 4)
                for c0 in range(0, gw, cols):
                    cw = min(cols, gw - c0)
                    mv = ap(wt.name, slice(0, vb), slice(c0, c0 + cw))
                    d = ap(acc, slice(0, tb), slice(c0, c0 + cw))
                    b.emit(Matmul, [oh, mv], [d], stationary=oh, moving=mv, dst=d,
                           accumulate=v > 0)  # fmt: skip
            o = ap(_scratch(b, f"o{slot}", (P, min(group, D)), to.dtype), slice(0, tb),
                   slice(0, gw))  # fmt: skip
            a = ap(acc, slice(0, tb), slice(0, gw))
            b.emit(TensorCopy, [a], [o], src=a, dst=o)
            for index, n, off in _runs(list(ti.shape), t0, t0 + tb, P):
                pad = (slice(None),) * (len(ti.shape) - len(index))
                dst = ap(out, *index, *pad, slice(g0, g0 + gw))
                part = ap(o.name, slice(off, off + n), slice(0, gw))
                b.emit(DmaCopy, [part], [dst], src=part, dst=dst, queue=8 + blk % 8)
    b.release(spread, acc)


def _scratch(b: KernelBuilder, key: str, shape, dt) -> str:
    full = f"emb.{key}:{dt.name}:{shape}"
    name = b.scratch.get(full)
    if name is None:
        name = b.scratch[full] = b.tile(key.rstrip("0123456789"), "sbuf", shape, dt)
    return name
