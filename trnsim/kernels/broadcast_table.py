"""A table of out's last two dims [T, D] broadcast over out [..., T, D] (its leading dims 1 or
out's): Llama's rotary cos and sin [T, hd] times q or k [B, H, T, hd]. After q's
`transpose(1, 2)` q is a strided view, which the row broadcast of [rows, T x D] views
(`torch.aten._trailing`) cannot take; here each operand is read through its own dims.

Out's rows (all dims but the last; this core's share, `layout.flat_ranges`) are walked in
blocks of up to 128 rows within one item (one index of out's dims before T) and one 128-row
chunk of T: each block loaded [p, D] (any strides), combined with the table's rows on the same
partitions by one `tensor_tensor` (VectorE or GpSimd, `Spread`), stored. A table every item
takes (leading dims of 1) whose rows fit TABLE_SHARE of a partition is loaded once, resident
as [128, chunks, D], row t on partition t % 128, and a block an engine may access there
(`engines.base.check_partition_start`) takes its rows from it; otherwise (a core's share
starting elsewhere, a table per item) a block is on partitions from 0 and loads its table rows.
"""

from __future__ import annotations

import numpy as np

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.isa import DmaCopy
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import flat_ranges
from trnsim.kernels.queues import Queues
from trnsim.kernels.spread import Spread

__all__ = ["is_table", "lower_table"]

FREE = 2048  # columns of a block at most (as `broadcast.FREE`)
DEPTH = 4  # rotating buffers per operand (as `broadcast.DEPTH`)
TABLE_SHARE = 0.125  # of a partition at most for a resident table (an assumption)


def is_table(part: tuple, shape: tuple) -> bool:
    """Whether an operand of shape `part` is a table of out's (`shape`) last two dims, its
    other dims 1 or out's, and not out's shape."""
    k = len(shape)
    if k < 3 or len(part) > k:
        return False
    p = (1,) * (k - len(part)) + tuple(part)
    return (p[-2:] == tuple(shape[-2:]) and p != tuple(shape)
            and all(x in (1, o) for x, o in zip(p[:-2], shape[:-2])))  # fmt: skip


def lower_table(
    b: KernelBuilder, cfg: ChipConfig, alu: str, full: str, table: str, out: str, first: bool,
) -> None:  # fmt: skip
    """out = full <alu> table (table <alu> full when `first`); `full` has out's shape, `table`
    is one (`is_table`)."""
    shape = tuple(b.tensors[out].shape)
    tshape = tuple(b.tensors[table].shape)
    T, d, lead = shape[-2], shape[-1], shape[:-2]
    pad = (1,) * (len(shape) - len(tshape)) + tshape
    runs = flat_ranges(shape, b.share(shape))
    if not runs:
        return
    if len(runs) > 1 or runs[0][0] % d or runs[0][1] % d:
        raise TraceError(f"a table {list(tshape)} over {list(shape)} shared inside its rows; "
                         "expected whole rows a core")  # fmt: skip
    P = cfg.core.sbuf.partitions
    fdt, odt, tdt = b.tensors[full].dtype, b.tensors[out].dtype, b.tensors[table].dtype
    inplace = fdt == odt
    width = min(d, FREE)
    qs = Queues(cfg)
    nq = dma_queues(cfg, width * fdt.itemsize)
    loads, stores, side = qs.loads(0, 1 / 2).take(nq), qs.stores().take(nq), qs.loads(1 / 2, 1)
    sp = Spread(b, cfg)
    chunks = -(-T // P)
    shared = all(x == 1 for x in pad[:-2])
    resident = None
    if shared and chunks * d * tdt.itemsize <= cfg.core.sbuf.partition_bytes * TABLE_SHARE:
        resident = b.tile("table", "sbuf", (P, chunks, d), tdt)
        tix = (0,) * (len(tshape) - 2)
        for k in range(chunks):
            p = min(P, T - k * P)
            src = ap(table, *tix, slice(k * P, k * P + p), slice(None))
            dst = ap(resident, slice(0, p), k, slice(None))
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=side[k])
    n = 0
    r, r1 = runs[0][0] // d, runs[0][1] // d
    while r < r1:
        item, t = divmod(r, T)
        p = min(r1 - r, P - t % P, T - t)
        own = resident is not None and _may_start(cfg, t % P, p)  # rows where the table's are
        s = t % P if own else 0
        idx = tuple(int(i) for i in np.unravel_index(item, lead)) if lead else ()
        rows = slice(t, t + p)
        for c0 in range(0, d, width):
            c = min(width, d - c0)
            cols, part = slice(c0, c0 + c), (slice(s, s + p), slice(0, c))
            x = ap(b.scratch_tile(f"tb.x{n % DEPTH}", "tbx", (P, width), fdt), *part)
            src = ap(full, *idx, rows, cols)
            b.emit(DmaCopy, [src], [x], src=src, dst=x, queue=loads[n])
            if own:
                w = ap(resident, slice(s, s + p), t // P, cols)
            else:
                w = ap(b.scratch_tile(f"tb.w{n % DEPTH}", "tbw", (P, width), tdt), *part)
                at = idx[len(idx) - (len(tshape) - 2) :]  # out's index of the table's dims
                tix = tuple(i if m > 1 else 0 for i, m in zip(at, tshape[:-2]))
                tsrc = ap(table, *tix, rows, cols)
                b.emit(DmaCopy, [tsrc], [w], src=tsrc, dst=w, queue=side[n])
            o = x if inplace else ap(b.scratch_tile(f"tb.o{n % DEPTH}", "tbo", (P, width), odt),
                                     *part)  # fmt: skip
            s0, s1 = (w, x) if first else (x, w)
            sp.tt(alu, s0, s1, o)
            dst = ap(out, *idx, rows, cols)
            b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=stores[n])
            n += 1
        r += p


def _may_start(cfg: ChipConfig, s: int, n: int) -> bool:
    """Whether an engine may access n partitions from partition s (the least partition-start
    step >= n divides s: `engines.base.check_partition_start`)."""
    steps = cfg.core.partition_start_steps
    return s % next((x for x in steps if x >= n), steps[-1]) == 0
