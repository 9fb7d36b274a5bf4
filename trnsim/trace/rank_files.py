"""A trace per rank: `trnsim run --system SYSTEM rank0.yaml rank1.yaml ...`, each file one rank's
program (docs/trace_extensions.md, "A trace per rank").

Each file is a whole trace (its own tensors, kernels, streams, events), loaded and checked alone,
and names its rank at the top (`rank: 3`: every stream of the file runs on rank 3; the order of
the files does not matter). `merge(programs)` joins them into one program with per-rank streams,
the form a single trace can also be written in, so that placing, the race and deadlock check
and the run are the same:

- a stream `s` of rank r's file is stream `r<r>.s`, its events `r<r>.<event>` (a file's events
  are its own: ranks order each other only by collectives), its kernels `r<r>.<kernel>`;
- tensors are shared by name: every rank holds its own copy of every tensor of every file, so a
  name must mean one shape and dtype (and init) in every file that declares it; ranks whose
  buffers differ in size (an all_to_allv's receive buffer) use different names;
- `mode`, `seed` and `lnc` must agree (or be left out), and so must `system:` (each file's
  resolved against its folder); `outputs:` add up;
- each collective keeps its file for its label and its errors.

`check_collectives(placed, files)`, on the merged program once placed on the system, finds
before running what would stop the run, naming the files: a rank of a group that has no file,
ranks issuing a group's k-th collective differently (op, size, dtype, reduction, algorithm,
root, pairs, counts), and a collective some rank never reaches (a deadlock).

Errors are one line naming the file, its line and key.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from trnsim.errors import DeadlockError, TraceError
from trnsim.trace.program import CollectiveSpec, Program, Step
from trnsim.trace.ranks import trace_system

__all__ = ["merge", "check_collectives", "RankFile"]


class RankFile:
    """Where a merged stream came from: its file and rank."""

    def __init__(self, source: str, rank: int):
        self.source, self.rank = source, rank


def merge(programs: list[Program], system: str | None = None) -> tuple[Program, list[RankFile]]:
    """The rank files' programs (in command-line order) as one program, and for each of its
    streams the file it came from. `system`: the `--system` given (the files' `system:` must
    then not matter); else the files must name one system, or none."""
    if not programs:
        raise TraceError("no trace file; expected one trace file per rank")
    owner: dict[int, Program] = {}
    given: dict[Path, Program] = {}
    for p in programs:
        here = Path(p.source).resolve()
        if here in given:
            raise TraceError(
                f"{p.source}:1: trace: the file is given twice ({given[here].source}); expected "
                f"each rank's file once"
            )
        given[here] = p
        if p.rank is None:
            raise TraceError(
                f"{p.source}:1: rank: missing: a run of several trace files takes each as one "
                f"rank's program; expected rank: R at the top of the file (R its rank)"
            )
        if p.rank in owner:
            raise TraceError(
                f"{p.source}:{p.lines.get('rank', 1)}: rank: rank {p.rank} is also "
                f"{owner[p.rank].source}'s; expected one file per rank"
            )
        owner[p.rank] = p
    first = programs[0]
    out = Program(
        name=first.name,
        chip=first.chip,
        seed=first.seed,
        mode=first.mode,
        lnc=first.lnc,
        source=first.source,
        lines=dict(first.lines),
    )
    out.system = system if system is not None else _system(programs)
    for key in ("mode", "seed", "lnc"):
        _agree(programs, key)
    for p in programs:
        out.lnc = out.lnc if out.lnc is not None else p.lnc
    files: list[RankFile] = []
    declared: dict[str, Program] = {}
    for p in programs:
        _tensors(out, p, declared)
        prefix = f"r{p.rank}."
        for name, k in p.kernels.items():
            out.kernels[prefix + name] = replace(k, name=prefix + name)
        for st in p.streams:
            steps = [_step(step, prefix, p.source) for step in st.steps]
            out.streams.append(replace(st, name=prefix + st.name, rank=p.rank, steps=steps))
            files.append(RankFile(p.source, p.rank))
        out.timing += [(prefix + a, prefix + b) for a, b in p.timing]
        out.outputs += [n for n in p.outputs if n not in out.outputs]
    return out, files


def _system(programs: list[Program]) -> str | None:
    """The one system the files name (resolved against each file's folder), or None."""
    named = [(p, trace_system(p.system, p.source)) for p in programs if p.system is not None]
    if not named:
        return None
    p0, s0 = named[0]
    for p, s in named[1:]:
        if _key(s) != _key(s0):
            raise TraceError(
                f"{p.source}:{p.lines.get('system', 1)}: system: {p.system}, but {p0.source} "
                f"names {p0.system}; expected the files of one run to name one system (or "
                f"trnsim run --system NAME)"
            )
    if len(named) != len(programs):
        missing = next(p for p in programs if p.system is None)
        raise TraceError(
            f"{missing.source}:1: system: missing, but {p0.source} names {p0.system}; expected "
            f"every file to name it, or none (with trnsim run --system NAME)"
        )
    return s0


def _key(system: str) -> str:
    """A system name as given, or a path resolved: the same file named two ways is one."""
    if "/" in system or system.endswith((".yaml", ".yml")):
        return str(Path(system).resolve())
    return system


def _agree(programs: list[Program], key: str) -> None:
    """`key` (mode, seed, lnc) the same in every file that gives it."""
    given = [p for p in programs if key in p.lines or (key == "lnc" and p.lnc is not None)]
    for p in given[1:]:
        a, b = getattr(given[0], key), getattr(p, key)
        if a != b:
            raise TraceError(
                f"{p.source}:{p.lines.get(key, 1)}: {key}: {b}, but {given[0].source} has "
                f"{key}: {a}; expected one {key} for the files of one run"
            )


def _tensors(out: Program, p: Program, declared: dict[str, Program]) -> None:
    for name, t in p.tensors.items():
        seen = out.tensors.get(name)
        if seen is None:
            out.tensors[name] = t
            declared[name] = p
        elif replace(seen, line=0) != replace(t, line=0):
            other = declared[name]
            raise TraceError(
                f"{p.source}:{t.line}: tensors.{name}: {_spec(t)}, but {other.source} (line "
                f"{seen.line}) declares {name} as {_spec(seen)}; expected one shape, dtype and "
                f"init per name in every file (each rank holds every tensor), or another name"
            )


def _spec(t) -> str:
    where = ", on host" if t.on != "hbm" else ""
    view = f", a view of {t.view}" if t.view else ""
    return f"{list(t.shape)} {t.dtype.name}{where}{view}" + (
        f" init {t.init!r}" if t.init is not None else ""
    )


def _step(step: Step, prefix: str, source: str) -> Step:
    """A step of a rank file's stream, its names (streams, events, kernels) the merged ones."""
    stream = prefix + step.stream if step.stream else None
    if step.kind in ("record", "wait", "launch"):
        return replace(step, arg=prefix + step.arg, stream=stream)
    if step.kind == "collective":
        return replace(step, arg=replace(step.arg, source=source), stream=stream)
    return replace(step, stream=stream)


# -- before running: the collectives of the files against each other -----------------------------


def check_collectives(placed: Program, files: list[RankFile]) -> None:
    """Raise TraceError (ranks that disagree, a rank with no file) or DeadlockError (a
    collective some rank never reaches) for the merged program `placed` on its system; each
    message names the files and lines. A rank issuing on one group from several streams is
    left to the run (its order is the run's), as the race check does."""
    has_file = {f.rank: f.source for f in files}
    names = {st.name: i for i, st in enumerate(placed.streams)}
    by_group: dict[tuple, dict[int, list]] = {}
    for i, st in enumerate(placed.streams):
        for step in st.steps:
            if step.kind == "collective":
                on = names[step.stream] if step.stream else i
                rank = placed.streams[on].rank
                by_group.setdefault(step.arg.group, {}).setdefault(rank, []).append((on, step))
    for group, ranks in by_group.items():
        if any(len({on for on, _ in steps}) > 1 for steps in ranks.values()):
            continue
        some = next(iter(ranks.values()))[0][1]
        absent = [r for r in group if r not in has_file]
        if absent:
            raise TraceError(
                f"{_at(some.arg)}: collective {some.arg.op} on group {_brief(group)}: ranks "
                f"{_brief(absent)} have no trace file (files are given for ranks "
                f"{_brief(sorted(has_file))}); expected a file with rank: R for every rank of "
                f"the group"
            )
        for k in range(max(len(v) for v in ranks.values())):
            here = {r: ranks[r][k][1].arg for r in group if r in ranks and k < len(ranks[r])}
            r0 = next(iter(here))
            for r, c in here.items():
                if signature(c) != signature(here[r0]):
                    raise TraceError(
                        f"{_at(c)}: collective #{k} on group {_brief(group)}: rank {r} issues "
                        f"{describe(c)} but rank {r0} issues {describe(here[r0])} "
                        f"({_at(here[r0])}); expected the ranks of a group to issue its "
                        f"collectives in the same order"
                    )
            missing = [r for r in group if r not in here]
            if missing:
                c = here[r0]
                issued = "; ".join(
                    f"{Path(has_file[r]).name} issues {len(ranks.get(r, ()))}" for r in missing[:4]
                ) + (" ..." if len(missing) > 4 else "")
                raise DeadlockError(
                    f"deadlock: {_at(c)}: collective {c.op} #{k} on group {_brief(group)}: "
                    f"ranks {_brief(missing)} never reach it ({issued} on the group); ranks "
                    f"{_brief(sorted(here))} wait at it; expected every rank of the group to "
                    f"issue it"
                )


def signature(c: CollectiveSpec) -> tuple:
    dt = c.dtype.name if c.dtype is not None else None
    return (c.op, c.nbytes, dt, c.reduce_op, c.algorithm, c.root, c.pairs, c.counts)


def describe(c: CollectiveSpec) -> str:
    red = f" ({c.reduce_op})" if c.op in ("all_reduce", "reduce_scatter") else ""
    counts = f" counts {[list(r) for r in c.counts]}" if c.counts else ""
    return f"{c.op} of {c.nbytes} bytes of {c.dtype.name}{red}{counts}"


def _at(c: CollectiveSpec) -> str:
    return f"{c.source}:{c.line}"


def _brief(ranks) -> str:
    ranks = list(ranks)
    if len(ranks) > 8:
        return "(" + ", ".join(map(str, ranks[:8])) + f", ... {len(ranks)} ranks)"
    return "(" + ", ".join(map(str, ranks)) + ")"
