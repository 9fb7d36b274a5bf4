"""The static race and deadlock check of a `Program` (docs/races.md gives the rules).

Within one launch on one physical core, every engine queue is in order and every DMA queue
issues in order (its transfers complete in any order); semaphore waits order what every
interleaving of the signals guarantees (`clocks`). Between launches and host copies, streams
are in order and events order streams (`streams`). Two accesses to overlapping regions
(`regions`), at least one a write, neither ordered before the other, are a race (`history`
within a launch, `found.conflicts` between unordered launches and copies). A launch (`launch`)
or a stream schedule that can never finish is a deadlock. Nothing here simulates.

`find_races(program)` returns the races (`Race`, with a one-line `message`); `check_races`
raises `RaceError` for the first (or returns warnings); `check_deadlocks` raises
`DeadlockError`.
"""

from __future__ import annotations

from trnsim.isa import Ap
from trnsim.trace.program import Program
from trnsim.trace.races.barriers import check_meeting, marks, ordered
from trnsim.trace.races.clocks import launch_clocks
from trnsim.trace.races.found import Race, RaceError, conflicts
from trnsim.trace.races.history import launch_races
from trnsim.trace.races.launch import Launch
from trnsim.trace.races.regions import Shapes
from trnsim.trace.races.streams import stream_clocks, stream_order

__all__ = ["Race", "RaceError", "find_races", "check_races", "check_deadlocks"]


def check_deadlocks(program: Program) -> None:
    """Raise DeadlockError when the streams' event waits can never all be met, or a launch of
    some kernel can never finish (`find_races` runs this check too)."""
    stream_order(program)
    for k in program.kernels.values():
        for c, prog in enumerate(k.per_core):
            Launch(prog, k.name, program.source, c).order()
        check_meeting(k, program.source, program.lnc)


def _analyse(program: Program, shapes: Shapes, kernel, c: int):
    """(races, tensor accesses, the same marked for the other cores: `barriers.marks`)."""
    la = Launch(kernel.per_core[c], kernel.name, program.source, c)
    order = la.order()
    clocks = launch_clocks(la, order)
    found, accs = launch_races(la, order, clocks, shapes)
    return found, accs, marks(la, clocks, shapes) if len(kernel.per_core) > 1 else {}


def find_races(program: Program, library: bool = True) -> list[Race]:
    """Every race of `program` (deterministic order); raises DeadlockError first if it can
    never finish. A kernel the kernel library lowered (it keeps its `ops`) is analysed
    instruction by instruction only when `library`; otherwise it counts as its ops' whole-tensor
    accesses, enough for races between streams (the library's own semaphores are its tests'
    concern: `tests/kernels` race-check its kernels), and far cheaper on large lowerings."""
    start = stream_clocks(program, stream_order(program))
    shapes = Shapes(program)
    src = program.source
    cache: dict[tuple, dict] = {}
    races: list[Race] = []
    touched: dict[tuple, dict] = {}  # (stream, step) -> {Access: label} of a launch or copy
    for i, st in enumerate(program.streams):
        for j, step in enumerate(st.steps):
            if step.kind == "copy":
                accs = {}
                for ap, w in zip(step.arg, (False, True)):
                    ap = ap if isinstance(ap, Ap) else Ap(ap, (), ap)
                    a = shapes.access(ap, {}, w)
                    if a is not None:
                        accs.setdefault(a, f"{src}:{step.line} stream {st.name} copy")
                touched[(i, j)] = accs
            elif step.kind == "launch":
                kernel = program.kernels.get(step.arg)
                if kernel is None or not kernel.low_level:
                    continue
                if kernel.ops and not library:
                    touched[(i, j)] = _op_accesses(kernel, shapes, src)
                    continue
                check_meeting(kernel, src, program.lnc)
                per, marked = [], []
                for c in range(len(kernel.per_core)):
                    if (kernel.name, c) not in cache:
                        found, *cache[(kernel.name, c)] = _analyse(program, shapes, kernel, c)
                        races += found
                    per.append(cache[(kernel.name, c)][0])
                    marked.append(cache[(kernel.name, c)][1])
                for a in range(len(per)):  # the cores of a launch: ordered only by barriers
                    for b in range(a + 1, len(per)):
                        races += conflicts(marked[a], marked[b], f"core{a}", f"core{b}", ordered)
                touched[(i, j)] = {acc: lab for p in per for acc, lab in p.items()}
    races += _between_streams(program, touched, start)
    return list(dict.fromkeys(races))


def _op_accesses(kernel, shapes: Shapes, src: str) -> dict:
    """{Access: label} of a lowered kernel's ops: each tensor an op names, whole, written when
    it is an output (`out`, `outs`)."""
    accs: dict = {}
    for op in kernel.ops:
        for key, arg in op.args.items():
            for name in arg if isinstance(arg, list) else [arg]:
                if not isinstance(name, str) or name not in shapes.tensors:
                    continue
                a = shapes.access(Ap(name, (), name), {}, key in ("out", "outs"))
                if a is not None:
                    accs.setdefault(a, f"{src}:{op.line} kernel {kernel.name} op {op.op}")
    return accs


def _between_streams(program: Program, touched: dict, start: dict) -> list[Race]:
    """Conflicts between steps of different streams that no event orders."""
    out: list[Race] = []
    steps = sorted(touched)
    for x in range(len(steps)):
        for y in range(x + 1, len(steps)):
            (i1, j1), (i2, j2) = steps[x], steps[y]
            if i1 == i2 or start[(i2, j2)][i1] > j1 or start[(i1, j1)][i2] > j2:
                continue
            out += conflicts(
                touched[steps[x]],
                touched[steps[y]],
                f"stream {program.streams[i1].name}",
                f"stream {program.streams[i2].name}",
            )
    return out


def check_races(program: Program, allow: bool = False, library: bool = True) -> list[str]:
    """Raise RaceError naming the first race (and how many more) unless `allow`; return one
    warning line per race (empty when there is none). Raises DeadlockError for a schedule that
    can never finish, whatever `allow`. `library`: as in `find_races`."""
    races = find_races(program, library)
    if races and not allow:
        more = f" (and {len(races) - 1} more)" if len(races) > 1 else ""
        raise RaceError(
            f"{races[0].message}{more}; add a wait that orders them, or pass "
            f"--allow-races to run anyway"
        )
    return [f"warning: {r.message}" for r in races]
