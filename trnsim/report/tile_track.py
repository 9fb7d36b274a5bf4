"""SBUF and PSUM in use over time, as Perfetto counter tracks: for a kernel whose tiles the
library placed by liveness (`TileSpec.live`), a tile is in use, in each launch, from the start
of the first instruction that accesses it to the end of the last; the counter is the bytes a
partition the tiles in use hold, per core and memory. (A tile placed over an older one's bytes
waits for the older one's last accesses, so the two are not in use at once.)

The recorder keeps the core program of each (kernel, physical core) placed by liveness
(`Recorder.tile_programs`); the spans give the instructions' times.
"""

from __future__ import annotations

import math
from bisect import bisect_right

from trnsim.isa import Ap

__all__ = ["tile_counters"]

NAMES = {"sbuf": "SBUF bytes a partition", "psum": "PSUM bytes a partition"}


def tile_counters(rec) -> list[dict]:
    """Counter events ("ph": "C") on each core's process: a memory's bytes a partition in use
    by the tiles of each launch of a kernel placed by liveness (none for other kernels)."""
    progs = rec.tile_programs
    if not progs:
        return []
    ends = {key: _ends(prog) for key, prog in progs.items()}  # tile -> (first, last) index
    wanted = {key: {i for fl in e.values() for i in fl} for key, e in ends.items()}
    starts: dict[tuple, list] = {}  # (kernel, core) -> its launches' starts, in order
    for w in sorted(rec.launches, key=lambda w: w.start_ps):
        for c in w.cores:
            if (w.kernel, c) in progs:
                starts.setdefault((w.kernel, c), []).append(w.start_ps)
    times: dict[tuple, list] = {}  # (kernel, core, launch, index) -> [start, end]
    for s in rec.recorded:
        key = (s.kernel, s.core)
        if key not in starts or s.index not in wanted[key]:
            continue
        k = (s.kernel, s.core, bisect_right(starts[key], s.start_ps) - 1, s.index)
        t = times.get(k)
        if t is None:
            times[k] = [s.start_ps, s.end_ps]
        else:  # a DMA transfer cut in pieces: the first start, the last end
            t[0], t[1] = min(t[0], s.start_ps), max(t[1], s.end_ps)
    changes: dict[tuple, dict[int, int]] = {}  # (core, memory) -> ps -> change in bytes
    for (kernel, core), st in starts.items():
        tiles = progs[(kernel, core)].tiles
        for i in range(len(st)):
            for name, (first, last) in ends[(kernel, core)].items():
                a = times.get((kernel, core, i, first))
                b = times.get((kernel, core, i, last))
                if a is None or b is None:
                    continue
                t = tiles[name]
                n = math.prod(t.shape[1:]) * t.dtype.itemsize
                ch = changes.setdefault((core, t.memory), {})
                ch[a[0]] = ch.get(a[0], 0) + n
                ch[b[1]] = ch.get(b[1], 0) - n
    out = []
    for (core, memory), ch in sorted(changes.items()):
        level = 0
        for ps in sorted(ch):
            level += ch[ps]
            out.append({"ph": "C", "name": NAMES[memory], "pid": core, "ts": ps / 1e6,
                        "args": {"bytes": level}})  # fmt: skip
    return out


def _ends(prog) -> dict[str, tuple[int, int]]:
    """Per tile of `prog`, the indices of the first and last instructions that access it."""
    out: dict[str, list] = {}
    tiles = prog.tiles
    fields: dict[type, tuple] = {}
    for ins in prog.instructions:
        fs = fields.get(type(ins))
        if fs is None:
            fs = fields[type(ins)] = tuple(f.name for f in ins.op_fields() if f.metadata["access"])
        for f in fs:
            v = getattr(ins, f)
            if type(v) is Ap and v.name in tiles:
                e = out.get(v.name)
                if e is None:
                    out[v.name] = [ins.index, ins.index]
                else:
                    e[1] = ins.index
    return {n: (a, b) for n, (a, b) in out.items()}
