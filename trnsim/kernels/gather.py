"""`embedding`: out[..., :] = weight[indices[...], :], gathered by DMA.

Per block of up to ROWS indices: the indices are loaded into one SBUF partition (one small
DMA), then one gather DMA (`dma_copy` with `indices`: the descriptor generator reads the row
numbers from SBUF) copies those rows of the table from HBM straight into out's rows in HBM,
one descriptor per row (D x itemsize bytes: efficient for long rows, descriptor-bound for short
ones, docs/calibration.md). Blocks rotate over the load queues (`queues`), a block's gather half
of them away from its index load, so one block's index load overlaps another's gather. An
index outside [0, V) is an error when the copy runs (PyTorch raises too). With LNC 2 the
blocks alternate between the cores (the op is isolated: `kernels.ALONE`).
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.isa import DmaCopy
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues
from trnsim.kernels.reduce import _runs

__all__ = ["lower_embedding"]

ROWS = 1024  # indices per gather
BUFS = 4


def lower_embedding(b: KernelBuilder, cfg: ChipConfig, weight: str, indices: str, out: str):
    """out = embedding(indices, weight) (module doc)."""
    tw, ti, to = b.tensors[weight], b.tensors[indices], b.tensors[out]
    if len(tw.shape) != 2:
        raise TraceError(f"embedding: weight {list(tw.shape)}; expected [V, D]")
    D = tw.shape[1]
    if list(to.shape) != [*ti.shape, D]:
        raise TraceError(
            f"embedding: indices {list(ti.shape)}, weight {list(tw.shape)} -> out "
            f"{list(to.shape)}; expected out {[*ti.shape, D]}"
        )
    if not ti.shape or ti.dtype.is_float:
        raise TraceError(
            f"embedding: indices {list(ti.shape)} {ti.dtype.name}; expected integers of at "
            "least one dim"
        )
    T = math.prod(ti.shape)
    tiles = [
        b.tile("idx", "sbuf", (1, min(ROWS, T)), ti.dtype) for _ in range(min(BUFS, -(-T // ROWS)))
    ]
    loads = Queues(cfg).loads()
    for blk, t0 in enumerate(range(0, T, ROWS)):
        if blk % b.part[1] != b.part[0]:
            continue
        n, tile = min(ROWS, T - t0), tiles[blk % len(tiles)]
        for index, k, off in _runs(list(ti.shape), t0, t0 + n, n):
            src, d = ap(indices, *index), ap(tile, slice(0, 1), slice(off, off + k))
            b.emit(DmaCopy, [src], [d], src=src, dst=d, queue=loads[blk])
        for index, k, off in _runs(list(ti.shape), t0, t0 + n, n):
            rows = ap(tile, slice(0, 1), slice(off, off + k))
            pad = (slice(None),) * (len(ti.shape) - len(index))
            dst, table = ap(out, *index, *pad, slice(None)), ap(weight)
            b.emit(DmaCopy, [table, rows], [dst], src=table, dst=dst, indices=rows,
                   queue=loads[blk + loads.count // 2])  # fmt: skip
