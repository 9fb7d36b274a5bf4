"""Collective steps in the race and deadlock check (docs/races.md, "Collectives").

On a program placed on a system (`trace.ranks.place`), a `collective:` step is its rank's part
of a collective: the k-th collective a rank issues on a group meets the k-th of every other rank
of that group. Such a meeting orders streams as an event would, both ways: what happens before
it on any rank of the group happens before what follows it on every rank of the group (a
collective completes on no rank before every rank has posted it). It reads its `tensor` and
writes its `out` (or `tensor`, in place), each rank its own copy.

Which step meets which is known before running when each rank issues its collectives on a group
from one stream (they are then posted in that stream's order): such a group is *static*. Its
ranks must issue the same sequence (op, size, dtype, reduction, algorithm, root, pairs) or the
check stops with an error naming the two ranks, the op, the sequence number and both lines; a
meeting some rank never reaches is a deadlock (`streams.stream_order` blocks each stream at a
static meeting until every rank of the group has reached it). A rank issuing on one group from
several streams makes the group *dynamic*: its order is the run's, so its steps neither block
nor order anything here, and the run reports what goes wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trnsim.errors import TraceError
from trnsim.trace.program import Program

__all__ = ["Meetings", "meetings", "brief"]


@dataclass
class Meetings:
    """The collectives of a placed program: `of[(stream, step)]` -> the key (group, k) of the
    meeting a static collective step is part of; `members[key]` -> its (stream, step) pairs, in
    group order; `steps`, every collective step (static or not)."""

    of: dict[tuple[int, int], tuple] = field(default_factory=dict)
    members: dict[tuple, list[tuple[int, int]]] = field(default_factory=dict)
    steps: set = field(default_factory=set)

    def group(self, key: tuple) -> tuple[int, ...]:
        return key[0]


def meetings(program: Program) -> Meetings:
    """The program's collective meetings (none for a program on one chip); raises TraceError
    when the ranks of a static group issue different collectives at one position."""
    out = Meetings()
    if program.ranks is None:
        return out
    names = {st.name: i for i, st in enumerate(program.streams)}
    by_group: dict[tuple, dict[int, list]] = {}  # group -> rank -> [(issuer, step, on)]
    for i, st in enumerate(program.streams):
        for j, step in enumerate(st.steps):
            if step.kind != "collective":
                continue
            on = names[step.stream] if step.stream else i
            rank = program.streams[on].rank
            out.steps.add((i, j))
            by_group.setdefault(step.arg.group, {}).setdefault(rank, []).append((i, j, on))
    for group, ranks in by_group.items():
        if any(len({(i, on) for i, _, on in steps}) > 1 for steps in ranks.values()):
            continue  # a rank issues from several streams: the run decides the order
        length = max(len(v) for v in ranks.values())
        for k in range(length):
            here = {r: ranks[r][k] for r in group if r in ranks and k < len(ranks[r])}
            _same(program, group, k, here)
            key = (group, k)
            out.members[key] = [here[r][:2] for r in group if r in here]
            for i, j, _ in here.values():
                out.of[(i, j)] = key
    return out


def _signature(c) -> tuple:
    dt = c.dtype.name if c.dtype is not None else None
    return (c.op, c.nbytes, dt, c.reduce_op, c.algorithm, c.root, c.pairs)


def _describe(c) -> str:
    red = f" ({c.reduce_op})" if c.op in ("all_reduce", "reduce_scatter") else ""
    return f"{c.op} of {c.nbytes} bytes of {c.dtype.name}{red}"


def _same(program: Program, group, k: int, here: dict) -> None:
    """The k-th collectives of the ranks of `group` (`here`: rank -> (stream, step, on)) agree."""
    first = None
    for r, (i, j, _) in here.items():
        step = program.streams[i].steps[j]
        if first is None:
            first = (r, step)
            continue
        r0, s0 = first
        if _signature(step.arg) != _signature(s0.arg):
            src = program.source
            raise TraceError(
                f"{src}:{step.line}: collective #{k} on group {brief(group)}: rank {r} issues "
                f"{_describe(step.arg)} but rank {r0} issues {_describe(s0.arg)} (line "
                f"{s0.line}); expected the ranks of a group to issue its collectives in the "
                f"same order"
            )


def brief(ranks) -> str:
    """A group in messages: `(0, 1, 2)`, or its first 8 ranks and its size."""
    ranks = list(ranks)
    if len(ranks) > 8:
        return "(" + ", ".join(map(str, ranks[:8])) + f", ... {len(ranks)} ranks)"
    return "(" + ", ".join(map(str, ranks)) + ")"
