"""SBUF and PSUM capacity: where a kernel's tiles live inside each partition.

Every tile spans partitions [0, P) and takes `partition_bytes` in each of them, so capacity is a
per-partition budget. PSUM tiles no larger than a bank are placed so they never straddle a bank
boundary (a matmul output must stay inside one bank on NC-v2/v3); larger ones start on a bank.

A hand-written kernel's tiles are placed one after another and live for the whole launch. The
kernel library places the tiles of a kernel of several ops by liveness (`place_live`): a tile
lives over the op steps from its creation to its last access, and tiles of disjoint steps may
share bytes (the library orders the later tile's accesses after the earlier one's).
"""

from __future__ import annotations

from trnsim.config import CoreConfig
from trnsim.errors import SimError


def place_tiles(
    tiles: list[tuple[str, str, int, int]], core: CoreConfig, placed: dict | None = None
) -> tuple[dict[str, int], int, int]:
    """Assign each (name, memory, partitions, partition_bytes) tile a byte offset: its offset
    in `placed` (the kernel library's, by liveness: `place_live`), else the next free one.

    Returns (offsets, sbuf bytes used per partition, psum bytes used per partition: the
    high-water marks); raises a SimError that lists the largest tiles when a memory overflows
    or a tile has too many partitions.
    """
    offsets: dict[str, int] = {}
    ends: list[tuple[str, str, int]] = []  # (name, memory, end) in placement order
    sbuf_top = psum_top = 0
    bank = core.psum.bank_bytes
    placed = placed or {}
    for name, memory, partitions, nbytes in tiles:
        limit = core.sbuf.partitions if memory == "sbuf" else core.psum.partitions
        if partitions > limit:
            e = SimError(f"tile {name} has {partitions} partitions; {memory.upper()} has {limit}")
            e.tile = name
            raise e
        start = placed.get(name)
        if memory == "sbuf":
            offsets[name] = sbuf_top if start is None else start
            sbuf_top = max(sbuf_top, offsets[name] + nbytes)
            end = offsets[name] + nbytes
        else:
            if start is None:
                start = _psum_start(psum_top, nbytes, bank)
            offsets[name] = start
            end = start + nbytes
            psum_top = max(psum_top, end)
        ends.append((name, memory, end))
    _check(tiles, ends, "sbuf", sbuf_top, core.sbuf.partition_bytes)
    _check(tiles, ends, "psum", psum_top, core.psum.banks * bank)
    return offsets, sbuf_top, psum_top


def _psum_start(start: int, nbytes: int, bank: int) -> int:
    """The first offset from `start` where a PSUM tile of `nbytes` may begin: one no larger
    than a bank never straddles a bank boundary; a larger one starts on a bank."""
    if nbytes > bank or start // bank != (start + nbytes - 1) // bank:
        return -(-start // bank) * bank
    return start


def place_live(
    tiles: list[tuple[str, str, int, int, int]], core: CoreConfig
) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Place (name, memory, partition_bytes, first, last) tiles, each live over the op steps
    [first, last], by liveness: in order of first step (then as listed), each goes at the top
    of the bytes no tile used so far if it fits under the memory's capacity there (nothing to
    wait for), else at the lowest offset where it fits between the tiles live at its first
    step (the bytes of tiles whose last step is before it), else above them all (the
    overflow `place_tiles` reports). When that leaves a memory's tiles past its capacity (the
    fresh bytes taken first can leave gaps too small for a later tile), each of them goes at
    the lowest offset where it fits instead.

    Returns (offsets, predecessors): per tile, the tiles that last held some of its bytes
    before it (they are dead at its first step; its accesses must wait for theirs, and through
    them for every earlier holder's)."""
    offsets: dict[str, int] = {}
    preds: dict[str, list[str]] = {}
    bank = core.psum.bank_bytes
    caps = {"sbuf": core.sbuf.partition_bytes, "psum": core.psum.banks * bank}
    for memory, cap in caps.items():
        mine = sorted(
            (t for t in enumerate(tiles) if t[1][1] == memory), key=lambda t: (t[1][3], t[0])
        )
        for fresh in (True, False):
            got = _place(mine, memory, cap, bank, fresh)
            if all(got[0][n] + t[2] <= cap for _, t in mine for n in [t[0]]):
                break
        offsets.update(got[0])
        preds.update(got[1])
    return offsets, preds


def _place(mine: list, memory: str, cap: int, bank: int, fresh: bool) -> tuple[dict, dict]:
    """`place_live` for one memory's tiles, in order: bytes no tile used first (`fresh`) or
    always the lowest offset where a tile fits."""
    offsets: dict[str, int] = {}
    preds: dict[str, list[str]] = {}
    live: list[tuple[int, int, int]] = []  # (offset, end, last step) of the live tiles
    held: list[list] = []  # [start, end, name] of the bytes' last holders, disjoint
    top = 0  # the highest byte any tile used so far
    for _, (name, _, nbytes, first, last) in mine:
        live = sorted(x for x in live if x[2] >= first)
        start = _fit(top, nbytes, memory, bank) if fresh else cap
        if start + nbytes > cap:
            start = _lowest(live, nbytes, memory, bank, cap)
        end = start + nbytes
        offsets[name] = start
        preds[name] = list(dict.fromkeys(h[2] for h in held if h[0] < end and start < h[1]))
        held = _hold(held, start, end, name)
        live.append((start, end, last))
        top = max(top, end)
    return offsets, preds


def _fit(start: int, nbytes: int, memory: str, bank: int) -> int:
    return _psum_start(start, nbytes, bank) if memory == "psum" else start


def _lowest(live: list, nbytes: int, memory: str, bank: int, cap: int) -> int:
    """The lowest offset where `nbytes` fit under `cap` between the `live` (offset, end, _)
    tiles (sorted by offset), or the offset above them all."""
    at = 0
    for lo, hi, _ in live:
        start = _fit(at, nbytes, memory, bank)
        if start + nbytes <= lo:
            return start
        at = max(at, hi)
    return _fit(at, nbytes, memory, bank)


def _hold(held: list, start: int, end: int, name: str) -> list:
    """`held` with the bytes [start, end) now last held by `name`."""
    out = []
    for lo, hi, n in held:
        if hi <= start or end <= lo:
            out.append([lo, hi, n])
            continue
        if lo < start:
            out.append([lo, start, n])
        if end < hi:
            out.append([end, hi, n])
    out.append([start, end, name])
    out.sort()
    return out


def in_use(buffers, memory: str) -> int:
    """The most bytes of `memory` ("sbuf", "psum") the tiles of one launch (`Buffer`s) hold at
    once: over the op steps their `live` spans cover, the largest sum of the tiles live at a
    step (a tile without a span lives for the whole launch)."""
    always = 0
    at: dict[int, int] = {}
    spans = []
    for b in buffers:
        if b.memory != memory:
            continue
        if b.live is None:
            always += b.nbytes
        else:
            spans.append((b.live, b.nbytes))
    steps = sorted({s for (first, last), _ in spans for s in (first, last)})
    for (first, last), n in spans:
        for s in steps:
            if first <= s <= last:
                at[s] = at.get(s, 0) + n
    return always + max(at.values(), default=0)


def _check(tiles, ends, memory: str, used: int, capacity: int) -> None:
    """Raise for an overflowing memory: the SimError's `tile` is the first that does not fit."""
    if used <= capacity:
        return
    mine = sorted((t for t in tiles if t[1] == memory), key=lambda t: -t[3])[:3]
    big = ", ".join(f"{n} {b} B" for n, _, _, b in mine)
    first = next(n for n, m, end in ends if m == memory and end > capacity)
    e = SimError(
        f"{memory.upper()} overflow: tiles need {used} bytes per "
        f"partition but {memory.upper()} has {capacity}; tile {first} is the first that does "
        f"not fit (largest: {big})"
    )
    e.tile = first
    raise e
