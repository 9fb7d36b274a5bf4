"""The races within one launch: the accesses of its instructions, in a topological order, each
checked against the history of its buffer's earlier accesses that are still live.

An earlier access E is ordered before a new one under the new access's clock when E's engine
queue has done it (or, for a DMA transfer, it is known complete). The history stays short:
- a buffer no instruction of the launch writes is not tracked (reads never race);
- an access ordered before a new one whose region holds it, the new one writing or both
  reading, is shadowed: whatever would race with it also races with the new one (a later access
  unordered with E cannot be ordered before the new one, nor after it, since E is before it);
- an access that every queue with accesses to the buffer still to come knows is done can
  race with nothing more (dropped now and then, when a buffer's history doubles).
"""

from __future__ import annotations

from trnsim.isa import Instr
from trnsim.trace.races.clocks import Clocks
from trnsim.trace.races.found import Race
from trnsim.trace.races.launch import Launch
from trnsim.trace.races.regions import Shapes, contains, dims_meet, instr_accesses

__all__ = ["launch_races"]

# an entry of a buffer's history: (lo, hi, queue, position, Access, instruction, ranks), where
# [lo, hi) is the access's flat range and ranks None for an engine queue's instruction
_NONE: list = []


class _Front:
    """Per queue, the clock of its latest instruction so far; per tracked buffer, per queue
    that accesses it, how many of that queue's instructions accessing it are still to come."""

    def __init__(self, la: Launch, left: dict[str, dict[int, int]]):
        self.clocks: list = [None] * len(la.queues)
        self.left = left

    def knows(self, e: tuple, buf: str) -> bool:
        """Does every queue that will still access `buf` know entry e is done?"""
        q, p, ranks = e[2], e[3], e[6]
        for r, n in self.left[buf].items():
            if not n:
                continue
            f = self.clocks[r]
            if f is None:
                return False
            if ranks is None:
                if f[q] < p:
                    return False
            elif not any(f[c] >= x for c, x in ranks):
                return False
        return True


def _accesses(la: Launch, shapes: Shapes) -> tuple[dict, dict, dict]:
    """(id(instruction) -> (its accesses to tracked buffers, those buffers), the tracked
    buffers -> per queue accessing them how many of its instructions do, each distinct tensor
    Access -> the label of its first instruction). Tracked: the buffers that can race within
    the launch (some instruction writes them; more than one queue, or a DMA queue, accesses
    them)."""
    tiles = la.prog.tiles
    memo: dict = {}
    accs = {id(ins): instr_accesses(ins, shapes, tiles, memo) for ins in la.prog.instructions}
    written = {a.buf for lst in accs.values() for a in lst if a.write}
    users: dict[str, dict[int, int]] = {}
    tensor_acc: dict = {}
    for ins in la.prog.instructions:
        qk = la.pos[id(ins)][0]
        mine = accs[id(ins)]
        for buf in {a.buf for a in mine if a.buf in written}:
            per = users.setdefault(buf, {})
            per[qk] = per.get(qk, 0) + 1
        for a in mine:
            if a not in tensor_acc and a.buf.startswith("tensor "):
                tensor_acc[a] = la.label(ins)
    tracked = {b: qs for b, qs in users.items() if len(qs) > 1 or any(la.isdma[q] for q in qs)}
    out = {}
    for key, mine in accs.items():
        acc = [a for a in mine if a.buf in tracked]
        out[key] = (acc, tuple({a.buf: None for a in acc}))
    return out, tracked, tensor_acc


def launch_races(la: Launch, order: list[Instr], clocks: Clocks, shapes: Shapes, races: list):
    """The tensor accesses of one launch (each distinct tensor Access it makes -> the label of
    its first instruction); the races between its instructions go into `races` (whose
    `append` may end the check: `races.Races`)."""
    at, pos, isdma = clocks.at, la.pos, la.isdma
    accs, tracked, tensor_acc = _accesses(la, shapes)
    hist: dict[str, list] = {}
    limit: dict[str, int] = {}
    front = _Front(la, tracked)
    for ins in order:
        qk, p = pos[id(ins)]
        k = front.clocks[qk] = at[id(ins)]
        mine, bufs = accs[id(ins)]
        if not mine:
            continue
        ranks = None if not isdma[qk] else clocks.ranks.get(id(ins), _NONE)
        for buf in bufs:
            tracked[buf][qk] -= 1  # (this instruction's own accesses are checked below)
        for acc in mine:
            keep = _check(acc, ins, qk, k, isdma[qk], hist.get(acc.buf, _NONE), la, races)
            keep.append((acc.flat[0], acc.flat[1], qk, p, acc, ins, ranks))
            hist[acc.buf] = keep
            if len(keep) > limit.get(acc.buf, 16):
                keep = hist[acc.buf] = [e for e in keep if not front.knows(e, acc.buf)]
                limit[acc.buf] = max(16, 2 * len(keep))
    return tensor_acc


def _check(acc, ins, qk, k, dma, lst, la, races) -> list:
    """Report the entries of `lst` that race with `acc` (of `ins`, on queue qk, clock k);
    return the entries that stay live (those `acc` does not shadow)."""
    lo, hi, write, name, dims = acc.flat[0], acc.flat[1], acc.write, acc.name, acc.dims
    keep = []
    for e in lst:
        oacc, oins = e[4], e[5]
        if oins is ins or e[1] <= lo or hi <= e[0]:
            keep.append(e)
            continue
        if oacc is not acc and oacc.name == name and not dims_meet(oacc.dims, dims):
            keep.append(e)  # disjoint slices of one operand (overlap() is this, or the flat range)
            continue
        ranks = e[6]
        if ranks is None:
            ordered = (e[2] == qk and not dma) or k[e[2]] >= e[3]
        else:
            ordered = any(k[c] >= r for c, r in ranks)
        if ordered:
            if (write or not oacc.write) and (oacc is acc or contains(acc, oacc)):
                continue  # shadowed
        elif write or oacc.write:
            a, b = (oins, ins) if oins.index <= ins.index else (ins, oins)  # in trace order
            regions = (oacc.text, acc.text) if a is oins else (acc.text, oacc.text)
            races.append(Race(la.label(a), la.label(b), f"{regions[0]} / {regions[1]} ({acc.buf})"))
        keep.append(e)
    return keep
