"""rms_norm's long rows that fit a partition: a row a partition (`norms`' blocks, in one lane
or two) or in pieces over the partitions (`row_pieces`; `norm_ragged` when the length is not a
multiple of 128), whichever the list schedule's model ends sooner.

A row a partition puts [128, D] blocks through the engines: a core with few of them (rows of
5120 fp32 or 12288 bf16, 16 MiB at LNC 2: three or four blocks a core) overlaps little of its
first block's load and its last block's passes and store. In pieces, a tile holds a few rows
over all the partitions, many tiles a core, which overlap. A block's columns in two lanes
(`norms.RMS_LANES`: each lane's passes and store wait only for its own columns) shorten each
block's chain instead. Which is sooner depends on the length, the dtype and the count of
blocks (rows of 2048 to 4096 a partition: 64 -> 52 us; in two lanes to 7168), so the choice is
the model's, not a threshold on the length: each lowered for each core's share at the chip's
default LNC (as `norms._variant`: the same choice, and so the same rounding, at any LNC),
estimated by a `schedule.Scheduled` in its emitted order (the slower core's: the shares, cut at
multiples of 128 rows, may differ), the transfers moving as the chip's DMA moves them
(`fluid`, `dma_parts`); kept by shapes."""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.schedule import Scheduled

__all__ = ["rms_variant", "IN_PIECES", "RMS_RAGGED"]

IN_PIECES = {"in_pieces": True}  # (the variant `norms._lower` lowers in pieces)
MARGIN = 0.03  # another plan only when estimated this much sooner: trn2 LNC 2, 16 MiB, bf16
# rows of 10000 estimated 1.8% sooner in pieces (ragged) ran 2% slower (67.7 -> 69.3 us), of
# 8192 4% sooner ran 3% faster (57.3 -> 55.7 us)
RMS_RAGGED = {"bufs_most": 12, "spread_affine": True}  # rms_norm's `norm_ragged`: 12 units
# resident (its BUFS, 4, left the loads waiting on the passes: trn2 LNC 2, 16 MiB, fp32 rows of
# 50257 59.0 -> 51.4 us, bf16 81.1 -> 55.7 us; 8: 52.3, 64.9; 16: 51.8, 56.3), the weight's
# copies over every load queue (in a quarter of them a tile's 16 copies of bf16 rows of 10000
# took 18 us before any output pass could start: 67.7 -> 58.3 us, 20000 57.8 -> 53.5 us)
CHOSEN_MOST = 64  # the choices kept, by shapes
_CHOSEN: dict = {}


def rms_variant(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, weight, lower,
                tries: tuple[dict, ...]) -> dict:  # fmt: skip
    """The plan of `tries` (variants of `norms._lower`) the model ends soonest, if MARGIN
    sooner than {} (as planned), else {} (module doc); `lower(tb, variant)` lowers the op on
    builder tb."""
    names = (x, out) + ((weight,) if weight is not None else ())
    key = tuple((tuple(b.tensors[n].shape), b.tensors[n].dtype.name) for n in names)
    hit = _CHOSEN.get(key)
    if hit is not None and hit[0] is cfg:
        return hit[1]
    spans = []
    for variant in ({}, *tries):
        ends = []
        for c in range(max(1, cfg.lnc)):  # (the cores' shares may differ: cut at 128 rows)
            tb = KernelBuilder(b.tensors)
            tb.part = (c, max(1, cfg.lnc))
            with Scheduled(tb, cfg, shared_dma=True, reorder=False, fluid=True,
                           dma_parts=True) as s:  # fmt: skip
                lower(tb, variant)
            ends.append(s.makespan)
        spans.append(max(ends))
    best = min(range(1, len(spans)), key=lambda i: spans[i], default=0)
    if len(_CHOSEN) >= CHOSEN_MOST:
        _CHOSEN.clear()
    _CHOSEN[key] = (cfg, tries[best - 1] if best and spans[best] < (1 - MARGIN) * spans[0] else {})
    return _CHOSEN[key][1]
