"""Cores of one launch meeting at `core_barrier` (docs/races.md): happens-before across cores.

A core's nth barrier (in program order) meets the other core's nth. An access A of one core is
ordered before an access B of the other when, for some n, A is known complete when the first
core's barrier n issues (its clock) and the other's barrier n is done in B's clock: A's core
went past its signal only after A, and B's core past its wait only after the signal arrived.
Each tensor access is marked with those two sets of barriers: (before, after).
"""

from __future__ import annotations

from trnsim.errors import DeadlockError
from trnsim.isa import CoreBarrier
from trnsim.trace.races.clocks import Clocks
from trnsim.trace.races.launch import Launch
from trnsim.trace.races.regions import Shapes, instr_accesses

__all__ = ["marks", "ordered", "check_meeting"]

NONE = (frozenset(), frozenset())


def marks(la: Launch, clocks: Clocks, shapes: Shapes) -> dict:
    """{(Access, (before, after)): label} of the launch's tensor accesses: `before` the
    barriers each is known complete at, `after` those done before it (both empty without
    barriers)."""
    prog, at, ranks = la.prog, clocks.at, clocks.ranks
    bars = [(n, la.pos[id(b)], at[id(b)]) for n, b in enumerate(_barriers(prog.instructions))]
    memo: dict = {}
    out: dict = {}
    for ins in prog.instructions:
        accs = [a for a in instr_accesses(ins, shapes, prog.tiles, memo)
                if a.buf.startswith("tensor ")]  # fmt: skip
        if not accs:
            continue
        mark = NONE
        if bars:
            (q, p), k = la.pos[id(ins)], at[id(ins)]
            if la.isdma[q]:  # a transfer is done once a clock knows it complete
                mine = ranks.get(id(ins), ())
                before = frozenset(n for n, _, kb in bars if any(kb[c] >= r for c, r in mine))
            else:
                before = frozenset(n for n, _, kb in bars if kb[q] >= p)
            mark = (before, frozenset(n for n, (qb, pb), _ in bars if k[qb] >= pb))
        for a in accs:
            out.setdefault((a, mark), la.label(ins))
    return out


def _barriers(instructions) -> list:
    return [i for i in instructions if i.__class__ is CoreBarrier]


def ordered(x: tuple, y: tuple) -> bool:
    """Are accesses marked x (one core) and y (the other) ordered by a barrier they share?"""
    return bool(x[0] & y[1]) or bool(y[0] & x[1])


def check_meeting(kernel, source: str, lnc: int | None = None) -> None:
    """Raise DeadlockError when the two cores of a kernel with barriers cannot both finish:
    both cores' queues are advanced together (as `Launch.order` does one core's), a barrier
    issuing once the other core has reached its own of the same number. A kernel with one
    core's list has no second core to meet (unless `lnc` is 1: the run refuses its barriers)."""
    if not any(_barriers(p.instructions) for p in kernel.per_core) or lnc == 1:
        return
    las = [Launch(p, kernel.name, source, c) for c, p in enumerate(kernel.per_core[:2])]
    number = [{id(b): n for n, b in enumerate(_barriers(la.prog.instructions))} for la in las]
    values: list[dict] = [{}, {}]
    heads = [[0] * len(la.lists) for la in las]
    reached: list[set] = [set(), set()]
    progress = True
    while progress:
        progress = False
        for c, la in enumerate(las):
            for qk, lst in enumerate(la.lists):
                h = heads[c][qk]
                while h < len(lst):
                    ins = lst[h]
                    if any(values[c].get(s, 0) < v for s, v in ins.wait):
                        break
                    n = number[c].get(id(ins))
                    if n is not None:
                        progress |= n not in reached[c]
                        reached[c].add(n)
                        if n not in reached[1 - c]:
                            break
                    for s, k in ins.signal:
                        values[c][s] = values[c].get(s, 0) + k
                    h += 1
                if h != heads[c][qk]:
                    heads[c][qk] = h
                    progress = True
    stuck = [
        _stuck(la, la.lists[qk][h], number[c], values[c], c, len(las))
        for c, la in enumerate(las)
        for qk, h in enumerate(heads[c])
        if h < len(la.lists[qk])
    ]
    if stuck:
        raise DeadlockError("deadlock: " + "; ".join(stuck))


def _stuck(la: Launch, ins, number: dict, values: dict, c: int, cores: int) -> str:
    label = la.label(ins).replace(" queue ", f" queue core{c}.", 1)
    n = number.get(id(ins))
    if n is not None and all(values.get(s, 0) >= v for s, v in ins.wait):
        why = " (the kernel has no list for it: give per_core both)" if cores == 1 else ""
        return (
            f"{label} waits at core_barrier {n + 1} for core{1 - c}'s, which it never reaches{why}"
        )
    s, v = next((s, v) for s, v in ins.wait if values.get(s, 0) < v)
    return f"{label} waits for semaphore '{s}' >= {v}, which can reach only {values.get(s, 0)}"
