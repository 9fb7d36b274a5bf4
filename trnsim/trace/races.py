"""The static race and deadlock check of a `Program` (docs/races.md gives the rules).

Within one launch on one physical core, every engine queue is in order and every DMA queue
issues in order (its transfers complete in any order); semaphore waits order what every
interleaving of the signals guarantees. Between launches and host copies, streams are in order
and events (`record`/`wait`) order streams. Happens-before is kept as vector clocks (one
component per queue, and for each DMA queue the set of its completed transfers, as a prefix plus
extras), computed once per distinct core program: two accesses to overlapping regions, at least
one a write, neither ordered before the other, are a race.

`find_races(program)` returns them (`Race`, with a one-line `message`); `check_deadlocks`
raises for a launch or a stream schedule that can never finish. Neither simulates.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from trnsim.errors import DeadlockError, SimError
from trnsim.isa import Ap, Engine, Instr
from trnsim.trace.program import CoreProgram, Program

__all__ = ["Race", "find_races", "check_races", "check_deadlocks", "RaceError"]

WRITE_FIELDS = ("dst", "reduce_dst")


class RaceError(SimError):
    """Two accesses to overlapping memory, at least one a write, are not ordered."""


@dataclass(frozen=True)
class Access:
    """One operand of one instruction (or host copy): `buf` names the memory (a tile, or the
    base tensor of a view), `dims` the (start, stop, step) per dim of `name`'s shape, `flat` the
    element range [lo, hi) in `buf`."""

    buf: str
    name: str
    dims: tuple
    flat: tuple
    write: bool
    text: str


@dataclass(frozen=True)
class Race:
    first: str
    second: str
    region: str

    @property
    def message(self) -> str:
        return (
            f"race: {self.first} and {self.second} both access {self.region}, at least one "
            f"writing, and no semaphore or event orders them"
        )


# -- regions ------------------------------------------------------------------------------------


def _dims(ap: Ap, shape: tuple) -> tuple:
    out = []
    for d, n in enumerate(shape):
        item = ap.index[d] if d < len(ap.index) else (None, None, None)
        if isinstance(item, int):
            i = item + n if item < 0 else item
            out.append((i, i + 1, 1))
            continue
        start, stop, step = item
        step = step or 1
        start = 0 if start is None else (start + n if start < 0 else start)
        stop = n if stop is None else (stop + n if stop < 0 else stop)
        out.append((max(0, start), min(n, max(stop, start + 1)), step))
    return tuple(out)


def _flat(dims: tuple, shape: tuple) -> tuple:
    lo = hi = 0
    stride = 1
    for (start, stop, step), n in zip(reversed(dims), reversed(shape)):
        last = start + (len(range(start, stop, step)) - 1) * step
        lo += start * stride
        hi += last * stride
        stride *= n
    return lo, hi + 1


def _ranges_meet(a: tuple, b: tuple) -> bool:
    if a[0] >= b[1] or b[0] >= a[1]:
        return False
    if a[2] == b[2] and a[2] > 1 and (a[0] - b[0]) % a[2]:
        return False
    return True


def overlap(a: Access, b: Access) -> bool:
    """Conservative: same name: the slices meet in every dim; views: the flat ranges meet."""
    if a.buf != b.buf:
        return False
    if a.name == b.name:
        return all(_ranges_meet(x, y) for x, y in zip(a.dims, b.dims))
    return a.flat[0] < b.flat[1] and b.flat[0] < a.flat[1]


def _contains(a: Access, b: Access) -> bool:
    """Does a's region hold all of b's (same name, unit steps in a, or equal slices)?"""
    if a.name != b.name:
        return False
    for x, y in zip(a.dims, b.dims):
        if x == y:
            continue
        if x[2] != 1 or y[0] < x[0] or y[1] > x[1]:
            return False
    return True


class _Shapes:
    """name -> (base buffer, shape) for tensors (views resolve to their base) and tiles."""

    def __init__(self, program: Program):
        self.tensors = {}
        self.memo: dict = {}
        for t in program.tensors.values():
            base = t
            while base.view is not None and base.view in program.tensors:
                base = program.tensors[base.view]
            self.tensors[t.name] = (f"tensor {base.name}", t.shape)

    def access(self, ap: Ap, tiles: dict, write: bool) -> Access | None:
        if ap.name in tiles:
            buf, shape = f"tile {ap.name}", tiles[ap.name].shape
        elif ap.name in self.tensors:
            buf, shape = self.tensors[ap.name]
        else:
            return None
        key = (ap, buf, shape, write)
        acc = self.memo.get(key)
        if acc is None:
            dims = _dims(ap, shape)
            acc = self.memo[key] = Access(buf, ap.name, dims, _flat(dims, shape), write, str(ap))
        return acc


def instr_accesses(ins: Instr, shapes: _Shapes, tiles: dict) -> list[Access]:
    out = []
    for f in ins.op_fields():
        v = getattr(ins, f.name)
        if type(v) is Ap:
            acc = shapes.access(v, tiles, f.name in WRITE_FIELDS)
            if acc is not None:
                out.append(acc)
    return out


# -- one core program: clocks, deadlocks, races -------------------------------------------------


def _queue(ins: Instr) -> str:
    return f"q{ins.queue}" if ins.engine == Engine.DMA else ins.engine.label


@dataclass
class CoreAnalysis:
    """What a core program's analysis keeps for the checks between launches."""

    races: list
    tensor_accesses: list  # (Access, label)


def _label(ins: Instr, kernel: str, source: str, queue: str) -> str:
    return f"{source}:{ins.line} kernel {kernel} queue {queue} {ins.label}"


def analyse_core(
    prog: CoreProgram, kernel: str, shapes: _Shapes, source: str, core: int = 0
) -> CoreAnalysis:
    """The races within one launch of `prog`; raises DeadlockError if it can never finish.

    A clock is a list of ints: per engine queue the instructions done, per DMA queue the
    transfers issued, and per (DMA queue, semaphore) how many of the queue's transfers that
    signal the semaphore are known complete (a prefix of them)."""
    instrs = prog.instructions
    queues = sorted({_queue(i) for i in instrs})
    qid = {q: k for k, q in enumerate(queues)}
    lists = {q: [i for i in instrs if _queue(i) == q] for q in queues}
    nq = len(queues)
    isdma = [q.startswith("q") for q in queues]
    pos = {}
    for q, lst in lists.items():
        for k, ins in enumerate(lst):
            pos[id(ins)] = (qid[q], k + 1)
    order = _greedy(instrs, lists, queues, kernel, source, core)
    # signals per semaphore, per queue: (position, increment, instruction) in queue order;
    # per DMA transfer its (component, rank) in each (queue, semaphore) list it belongs to
    sigs: dict[str, dict[int, list]] = {}
    comp: dict[tuple, int] = {}
    ranks: dict[int, list] = {}
    for ins in instrs:
        qk, p = pos[id(ins)]
        for s, n in ins.signal:
            lst = sigs.setdefault(s, {}).setdefault(qk, [])
            lst.append((p, n, ins))
            if isdma[qk]:
                c = comp.setdefault((qk, s), nq + len(comp))
                ranks.setdefault(id(ins), []).append((c, len(lst)))
    prefix = {
        s: {q: _cumsum([x[1] for x in lst]) for q, lst in by.items()} for s, by in sigs.items()
    }
    places = {s: {q: [x[0] for x in lst] for q, lst in by.items()} for s, by in sigs.items()}
    tops = {s: {q: max(x[1] for x in lst) for q, lst in by.items()} for s, by in sigs.items()}
    width = nq + len(comp)
    heads = _may_precede(instrs, [lists[q] for q in queues], pos, sigs, prefix, places)
    cl: dict[int, list] = {}
    done_clock: dict[int, list] = {}
    last: list = [None] * nq
    for ins in order:
        qk, p = pos[id(ins)]
        k = last[qk][:] if last[qk] is not None else [0] * width
        for s, v in ins.wait:
            if v > 0 and s in sigs:
                _join_wait(
                    k,
                    s,
                    v,
                    qk,
                    p,
                    sigs[s],
                    prefix[s],
                    places[s],
                    cl,
                    done_clock,
                    heads.get(id(ins)),
                    isdma,
                    comp,
                    tops[s],
                )
        if isdma[qk]:
            k[qk] = p
            cl[id(ins)] = last[qk] = k
        else:
            cl[id(ins)] = k
            d = k[:]
            d[qk] = p
            done_clock[id(ins)] = last[qk] = d
    return _races(order, cl, pos, queues, ranks, shapes, prog, kernel, source)


def _cumsum(xs: list) -> list:
    out, t = [0], 0
    for x in xs:
        t += x
        out.append(t)
    return out


def _join_wait(
    k: list,
    s: str,
    v: int,
    qk: int,
    p: int,
    by_queue: dict,
    prefix: dict,
    places: dict,
    cl: dict,
    done_clock: dict,
    heads: list | None,
    isdma: list,
    comp: dict,
    top: dict,
) -> None:
    """Join into `k` the clocks of the signals of `s` that every way of reaching `v` includes:
    those whose increment, with the increments ordered after them on their own engine queue,
    exceeds the slack (the increments of every signal that may issue before the waiter, minus
    v). `heads` (from `_may_precede`) bounds, per queue, what may issue before the waiter;
    None when the waiter needs no bound (every signal is required anyway)."""
    avail = {}
    total = 0
    for q in by_queue:
        if q == qk:  # own queue: only the signals before the waiter
            m = bisect_left(places[q], p)
        elif heads is not None:  # only the signals that may issue before the waiter
            m = bisect_right(places[q], heads[q])
        else:
            m = len(by_queue[q])
        avail[q] = m
        total += prefix[q][m]
    slack = total - v
    for q, m in avail.items():
        if not m:
            continue
        lst, sums = by_queue[q], prefix[q]
        if isdma[q]:
            c = comp[(q, s)]
            j, last_req = k[c], -1
            if top[q] > slack:
                for i in range(m - 1, -1, -1):
                    if lst[i][1] > slack:
                        last_req = i
                        break
            while j < m and lst[j][1] > slack:
                j += 1  # (only when the slack is below every increment: at most once each)
            k[c] = max(k[c], j)
            if last_req >= 0:
                _join(k, cl[id(lst[last_req][2])])
        else:
            # required: every signal whose suffix of increments (up to m) exceeds the slack;
            # they are a prefix of the queue's signals, so the last of them carries the rest
            j = min(m, bisect_left(sums, sums[m] - slack)) - 1
            if j >= 0:
                _join(k, done_clock[id(lst[j][2])])


def _may_precede(instrs, lists, pos, sigs, prefix, places) -> dict:
    """Per waiter whose wait leaves slack when every signal counts: how many instructions of
    each queue may issue before it (a list, one count per queue).

    For a waiter W on queue q this is the launch executed abstractly with q stopped at W: every
    other queue advances while its waits are met, a DMA transfer's signals counting from its
    issue. Semaphores only grow, so whatever issues before W in some execution issues in this
    run. One run per queue serves all its waiters: after recording W's counts, W issues and the
    run goes on until q's next instruction."""
    nq = len(lists)
    need: dict[int, list] = {}
    for ins in instrs:
        qk, p = pos[id(ins)]
        for s, v in ins.wait:
            if v > 0 and s in sigs:
                total = sum(
                    prefix[s][r][bisect_left(places[s][r], p) if r == qk else -1] for r in sigs[s]
                )
                if total - v > 0:
                    need.setdefault(qk, []).append(ins)
                    break
    out: dict[int, list] = {}
    for q, waiters in need.items():
        wanted = {id(w) for w in waiters}
        values: dict[str, int] = {}
        heads = [0] * nq
        waiting: dict[str, list] = {}
        work = [r for r in range(nq) if r != q]
        lst = lists[q]
        for h in range(len(lst) + 1):
            while work:
                r = work.pop()
                rl, j = lists[r], heads[r]
                while j < len(rl):
                    ins = rl[j]
                    blocked = None
                    for s, v in ins.wait:
                        if values.get(s, 0) < v:
                            blocked = s
                            break
                    if blocked is not None:
                        waiting.setdefault(blocked, []).append(r)
                        break
                    for s, n in ins.signal:
                        values[s] = values.get(s, 0) + n
                        woken = waiting.pop(s, None)
                        if woken:
                            work += woken
                    j += 1
                heads[r] = j
            if h == len(lst):
                break
            ins = lst[h]
            if id(ins) in wanted:
                heads[q] = h
                out[id(ins)] = heads[:]
            for s, n in ins.signal:  # its waits are met: the launch has no deadlock
                values[s] = values.get(s, 0) + n
                woken = waiting.pop(s, None)
                if woken:
                    work += woken
    return out


def _join(k: list, o: list) -> None:
    for i, x in enumerate(o):
        if x > k[i]:
            k[i] = x


def _greedy(instrs, lists, queues, kernel, source, core) -> list:
    """A topological order of the launch (every queue advanced while its next instruction's
    waits are met by the signals so far); raises DeadlockError when some queue can never go on."""
    values: dict[str, int] = {}
    heads = dict.fromkeys(queues, 0)
    order = []
    progress = True
    while progress:
        progress = False
        for q in queues:
            lst, h = lists[q], heads[q]
            while h < len(lst) and all(values.get(s, 0) >= v for s, v in lst[h].wait):
                ins = lst[h]
                for s, n in ins.signal:
                    values[s] = values.get(s, 0) + n
                order.append(ins)
                h += 1
                progress = True
            heads[q] = h
    stuck = [(q, lists[q][heads[q]]) for q in queues if heads[q] < len(lists[q])]
    if stuck:
        parts = []
        for q, ins in stuck:
            s, v = next((s, v) for s, v in ins.wait if values.get(s, 0) < v)
            later = [i for i in lists[q][heads[q] :] if any(x == s for x, _ in i.signal)]
            why = (
                " that only its own later instructions signal"
                if later
                and all(
                    _queue(i) == q
                    for i in instrs
                    if any(x == s for x, _ in i.signal) and i not in order
                )
                else ""
            )
            parts.append(
                f"{_label(ins, kernel, source, f'core{core}.{q}')} waits for semaphore "
                f"'{s}' >= {v}{why}, which can reach only {values.get(s, 0)}"
            )
        raise DeadlockError("deadlock: " + "; ".join(parts))
    return order


def _races(order, clocks, pos, queues, ranks, shapes, prog, kernel, source):
    tiles = prog.tiles
    # per buffer, per queue: [(position, Access, instruction)] of its writes and of its reads
    hist: dict[str, dict[int, tuple[list, list]]] = {}
    races, tensor_acc = [], []
    no_ranks: list = []
    # per queue, the clock of its latest instruction (every later one's clock is at least
    # that) and how many of its instructions are still to come: an access that every queue
    # still to come knows is done can race with nothing more and leaves the history
    left = [0] * len(queues)
    for ins in order:
        left[pos[id(ins)][0]] += 1
    front: list = [None] * len(queues)
    limit: dict[str, int] = {}

    def known(e: tuple, oq: int, odma: bool) -> bool:
        for r, f in enumerate(front):
            if not left[r]:
                continue
            if f is None:
                return False
            if not odma:
                if f[oq] < e[0]:
                    return False
            elif not any(f[c] >= x for c, x in ranks.get(id(e[2]), no_ranks)):
                return False
        return True

    for ins in order:
        qk, p = pos[id(ins)]
        q = queues[qk]
        k = clocks[id(ins)]
        dma = q.startswith("q")
        front[qk] = k
        for acc in instr_accesses(ins, shapes, tiles):
            if acc.buf.startswith("tensor"):
                tensor_acc.append((acc, _label(ins, kernel, source, q)))
            per_q = hist.setdefault(acc.buf, {})
            for oq, (ws, rs) in per_q.items():
                odma = queues[oq].startswith("q")
                if oq == qk and not dma:
                    continue
                for lst in (ws, rs) if acc.write else (ws,):
                    for j in range(len(lst) - 1, -1, -1):
                        op, oacc, oins = lst[j]
                        if oins is ins:
                            continue
                        if not odma:
                            if k[oq] >= op:
                                break  # this one and every earlier one is done
                        elif any(k[c] >= r for c, r in ranks.get(id(oins), no_ranks)):
                            continue
                        if overlap(acc, oacc):
                            races.append(
                                Race(
                                    _label(oins, kernel, source, queues[oq]),
                                    _label(ins, kernel, source, q),
                                    f"{oacc.text} / {acc.text} ({acc.buf})",
                                )
                            )
            if acc.write:  # an access ordered before this write, inside its region, is
                # shadowed: whatever would race with it races with this write too
                for oq, lists in per_q.items():
                    odma = queues[oq].startswith("q")
                    per_q[oq] = tuple(
                        [
                            e
                            for e in lst
                            if not (
                                _contains(acc, e[1])
                                and e[2] is not ins
                                and (
                                    (oq == qk and not dma)
                                    or (
                                        k[oq] >= e[0]
                                        if not odma
                                        else any(
                                            k[c] >= r for c, r in ranks.get(id(e[2]), no_ranks)
                                        )
                                    )
                                )
                            )
                        ]
                        for lst in lists
                    )
            ws, rs = per_q.setdefault(qk, ([], []))
            (ws if acc.write else rs).append((p, acc, ins))
            size = sum(len(x) + len(y) for x, y in per_q.values())
            if size > limit.get(acc.buf, 64):
                for oq, lists in per_q.items():
                    odma = queues[oq].startswith("q")
                    per_q[oq] = tuple([e for e in lst if not known(e, oq, odma)] for lst in lists)
                size = sum(len(x) + len(y) for x, y in per_q.values())
                limit[acc.buf] = max(64, 2 * size)
        left[qk] -= 1
    return CoreAnalysis(races, tensor_acc)


# -- the program: launches, copies, streams -----------------------------------------------------


def check_deadlocks(program: Program) -> None:
    """Raise DeadlockError when the streams' event waits can never all be met, or a launch of
    some kernel can never finish (see `find_races`, which runs this check too)."""
    _stream_order(program)
    shapes = _Shapes(program)
    for k in program.kernels.values():
        for c, prog in enumerate(k.per_core):
            analyse_core(prog, k.name, shapes, program.source, c)


def _stream_order(program: Program) -> list:
    """Streams advanced greedily; a wait passes once some stream recorded its event."""
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
    stuck = [
        (st, st.steps[heads[i]]) for i, st in enumerate(program.streams) if heads[i] < len(st.steps)
    ]
    if stuck:
        raise DeadlockError(
            "deadlock: "
            + "; ".join(
                f"{program.source}:{step.line} stream {st.name} waits for event '{step.arg}', "
                f"which no stream can record before it"
                for st, step in stuck
            )
        )
    return order


def find_races(program: Program) -> list[Race]:
    """Every race of `program` (deterministic order); raises DeadlockError first if it can
    never finish."""
    order = _stream_order(program)
    shapes = _Shapes(program)
    src = program.source
    cache: dict[tuple, CoreAnalysis] = {}
    races: list[Race] = []
    n = len(program.streams)
    # stream vector clocks: clock of each step's start
    last = [[0] * n for _ in range(n)]
    start: dict[tuple, list] = {}
    records: dict[tuple, list] = {}  # (stream, step) of a record -> its clock once processed
    every: dict[str, list] = {}
    for i, st in enumerate(program.streams):
        for j, step in enumerate(st.steps):
            if step.kind == "record":
                every.setdefault(step.arg, []).append((i, j))
    for i, j in order:
        st = program.streams[i]
        step = st.steps[j]
        k = last[i][:]
        if step.kind == "wait":
            cands = []
            for ri, rj in every[step.arg]:
                if ri == i and rj > j:
                    continue  # a later record of this stream cannot come first
                own = [0] * n  # not yet placed: at least its own stream's steps before it
                own[ri] = rj + 1
                cands.append(records.get((ri, rj), own))
            meet = [min(c[x] for c in cands) for x in range(n)]
            k = [max(a, b) for a, b in zip(k, meet)]
        start[(i, j)] = k
        done = k[:]
        done[i] = j + 1
        if step.kind == "record":
            records[(i, j)] = done
        last[i] = done
    # what each launch / copy step touches in HBM or host memory
    touched: dict[tuple, list] = {}
    for i, st in enumerate(program.streams):
        for j, step in enumerate(st.steps):
            if step.kind == "copy":
                accs = []
                for ap, w in zip(step.arg, (False, True)):
                    ap = ap if isinstance(ap, Ap) else Ap(ap, (), ap)
                    a = shapes.access(ap, {}, w)
                    if a is not None:
                        accs.append((a, f"{src}:{step.line} stream {st.name} copy"))
                touched[(i, j)] = accs
            elif step.kind == "launch":
                kernel = program.kernels.get(step.arg)
                if kernel is None or not kernel.low_level:
                    continue
                per = []
                for c, prog in enumerate(kernel.per_core):
                    key = (kernel.name, c)
                    if key not in cache:
                        cache[key] = analyse_core(prog, kernel.name, shapes, src, c)
                        races += cache[key].races
                    per.append(cache[key].tensor_accesses)
                for a in range(len(per)):  # the physical cores of one launch are not ordered
                    for b in range(a + 1, len(per)):
                        races += _conflicts(per[a], per[b], f"core{a}", f"core{b}")
                touched[(i, j)] = [x for p in per for x in p]
    steps = sorted(touched)
    for x in range(len(steps)):
        for y in range(x + 1, len(steps)):
            (i1, j1), (i2, j2) = steps[x], steps[y]
            if i1 == i2 or start[(i2, j2)][i1] > j1 or start[(i1, j1)][i2] > j2:
                continue
            races += _conflicts(
                touched[steps[x]],
                touched[steps[y]],
                f"stream {program.streams[i1].name}",
                f"stream {program.streams[i2].name}",
            )
    seen, out = set(), []
    for r in races:
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out


def _conflicts(a: list, b: list, wa: str, wb: str) -> list[Race]:
    """Conflicting pairs between two unordered access lists: the first per pair of buffers."""
    by_buf: dict[str, list] = {}
    seen: set = set()
    for acc, label in b:
        if acc not in seen:
            seen.add(acc)
            by_buf.setdefault(acc.buf, []).append((acc, label))
    writes = {buf for buf, lst in by_buf.items() if any(x.write for x, _ in lst)}
    out, done = [], set()
    seen = set()
    for acc, label in a:
        if acc in seen or (not acc.write and acc.buf not in writes):
            continue
        seen.add(acc)
        for oacc, olabel in by_buf.get(acc.buf, ()):
            if (acc.write or oacc.write) and acc.buf not in done and overlap(acc, oacc):
                out.append(
                    Race(
                        f"{label} ({wa})",
                        f"{olabel} ({wb})",
                        f"{acc.text} / {oacc.text} ({acc.buf})",
                    )
                )
                done.add(acc.buf)
                break
    return out


def check_races(program: Program, allow: bool = False) -> list[str]:
    """Raise RaceError naming the first race (and how many more) unless `allow`; return one
    warning line per race (empty when there is none). Raises DeadlockError for a schedule that
    can never finish, whatever `allow`."""
    races = find_races(program)
    if races and not allow:
        more = f" (and {len(races) - 1} more)" if len(races) > 1 else ""
        raise RaceError(
            f"{races[0].message}{more}; add a wait that orders them, or pass "
            f"--allow-races to run anyway"
        )
    return [f"warning: {r.message}" for r in races]
