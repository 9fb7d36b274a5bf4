"""A layer_norm core's last rows, fewer than 128, in k segments a row (`norm_stt`'s fp32 tails,
`norm_tail`'s 16-bit ones): segment s of a block of g rows, columns [s D/k, (s+1) D/k), on
partitions [s g, (s+1) g), so the block's passes cost 1/k of a whole block's (an engine's time
is by the free size, whatever the partitions). Shared here: the cuts that put a row in the same
block at any LNC (`ranges`), the matrix that adds a row's sums over its k partitions (`pairs`)
and TensorE's K = k selector that spreads the weight's and bias' segments (`selector`)."""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import AffineSelect, Memset
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.row_plan import G
from trnsim.kernels.rows import norm_share

__all__ = ["ranges", "pairs", "selector"]


def ranges(b: KernelBuilder, cfg: ChipConfig, tx, share: tuple[int, int]) -> list[tuple]:
    """`share` cut where the chip's default LNC cuts x's rows between its cores
    (`rows.norm_share`): a 2-D x's blocks and tails follow those cuts at any LNC, so a row
    goes the same way (whole or in segments) and gets the same values at LNC 1 and 2."""
    lo, hi = share
    n = max(1, cfg.lnc)
    if len(tx.shape) != 2 or n == 1:
        return [share]
    cuts = set()
    for c in range(n):
        tb = KernelBuilder(b.tensors)
        tb.part = (c, n)
        cuts.update(norm_share(tb, cfg, "layer_norm", tx))
    cuts = sorted({lo, hi} | {c for c in cuts if lo < c < hi})
    return list(zip(cuts, cuts[1:]))


def pairs(b: KernelBuilder, P: int, g: int, k: int) -> str:
    """[P, P] fp32: 1 where m = m' (mod g) (the partitions of a row of a tail of g rows in k
    segments: its sums added over them by one matmul)."""
    t = b.tile("pairs", "sbuf", (P, P), dtype("float32"))
    a = ap(t)
    b.emit(Memset, [], [a], dst=a, value=0.0, engine=G)
    for r in range(-(k - 1) * g, k * g, g):  # (1 where m - m' + r = 0)
        b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=1.0, cmp="not_equal",
               start=r, partition_step=1, step=-1, engine=G)  # fmt: skip
    return t


def selector(b: KernelBuilder, key: str, P: int, g: int, k: int, starts, dt) -> str:
    """[P, P] of dtype dt: on partitions [p0, p0 + k) for each p0 of `starts`, row s ones on
    columns [s g, (s + 1) g) (TensorE's K = k selector of a tail's weight and bias segments,
    loaded as [k, D / k] on those partitions)."""
    sel = b.scratch_tile(key, "selector", (P, P), dt)
    for p0 in starts:
        a = ap(sel, slice(p0, p0 + k))
        b.emit(Memset, [], [a], dst=a, value=0.0, engine=G)
        for s in range(k):  # (ones on row s there)
            a = ap(sel, slice(p0, p0 + k), slice(s * g, (s + 1) * g))
            b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=1.0, cmp="not_equal",
                   start=-s, partition_step=1, step=0, engine=G)  # fmt: skip
    return sel
