"""Dropping the signals no wait can observe, so an engine runs long blocks in one step.

The builder (`builder.py`) gives every access a signal on its tile's counter, but only a few
counts are ever waited for: a DMA that reloads a rotating buffer waits for the reads of its
previous use, an evacuation waits for a bank's last accumulating matmul. The other signals cost
the simulation an event each (`core.run`: an engine's block of instructions ends at the first
one that signals) and tell nothing.

On a semaphore that only one compute engine signals (engines complete in order), the n-th
count is reached by the same instruction whether or not the earlier increments were given at
once: so each increment whose count no wait names is deferred to that semaphore's next signal
on the queue whose count some wait names (or its last one, which keeps the totals). Every wait
is then released by the same instruction, at the same instant, as before: the timeline is
unchanged to the picosecond, and the race check (docs/races.md) sees the same orders. DMA
queues complete out of issue order (a store's latency differs from a load's), so semaphores
a DMA queue signals, or that two queues signal, are left as they are.
"""

from __future__ import annotations

from collections import defaultdict

from trnsim.isa import Engine, Instr
from trnsim.trace.program import CoreProgram

__all__ = ["drop_unobserved_signals"]

_set = object.__setattr__  # instructions are frozen; these are the builder's own, not shared


def drop_unobserved_signals(prog: CoreProgram) -> CoreProgram:
    """`prog` with each compute engine's unobserved increments deferred (module doc); the
    instructions are changed in place (they are the builder's own)."""
    waited: dict[str, set[int]] = defaultdict(set)
    signals: dict[str, list[tuple[Instr, int]]] = defaultdict(list)
    queue: dict[str, object] = {}  # sem -> the one compute engine signalling it (None: other)
    for ins in prog.instructions:
        for s, v in ins.wait:
            waited[s].add(v)
        if ins.signal:
            q = None if ins.engine is Engine.DMA else ins.engine
            for s, n in ins.signal:
                if queue.setdefault(s, q) is not q:
                    queue[s] = None
                signals[s].append((ins, n))
    changed: dict[int, tuple[Instr, dict[str, int]]] = {}  # id -> (instruction, sem -> n)
    for s, sigs in signals.items():
        if queue[s] is None or len(sigs) < 2:
            continue
        marks, count, carry = waited.get(s, ()), 0, 0
        last = len(sigs) - 1
        for i, (ins, n) in enumerate(sigs):
            before, count = count, count + n
            if i < last and not any(v in marks for v in range(before + 1, count + 1)):
                carry += n  # no wait sees this count: give it with the next one
                changed.setdefault(id(ins), (ins, {}))[1][s] = 0
            elif carry:
                changed.setdefault(id(ins), (ins, {}))[1][s] = carry + n
                carry = 0
    for ins, new in changed.values():
        sig = tuple([(s, new.get(s, n)) for s, n in ins.signal if new.get(s, n)])
        _set(ins, "signal", sig)
    return prog
