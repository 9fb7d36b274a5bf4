"""Cutting a DMA copy into descriptors and spreading them over a core's DMA engines.

Pure functions, no SimPy. A descriptor moves one run of bytes that is contiguous in both the
source and the destination, at most `max_descriptor_bytes` long. The copy walks both access
patterns in the same flat (row-major) element order, so descriptor boundaries are the union of
three grids over that order, counted in elements:

- the source's run length `a` (elements that are adjacent in memory: for an HBM tensor, the
  innermost dims read whole and with unit stride; for an SBUF tile the same over the free dims,
  because each partition is a separate memory row),
- the destination's run length `b`,
- `m = max_descriptor_bytes // itemsize` (the larger itemsize when the copy casts).

Engines: SBUF partition `p` is served by engine `p * E // P` (16 engines, 128 partitions: 8 each),
so a copy with an SBUF endpoint gives each engine the descriptors of its partitions (the written
partitions when the destination is in SBUF, else the read ones). An HBM -> HBM copy deals its
descriptors round-robin over all engines. A transpose is cut by its destination rows only. A
gather is cut as if its rows were read from rows of src none adjacent to another (`gathered`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

from trnsim.config import DmaConfig
from trnsim.memory.buffer import Buffer, Ref


@dataclass(frozen=True)
class Piece:
    """The share of one copy that one DMA engine moves."""

    engine: int
    descriptors: int
    elements: int
    src_bytes: int  # bytes read from the source memory
    dst_bytes: int  # bytes written to the destination memory

    @property
    def engine_bytes(self) -> int:
        """Bytes the engine's data path carries: the larger side when the copy casts."""
        return max(self.src_bytes, self.dst_bytes)


def run_elements(ref: Ref) -> int:
    """Elements per contiguous run of `ref` in its flat iteration order.

    For an on-chip tile only the free dims count: partitions are separate memories.
    """
    shape = ref.buf.shape
    first = 1 if ref.buf.onchip else 0
    run = 1
    for d in range(len(shape) - 1, first - 1, -1):
        start, stop, step = ref.ranges[d]
        n = len(range(start, stop, step))
        if n == shape[d] and (step == 1 or n == 1):
            run *= n  # the whole dim: the next outer one continues the run
            continue
        if step == 1 or n == 1:
            run *= n  # a partial dim ends the run
        break
    return run


def _terms(grids: tuple[int, ...]) -> list[tuple[int, int]]:
    """(lcm, sign) of every non-empty subset of `grids`, for inclusion-exclusion."""
    return [
        (math.lcm(*sub), (-1) ** (k + 1))
        for k in range(1, len(grids) + 1)
        for sub in combinations(grids, k)
    ]


def segments(lo: int, hi: int, grids: tuple[int, ...]) -> int:
    """Pieces that [lo, hi) is cut into by the multiples of any of `grids` (inclusion-exclusion).

    `lo` and `hi` are element positions; cuts strictly inside the interval count.
    """
    return _segments(lo, hi, _terms(grids))


def _segments(lo: int, hi: int, terms: list[tuple[int, int]]) -> int:
    return 1 + sum(sign * ((hi - 1) // g - lo // g) for g, sign in terms)


def _grids(*runs: int) -> tuple[int, ...]:
    """Distinct grid steps, dropping ones implied by a divisor already present."""
    out: list[int] = []
    for g in sorted(set(runs)):
        if not any(g % h == 0 for h in out):
            out.append(g)
    return tuple(out)


def cut(src: Ref, dst: Ref, transpose: bool, dma: DmaConfig, partitions: int) -> tuple[Piece, ...]:
    """The per-engine pieces of a copy from `src` to `dst`, ordered by engine: one tuple shared
    by every copy alike (the DMA system keys what it derives from the pieces by its identity).

    `partitions` is the SBUF partition count (P); the engine count comes from `dma`. Copies
    alike in what the cut depends on (itemsizes, runs, sizes, the SBUF side's partitions) share
    one cut: a kernel makes thousands of copies of a few kinds.
    """
    s_item, d_item = src.dtype.itemsize, dst.dtype.itemsize
    side = dst if dst.buf.memory == "sbuf" else src if src.buf.memory == "sbuf" else None
    key = (
        s_item,
        d_item,
        dst.size,
        transpose,
        None if transpose else run_elements(src),
        run_elements(dst),
        None if side is None else (side.free_size, side.partitions, side.p_start),
        dma.max_descriptor_bytes,
        dma.engines,
        partitions,
    )
    pieces = _CUTS.get(key)
    if pieces is None:
        if len(_CUTS) >= _MAX_CUTS:
            _CUTS.clear()
        pieces = _CUTS[key] = _cut(key)
    return pieces


_CUTS: dict[tuple, tuple[Piece, ...]] = {}  # cut's key -> its pieces
_MAX_CUTS = 100_000


def _cut(key: tuple) -> tuple[Piece, ...]:
    s_item, d_item, n_elems, transpose, run_src, run_dst, side, max_bytes, engines, parts = key
    m = max(1, max_bytes // max(s_item, d_item))
    grids = _grids(run_dst, m) if transpose else _grids(run_src, run_dst, m)
    if side is None:  # HBM <-> HBM: round-robin over all engines
        total = segments(0, n_elems, grids)
        counts = [total // engines + (e < total % engines) for e in range(engines)]
        pieces, before = [], 0
        for e, c in enumerate(counts):
            if c:
                lo, hi = n_elems * before // total, n_elems * (before + c) // total
                pieces.append(Piece(e, c, hi - lo, (hi - lo) * s_item, (hi - lo) * d_item))
                before += c
        return tuple(pieces)
    free, rows, p_start = side
    terms = _terms(grids)
    # when every grid divides the row length, all partitions are cut alike
    same = _segments(0, free, terms) if free % math.lcm(*grids) == 0 else None
    desc = [0] * engines
    elems = [0] * engines
    for i in range(rows):
        e = (p_start + i) * engines // parts
        desc[e] += same if same is not None else _segments(i * free, (i + 1) * free, terms)
        elems[e] += free
    return tuple(
        Piece(e, desc[e], elems[e], elems[e] * s_item, elems[e] * d_item)
        for e in range(engines)
        if desc[e]
    )


def gathered(src: Ref, rows: int, row: int) -> Ref:
    """What a gather of `rows` rows of `row` elements of `src` reads, for its cost: that many
    rows, none adjacent to another (each its own run), on src's memory."""
    b = src.buf
    buf = Buffer(b.name, b.memory, (2 * rows, row), b.dtype, None, b.offset, b.core)
    return Ref(buf, ((0, 2 * rows, 2), (0, row, 1)), (rows, row), (), src.ap)
