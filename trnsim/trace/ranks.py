"""A trace placed on a system: each stream on a rank, each collective's group as ranks.

`place(program, system)` returns a copy of `program` whose every stream has its `rank` (the
trace's `rank:`, or by default the rank on logical core `core:` of chip 0: rank = core when
every logical core holds a rank) and its `core` (that rank's logical core on its chip), and
whose every `collective:` step names its group as ranks (`all`: every rank of the system), its
root (broadcast; default the group's first rank) and its size. `Program.ranks` is then the
system's rank count: under a system each rank has its own copy of every tensor (the ranks run
one program, SPMD, each on its own memory), and only a collective moves data between them.

Errors are one line naming the trace's line and key (`t.yaml:9: streams[1].rank: rank 64
does not exist: trn2-48xl has ranks 0..63; expected ...`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from trnsim.config import SystemConfig, load_system
from trnsim.errors import TraceError
from trnsim.trace.program import CollectiveSpec, Program, Step, StreamSpec

__all__ = ["place", "stream_ranks", "system_config", "on_its_system", "trace_system"]


def system_config(program: Program, name: str | None = None, overrides=()) -> SystemConfig | None:
    """The system a run of `program` uses: `name` (`--system`) or the trace's `system:` (a path
    relative to the trace's folder), with `overrides` (`--set`); None for one chip."""
    name = name or program.system
    if name is None:
        return None
    if name == program.system:
        name = trace_system(name, program.source)
    return load_system(name, overrides)


def trace_system(name: str, source: str) -> str:
    """A trace's `system:` as `load_system` takes it: a path (it contains `/` or ends with
    .yaml) relative to the folder of the trace at `source`; a bundled name as it is."""
    if (name.endswith((".yaml", ".yml")) or "/" in name) and not Path(name).is_absolute():
        return str(Path(source).parent / name)
    return name


def on_its_system(program: Program) -> Program:
    """`program` placed on the system its `system:` names, if it names one and is not placed
    yet (the race and deadlock check analyses a trace on its system); else `program`."""
    if program.ranks is not None or program.system is None:
        return program
    return place(program, system_config(program))


def place(program: Program, system: SystemConfig) -> Program:
    """`program` on `system` (see the module docstring); the program itself is not changed."""
    src = program.source
    if program.lnc is not None and program.lnc != system.lnc:
        raise TraceError(
            f"{src}:{program.lines.get('lnc', 0)}: lnc: {program.lnc}, but {system.name} runs "
            f"its chips at lnc {system.lnc}; expected lnc: {system.lnc} or none (or --set "
            f"lnc={program.lnc} on the system)"
        )
    ranks = {st.name: _rank(st, i, system, src) for i, st in enumerate(program.streams)}
    streams = []
    for i, st in enumerate(program.streams):
        steps = [
            _step(step, f"{src}:{step.line}: streams[{i}].do[{j}].collective",
                  ranks[step.stream or st.name], system, program.tensors)
            for j, step in enumerate(st.steps)
        ]  # fmt: skip
        rank = ranks[st.name]
        streams.append(replace(st, core=system.rank_place(rank)[1], rank=rank, steps=steps))
    return replace(program, streams=streams, ranks=system.ranks)


def stream_ranks(program: Program) -> list[int | None]:
    """Each stream's rank once placed; [None, ...] for a program on one chip (its streams share
    one memory)."""
    if program.ranks is None:
        return [None] * len(program.streams)
    return [st.rank for st in program.streams]


def _rank(st: StreamSpec, i: int, system: SystemConfig, src: str) -> int:
    where = f"{src}:{st.lines.get('rank', st.lines.get('core', st.line))}: streams[{i}]"
    if st.rank is not None:
        if not 0 <= st.rank < system.ranks:
            raise TraceError(
                f"{where}.rank: rank {st.rank} does not exist: {system.name} has ranks "
                f"0..{system.ranks - 1}; expected a rank of the system"
            )
        return st.rank
    holders = {system.rank_place(r)[1]: r for r in system.chip_ranks(0)}
    if st.core not in holders:
        cores = ", ".join(map(str, sorted(holders)))
        raise TraceError(
            f"{where}.core: logical core {st.core} of chip 0 holds no rank of {system.name} "
            f"(its ranks are on logical cores {cores}); expected one of those, or rank:"
        )
    return holders[st.core]


def _step(step: Step, where: str, rank: int, system: SystemConfig, tensors) -> Step:
    """A step of a stream of `rank`; a collective's group, root and sizes checked on `system`
    (errors at `where`, the step's line and key)."""
    if step.kind != "collective":
        return step
    c: CollectiveSpec = step.arg
    group = c.group if c.group is not None else tuple(range(system.ranks))
    for r in group:
        if r >= system.ranks:
            raise TraceError(
                f"{where}.group: rank {r} does not exist: {system.name} has ranks "
                f"0..{system.ranks - 1}; expected ranks of the system"
            )
    if rank not in group:
        raise TraceError(
            f"{where}.group: the stream's rank {rank} is not in the group {_brief(group)}; "
            f"expected a group holding the rank that issues it (each rank of a group issues "
            f"the step)"
        )
    root = c.root
    if c.op == "broadcast":
        root = group[0] if root is None else root
        if root not in group:
            raise TraceError(f"{where}.root: rank {root} is not in the group {_brief(group)}; "
                             f"expected a rank of the group")  # fmt: skip
    for pair in c.pairs:
        for r in pair:
            if r not in group:
                raise TraceError(f"{where}.pairs: rank {r} is not in the group "
                                 f"{_brief(group)}; expected ranks of the group")  # fmt: skip
    if c.op == "all_to_allv":
        _counts(c, where, rank, group, tensors)
    if c.op in ("all_gather", "reduce_scatter") and c.out is not None:
        small, big = (c.tensor, c.out) if c.op == "all_gather" else (c.out, c.tensor)
        s, b = _size(tensors[small]), _size(tensors[big])
        if b != len(group) * s:
            raise TraceError(
                f"{where}.out: tensor {big} has {b} bytes and {small} {s}, in a group of "
                f"{len(group)}; expected {big} of {len(group)} x {small}'s size"
            )
    return replace(step, arg=replace(c, group=tuple(group), root=root))


def _counts(c: CollectiveSpec, where: str, rank: int, group, tensors) -> None:
    """all_to_allv's counts on the placed group: n x n, and the rank's row (what it sends) and
    column (what it receives) within its `tensor` and `out`."""
    n = len(group)
    if len(c.counts) != n:
        raise TraceError(f"{where}.counts: {len(c.counts)} rows for a group of {n} ranks; "
                         f"expected an {n} x {n} matrix of element counts")  # fmt: skip
    if c.tensor is None:
        return
    i = group.index(rank)
    send, recv = sum(c.counts[i]), sum(row[i] for row in c.counts)
    for key, name, need, what in (("tensor", c.tensor, send, "sends"),
                                  ("out", c.out, recv, "receives")):  # fmt: skip
        have = math.prod(tensors[name].shape)
        if have < need:
            raise TraceError(
                f"{where}.{key}: rank {rank} {what} {need} elements (counts "
                f"{'row' if key == 'tensor' else 'column'} {i}) but tensor {name} holds "
                f"{have}; expected a tensor of at least {need} elements"
            )


def _size(t) -> int:
    return math.prod(t.shape) * t.dtype.itemsize


def _brief(ranks) -> str:
    ranks = list(ranks)
    if len(ranks) > 8:
        return "(" + ", ".join(map(str, ranks[:8])) + f", ... {len(ranks)} ranks)"
    return "(" + ", ".join(map(str, ranks)) + ")"
