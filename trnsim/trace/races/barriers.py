"""Cores of one launch meeting at `core_barrier` (docs/races.md): happens-before across cores.

A core's nth barrier (in program order) meets the other core's nth. An access A of one core is
ordered before an access B of the other when, for some n, A is known complete when the first
core's barrier n issues (its clock) and the other's barrier n is done in B's clock: A's core
went past its signal only after A, and B's core past its wait only after the signal arrived.
Each tensor access is marked with those two sets of barriers: (before, after).
"""

from __future__ import annotations

from trnsim.isa import CoreBarrier
from trnsim.trace.races.clocks import Clocks
from trnsim.trace.races.launch import Launch
from trnsim.trace.races.regions import Shapes, instr_accesses

__all__ = ["marks", "ordered"]

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
