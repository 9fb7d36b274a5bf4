"""The static race and deadlock check of a `Program` (docs/races.md gives the rules).

Within one launch on one physical core, every engine queue is in order and every DMA queue
issues in order (its transfers complete in any order); semaphore waits order what every
interleaving of the signals guarantees (`clocks`). Between launches and host copies, streams
are in order and events order streams (`streams`). Two accesses to overlapping regions
(`regions`), at least one a write, neither ordered before the other, are a race (`history`
within a launch, `found.conflicts` between unordered launches and copies); tiles the kernel
library placed over one another's bytes are compared by address (`reuse`). A launch (`launch`)
or a stream schedule that can never finish is a deadlock. Nothing here simulates.

`find_races(program)` returns the races (`Race`, with a one-line `message`); `check_races`
raises `RaceError` for the first (or returns warnings); `check_deadlocks` raises
`DeadlockError`.
"""

from __future__ import annotations

from trnsim.isa import Ap
from trnsim.trace.ops import OPS
from trnsim.trace.program import Program
from trnsim.trace.races.barriers import check_meeting, marks, ordered
from trnsim.trace.races.clocks import launch_clocks
from trnsim.trace.races.collectives import meetings
from trnsim.trace.races.found import Race, RaceError, conflicts
from trnsim.trace.races.history import launch_races
from trnsim.trace.races.launch import Launch
from trnsim.trace.races.regions import Shapes, overlap
from trnsim.trace.races.reuse import reuse_races
from trnsim.trace.races.streams import stream_clocks, stream_order
from trnsim.trace.ranks import on_its_system, stream_ranks

__all__ = ["Race", "RaceError", "Races", "find_races", "check_races", "check_deadlocks"]


def check_deadlocks(program: Program) -> None:
    """Raise DeadlockError when the streams' event waits can never all be met, or a launch of
    some kernel can never finish (`find_races` runs this check too). A program naming a
    system (`system:`) is checked on it."""
    program = on_its_system(program)
    meetings(program)  # ranks issuing a group's collectives in different orders
    stream_order(program)
    for k in program.kernels.values():
        for c, prog in enumerate(k.per_core):
            Launch(prog, k.name, program.source, c).order()
        check_meeting(k, program.source, program.lnc)


class Races(list):
    """The races found, in a deterministic order, at most `limit` of them: the check stops at
    the limit (`complete` is then False: there may be more). Adding one past the limit raises
    `_Enough`, which ends the check wherever it is (its history scans included)."""

    def __init__(self, limit: int | None = None):
        super().__init__()
        self.limit = limit
        self.complete = True
        self._seen: set = set()

    def append(self, race: Race) -> None:
        if race in self._seen:
            return
        if self.limit is not None and len(self) >= self.limit:
            self.complete = False
            raise _Enough
        self._seen.add(race)
        super().append(race)

    def extend(self, races) -> None:
        for r in races:
            self.append(r)

    def __iadd__(self, races):
        self.extend(races)
        return self


class _Enough(Exception):
    """The limit of races is reached: stop looking."""


def _analyse(la: Launch, order: list, shapes: Shapes, races: Races, cores: int):
    """(tensor accesses, the same marked for the other cores: `barriers.marks`); the launch's
    races go into `races`."""
    clocks = launch_clocks(la, order)
    accs = launch_races(la, order, clocks, shapes, races)
    reuse_races(la, clocks, races)
    return accs, marks(la, clocks, shapes) if cores > 1 else {}


def find_races(program: Program, library: bool = True, limit: int | None = None) -> Races:
    """The races of `program` (deterministic order), all of them or the first `limit` (the
    check then stops there: `Races.complete` says whether it went through); raises
    DeadlockError first if it can never finish. A kernel the kernel library lowered (it keeps
    its `ops`) is analysed instruction by instruction only when `library`; otherwise it counts
    as its ops' whole-tensor accesses, enough for races between streams (the library's own
    semaphores are its tests' concern: `tests/kernels` race-check its kernels), and far cheaper
    on large lowerings. A program naming a system (`system:`) is analysed on it
    (`trace.ranks.place`)."""
    program = on_its_system(program)
    meet = meetings(program)
    start = stream_clocks(program, stream_order(program, meet), meet)
    orders = _orders(program, library)  # every deadlock before any race
    races = Races(limit)
    try:
        _find(program, library, start, orders, races)
    except _Enough:
        pass
    return races


def _orders(program: Program, library: bool) -> dict[tuple, tuple]:
    """(kernel, core) -> (Launch, a topological order) of each launched kernel analysed
    instruction by instruction; raises DeadlockError for one that can never finish."""
    out: dict[tuple, tuple] = {}
    for st in program.streams:
        for step in st.steps:
            kernel = program.kernels.get(step.arg) if step.kind == "launch" else None
            if kernel is None or not kernel.low_level or (kernel.ops and not library):
                continue
            if (kernel.name, 0) in out:
                continue
            check_meeting(kernel, program.source, program.lnc)
            for c, prog in enumerate(kernel.per_core):
                la = Launch(prog, kernel.name, program.source, c)
                out[(kernel.name, c)] = (la, la.order())
    return out


def _find(program: Program, library: bool, start: dict, orders: dict, races: Races) -> None:
    shapes = Shapes(program)
    src = program.source
    cache: dict[tuple, tuple] = {}
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
            elif step.kind == "collective" and program.ranks is not None:
                touched[(i, j)] = _collective_accesses(step, shapes, f"{src}:{step.line}")
            elif step.kind == "launch":
                kernel = program.kernels.get(step.arg)
                if kernel is None or not kernel.low_level:
                    continue
                if kernel.ops and not library:
                    touched[(i, j)] = _op_accesses(kernel, shapes, src)
                    continue
                per, marked = [], []
                cores = len(kernel.per_core)
                for c in range(cores):
                    key = (kernel.name, c)
                    if key not in cache:
                        cache[key] = _analyse(*orders[key], shapes, races, cores)
                    per.append(cache[key][0])
                    marked.append(cache[key][1])
                for a in range(len(per)):  # the cores of a launch: ordered only by barriers
                    for b in range(a + 1, len(per)):
                        races += conflicts(marked[a], marked[b], f"core{a}", f"core{b}", ordered)
                touched[(i, j)] = {acc: lab for p in per for acc, lab in p.items()}
    _between_streams(program, touched, start, races)


def _collective_accesses(step, shapes: Shapes, where: str) -> dict:
    """{Access: label} of a collective step: its `tensor` read, its `out` (or, in place, its
    `tensor`) written, whole; each rank's own copy (`_between_streams` compares one rank's)."""
    c = step.arg
    accs: dict = {}
    label = f"{where} collective {c.op}"
    for name, write in ((c.tensor, c.out is None), (c.out, True)):
        if name is not None:
            a = shapes.access(Ap(name, (), name), {}, write)
            if a is not None:
                accs[a] = label
    return accs


def _op_accesses(kernel, shapes: Shapes, src: str) -> dict:
    """{Access: label} of a lowered kernel's ops: each tensor an op reads or writes (its
    record's `accesses`), whole."""
    accs: dict = {}
    for op in kernel.ops:
        for _, name, rw in OPS[op.op].accesses(op.args, shapes.tensors):
            a = shapes.access(Ap(name, (), name), {}, rw == "w")
            if a is not None:
                accs.setdefault(a, f"{src}:{op.line} kernel {kernel.name} op {op.op}")
    return accs


def _between_streams(program: Program, touched: dict, start: dict, races: Races) -> None:
    """Conflicts between steps of different streams that no event orders: per buffer some
    step writes, its accesses swept in order of their flat ranges, so that only accesses whose
    ranges meet are compared (10,000 streams touching disjoint memory cost n log n, not n^2).
    The first conflict per (step, step, buffer), into `races`."""
    by_buf: dict[str, list] = {}
    for key in sorted(touched):
        for acc, label in touched[key].items():
            by_buf.setdefault(acc.buf, []).append((acc.flat[0], acc.flat[1], key, acc, label))
    found: set = set()
    names = [st.name for st in program.streams]
    ranks = stream_ranks(program)  # on a system each rank has its own copy of every tensor
    for buf, items in by_buf.items():
        if not any(x[3].write for x in items):
            continue
        items.sort(key=lambda x: x[:2])
        active: list = []
        for item in items:
            lo, _, (i2, j2), acc, label = item
            active = [x for x in active if x[1] > lo]
            for x in active:
                (i1, j1), oacc = x[2], x[3]
                if (
                    i1 == i2
                    or ranks[i1] != ranks[i2]
                    or not (acc.write or oacc.write)
                    or start[(i2, j2)].get(i1, 0) > j1
                    or start[(i1, j1)].get(i2, 0) > j2
                ):
                    continue
                a, b = sorted((x, item), key=lambda y: y[2])
                pair = (a[2], b[2], buf)
                if pair not in found and overlap(a[3], b[3]):
                    found.add(pair)
                    races.append(
                        Race(
                            f"{a[4]} (stream {names[a[2][0]]})",
                            f"{b[4]} (stream {names[b[2][0]]})",
                            f"{a[3].text} / {b[3].text} ({buf})",
                        )
                    )
            active.append(item)


REPORTED = 20
"""Races `check_races` lists with `allow` (a warning line each)."""
COUNTED = 1000
"""Races counted beyond those listed before the check stops looking: "and more than 1000
others" (a racy trace can have millions: listing them would cost more than the simulation)."""


def check_races(program: Program, allow: bool = False, library: bool = True) -> list[str]:
    """Raise RaceError naming the first race unless `allow` (the check stops there); with
    `allow`, return one warning line per race for the first REPORTED and a line counting the
    others (up to COUNTED of them, where the check stops), empty when there is none. Raises
    DeadlockError for a schedule that can never finish, whatever `allow`. `library`: as in
    `find_races`."""
    if not allow:
        races = find_races(program, library, limit=1)
        if races:
            raise RaceError(
                f"{races[0].message}; add a wait that orders them, or pass --allow-races to "
                f"run anyway (it lists the first {REPORTED})"
            )
        return []
    races = find_races(program, library, limit=REPORTED + COUNTED + 1)
    lines = [f"warning: {r.message}" for r in races[:REPORTED]]
    others = len(races) - REPORTED
    if others > 0:
        count = f"{others}" if races.complete else f"more than {COUNTED}"
        lines.append(f"warning: and {count} other race{'s' if others > 1 else ''}")
    return lines
