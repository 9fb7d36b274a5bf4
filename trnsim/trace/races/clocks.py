"""Happens-before within one launch, as vector clocks (docs/races.md, "What orders what").

A clock is a list of ints: per engine queue the instructions done, per DMA queue the transfers
issued, and per (DMA queue, direction) how many of the queue's transfers in that direction are
known complete (a prefix of them: a queue completes its transfers of one direction in order).
An instruction's clock is what is known done when it issues; a wait joins the clocks of the
signals that every way of reaching its value includes.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from trnsim.isa import Instr
from trnsim.trace.races.launch import Launch

__all__ = ["Clocks", "launch_clocks"]


@dataclass
class Clocks:
    """`at[id(ins)]`: the clock when ins issues; `ranks[id(t)]`: for a DMA transfer t, its
    [(component, rank)]: its 1-based place among its queue's transfers of its direction; t is
    known complete under a clock k when k[component] >= rank."""

    at: dict[int, list]
    ranks: dict[int, list]


def direction(ins: Instr, tiles) -> int:
    """A DMA transfer's direction, the unit of completion order: 1 into HBM (a store, which
    completes after `dma.store_completion_latency`), 0 into SBUF or PSUM (after
    `dma.load_completion_latency`). The latencies differ, so only one direction's transfers
    complete in queue order."""
    return 0 if ins.dst.name in tiles else 1


class _Sem:
    """The signals of one semaphore, per signalling line (an engine queue, or a DMA queue's
    transfers of one direction: both complete in order), keyed (queue, direction):
    (position, increment, instruction) in queue order, their positions and the running sums
    of their increments; per queue that waits on it, the positions of its waits and the
    running maximum of the values they wait for (`gates`)."""

    def __init__(self, by_line: dict[tuple, list], gates: dict | None = None):
        self.by_line = by_line
        self.gates = gates or {}
        self.places = {q: [x[0] for x in lst] for q, lst in by_line.items()}
        self.sums = {}
        for q, lst in by_line.items():
            sums, t = [0], 0
            for x in lst:
                t += x[1]
                sums.append(t)
            self.sums[q] = sums
        self.total = sum(s[-1] for s in self.sums.values())
        # one line alone signals it (one semaphore per queue, as Neuron uses them): the
        # signals required by a wait for v are those up to the first whose running sum
        # reaches v, whatever else may precede the waiter
        self.only = next(iter(by_line)) if len(by_line) == 1 else None

    def available(self, qk: int, p: int, heads: list | None, v: int = 0) -> dict[tuple, int]:
        """Per signalling line, how many of its signals may issue before the waiter at
        position p of queue qk (`heads`: what may issue before it; None: everything) and may
        help reach `v`: a signal its queue gives only after one of its instructions waited for
        the semaphore to reach v or more (a queue issues in order) comes when v is reached
        already (a tile whose bytes and semaphores a later op's tile takes: that tile's first
        accesses wait for the old one's last counts, `kernels.liveness`)."""
        out = {}
        gates = self.gates
        for line, places in self.places.items():
            q = line[0]
            if q == qk:
                n = bisect_left(places, p)
            elif heads is not None:
                n = bisect_right(places, heads[q])
            else:
                n = len(places)
            gate = gates.get(q) if v else None
            if gate is not None:
                i = bisect_left(gate[1], v)
                if i < len(gate[0]):
                    n = min(n, bisect_left(places, gate[0][i]))
            out[line] = n
        return out

    def slack(self, avail: dict[int, int], v: int) -> int:
        sums = self.sums
        return sum([sums[q][m] for q, m in avail.items()]) - v

    def slack_of_all(self, qk: int, p: int, v: int) -> int:
        """The slack when every signal may come first (but those after p on the waiter's own
        queue qk)."""
        out = self.total - v
        for line, own in self.sums.items():
            if line[0] == qk:
                out -= own[-1] - own[bisect_left(self.places[line], p)]
        return out


def launch_clocks(la: Launch, order: list[Instr]) -> Clocks:
    """The clocks of every instruction of `la`, computed along `order` (a topological one)."""
    nq, isdma, pos, tiles = len(la.queues), la.isdma, la.pos, la.prog.tiles
    by_sem: dict[str, dict[tuple, list]] = {}
    gates: dict[str, dict[int, tuple]] = {}  # sem -> queue -> (wait positions, running max)
    comp: dict[tuple, int] = {}  # (DMA queue, direction) -> its component
    count: dict[tuple, int] = {}
    ranks: dict[int, list] = {}
    for ins in la.prog.instructions:
        qk, p = pos[id(ins)]
        line = (qk, 0)
        if isdma[qk]:
            line = (qk, direction(ins, tiles))
            c = comp.setdefault(line, nq + len(comp))
            count[line] = n = count.get(line, 0) + 1
            ranks[id(ins)] = [(c, n)]
        for s, n in ins.signal:
            by_sem.setdefault(s, {}).setdefault(line, []).append((p, n, ins))
        for s, v in ins.wait:
            g = gates.setdefault(s, {}).get(qk)
            if g is None:
                gates[s][qk] = ([p], [v])
            elif v > g[1][-1]:
                g[0].append(p)
                g[1].append(v)
    sems = {s: _Sem(by, gates.get(s)) for s, by in by_sem.items()}
    heads = la.may_precede(_needing_bounds(la, sems))
    width = nq + len(comp)
    at: dict[int, list] = {}
    done: dict[int, list] = {}
    last: list = [None] * nq
    for ins in order:
        qk, p = pos[id(ins)]
        k = last[qk][:] if last[qk] is not None else [0] * width
        for s, v in ins.wait:
            if v > 0 and s in sems:
                sem = sems[s]
                line = sem.only
                if line is not None:
                    j = bisect_left(sem.sums[line], v) - 1
                    _join_done(k, sem.by_line[line][j][2], at, done, ranks)
                    continue
                avail = sem.available(qk, p, heads.get(id(ins)), v)
                _join_required(k, sem, avail, sem.slack(avail, v), at, done, ranks)
        at[id(ins)] = k
        if isdma[qk]:
            k[qk] = p
            last[qk] = k
        else:
            d = k[:]
            d[qk] = p
            done[id(ins)] = last[qk] = d
    return Clocks(at, ranks)


def _needing_bounds(la: Launch, sems: dict) -> dict[int, list[Instr]]:
    """Per queue, its waiters whose wait leaves slack when every signal counts (the others need
    no bound on what may precede them: all their signals are required anyway)."""
    need: dict[int, list[Instr]] = {}
    for qk, lst in enumerate(la.lists):
        for p, ins in enumerate(lst, 1):
            for s, v in ins.wait:
                sem = sems.get(s)
                if (
                    v > 0
                    and sem is not None
                    and sem.only is None
                    and sem.slack_of_all(qk, p, v) > 0
                ):
                    need.setdefault(qk, []).append(ins)
                    break
    return need


def _join_required(k, sem, avail, slack, at, done, ranks) -> None:
    """Join into `k` the completion of every signal of `sem` (among `avail`) that every way of
    reaching the waited value includes: those whose increment, with the increments after them
    on their own line (an engine queue, or a DMA queue's direction: each completes in order),
    exceeds the slack. They are a prefix of their line's signals: the last carries the rest."""
    for line, m in avail.items():
        if not m:
            continue
        sums = sem.sums[line]
        j = min(m, bisect_left(sums, sums[m] - slack)) - 1
        if j >= 0:
            _join_done(k, sem.by_line[line][j][2], at, done, ranks)


def _join_done(k: list, x: Instr, at: dict, done: dict, ranks: dict) -> None:
    """Join into `k` that `x` has completed (and with it its line's earlier instructions)."""
    r = ranks.get(id(x))
    if r is None:
        _join(k, done[id(x)])
    else:  # a transfer: known complete, so issued, and so is all its issue knew
        _join(k, at[id(x)])
        c, rank = r[0]
        if k[c] < rank:
            k[c] = rank


def _join(k: list, o: list) -> None:
    k[:] = map(max, k, o)
