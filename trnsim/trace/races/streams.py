"""Happens-before between the steps of a trace's streams (launches, copies, events).

A stream is in order: each step completes before the next begins. `wait: e` passes once some
stream has recorded `e` (the first record to complete is the one waited for): the wait is
ordered after what precedes every record of `e` that could come first. Records later in the
waiting stream itself cannot come first; a record not yet placed is assumed to know only its
own stream's earlier steps. Launches of different streams on one logical core run one at a time
but in no fixed order, and `synchronize` orders nothing between streams (the host enqueues every
stream before running them).
"""

from __future__ import annotations

from trnsim.errors import DeadlockError
from trnsim.trace.program import Program

__all__ = ["stream_order", "stream_clocks"]


def stream_order(program: Program) -> list[tuple[int, int]]:
    """The (stream, step) pairs in an order the streams can run in (each advanced while its
    next wait's event has been recorded); raises DeadlockError when some stream can never go
    on, naming each stuck wait's line and, for a cycle of waits, the cycle."""
    heads = [0] * len(program.streams)
    recorded: set = set()
    order = []
    progress = True
    while progress:
        progress = False
        for i, st in enumerate(program.streams):
            while heads[i] < len(st.steps):
                step = st.steps[heads[i]]
                if step.kind == "wait" and step.arg not in recorded:
                    break
                if step.kind == "record":
                    recorded.add(step.arg)
                order.append((i, heads[i]))
                heads[i] += 1
                progress = True
    stuck = {
        i: st.steps[heads[i]] for i, st in enumerate(program.streams) if heads[i] < len(st.steps)
    }
    if stuck:
        raise DeadlockError(_stuck_message(program, stuck))
    return order


def _stuck_message(program: Program, stuck: dict) -> str:
    """One part per stuck stream: its wait's line, the event, and who records it later."""
    parts = []
    for i, step in stuck.items():
        st = program.streams[i]
        later = [
            program.streams[j].name
            for j in stuck
            if any(s.kind == "record" and s.arg == step.arg for s in program.streams[j].steps)
        ]
        if later:
            who = " and ".join(f"stream {n}" for n in later)
            why = (
                f"which only {who} record{'s' if len(later) == 1 else ''}, after a wait that "
                f"cannot be met (a cycle of waits)"
            )
        else:
            why = "which no stream can record before it"
        parts.append(
            f"{program.source}:{step.line} stream {st.name} waits for event '{step.arg}', {why}"
        )
    return "deadlock: " + "; ".join(parts)


def stream_clocks(program: Program, order: list[tuple[int, int]]) -> dict[tuple, dict]:
    """(stream, step) -> the vector clock of the step's start, sparse: {stream: how many of its
    steps are known complete}, streams known to have completed none left out (a trace of
    10,000 independent streams keeps 10,000 one-entry clocks, not 10,000 x 10,000 ints)."""
    last: dict[int, dict] = {}
    start: dict[tuple, dict] = {}
    records: dict[tuple, dict] = {}
    every: dict[str, list] = {}
    for i, st in enumerate(program.streams):
        for j, step in enumerate(st.steps):
            if step.kind == "record":
                every.setdefault(step.arg, []).append((i, j))
    for i, j in order:
        step = program.streams[i].steps[j]
        k = last.get(i, {})
        if step.kind == "wait":
            meet = None
            for ri, rj in every[step.arg]:
                if ri == i and rj > j:
                    continue  # a later record of this stream cannot come first
                # not yet placed: it knows at least its own stream's steps before it
                c = records.get((ri, rj)) or {ri: rj + 1}
                meet = (
                    dict(c)
                    if meet is None
                    else {x: min(v, c[x]) for x, v in meet.items() if x in c}
                )
            k = dict(k)
            for x, v in meet.items():
                if v > k.get(x, 0):
                    k[x] = v
        start[(i, j)] = k
        done = dict(k)
        done[i] = j + 1
        if step.kind == "record":
            records[(i, j)] = done
        last[i] = done
    return start
