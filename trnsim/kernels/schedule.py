"""A static list schedule of a lowering's instructions: the order each in-order queue gets them.

A lowering that pipelines blocks over several engines fixes, by the order it emits them, the
order each engine's queue runs its instructions. A fixed interleaving (stage 2 of a block one
block behind stage 1, stage 3 two, ...) leaves an engine idle whenever a block's chain of passes
does not match the lag: the engine's queue waits, in order, on an instruction whose input another
engine has not made yet, while later work it could do is queued behind it.

`Scheduled` records a lowering's instructions as it emits them (a correct program), derives
their dependencies on tiles as the builder will (a read after the tile's last write, a write
after its last write and the reads since), estimates each instruction's time by its engine's
own cost model (the fixed overhead where it waits on another queue, the commit stall where it
reads what its engine's previous instruction wrote; a DMA transfer by its queue's setup and the
engines' bandwidth: each queue's own, or, `shared_dma`, one transfer's data at a time over all
the queues, as the core's DMA engines move them), and simulates two orders: the emitted one,
and a list schedule in which each next instruction is the one that can start soonest on its
queue (ties in emitted order).
It emits the one that ends sooner. Dependent instructions keep their relative order either
way, so the program computes the same values; only independent work of different blocks
interleaves differently.

An instruction may be recorded with `choices`: other (cls, reads, writes, fields) that do the
same work with the same values on another engine (a norm's normalisation, weight or bias,
`norm_stages.NormStages.flex`); the list schedule runs each on the choice that would end
soonest, so the engines' shares even out in time rather than per block, and its dependencies are
those of all its choices. Instructions recorded with one `group` take the choice the first of
them to be scheduled took (a block's weight and bias passes, which follow one another on its
tile: one engine's work, not a hand-off between two at each instruction). A choice costs its
wait where a producer ran on another queue, as the choices of the producers fell.

`fluid`: the estimate moves the transfers as the chip's DMA does (`_Fluid`, after
`trnsim.dma.system`): each queue's transfers in order, their data at once with other queues', on
the DMA engines of their SBUF partitions, each engine shared fairly (the serial model above let a
transfer's data wait for all those scheduled before it: bf16 rows of 64K saw the weight in at
9.3 us, not 3.8, and put the first fused pass behind the rstd steps that wait for it). A write
then waits only for the writes of the tile it overlaps (the builder's rule: a block's halves,
on two queues, load at once). `search`: a descent over the choices (`_Graph.search`) from
each of the list schedules' starts, kept per graph (a variant's trial, and each core's share of
the op, are one graph).
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.engines.gpsimd import GpSimdEngine
from trnsim.engines.scalar import ScalarEngine
from trnsim.engines.tensor import TensorEngine
from trnsim.engines.vector import VectorEngine
from trnsim.engines.warmup import Warmup
from trnsim.isa import Ap, Engine
from trnsim.kernels.builder import KernelBuilder, region
from trnsim.memory.buffer import Buffer, bind

__all__ = ["Scheduled"]

SEARCHED_MOST = 64  # the searches kept (`Scheduled`, `search`), by graph
_SEARCHED: dict = {}

MODELS = {
    Engine.VECTOR: VectorEngine,
    Engine.SCALAR: ScalarEngine,
    Engine.GPSIMD: GpSimdEngine,
    Engine.TENSOR: TensorEngine,
}


class Scheduled:
    """A context manager around a lowering's emits: inside, `b.emit` records; on leaving, the
    recorded instructions are emitted in the order that the model ends soonest (module doc).
    `makespan` is then that order's estimated ns (from the first recorded instruction).
    `shared_dma`: the DMA queues' transfers share the engines' bandwidth (module doc);
    `dma_parts`: a transfer's data moves on the DMA engines of the partitions it touches only
    (each serves P / engines of them). `reorder` False: the emitted order only (`makespan`
    then estimates the lowering as written, for a lowering that compares plans of its own)."""

    def __init__(self, b: KernelBuilder, cfg: ChipConfig, shared_dma: bool = False,
                 reorder: bool = True, dma_parts: bool = False, fluid: bool = False,
                 search: int = 0):  # fmt: skip
        self.b, self.cfg, self.shared_dma, self.reorder = b, cfg, shared_dma, reorder
        self.fluid, self.search = fluid, search
        self.dma_parts = dma_parts
        self.recorded: list[tuple] = []
        self.makespan = 0.0

    def __enter__(self) -> Scheduled:
        rec, self.choices, self.groups = self.recorded, [], []

        def record(cls, reads, writes, choices=(), group=None, **fields):
            rec.append((cls, reads, writes, fields))
            self.choices.append([rec[-1], *choices])
            self.groups.append(group)

        self.outer = self.b.__dict__.get("emit")  # (an enclosing Scheduled's: it then records
        # this one's order, so a trial may estimate a lowering that schedules its own)
        self.b.emit = record  # an attribute of the instance hides the class's method
        return self

    def __exit__(self, kind, value, tb) -> None:
        del self.b.emit
        if self.outer is not None:
            self.b.emit = self.outer
        if kind is not None or not self.recorded:
            return
        g = _Graph(self.b, self.cfg, self.recorded, self.shared_dma, self.choices, self.groups,
                   self.dma_parts, self.fluid)  # fmt: skip
        emitted, first = list(range(len(self.recorded))), [0] * len(self.recorded)
        options = [(g.simulate(emitted), 0, emitted, first)]
        for v, by in enumerate(("index", "rank") if self.reorder else ()):
            g.use(first)
            greedy = g.greedy(by)
            picks = list(g.pick)
            options.append((g.simulate(greedy), 1 + v, greedy, picks))
        if (self.reorder and self.search and self.b.searching
                and any(len(o) > 1 for o in g.options)):  # fmt: skip
            key = g.signature()
            if key not in _SEARCHED:
                if len(_SEARCHED) >= SEARCHED_MOST:
                    _SEARCHED.clear()
                g.use(first)  # (the choices as recorded, each queue's order by the list schedule)
                fixed = g._run(None, [0.0] * len(first), True)
                starts = [(fixed[1], fixed[0], first)] + [(m, o, p) for m, _, o, p in options[1:]]
                # (a descent from each: where one ends depends on where it starts)
                _SEARCHED[key] = min(
                    (g.search(o, p, self.search // len(starts)) for _, o, p in starts),
                    key=lambda x: x[0],
                )
            span, order, picks = _SEARCHED[key]
            options.append((span, 3, order, picks))
        self.makespan, _, order, picks = min(options)  # (ties: the emitted order)
        for i in order:
            cls, reads, writes, fields = self.choices[i][picks[i]]
            self.b.emit(cls, reads, writes, **fields)


class _Graph:
    """The recorded instructions' dependencies, queues and estimated times."""

    def __init__(self, b: KernelBuilder, cfg: ChipConfig, rec: list[tuple], shared_dma=False,
                 choices=None, groups=None, dma_parts=False, fluid=False):  # fmt: skip
        self.b, self.cfg, self.rec, self.shared_dma = b, cfg, list(rec), shared_dma
        self.fluid = fluid  # (`Scheduled`)
        self.engines: dict[int, tuple] = {}  # (`_Fluid._engines`)
        t = cfg.core.tensor  # with `fluid`, TensorE's warm-up as the core's (`Warmup`)
        self.warm = ((t.warmup_start_rate, round(t.warmup_time * 1e12))
                     if t.warmup and t.warmup_start_rate < 1 else None)  # fmt: skip
        self.groups = groups or [None] * len(rec)
        self.dma_parts = dma_parts  # (`Scheduled`)
        # each instruction's choices (the recorded one first; others: the same work on another
        # engine, `Scheduled` module doc), its dependencies those of all of them
        self.choices = choices or [[r] for r in rec]
        tiles, n = b.tiles, len(rec)
        self.tiles = tiles
        self.queue = [_queue(c, f) for c, _, _, f in rec]
        preds: list[set[int]] = [set() for _ in range(n)]
        reads_since: dict[str, list[int]] = {}  # tile -> its reads since its last write
        # tile -> its writes a read waits for: the last, and with `fluid` the transfers before
        # it into other regions of the tile, with no read between (the builder orders a write
        # after the reads before it, not after a write it does not overlap: a block's halves
        # load at once on two queues)
        writers: dict[str, list[int]] = {}
        waited: dict[str, list[int]] = {}  # tile -> the reads its last writes waited for
        union = [([a for c in cs for a in c[1]], [a for c in cs for a in c[2]])
                 for cs in self.choices]  # fmt: skip
        for i, (reads, writes) in enumerate(union):
            for a in reads:
                preds[i].update(writers.get(a.name, ()))
            beside = False  # a write of i beside an earlier one's region (no edge)
            for a in writes:
                if a.name in tiles:
                    preds[i].update(reads_since.get(a.name, ()))
                    for w in writers.get(a.name, ()):
                        if fluid and not reads_since.get(a.name) and self._beside(w, i, a):
                            beside = True  # (after the reads the writes beside it waited for)
                            preds[i].update(waited.get(a.name, ()))
                        else:
                            preds[i].add(w)
            for a in reads:
                if a.name in tiles:
                    reads_since.setdefault(a.name, []).append(i)
            for a in writes:
                if a.name in tiles:
                    if not beside:
                        writers[a.name], waited[a.name] = [], reads_since.get(a.name, [])
                    writers[a.name].append(i)
                    reads_since[a.name] = []
            preds[i].discard(i)
        self.preds = [sorted(p) for p in preds]
        self.succs: list[list[int]] = [[] for _ in range(n)]
        for i, ps in enumerate(self.preds):
            for p in ps:
                self.succs[p].append(i)
        # an instruction waits on a semaphore (its fixed overhead) only for a producer on
        # another queue that no earlier instruction of its queue waited for (`builder`)
        waited: dict = {}
        self.cost = []
        self.options: list[list[tuple]] = []  # each choice's (queue, cost)
        # an instruction with choices: each choice's cost without and with a wait (`_flex`)
        self.costs: dict[int, list[tuple[float, float]]] = {}
        for i in range(n):
            cross = {p for p in self.preds[i] if self.queue[p] != self.queue[i]}
            seen = waited.setdefault(self.queue[i], set())
            cs = self.choices[i]
            if len(cs) == 1:
                self.cost.append(self._cost(i, bool(cross - seen)))
                self.options.append([(self.queue[i], self.cost[i])])
            else:
                pairs = self.costs[i] = [(self._cost(i, False, c), self._cost(i, True, c))
                                         for c in cs]  # fmt: skip
                self.cost.append(pairs[0][bool(cross - seen)])
                opts = [(self.queue[i], self.cost[i])]
                for c, pair in zip(cs[1:], pairs[1:]):
                    q = _queue(c[0], c[3])
                    opts.append((q, pair[any(self.queue[p] != q for p in self.preds[i])]))
                self.options.append(opts)
            seen |= cross
        self.pick = [0] * n
        d = cfg.core.dma
        self.setup = (d.transfer_setup + (d.engines - 1) * d.engine_stagger) * 1e9
        self.latency = d.load_completion_latency * 1e9
        self.bw = d.engines * d.engine_bandwidth / 1e9  # bytes a ns
        self.commit = {}
        for e, model in MODELS.items():
            c = getattr(getattr(cfg.core, e.label), "commit_latency_cycles", 0)
            self.commit[e] = c * 1e9 / model(cfg.core).clock_hz

    def signature(self) -> tuple:
        """What the estimate of an order depends on (the same for each core's share of an op
        and for a variant's trial and its lowering: `Scheduled`'s search is kept by it)."""
        return (tuple(map(tuple, self.preds)), tuple(map(tuple, self.options)),
                tuple(tuple(c) for c in self.costs.values()), tuple(self.groups),
                tuple(_Fluid(self)._engines(i) for i in range(len(self.rec))
                      if isinstance(self.queue[i], tuple)),
                tuple(self.cost[i] for i in range(len(self.rec))
                      if isinstance(self.queue[i], tuple)))  # fmt: skip

    def search(self, order: list[int], picks: list[int], evals: int) -> tuple:
        """(estimated end, order, picks): from `picks` (and their list schedule, `order`), a
        descent over the choices: each instruction's (each group's) other choices, and two
        instructions of one kind (the same class on the same queues) on different queues
        swapped (the nearest pairs first), each tried by the list schedule of the choices so
        fixed (`greedy`), each that ends sooner kept; until a pass gains nothing or `evals`
        list schedules were tried. A choice's engine by
        the end it gives the whole schedule, not the instruction: the greedy pick evens the
        engines' load block by block, ending a chain sooner at the expense of work after it."""
        n, zero = len(self.rec), [0.0] * len(self.rec)
        units: dict = {}  # a group's instructions, or one instruction
        for i in range(n):
            if len(self.options[i]) > 1:
                units.setdefault(("g", self.groups[i]) if self.groups[i] is not None else i,
                                 []).append(i)  # fmt: skip
        unit = list(units.values())
        kinds: dict = {}  # (class, its choices' queues) -> its units, in order
        for u in unit:
            i = u[0]
            kinds.setdefault((self.rec[i][0], tuple(q for q, _ in self.options[i])),
                             []).append(u)  # fmt: skip
        pairs = sorted(
            ((a, b) for us in kinds.values() for k, a in enumerate(us) for b in us[k + 1 :]),
            key=lambda ab: (ab[1][0] - ab[0][0], ab[0][0]),
        )
        self.use(picks)
        best = (self._run(order)[1], order, list(picks))
        tried = 0
        while tried < evals:
            gained = False
            moves = [(u, o) for u in unit for o in range(len(self.options[u[0]]))
                     if o != best[2][u[0]]]  # fmt: skip
            moves += [(a, b) for a, b in pairs if best[2][a[0]] != best[2][b[0]]]
            for m in moves:
                if tried >= evals:
                    break
                p = list(best[2])
                if isinstance(m[1], int):
                    for i in m[0]:
                        p[i] = m[1]
                else:
                    oa, ob = p[m[0][0]], p[m[1][0]]
                    for i in m[0]:
                        p[i] = ob
                    for i in m[1]:
                        p[i] = oa
                self.use(p)
                out, span = self._run(None, zero, True)
                tried += 1
                if span < best[0] - 1e-6:
                    best, gained = (span, out, p), True
            if not gained:
                break
        self.use(best[2])
        return best

    def _beside(self, w: int, i: int, a: Ap) -> bool:
        """Whether transfer i writes `a` beside transfer w's write of that tile (disjoint)."""
        if not (isinstance(self.queue[w], tuple) and isinstance(self.queue[i], tuple)):
            return False
        if len(self.choices[w]) > 1 or len(self.choices[i]) > 1:
            return False
        shape = self.tiles[a.name].shape
        mine = region(a, shape)
        for x in self.rec[w][2]:
            if x.name == a.name and all(
                lo < hi2 and lo2 < hi for (lo, hi), (lo2, hi2) in zip(region(x, shape), mine)
            ):
                return False
        return True

    def use(self, picks: list[int]) -> None:
        """Each instruction i as its choice picks[i]."""
        for i, o in enumerate(picks):
            if len(self.options[i]) > 1:
                self._pick(i, o)

    def _pick(self, i: int, o: int) -> None:
        self.pick[i], self.rec[i] = o, self.choices[i][o]
        self.queue[i], self.cost[i] = self.options[i][o]

    def _cost(self, i: int, waits: bool, rec=None) -> float:
        """Instruction i's ns on its engine (a DMA transfer: its bytes)."""
        cls, reads, writes, fields = rec or self.rec[i]
        tiles = self.tiles
        if isinstance(self.queue[i], tuple):
            a = next((x for x in writes + reads if x.name in tiles), None)
            if a is None:
                return 0.0
            t = tiles[a.name]
            return math.prod(e - s for s, e in region(a, t.shape)) * t.dtype.itemsize
        engine = fields.get("engine", cls.ENGINE)
        model = MODELS[engine](self.cfg.core)
        bound = {}
        for k, v in fields.items():
            if k == "engine":
                continue
            if isinstance(v, Ap) and v.name in tiles:
                t = tiles[v.name]
                v = bind(v, Buffer(t.name, t.memory, t.shape, t.dtype), k)
            bound[k] = v
        ins = cls(engine=engine, wait=(("estimate", 1),) if waits else (), **bound)
        return model.cost(ins, None) * 1e9 / model.clock_hz

    def _flex(self, i: int, o: int, state: dict, run: bool = False) -> tuple:
        """(queue, cost) of instruction i's choice o: it waits for a producer that ran on
        another queue (as its choices fell: `state`) where no instruction of its queue waited
        for it before (`run`: it runs, and has waited for them)."""
        q = self.options[i][o][0]
        on = state.setdefault("on", {})
        seen = state.setdefault("seen", {}).setdefault(q, set())
        cross = {p for p in self.preds[i] if on.get(p, self.queue[p]) != q}
        plain, waiting = self.costs[i][o]
        cost = waiting if cross - seen else plain
        if run:
            seen |= cross
            on[i] = q
        return q, cost

    def _start(self, i: int, start: float, state: dict) -> float:
        """Run instruction i from `start` at the earliest on its queue (`state`: each queue's
        free time and last instruction); its finish."""
        q = self.queue[i]
        free, last = state["free"], state["last"]
        if i in self.costs:
            self.cost[i] = self._flex(i, self.pick[i], state, run=True)[1]
        start = max(start, free.get(q, 0.0))
        if isinstance(q, tuple):  # a DMA queue: its setup (overlapping the previous
            # transfer's data), then the data at the engines' bandwidth
            data = self.cost[i] / self.bw / (self._touched(i) if self.dma_parts else 1.0)
            if self.shared_dma:  # its data after the data of the transfers before it
                begin = max(start + self.setup, state.get("dma", 0.0))
                state["dma"] = begin + data
                free[q] = max(start + self.setup, begin + data - self.setup)
                return begin + data + self.latency
            free[q] = start + max(self.setup, data)
            return start + self.setup + data + self.latency
        prev = last.get(q)  # a read of what the engine's previous instruction wrote waits
        if prev is not None and _reads_after(self.rec[i][1], self.rec[prev][2], self.tiles):
            start += self.commit[q]
        last[q] = i
        free[q] = start + self.cost[i]
        if q == Engine.TENSOR and self.fluid and self.warm is not None:  # (its warm-up)
            warm = state.setdefault("warm", Warmup(*self.warm))
            free[q] = start + warm.stretch(round(start * 1e3), round(self.cost[i] * 1e3)) / 1e3
        return free[q]

    def _touched(self, i: int) -> float:
        """The share of the DMA engines transfer i moves its data on: those of the SBUF
        partitions it touches (each engine serves P / engines of them)."""
        _, reads, writes, _ = self.rec[i]
        a = next((x for x in writes + reads if x.name in self.tiles), None)
        if a is None:
            return 1.0
        d, P = self.cfg.core.dma.engines, self.cfg.core.sbuf.partitions
        lo, hi = region(a, self.tiles[a.name].shape)[0]
        each = max(1, P // d)
        return min(d, -(-(hi - lo) // each)) / d

    def simulate(self, order: list[int]) -> float:
        """The estimated end of the instructions run in `order` (each queue in that order)."""
        if self.fluid:  # (transfers end as the ones after them share the engines: `_run`)
            return self._run(order)[1]
        finish = [0.0] * len(order)
        state = {"free": {}, "last": {}}
        for i in order:
            finish[i] = self._start(i, max((finish[p] for p in self.preds[i]), default=0.0),
                                    state)  # fmt: skip
        return max(finish, default=0.0)

    def greedy(self, by: str = "index", fixed: bool = False) -> list[int]:
        """The list schedule: each next instruction the one that can start soonest on its queue;
        of those that can start together, the one emitted first (`by` "index"), or the one with
        the longest estimated chain of work after it (its upward rank: "rank")."""
        n, queue = len(self.rec), self.queue
        rank = [0.0] * n  # (all 0 by "index": ties go to the first emitted)
        if by == "rank":
            dur = [self.cost[i] / self.bw + self.setup if isinstance(queue[i], tuple)
                   else self.cost[i] for i in range(n)]  # fmt: skip
            for i in range(n - 1, -1, -1):
                rank[i] = dur[i] + max((rank[s] for s in self.succs[i]), default=0.0)
        return self._run(None, rank, fixed)[0]

    def _run(self, order: list[int] | None, rank=None, fixed=False) -> tuple[list[int], float]:
        """(the order the instructions start in, the estimated end): each queue's instructions
        in `order`'s order, or (None) in a list schedule's (`greedy`). Time advances from event
        to event: an instruction's start, and with `fluid` DMA a transfer's data starting or
        ending (its producers' consumers are ready only then: `_Fluid`)."""
        n, queue = len(self.rec), self.queue
        ready_at, left = [0.0] * n, [len(p) for p in self.preds]
        finish = [0.0] * n
        flexible = [order is None and not fixed and len(o) > 1 for o in self.options]
        seq: dict = {}  # (a given order) queue -> its instructions in that order, reversed
        for i in reversed(order or ()):
            seq.setdefault(queue[i], []).append(i)
        pending: dict = {}  # queue -> its instructions whose producers are all done
        for i in range(n):
            if not left[i]:
                pending.setdefault(None if flexible[i] else queue[i], []).append(i)
        state = {"free": {}, "last": {}}
        free, out = state["free"], []
        dma = _Fluid(self) if self.fluid else None
        taken: dict = {}  # group -> the choice its first scheduled instruction took

        def done(i: int, end: float) -> None:
            finish[i] = end
            for s in self.succs[i]:
                ready_at[s] = max(ready_at[s], end)
                left[s] -= 1
                if not left[s]:
                    k = None if flexible[s] else queue[s]
                    pending.setdefault(k, []).append(s)
                    dirty.add(k)

        def first(q) -> tuple | None:
            """The key of the instruction of pending[q] that goes first (None: none)."""
            best, ready = None, pending.get(q, ())
            f = free.get(q, 0.0)
            if order is not None:  # only the queue's next in the order
                nxt = seq[q][-1] if ready else None
                return None if nxt is None or left[nxt] else (max(f, ready_at[nxt]), nxt, 0)
            for i in ready:
                o = 0
                if q is None:  # the choice that would end soonest (its group's, if taken)
                    g = self.groups[i]
                    os_ = [taken[g]] if g is not None and g in taken else range(
                        len(self.options[i]))  # fmt: skip
                    o = min(os_, key=lambda o: (max(
                        free.get(self.options[i][o][0], 0.0), ready_at[i])
                        + self._flex(i, o, state)[1], o))  # fmt: skip
                    f = free.get(self.options[i][o][0], 0.0)
                key = (max(f, ready_at[i]), -rank[i], i, o)
                if best is None or key < best:
                    best = key
            return best

        # each queue's first, again where its instructions or its free time changed (those
        # with choices each time: their keys follow every queue's)
        firsts: dict = {}
        dirty = set(pending)
        while len(out) < n:
            for q in dirty | ({None} if None in pending else set()):
                firsts[q] = first(q)
            dirty.clear()
            best = min((k for k in firsts.values() if k is not None), default=None)
            if dma is not None:
                t = dma.next_event()
                if t is not None and (best is None or t <= best[0]):
                    for i, end in dma.step(t):
                        done(i, end)
                    continue
            start, i, o = best[0], best[-2], best[-1]
            pending[None if flexible[i] else queue[i]].remove(i)
            dirty.add(None if flexible[i] else queue[i])
            if order is not None:
                seq[queue[i]].pop()
            if flexible[i]:
                self._pick(i, o)
                if self.groups[i] is not None:
                    taken.setdefault(self.groups[i], o)
            out.append(i)
            dirty.add(queue[i])  # (its free time)
            if dma is not None and isinstance(queue[i], tuple):
                free[queue[i]] = start  # (the queue issues its next; `_Fluid` orders the data)
                dma.submit(i, start)
            else:
                done(i, self._start(i, start, state))
        while dma is not None and dma.next_event() is not None:  # the last transfers' ends
            for i, end in dma.step(dma.next_event()):
                finish[i] = end
        return out, max(finish, default=0.0)


class _Fluid:
    """The DMA transfers of a `_Graph` with `fluid`, as the chip's DMA moves them
    (`trnsim.dma.system`): a queue sets up one transfer at a time (its setup: transfer_setup and
    the stagger of the engines it touches) while earlier ones move their data; a transfer moves
    its data after the queue's previous one has, on the DMA engines of its SBUF partitions
    (`dma_parts` or not), each engine shared max-min fairly between the transfers on it; it is
    done the completion latency after (a load's; a store's into HBM)."""

    def __init__(self, g: _Graph):
        self.g, self.now = g, 0.0
        d = g.cfg.core.dma
        self.engines, self.setup = d.engines, d.transfer_setup * 1e9
        self.stagger = d.engine_stagger * 1e9
        self.bw = (d.engine_bandwidth / 1e9, d.store_bandwidth / 1e9)  # bytes a ns: load, store
        self.lat = (d.load_completion_latency * 1e9, d.store_completion_latency * 1e9)
        self.waiting: dict = {}  # queue -> [(transfer, its setup's end)], in order
        self.setup_free: dict = {}  # queue -> the end of its last setup
        self.busy: dict = {}  # queue -> its transfer moving data
        self.left: dict[int, float] = {}  # transfer moving data -> its work left (ns at rate 1)
        self.rate: dict[int, float] = {}
        self.uses: dict[int, tuple] = {}  # transfer -> its engines
        self.next: float | None | bool = False  # (`next_event`; False: not known)

    def submit(self, i: int, t: float) -> None:
        """Transfer i issued at t (no event before t is left)."""
        self._advance(t)
        self.next = False
        g, q = self.g, self.g.queue[i]
        es, store = self._engines(i)
        self.uses[i] = es
        setup = self.setup + (len(es) - 1) * self.stagger
        end = self.setup_free[q] = max(t, self.setup_free.get(q, 0.0)) + setup
        self.waiting.setdefault(q, []).append((i, end))
        self.left[-1 - i] = g.cost[i] / len(es) / self.bw[store]  # (its work, while waiting)

    def next_event(self) -> float | None:
        """The time of the next data start or end (None: no transfer in flight)."""
        if self.next is False:  # (kept until a transfer is issued, or an event passes)
            self.next = self._next_event()
        return self.next

    def _next_event(self) -> float | None:
        t = None
        for q, w in self.waiting.items():
            if w and q not in self.busy:
                t = w[0][1] if t is None else min(t, w[0][1])
        for i, r in self.rate.items():
            e = self.now + self.left[i] / r
            t = e if t is None else min(t, e)
        return None if t is None else max(t, self.now)

    def step(self, t: float) -> list[tuple[int, float]]:
        """Advance to event time t: [(transfer, its completion)] of the data ended then."""
        self._advance(t)
        self.next = False
        out = []
        for i in [i for i in self.rate if self.left[i] <= 1e-6 * max(1.0, t)]:
            del self.left[i], self.rate[i]
            q = self.g.queue[i]
            del self.busy[q]
            out.append((i, t + self.lat[self._engines(i)[1]]))
        for q, w in self.waiting.items():
            if w and q not in self.busy and w[0][1] <= t + 1e-9:
                i, _ = w.pop(0)
                self.busy[q] = i
                self.left[i] = self.left.pop(-1 - i)
        self._share()
        return out

    def _advance(self, t: float) -> None:
        for i, r in self.rate.items():
            self.left[i] -= r * (t - self.now)
        self.now = max(self.now, t)

    def _share(self) -> None:
        """Each moving transfer's rate: max-min fair over the engines (capacity 1 each)."""
        cap, todo, self.rate = [1.0] * self.engines, set(self.busy.values()), {}
        while todo:
            count = [0] * self.engines
            for i in todo:
                for e in self.uses[i]:
                    count[e] += 1
            share, e = min((cap[e] / c, e) for e, c in enumerate(count) if c)
            share = min(share, 1.0)
            for i in sorted(todo):
                if share >= 1.0 or e in self.uses[i]:
                    self.rate[i] = share
                    todo.discard(i)
                    for x in self.uses[i]:
                        cap[x] -= share

    def _engines(self, i: int) -> tuple[tuple, bool]:
        """(the DMA engines transfer i moves its data on, whether it stores into HBM)."""
        g = self.g
        if i in g.engines:
            return g.engines[i]
        g.engines[i] = self._uses(i)
        return g.engines[i]

    def _uses(self, i: int) -> tuple[tuple, bool]:
        g = self.g
        _, reads, writes, _ = g.rec[i]
        store = not any(x.name in g.tiles for x in writes)
        a = next((x for x in writes + reads if x.name in g.tiles), None)
        if a is None:
            return tuple(range(self.engines)), store
        P = g.cfg.core.sbuf.partitions
        lo, hi = region(a, g.tiles[a.name].shape)[0]
        return tuple(range(lo * self.engines // P, (hi - 1) * self.engines // P + 1)), store


def _queue(cls, fields: dict):
    """The queue an instruction runs on: its compute engine, or ("dma", its DMA queue)."""
    engine = fields.get("engine", cls.ENGINE)
    return ("dma", fields.get("queue", 0)) if engine == Engine.DMA else engine


def _reads_after(reads: list[Ap], writes: list[Ap], tiles) -> bool:
    """Whether one of `reads` overlaps one of `writes` (the engines' commit stall)."""
    for w in writes:
        if w.name not in tiles:
            continue
        rw = None
        for r in reads:
            if r.name != w.name:
                continue
            shape = tiles[w.name].shape
            rw = rw or region(w, shape)
            if all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(region(r, shape), rw)):
                return True
    return False
