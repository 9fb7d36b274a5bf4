"""Tiles that share bytes: the kernel library places a kernel's tiles by liveness
(`TileSpec.offset`, `live`; `memory.onchip.place_live`), so a later op's tile may lie over an
earlier op's. Their accesses are compared by address, not by tile name: every access of the
later tile must follow every access of the earlier one (docs/races.md, "Reused bytes").

Per pair (D, T) of tiles of one memory whose byte ranges meet, T after D (the later first op
step, then the later in the program's tiles), D the last holder of some of T's bytes before T:
T's first access on each queue must be ordered after D's last access on each line (an engine
queue, or a DMA queue's transfers of one direction, which complete in order). That is enough:
T's later accesses on a queue come after its first there, and D's earlier accesses on a line
complete before its last there; a holder before D is ordered before D the same way. A pair
that fails is a race between those two accesses.
"""

from __future__ import annotations

import math

from trnsim.isa import Ap
from trnsim.trace.races.clocks import Clocks, direction
from trnsim.trace.races.found import Race
from trnsim.trace.races.launch import Launch

__all__ = ["reuse_races", "holders"]


def holders(tiles: dict) -> list[tuple[str, str]]:
    """(D, T) for each tile T placed by liveness and each tile D that last held some of its
    bytes before it (T's first op step, then its place in `tiles`, orders them)."""
    out = []
    order = {n: i for i, n in enumerate(tiles)}
    for memory in ("sbuf", "psum"):
        mine = [t for t in tiles.values() if t.memory == memory and t.offset is not None]
        mine.sort(key=lambda t: (t.live[0] if t.live else 0, order[t.name]))
        held: list[tuple[int, int, str]] = []  # (start, end, name): bytes' last holders
        for t in mine:
            lo = t.offset
            hi = lo + math.prod(t.shape[1:]) * t.dtype.itemsize
            rest = []
            for a, b, n in held:
                if b <= lo or hi <= a:
                    rest.append((a, b, n))
                    continue
                out.append((n, t.name))
                if a < lo:
                    rest.append((a, lo, n))
                if hi < b:
                    rest.append((hi, b, n))
            rest.append((lo, hi, t.name))
            held = rest
    return list(dict.fromkeys(out))


def reuse_races(la: Launch, clocks: Clocks, races) -> None:
    """The races between tiles of `la` that share bytes, into `races` (module doc)."""
    tiles = la.prog.tiles
    pairs = holders(tiles)
    if not pairs:
        return
    firsts, lasts = _ends(la, {n for p in pairs for n in p})
    at, ranks, pos, isdma = clocks.at, clocks.ranks, la.pos, la.isdma
    for d, t in pairs:
        found = None
        for f in firsts.get(t, {}).values():
            k = at[id(f)]
            for x in lasts.get(d, {}).values():
                q, p = pos[id(x)]
                done = any(k[c] >= r for c, r in ranks[id(x)]) if isdma[q] else k[q] >= p
                if not done:
                    found = (x, f)
                    break
            if found:
                break
        if found:
            x, f = found
            a, b = (x, f) if x.index <= f.index else (f, x)
            tx, tt = tiles[d], tiles[t]
            lo = max(tx.offset, tt.offset)
            hi = min(tx.offset + _bytes(tx), tt.offset + _bytes(tt))
            races.append(Race(la.label(a), la.label(b),
                              f"tiles {d} / {t} ({tt.memory} bytes {lo}..{hi} of each "
                              "partition: reused)"))  # fmt: skip


def _bytes(t) -> int:
    return math.prod(t.shape[1:]) * t.dtype.itemsize


def _ends(la: Launch, names: set) -> tuple[dict, dict]:
    """Per tile of `names`: {queue: its first access there}, {line: its last access there}."""
    firsts: dict[str, dict] = {}
    lasts: dict[str, dict] = {}
    tiles, isdma, pos = la.prog.tiles, la.isdma, la.pos
    fields: dict[type, tuple] = {}
    for ins in la.prog.instructions:
        fs = fields.get(type(ins))
        if fs is None:  # not a barrier's `data`: it only names it
            fs = fields[type(ins)] = tuple(f.name for f in ins.op_fields() if f.metadata["access"])
        mine = None
        for f in fs:
            v = getattr(ins, f)
            if type(v) is Ap and v.name in names:
                mine = [v.name] if mine is None else [*mine, v.name]
        if mine is None:
            continue
        q = pos[id(ins)][0]
        line = (q, direction(ins, tiles)) if isdma[q] else (q, 0)
        for n in mine:
            firsts.setdefault(n, {}).setdefault(q, ins)
            lasts.setdefault(n, {})[line] = ins
    return firsts, lasts
