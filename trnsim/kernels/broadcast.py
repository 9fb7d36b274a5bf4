"""Spreading a [D] tensor over all partitions: NKI kernels broadcast along partitions on TensorE,
as a ones column times the row (`matmul` with K = 1), since DMA copies element for element."""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import DmaCopy, Matmul, Memset, TensorCopy
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues

__all__ = ["spread_rows"]


def spread_rows(b: KernelBuilder, cfg: ChipConfig, name: str, d: int) -> str:
    """A [128, d] tile (of the tensor's dtype) holding tensor `name` (d elements) on every
    partition: loaded into one partition, multiplied by a ones column on TensorE (K = 1) into
    PSUM, copied out."""
    P, f32 = cfg.core.sbuf.partitions, dtype("float32")
    t = b.tensors[name]
    row = b.tile("row", "sbuf", (1, d), t.dtype)
    ones = b.tile("ones", "sbuf", (1, P), t.dtype)
    out = b.tile(f"{name}_rows", "sbuf", (P, d), t.dtype)
    b.emit(Memset, [], [ap(ones)], dst=ap(ones), value=1.0)
    src, dst = ap(name), ap(row)
    b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=Queues(cfg).loads()[0])
    step = min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)
    ps = [b.psum("spread", (P, step), f32)]
    ps.append(b.psum("spread", (P, step), f32) if d > step else ps[0])
    for c in range(0, d, step):  # two banks in turn: the next matmul runs during this copy
        w = min(step, d - c)
        acc = ap(ps[c // step % 2], slice(None), slice(0, w))
        mv = ap(row, slice(None), slice(c, c + w))
        b.emit(Matmul, [ap(ones), mv], [acc], stationary=ap(ones), moving=mv, dst=acc)
        o = ap(out, slice(None), slice(c, c + w))
        b.emit(TensorCopy, [acc], [o], src=acc, dst=o)
    b.release(*dict.fromkeys(ps))
    return out
