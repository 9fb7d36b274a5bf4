"""Happens-before within one launch, as vector clocks (docs/races.md, "What orders what").

A clock is a list of ints: per engine queue the instructions done, per DMA queue the transfers
issued, and per (DMA queue, semaphore) how many of the queue's transfers that signal the
semaphore are known complete (a prefix of them). An instruction's clock is what is known done
when it issues; a wait joins the clocks of the signals that every way of reaching its value
includes.
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
    (component, rank) in each (queue, semaphore) list it signals: t is known complete under a
    clock k when k[component] >= rank for one of them."""

    at: dict[int, list]
    ranks: dict[int, list]


class _Sem:
    """The signals of one semaphore, per queue: (position, increment, instruction) in queue
    order, their positions, the running sums of their increments and the largest increment."""

    def __init__(self, by_queue: dict[int, list]):
        self.by_queue = by_queue
        self.places = {q: [x[0] for x in lst] for q, lst in by_queue.items()}
        self.sums = {}
        self.top = {}
        for q, lst in by_queue.items():
            sums, t = [0], 0
            for x in lst:
                t += x[1]
                sums.append(t)
            self.sums[q] = sums
            self.top[q] = max(x[1] for x in lst)
        self.total = sum(s[-1] for s in self.sums.values())

    def available(self, qk: int, p: int, heads: list | None) -> dict[int, int]:
        """Per signalling queue, how many of its signals may issue before the waiter at
        position p of queue qk (`heads`: what may issue before it; None: everything)."""
        out = {}
        for q, places in self.places.items():
            if q == qk:
                out[q] = bisect_left(places, p)
            elif heads is not None:
                out[q] = bisect_right(places, heads[q])
            else:
                out[q] = len(places)
        return out

    def slack(self, avail: dict[int, int], v: int) -> int:
        sums = self.sums
        return sum([sums[q][m] for q, m in avail.items()]) - v

    def slack_of_all(self, qk: int, p: int, v: int) -> int:
        """The slack when every signal may come first (but those after p on the waiter's own
        queue qk)."""
        if qk not in self.sums:
            return self.total - v
        own = self.sums[qk]
        return self.total - own[-1] + own[bisect_left(self.places[qk], p)] - v


def launch_clocks(la: Launch, order: list[Instr]) -> Clocks:
    """The clocks of every instruction of `la`, computed along `order` (a topological one)."""
    nq, isdma, pos = len(la.queues), la.isdma, la.pos
    by_sem: dict[str, dict[int, list]] = {}
    comp: dict[tuple, int] = {}
    ranks: dict[int, list] = {}
    for ins in la.prog.instructions:
        qk, p = pos[id(ins)]
        for s, n in ins.signal:
            lst = by_sem.setdefault(s, {}).setdefault(qk, [])
            lst.append((p, n, ins))
            if isdma[qk]:
                c = comp.setdefault((qk, s), nq + len(comp))
                ranks.setdefault(id(ins), []).append((c, len(lst)))
    sems = {s: _Sem(by) for s, by in by_sem.items()}
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
                avail = sem.available(qk, p, heads.get(id(ins)))
                _join_required(k, sem, avail, sem.slack(avail, v), s, at, done, isdma, comp)
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
                if v > 0 and sem is not None and sem.slack_of_all(qk, p, v) > 0:
                    need.setdefault(qk, []).append(ins)
                    break
    return need


def _join_required(k, sem, avail, slack, s, at, done, isdma, comp) -> None:
    """Join into `k` the completion of every signal of `sem` (among `avail`) that every way of
    reaching the waited value includes: those whose increment, with the increments after them
    on their own engine queue (a DMA transfer: its own increment alone), exceeds the slack."""
    for q, m in avail.items():
        if not m:
            continue
        lst = sem.by_queue[q]
        if isdma[q]:
            c = comp[(q, s)]
            j = k[c]
            while j < m and lst[j][1] > slack:
                j += 1  # (only when the slack is below every increment: at most once each)
            if j > k[c]:
                k[c] = j
            if sem.top[q] > slack:
                for i in range(m - 1, -1, -1):
                    if lst[i][1] > slack:  # the last required transfer: after its issue
                        _join(k, at[id(lst[i][2])])
                        break
        else:
            # the required signals are a prefix of the queue's: the last of them carries the rest
            sums = sem.sums[q]
            j = min(m, bisect_left(sums, sums[m] - slack)) - 1
            if j >= 0:
                _join(k, done[id(lst[j][2])])


def _join(k: list, o: list) -> None:
    k[:] = map(max, k, o)
