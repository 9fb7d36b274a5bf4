"""SBUF and PSUM capacity: where a kernel's tiles live inside each partition.

Every tile spans partitions [0, P) and takes `partition_bytes` in each of them, so capacity is a
per-partition budget. PSUM tiles no larger than a bank are placed so they never straddle a bank
boundary (a matmul output must stay inside one bank on NC-v2/v3); larger ones start on a bank.
"""

from __future__ import annotations

from trnsim.config import CoreConfig
from trnsim.errors import SimError


def place_tiles(
    tiles: list[tuple[str, str, int, int]], core: CoreConfig
) -> tuple[dict[str, int], int, int]:
    """Assign each (name, memory, partitions, partition_bytes) tile a byte offset.

    Returns (offsets, sbuf bytes used per partition, psum bytes used per partition); raises a
    SimError that lists the largest tiles when a memory overflows or a tile has too many
    partitions.
    """
    offsets: dict[str, int] = {}
    ends: list[tuple[str, str, int]] = []  # (name, memory, end) in placement order
    sbuf_top = psum_top = 0
    bank = core.psum.bank_bytes
    for name, memory, partitions, nbytes in tiles:
        limit = core.sbuf.partitions if memory == "sbuf" else core.psum.partitions
        if partitions > limit:
            e = SimError(f"tile {name} has {partitions} partitions; {memory.upper()} has {limit}")
            e.tile = name
            raise e
        if memory == "sbuf":
            offsets[name] = sbuf_top
            sbuf_top += nbytes
        else:
            start = psum_top
            if nbytes > bank or start // bank != (start + nbytes - 1) // bank:
                start = -(-start // bank) * bank
            offsets[name] = start
            psum_top = start + nbytes
        ends.append((name, memory, sbuf_top if memory == "sbuf" else psum_top))
    _check(tiles, ends, "sbuf", sbuf_top, core.sbuf.partition_bytes)
    _check(tiles, ends, "psum", psum_top, core.psum.banks * bank)
    return offsets, sbuf_top, psum_top


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
