"""Collectives as data: a Schedule is steps of transfers between ranks' buffers.

Every rank of a collective has buffer 0 (`count` elements: the data in and, for all_reduce,
all_gather, reduce_scatter and broadcast, out) and, for all_to_all and permute, buffer 1 (the
output). A `Transfer` copies `count` elements from offset `src_off` of the sender's buffer to
offset `dst_off` of each receiver's (two receivers: duplication, one read and two writes); a
reducing one adds the payload into the receiver's region instead (in fp32, as the DMA does),
together with the same region of the `others`' buffers (ranks on the receiver's chip: KangaRing
adds the pair's secondary in the same pass).

How a schedule runs (`run.py`): a transfer of step s starts when its sender and receivers have
all arrived at the collective and every transfer *into* any of them at an earlier step has
completed (data and credits: what a rank sends at step s may depend on anything it received
before, and a receiver takes step s only once its earlier steps are done); a sender's transfers
on one `channel` move one after another (a DMA ring), so the slices of a chunk go in order and
the reduction of one overlaps the move of the next. Steps carry no clock: a fast pair runs
ahead of a straggler wherever the data allows.

Schedules are built once per (op, group, count, itemsize, topology key, algorithm, settings)
and cached, as kernel lowerings are.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Transfer:
    """One move (and reduce) of a region of a buffer: see the module docstring."""

    src: int
    dsts: tuple[int, ...]
    src_off: int
    dst_off: int
    count: int
    reduce: bool = False
    others: tuple[int, ...] = ()
    channel: int = 0
    src_buf: int = 0
    dst_buf: int = 0


@dataclass(frozen=True)
class Schedule:
    """The steps of one collective on `ranks` (global rank ids, in group order)."""

    op: str
    algorithm: str
    ranks: tuple[int, ...]
    count: int
    """Elements of buffer 0 on each rank."""
    steps: tuple[tuple[Transfer, ...], ...]
    out_count: int = 0
    """Elements of buffer 1 on each rank (0: none)."""
    rings: int = 0
    """Parallel rings used (Ring and KangaRing; 0 for the others)."""
    detail: str = ""
    """What the algorithm chose (e.g. a hierarchical pair), for reports."""

    @property
    def transfers(self) -> int:
        return sum(len(s) for s in self.steps)


def bounds(count: int, parts: int) -> list[int]:
    """Offsets splitting `count` elements into `parts` near-equal pieces (the first
    `count % parts` one element longer): parts + 1 numbers from 0 to count."""
    q, r = divmod(count, parts)
    out, at = [0], 0
    for i in range(parts):
        at += q + (1 if i < r else 0)
        out.append(at)
    return out


def pieces(lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    """[lo, hi) cut into `parts` near-equal (lo, hi) pieces (empty ones dropped)."""
    b = bounds(hi - lo, parts)
    return [(lo + b[i], lo + b[i + 1]) for i in range(parts) if b[i + 1] > b[i]]


@dataclass
class Steps:
    """Builds a schedule's steps: `add` to the current step, `next()` to close it."""

    steps: list[list[Transfer]] = field(default_factory=lambda: [[]])

    def add(self, t: Transfer) -> None:
        if t.count > 0:
            self.steps[-1].append(t)

    def copy(self, src, dsts, lo, hi, channel=0, dst_lo=None, src_buf=0, dst_buf=0) -> None:
        dsts = dsts if isinstance(dsts, tuple) else (dsts,)
        off = lo if dst_lo is None else dst_lo
        self.add(Transfer(src, dsts, lo, off, hi - lo, False, (), channel, src_buf, dst_buf))

    def reduce(self, src, dst, lo, hi, channel=0, others=(), slices=1) -> None:
        """A reducing transfer of [lo, hi), in `slices` pieces on one channel."""
        for a, b in pieces(lo, hi, slices):
            self.add(Transfer(src, (dst,), a, a, b - a, True, tuple(others), channel))

    def add_reduce_into_output(self, src, dst, count, channel=0) -> None:
        """Add all of `src`'s buffer 0 into `dst`'s buffer 1 (single-step Mesh)."""
        self.add(Transfer(src, (dst,), 0, 0, count, True, (), channel, 0, 1))

    def next(self) -> None:
        if self.steps[-1]:
            self.steps.append([])

    def extend(self, other: tuple[tuple[Transfer, ...], ...]) -> None:
        """Append another schedule's steps after the current ones."""
        self.next()
        for s in other:
            self.steps[-1].extend(s)
            self.next()

    def done(self) -> tuple[tuple[Transfer, ...], ...]:
        return tuple(tuple(s) for s in self.steps if s)


Regions = tuple[tuple[int, int], ...]
"""A unit of data: (lo, hi) element ranges of a buffer, in order."""


def split_regions(regions: Regions, parts: int) -> list[Regions]:
    """`regions` cut into `parts` near-equal pieces by element count (some may be empty)."""
    total = sum(hi - lo for lo, hi in regions)
    b = bounds(total, parts)
    out = []
    for i in range(parts):
        want_lo, want_hi = b[i], b[i + 1]
        piece, at = [], 0
        for lo, hi in regions:
            n = hi - lo
            a, z = max(want_lo, at), min(want_hi, at + n)
            if z > a:
                piece.append((lo + a - at, lo + z - at))
            at += n
        out.append(tuple(piece))
    return out


def merge(regions) -> Regions:
    """Sorted regions with overlapping and adjacent ones joined."""
    out: list[list[int]] = []
    for lo, hi in sorted(regions):
        if hi <= lo:
            continue
        if out and out[-1][1] >= lo:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def chunk_units(count: int, n: int) -> list[Regions]:
    """Buffer 0 of `count` elements as `n` contiguous chunks, one unit each."""
    b = bounds(count, n)
    return [((b[i], b[i + 1]),) for i in range(n)]
