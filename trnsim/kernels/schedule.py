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
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.engines.gpsimd import GpSimdEngine
from trnsim.engines.scalar import ScalarEngine
from trnsim.engines.tensor import TensorEngine
from trnsim.engines.vector import VectorEngine
from trnsim.isa import Ap, Engine
from trnsim.kernels.builder import KernelBuilder, region
from trnsim.memory.buffer import Buffer, bind

__all__ = ["Scheduled"]

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
                 reorder: bool = True, dma_parts: bool = False):  # fmt: skip
        self.b, self.cfg, self.shared_dma, self.reorder = b, cfg, shared_dma, reorder
        self.dma_parts = dma_parts
        self.recorded: list[tuple] = []
        self.makespan = 0.0

    def __enter__(self) -> Scheduled:
        rec, self.choices, self.groups = self.recorded, [], []

        def record(cls, reads, writes, choices=(), group=None, **fields):
            rec.append((cls, reads, writes, fields))
            self.choices.append([rec[-1], *choices])
            self.groups.append(group)

        self.b.emit = record  # an attribute of the instance hides the class's method
        return self

    def __exit__(self, kind, value, tb) -> None:
        del self.b.emit
        if kind is not None or not self.recorded:
            return
        g = _Graph(self.b, self.cfg, self.recorded, self.shared_dma, self.choices, self.groups,
                   self.dma_parts)  # fmt: skip
        emitted, first = list(range(len(self.recorded))), [0] * len(self.recorded)
        options = [(g.simulate(emitted), 0, emitted, first)]
        for v, by in enumerate(("index", "rank") if self.reorder else ()):
            g.use(first)
            greedy = g.greedy(by)
            picks = list(g.pick)
            options.append((g.simulate(greedy), 1 + v, greedy, picks))
        self.makespan, _, order, picks = min(options)  # (ties: the emitted order)
        for i in order:
            cls, reads, writes, fields = self.choices[i][picks[i]]
            self.b.emit(cls, reads, writes, **fields)


class _Graph:
    """The recorded instructions' dependencies, queues and estimated times."""

    def __init__(self, b: KernelBuilder, cfg: ChipConfig, rec: list[tuple], shared_dma=False,
                 choices=None, groups=None, dma_parts=False):  # fmt: skip
        self.b, self.cfg, self.rec, self.shared_dma = b, cfg, list(rec), shared_dma
        self.groups = groups or [None] * len(rec)
        self.dma_parts = dma_parts  # (`Scheduled`)
        # each instruction's choices (the recorded one first; others: the same work on another
        # engine, `Scheduled` module doc), its dependencies those of all of them
        self.choices = choices or [[r] for r in rec]
        tiles, n = b.tiles, len(rec)
        self.tiles = tiles
        preds: list[set[int]] = [set() for _ in range(n)]
        reads_since: dict[str, list[int]] = {}  # tile -> its reads since its last write
        writer: dict[str, int] = {}  # tile -> its last write
        union = [([a for c in cs for a in c[1]], [a for c in cs for a in c[2]])
                 for cs in self.choices]  # fmt: skip
        for i, (reads, writes) in enumerate(union):
            for a in reads:
                if a.name in writer:
                    preds[i].add(writer[a.name])
            for a in writes:
                if a.name in tiles:
                    preds[i].update(reads_since.get(a.name, ()))
                    if a.name in writer:
                        preds[i].add(writer[a.name])
            for a in reads:
                if a.name in tiles:
                    reads_since.setdefault(a.name, []).append(i)
            for a in writes:
                if a.name in tiles:
                    writer[a.name], reads_since[a.name] = i, []
            preds[i].discard(i)
        self.preds = [sorted(p) for p in preds]
        self.succs: list[list[int]] = [[] for _ in range(n)]
        for i, ps in enumerate(self.preds):
            for p in ps:
                self.succs[p].append(i)
        self.queue = [_queue(c, f) for c, _, _, f in rec]
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

    def use(self, picks: list[int]) -> None:
        """Each instruction i as its choice picks[i]."""
        for i, o in enumerate(picks):
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
        if run:
            seen |= cross
            on[i] = q
        return q, waiting if cross - seen else plain

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
        finish = [0.0] * len(order)
        state = {"free": {}, "last": {}}
        for i in order:
            finish[i] = self._start(i, max((finish[p] for p in self.preds[i]), default=0.0),
                                    state)  # fmt: skip
        return max(finish, default=0.0)

    def greedy(self, by: str = "index") -> list[int]:
        """The list schedule: each next instruction the one that can start soonest on its queue;
        of those that can start together, the one emitted first (`by` "index"), or the one with
        the longest estimated chain of work after it (its upward rank: "rank")."""
        n, queue = len(self.rec), self.queue
        ready_at, left = [0.0] * n, [len(p) for p in self.preds]
        pending: dict = {}  # queue -> its instructions whose producers are all scheduled
        flexible = [len(o) > 1 for o in self.options]  # (those with choices: pending[None])
        for i in range(n):
            if not left[i]:
                pending.setdefault(None if flexible[i] else queue[i], []).append(i)
        state = {"free": {}, "last": {}}
        free, out = state["free"], []
        rank = [0.0] * n  # (all 0 by "index": ties go to the first emitted)
        if by == "rank":
            dur = [self.cost[i] / self.bw + self.setup if isinstance(queue[i], tuple)
                   else self.cost[i] for i in range(n)]  # fmt: skip
            for i in range(n - 1, -1, -1):
                rank[i] = dur[i] + max((rank[s] for s in self.succs[i]), default=0.0)
        taken: dict = {}  # group -> the choice its first scheduled instruction took
        while len(out) < n:
            best = None
            for q, ready in pending.items():
                f = free.get(q, 0.0)
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
            start, i, o = best[0], best[2], best[3]
            pending[None if flexible[i] else queue[i]].remove(i)
            if flexible[i]:
                self._pick(i, o)
                if self.groups[i] is not None:
                    taken.setdefault(self.groups[i], o)
            end = self._start(i, start, state)
            out.append(i)
            for s in self.succs[i]:
                ready_at[s] = max(ready_at[s], end)
                left[s] -= 1
                if not left[s]:
                    pending.setdefault(None if flexible[s] else queue[s], []).append(s)
        return out


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
