"""The collectives engine's API: a World of ranks on a System, collectives posted by each rank.

    from trnsim.collectives import World
    w = World.from_config(load_system("trn2-48xl"))          # or World(System(...), Settings(...))
    r = w.collective("all_reduce", range(64), 64 << 20, "bfloat16")
    r.time_ps, r.algorithm, r.algbw, r.busbw, r.link_bytes

`collective(op, ranks, nbytes, dtype, reduce_op="sum", algorithm=None, start_delays=None,
inputs=None, root=0, pairs=(), counts=())` posts the collective on every rank of the group
(rank i `start_delays[i]` s late: a straggler), runs the simulation until it completes and
returns a `Result`. `nbytes` is each rank's buffer 0 (the whole vector of an all_reduce, the
output of an all_gather, the input of a reduce_scatter, a rank's send buffer of an
all_to_all, the message of broadcast, send_recv and permute; see `build`). In functional mode
`inputs` (one array a rank, or None for seeded random values) go in and `Result.outputs` come
out.

Lower level, for streams (the trace's `collective:` step, torch.distributed): `post(rank, op,
ranks, nbytes, ...)` returns a `Handle` whose SimPy `event` fires when the collective is done;
the k-th collective a rank posts on a group is matched with the k-th of every other rank of
that group (same op, size, dtype and settings, else a TrnsimError naming the ranks, the op and
the sequence number). `run()` runs the simulation; collectives some rank never reached raise a
DeadlockError naming the ranks that are stuck and those that never arrived. Several jobs
sharing links are collectives posted on disjoint groups before `run()`.

Times are integer ps on the System's clock; `Result.algbw` and `busbw` are B/s (nccom-test's
columns, whose GB/s are GiB/s: divide by 2**30).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy

from trnsim.collectives.build import build
from trnsim.collectives.context import Context
from trnsim.collectives.run import REDUCE_OPS, Clock, Execution
from trnsim.collectives.select import Settings, select
from trnsim.config import SystemConfig
from trnsim.dtypes import DType, to_dtype
from trnsim.dtypes import dtype as lookup_dtype
from trnsim.errors import DeadlockError, TrnsimError
from trnsim.system.system import System
from trnsim.units import PS_PER_S, seconds_to_ps

BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "all_to_allv": lambda n: (n - 1) / n,
}


@dataclass
class Result:
    """One collective's outcome. Times in ps; bandwidths in B/s; `link_bytes`: link name ->
    bytes it carried (links that carried none left out); `outputs`: each rank's result in
    functional mode (group order)."""

    op: str
    algorithm: str
    ranks: tuple[int, ...]
    nbytes: int
    dtype: str
    start_ps: int
    end_ps: int
    rank_end_ps: dict[int, int]
    rings: int
    steps: int
    transfers: int
    link_bytes: dict[str, float]
    outputs: list[np.ndarray] | None = None

    @property
    def time_ps(self) -> int:
        return self.end_ps - self.start_ps

    @property
    def algbw(self) -> float:
        return self.nbytes / (self.time_ps / PS_PER_S) if self.time_ps else float("inf")

    @property
    def busbw(self) -> float:
        f = BUS_FACTOR.get(self.op, lambda n: 1.0)(len(self.ranks))
        return self.algbw * f


@dataclass
class Handle:
    """A posted collective as one rank sees it: `event` succeeds with the `Result`."""

    rank: int
    seq: int
    event: simpy.Event
    result: Result | None = None


@dataclass
class _Pending:
    sig: tuple
    execution: Execution
    posted: dict[int, tuple[int, Handle]] = field(default_factory=dict)  # rank -> (ps, handle)
    result: Result | None = None


class World:
    """Ranks on a System running collectives (see the module docstring)."""

    def __init__(
        self,
        system: System,
        settings: Settings | None = None,
        chips_per_node: int | None = None,
    ):
        self.system = system
        self.settings = settings or Settings()
        self.env = system.env
        self.clock = Clock(system)
        s = self.settings
        self.ctx = Context(
            system.topology,
            system.ranks_per_chip,
            chips_per_node or system.topology.unit_chips,
            s.rings,
            s.slices,
            system.cc.duplication,
        )
        self._seq: dict[tuple[tuple[int, ...], int], int] = {}
        self._pending: dict[tuple[tuple[int, ...], int], _Pending] = {}
        self._tags = 0
        self._start_ps = seconds_to_ps(s.start_cost)

    @classmethod
    def from_config(
        cls,
        cfg: SystemConfig,
        functional: bool = False,
        links_only: bool = False,
        link_bandwidth: dict[str, float] | None = None,
    ) -> World:
        """A World on the system of a `SystemConfig` (`trnsim.config.load_system`), with its
        `collectives:` settings. `links_only`: DMA, HBM and reductions unbounded and no start
        cost (the closed forms' configuration); `link_bandwidth`: links overridden by name."""
        system = System.from_config(cfg, functional, links_only, link_bandwidth)
        c = cfg.collectives
        settings = Settings(
            0.0 if links_only else c.start_cost,
            c.rings,
            c.mesh_max,
            c.rdh_max,
            c.algorithm,
            c.slices,
        )
        return cls(system, settings, cfg.chips_per_node)

    # -- posting -------------------------------------------------------------------------------

    def post(
        self,
        rank: int,
        op: str,
        ranks,
        nbytes: int,
        dtype: str = "float32",
        reduce_op: str = "sum",
        algorithm: str | None = None,
        delay: float = 0.0,
        data: np.ndarray | None = None,
        root: int = 0,
        pairs=(),
        counts=(),
    ) -> Handle:
        """Rank `rank` issues `op` on group `ranks` now; it starts its part `delay` s later
        (plus the config's start cost). See the module docstring."""
        group = tuple(int(r) for r in ranks)
        if rank not in group:
            raise TrnsimError(f"rank {rank} posts a collective on a group it is not in: {group}")
        if len(set(group)) != len(group):
            raise TrnsimError(f"group {group} names a rank twice")
        for r in group:
            self.system.rank_place(r)
        if reduce_op not in REDUCE_OPS:
            raise TrnsimError(
                f"unknown reduce_op {reduce_op!r}; expected one of {', '.join(REDUCE_OPS)}"
            )
        dt = lookup_dtype(dtype) if isinstance(dtype, str) else dtype
        sig = (
            op,
            nbytes,
            dt.name,
            reduce_op,
            algorithm,
            root,
            tuple(pairs),
            tuple(map(tuple, counts)),
        )
        seq_key = (group, rank)
        seq = self._seq.get(seq_key, 0)
        self._seq[seq_key] = seq + 1
        key = (group, seq)
        p = self._pending.get(key)
        if p is None:
            p = self._pending[key] = _Pending(sig, self._start(group, seq, sig, dt))
        elif p.sig != sig:
            first = min(p.posted)
            raise TrnsimError(
                f"collective #{seq} on group {_brief(group)}: rank {rank} issued {_desc(sig)} "
                f"but rank {first} issued {_desc(p.sig)}: ranks must issue a group's "
                f"collectives in the same order"
            )
        if rank in p.posted:
            raise AssertionError("a rank's sequence numbers only grow")
        h = Handle(rank, seq, self.env.event())
        p.posted[rank] = (self.env.now, h)
        ex = p.execution
        if ex.buffers is not None:
            self._fill(ex, rank, data)
        at = self.env.now + seconds_to_ps(delay) + self._start_ps
        self.clock.at(at, ex.arrive, rank)
        if p.result is not None:  # already complete (cannot be: it waits for this rank)
            h.event.succeed(p.result)
        return h

    def _start(self, group, seq, sig, dt: DType) -> Execution:
        op, nbytes, _, reduce_op, algorithm, root, pairs, counts = sig
        if nbytes % dt.itemsize:
            raise TrnsimError(f"{op}: {nbytes} bytes is not a whole number of {dt.name} elements")
        count = nbytes // dt.itemsize
        if counts:
            count = max(sum(row) for row in counts)
        alg = select(op, group, nbytes, self.ctx, self.settings, algorithm)
        sched = build(op, group, count, self.ctx, alg, root, pairs, counts)
        buffers = None
        if self.system.functional:
            buffers = {
                r: [np.zeros(sched.count, dt.np), np.zeros(sched.out_count, dt.np)] for r in group
            }
        self._tags += 1
        key = (group, seq)
        return Execution(
            self.system,
            self.clock,
            sched,
            self._tags,
            dt,
            reduce_op,
            buffers,
            lambda ex: self._done(key, ex),
        )

    def _fill(self, ex: Execution, rank: int, data) -> None:
        sched = ex.sched
        buf = ex.buffers[rank][0]
        if data is None:
            i = sched.ranks.index(rank)
            rng = np.random.default_rng(1_000_003 * ex.tag + i)
            data = rng.standard_normal(buf.size).astype(np.float32)
        data = np.asarray(data).reshape(-1)
        if sched.op == "all_gather":
            from trnsim.collectives.schedule import chunk_units

            ((lo, hi),) = chunk_units(sched.count, len(sched.ranks))[sched.ranks.index(rank)]
            buf[lo:hi] = to_dtype(data[: hi - lo].astype(np.float32), ex.dtype)
        else:
            buf[: data.size] = to_dtype(data[: buf.size].astype(np.float32), ex.dtype)

    def _done(self, key, ex: Execution) -> None:
        p = self._pending.pop(key)
        sched = ex.sched
        start = min(ps for ps, _ in p.posted.values())
        outputs = None
        if ex.buffers is not None:
            outputs = [output_of(sched, ex.buffers[r], r) for r in sched.ranks]
        res = Result(
            sched.op,
            sched.algorithm,
            sched.ranks,
            p.sig[1],
            p.sig[2],
            start,
            ex.done_ps,
            dict(ex.end_ps),
            sched.rings,
            len(sched.steps),
            sched.transfers,
            {},
            outputs,
        )
        p.result = res
        for _, h in p.posted.values():
            h.result = res
            h.event.succeed(res)

    # -- running -------------------------------------------------------------------------------

    def run(self, until=None) -> None:
        """Run the simulation until nothing is left to do (or `until` ps); collectives still
        pending then raise a DeadlockError naming the ranks stuck and missing."""
        self.env.run(until)
        if until is None and self._pending:
            raise DeadlockError(self._stuck())

    def _stuck(self) -> str:
        parts = []
        for (group, seq), p in sorted(self._pending.items()):
            missing = [r for r in group if r not in p.posted]
            waiting = sorted(p.posted)
            parts.append(
                f"{p.sig[0]} #{seq} on group {_brief(group)}: ranks {_brief(missing)} never "
                f"reached it; ranks {_brief(waiting)} wait for them"
                if missing
                else f"{p.sig[0]} #{seq} on group {_brief(group)} did not complete"
            )
        return "deadlock: " + "; ".join(parts)

    def collective(
        self,
        op: str,
        ranks,
        nbytes: int,
        dtype: str = "float32",
        reduce_op: str = "sum",
        algorithm: str | None = None,
        start_delays=None,
        inputs=None,
        root: int = 0,
        pairs=(),
        counts=(),
    ) -> Result:
        """Post `op` on every rank of `ranks` (rank i of the group `start_delays[i]` s late),
        run and return the Result (link bytes: those of this run)."""
        group = tuple(int(r) for r in ranks)
        before = list(self.system.link_bytes)
        handles = [
            self.post(
                r,
                op,
                group,
                nbytes,
                dtype,
                reduce_op,
                algorithm,
                start_delays[i] if start_delays is not None else 0.0,
                inputs[i] if inputs is not None else None,
                root,
                pairs,
                counts,
            )
            for i, r in enumerate(group)
        ]
        self.run()
        res = handles[0].result
        res.link_bytes = self.link_bytes(before)
        return res

    def link_bytes(self, before=None) -> dict[str, float]:
        """Bytes each link carried (since `before`, a copy of `system.link_bytes`)."""
        links = self.system.topology.links
        now = self.system.link_bytes
        base = before or [0.0] * len(now)
        return {links[i].name: now[i] - base[i] for i in range(len(now)) if now[i] != base[i]}


def output_of(sched, buffers, rank) -> np.ndarray:
    """A rank's result: its reduce_scatter unit, buffer 1 where the op writes there, else
    buffer 0."""
    if sched.op == "reduce_scatter":
        from trnsim.collectives.schedule import chunk_units

        ((lo, hi),) = chunk_units(sched.count, len(sched.ranks))[sched.ranks.index(rank)]
        return buffers[0][lo:hi].copy()
    if sched.out_count:
        return buffers[1].copy()
    return buffers[0].copy()


def _desc(sig) -> str:
    op, nbytes, dt, reduce_op, alg, *_, counts = sig
    return (
        f"{op} of {nbytes} bytes of {dt}"
        + (f" ({reduce_op})" if op in ("all_reduce", "reduce_scatter") else "")
        + (f" counts {[list(row) for row in counts]}" if counts else "")
    )


def _brief(ranks) -> str:
    ranks = list(ranks)
    if len(ranks) > 8:
        return "(" + ", ".join(map(str, ranks[:8])) + f", ... {len(ranks)} ranks)"
    return "(" + ", ".join(map(str, ranks)) + ")"
