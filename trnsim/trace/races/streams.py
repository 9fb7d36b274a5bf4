"""Happens-before between the steps of a trace's streams (launches, copies, events).

A stream is in order: each step completes before the next begins. `wait: e` passes once some
stream has recorded `e` (the first record to complete is the one waited for): the wait is
ordered after what precedes every record of `e` that could come first. Records later in the
waiting stream itself cannot come first; a record not yet placed is assumed to know only its
own stream's earlier steps. Launches of different streams on one logical core run one at a time
but in no fixed order, and `synchronize` orders nothing between streams (the host enqueues every
stream before running them). On a system, a collective's meeting (`collectives`) passes once
every rank of its group has reached it, and orders its ranks' streams both ways.
"""

from __future__ import annotations

from trnsim.errors import DeadlockError
from trnsim.trace.program import Program
from trnsim.trace.races.collectives import Meetings, brief, meetings

__all__ = ["stream_order", "stream_clocks"]


def stream_order(program: Program, meet: Meetings | None = None) -> list[tuple[int, int]]:
    """The (stream, step) pairs in an order the streams can run in (each advanced while its
    next wait's event has been recorded and its next collective's meeting has every rank of
    the group at it; `meet`: the program's `collectives.meetings`); raises DeadlockError when
    some stream can never go on, naming each stuck wait's line and, for a cycle of waits, the
    cycle, and each collective some rank never reaches."""
    meet = meetings(program) if meet is None else meet
    heads = [0] * len(program.streams)
    recorded: set = set()
    met: set = set()  # meetings every rank of the group has reached
    order = []
    progress = True
    while progress:
        progress = False
        for i, st in enumerate(program.streams):
            while heads[i] < len(st.steps):
                step = st.steps[heads[i]]
                if step.kind == "wait" and step.arg not in recorded:
                    break
                key = meet.of.get((i, heads[i]))
                if key is not None and key not in met:
                    if not _all_there(meet, key, heads):
                        break
                    met.add(key)
                if step.kind == "record":
                    recorded.add(step.arg)
                order.append((i, heads[i]))
                heads[i] += 1
                progress = True
    stuck = {
        i: st.steps[heads[i]] for i, st in enumerate(program.streams) if heads[i] < len(st.steps)
    }
    if stuck:
        raise DeadlockError(_stuck_message(program, stuck, meet, heads))
    return order


def _all_there(meet: Meetings, key: tuple, heads: list[int]) -> bool:
    """Has every rank of the meeting's group reached it (its stream's head is at the step)?"""
    members = meet.members[key]
    return len(members) == len(key[0]) and all(heads[i] == j for i, j in members)


def _stuck_message(program: Program, stuck: dict, meet: Meetings, heads: list[int]) -> str:
    """One part per stuck stream: its wait's line, the event, and who records it later; or
    its collective, the ranks that never reach it and those at it."""
    parts = []
    told: set = set()
    for i, step in stuck.items():
        st = program.streams[i]
        key = meet.of.get((i, heads[i]))
        if step.kind == "collective" and key is not None:
            if key in told:
                continue
            told.add(key)
            group = key[0]
            at = [(program.streams[m].rank, program.streams[m].name)
                  for m, j in meet.members[key] if heads[m] == j]  # fmt: skip
            never = [r for r in group if r not in {r for r, _ in at}]
            parts.append(
                f"{program.source}:{step.line} collective {step.arg.op} #{key[1]} on group "
                f"{brief(group)}: ranks {brief(never)} never reach it; ranks "
                f"{brief(r for r, _ in at)} wait at it (streams {', '.join(n for _, n in at)})"
            )
            continue
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


def stream_clocks(
    program: Program, order: list[tuple[int, int]], meets: Meetings | None = None
) -> dict[tuple, dict]:
    """(stream, step) -> the vector clock of the step's start, sparse: {stream: how many of its
    steps are known complete}, streams known to have completed none left out (a trace of
    10,000 independent streams keeps 10,000 one-entry clocks, not 10,000 x 10,000 ints). A
    collective's meeting completes with the clocks of all its ranks' streams joined."""
    meets = meetings(program) if meets is None else meets
    joined: dict[tuple, dict] = {}  # meeting -> the clock its steps complete with
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
        key = meets.of.get((i, j))
        if key is not None:  # its accesses follow every rank's posting it
            if key not in joined:  # the first rank to pass: every other is at it still
                both: dict = {}
                for m, _ in meets.members[key]:
                    for x, v in last.get(m, {}).items():
                        if v > both.get(x, 0):
                            both[x] = v
                done = dict(both)
                for m, mj in meets.members[key]:
                    done[m] = mj + 1
                joined[key] = (both, done)
            start[(i, j)], last[i] = joined[key]
            continue
        start[(i, j)] = k
        done = dict(k)
        done[i] = j + 1
        if step.kind == "record":
            records[(i, j)] = done
        last[i] = done
    return start
