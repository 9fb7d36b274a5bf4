"""`transpose` of the last two dims: out[..., N, M] = x[..., M, N]^T.

The kernel, per block of 128 columns of x and up to 512 of its rows: a DMA transpose into SBUF
(on NC-v3 and later, for 2- and 4-byte dtypes), or else a load, a TensorE transpose into PSUM
and a copy back to SBUF (128 x 128 at a time); then a store of the block into out's rows. Loads
rotate over the load queues and stores over the store queues (`queues`), through BUFS buffers
(shared by the kernel's transposes): a block of x with few rows (a head's [128, 2048] has
blocks of 32 KiB) is mostly the DMA's fixed cost, so many must be in flight to keep HBM busy
(with 3 buffers a head transpose reached 21% of its HBM bound, with 32 86%). At LNC 2 each core
takes the rows of out in its share (`layout.core_rows`, cut at multiples of 128 of out's
flattened rows): a block of 128 rows that a cut crosses is cut there too (out's rows need not
be a multiple of 128).
"""

from __future__ import annotations

import itertools
import math

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.isa import DmaCopy, TensorCopy, Transpose
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import core_rows
from trnsim.kernels.queues import Queues

__all__ = ["lower_transpose", "lower_moved_last"]

BUFS = 32  # blocks in flight, each [128, <= ROWS] (32 KiB of a partition at most)
ROWS = 512  # rows of x per DMA-transpose block (its free size in SBUF)


def lower_transpose(
    b: KernelBuilder, cfg: ChipConfig, x: str, out: str, dim0: int = -2, dim1: int = -1
) -> None:
    tx, to = b.tensors[x], b.tensors[out]
    nd = len(tx.shape)
    dims = sorted(d % nd for d in (dim0, dim1)) if nd >= 2 else []
    if dims != [nd - 2, nd - 1]:
        raise TraceError(
            f"transpose: dims {dim0}, {dim1} of x {list(tx.shape)}: only the last two dims "
            "are lowered yet"
        )
    *lead, M, N = tx.shape
    if tuple(to.shape) != (*lead, N, M) or to.dtype != tx.dtype:
        raise TraceError(
            f"transpose: x {list(tx.shape)} {tx.dtype.name} -> out {list(to.shape)} "
            f"{to.dtype.name}; expected out {[*lead, N, M]} of x's dtype"
        )
    P = cfg.core.sbuf.partitions
    dma = tx.dtype.itemsize in (2, 4) and cfg.core.dma.transpose_hbm_rate > 0
    rows = ROWS if dma else P
    width = min(rows, M)
    tiles = [b.scratch_tile(f"transpose:{i}", "t", (P, width), tx.dtype) for i in range(BUFS)]
    qs = Queues(cfg)
    loads, stores = qs.loads(), qs.stores()
    turn = (
        None if dma else (b.tile("raw", "sbuf", (P, P), tx.dtype), b.psum("tp", (P, P), tx.dtype))
    )
    lo, hi = core_rows(tuple(to.shape), b.part) if b.part[1] > 1 else (0, len(_lead(lead)) * N)
    n = 0
    for i, batch in enumerate(_lead(lead)):
        for r0 in range(0, N, P):  # out's rows n0 .. n0 + nw: those of them in this core's share
            n0, n1 = max(r0, lo - i * N), min(r0 + P, N, hi - i * N)
            if n0 >= n1:
                continue
            nw = n1 - n0
            for m0 in range(0, M, rows):
                mw = min(rows, M - m0)
                t = ap(tiles[n % BUFS], slice(0, nw), slice(0, mw))
                src = ap(x, *batch, slice(m0, m0 + mw), slice(n0, n0 + nw))
                if dma:
                    b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=loads[n], transpose=True)
                else:
                    raw, tp = turn
                    r = ap(raw, slice(0, mw), slice(0, nw))
                    b.emit(DmaCopy, [src], [r], src=src, dst=r, queue=loads[n])
                    p = ap(tp, slice(0, nw), slice(0, mw))
                    b.emit(Transpose, [r], [p], src=r, dst=p)
                    b.emit(TensorCopy, [p], [t], src=p, dst=t)
                dst = ap(out, *batch, slice(n0, n0 + nw), slice(m0, m0 + mw))
                b.emit(DmaCopy, [t], [dst], src=t, dst=dst, queue=stores[n])
                n += 1
    if turn:
        b.release(turn[1])


def lower_moved_last(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, perm: list[int]):
    """out = x.permute(perm) where x's last dim goes elsewhere than out's second last (the
    math path's k.transpose(1, 2).transpose(-2, -1): [B, T, H, hd] -> [B, H, hd, T], one
    permute under torch.compile): for every index of the other dims, the [M, N] slice of x
    (M: the x dim that ends last in out, N: x's last) is turned as `lower_transpose` turns one
    (DMA transpose, blocks of 128 of N by up to 512 of M) and stored where out's dim holding
    N and its last dim cross. At LNC 2 each core stores the rows of out in its share."""
    tx, to = b.tensors[x], b.tensors[out]
    nd, P = len(tx.shape), cfg.core.sbuf.partitions
    a, q = perm[-1], perm.index(nd - 1)  # x's dim that is out's last; out's dim of x's last
    M, N = tx.shape[a], tx.shape[-1]
    if not (tx.dtype.itemsize in (2, 4) and cfg.core.dma.transpose_hbm_rate > 0):
        raise TraceError(
            f"permute: dims {perm} move x's last dim, which {cfg.name} lowers only as a swap of "
            f"the last two (it has no DMA transpose for {tx.dtype.name})"
        )
    width = min(ROWS, M)
    tiles = [b.scratch_tile(f"transpose:{i}", "t", (P, width), tx.dtype) for i in range(BUFS)]
    qs = Queues(cfg)
    loads, stores = qs.loads(), qs.stores()
    rows = math.prod(to.shape[:-1])
    lo, hi = core_rows(tuple(to.shape), b.part) if b.part[1] > 1 else (0, rows)
    others = [j for j in range(nd - 1) if j != q]  # out's dims fixed per slice
    step = math.prod(to.shape[q + 1 : nd - 1])  # out's rows between n and n + 1
    n = 0
    for combo in itertools.product(*(range(to.shape[j]) for j in others)):
        at = dict(zip(others, combo))
        base = sum(at[j] * math.prod(to.shape[j + 1 : nd - 1]) for j in others)
        first, last = -(-(lo - base) // step), -(-(hi - base) // step)  # n in this core's rows
        for r0 in range(max(0, first), min(N, last), P):
            n0, n1 = r0, min(r0 + P, N, last)
            for m0 in range(0, M, ROWS):
                mw = min(ROWS, M - m0)
                t = ap(tiles[n % BUFS], slice(0, n1 - n0), slice(0, mw))
                sx: list = [None] * nd
                for j in others:
                    sx[perm[j]] = at[j]
                sx[a], sx[nd - 1] = slice(m0, m0 + mw), slice(n0, n1)
                src = ap(x, *sx)
                b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=loads[n], transpose=True)
                so = [at.get(j) for j in range(nd)]
                so[q], so[nd - 1] = slice(n0, n1), slice(m0, m0 + mw)
                dst = ap(out, *so)
                b.emit(DmaCopy, [t], [dst], src=t, dst=dst, queue=stores[n])
                n += 1


def _lead(lead: list[int]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for size in lead:
        out = [(*o, i) for o in out for i in range(size)]
    return out
