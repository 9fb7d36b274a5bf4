"""Running one size of `trnsim nccom`: a `Job` (the system, the op on its first ranks, the
what-ifs) measured on a fresh World per size (`measure` -> `Row`), with nccl-tests' send_recv
(every rank to the next) and a permute around a ring of the fabric, and `--check`'s comparison
of every rank's values with numpy."""

from __future__ import annotations

from dataclasses import dataclass, replace

import ml_dtypes
import numpy as np

from trnsim.collectives import World
from trnsim.collectives.schedule import chunk_units
from trnsim.collectives.world import BUS_FACTOR
from trnsim.config import SystemConfig
from trnsim.dtypes import DType
from trnsim.errors import TrnsimError
from trnsim.system import Switch
from trnsim.units import PS_PER_S

CHECK_MAX_BYTES = 256 * 2**20
"""--check keeps every rank's buffers: the largest size x ranks it takes."""


@dataclass
class Row:
    """One size's outcome: bytes a rank (the engine's `nbytes`, see docs/collectives.md),
    elements, time in ps, the algorithm, and the check's verdict (None without --check)."""

    op: str
    ranks: int
    size: int
    count: int
    dtype: DType
    time_ps: int
    algorithm: str
    check: str | None = None

    @property
    def algbw(self) -> float:
        """size / time, in B/s (infinite for a collective that took no time: one rank, links
        only)."""
        return self.size / (self.time_ps / PS_PER_S) if self.time_ps else float("inf")

    @property
    def busbw(self) -> float:
        """algbw x nccom-test's factor: 2(r-1)/r all_reduce, (r-1)/r all_gather, reduce_scatter
        and all_to_all, 1 send_recv and permute."""
        factor = BUS_FACTOR.get(self.op, lambda n: 1.0)(self.ranks)
        return self.algbw * factor if factor else 0.0


@dataclass(frozen=True)
class Job:
    """What every size shares: the system, the op on its first `ranks` ranks, and the what-ifs
    (links by name in B/s, start delays by rank in s, a forced algorithm or None)."""

    cfg: SystemConfig
    op: str
    ranks: int
    dtype: DType
    algorithm: str | None = None
    links: tuple[tuple[str, float], ...] = ()
    delays: tuple[float, ...] = ()
    links_only: bool = False
    pairs: tuple[tuple[int, int], ...] = ()

    def world(self, functional: bool = False) -> World:
        return World.from_config(self.cfg, functional, self.links_only, dict(self.links) or None)

    def with_pairs(self) -> Job:
        """This job with its (source, target) pairs: every rank to the next for send_recv,
        around a ring of the fabric for permute (`permute_pairs`); none for the other ops."""
        n = self.ranks
        if self.op == "send_recv":
            return replace(self, pairs=tuple((i, (i + 1) % n) for i in range(n)))
        if self.op == "permute":
            return replace(self, pairs=permute_pairs(self.world(), n))
        return self


def measure(job: Job, size: int, check: bool = False) -> Row:
    """Run `job`'s op on `size` bytes a rank (rounded down to whole elements) on a fresh World;
    with `check`, in functional mode, its values compared with numpy."""
    count = size // job.dtype.itemsize
    nbytes = count * job.dtype.itemsize
    n, op = job.ranks, job.op
    w = job.world(functional=check)
    xs = _inputs(job, count) if check else None
    delays = job.delays or (0.0,) * n
    if op == "send_recv":  # nccl-tests': every rank sends to the next, receives from the last
        pairs = job.pairs
        handles = []
        for a, b in pairs:
            data = xs[a] if check else None
            handles.append(w.post(a, op, (a, b), nbytes, job.dtype, delay=delays[a], data=data))
            w.post(b, op, (a, b), nbytes, job.dtype, delay=delays[b])
        w.run()
        results = [h.result for h in handles]
        time_ps = max(r.end_ps for r in results) - min(r.start_ps for r in results)
        algorithm = results[0].algorithm
        outputs = [(b, r.outputs[1] if r.outputs else None) for (a, b), r in zip(pairs, results)]
        got = dict(outputs) if check else None
        want = {b: xs[a] for a, b in pairs} if check else None
    else:
        pairs = job.pairs
        ins = None
        if check and op == "all_gather":
            parts = chunk_units(count, n)
            ins = [x[lo:hi] for x, ((lo, hi),) in zip(xs, parts)]
        r = w.collective(
            op,
            range(n),
            nbytes,
            job.dtype,
            algorithm=job.algorithm,
            start_delays=delays,
            inputs=ins or xs,
            pairs=pairs,
        )
        time_ps, algorithm = r.time_ps, r.algorithm
        got = dict(enumerate(r.outputs)) if check else None
        want = _expected(op, xs, count, pairs) if check else None
    verdict = _verify(got, want, job) if check else None
    return Row(op, n, nbytes, count, job.dtype, time_ps, algorithm, verdict)


def permute_pairs(w: World, n: int) -> tuple[tuple[int, int], ...]:
    """Each of ranks 0..n-1 sends to the next around a ring of their chips over direct links
    (a chip's ranks consecutive), as the runtime's permute requires."""
    per = w.system.ranks_per_chip
    chips = sorted({r // per for r in range(n)})
    topo = w.system.topology
    ring = chip_ring(topo, chips)
    if ring is None and isinstance(topo, Switch):
        raise TrnsimError(
            f"permute: ranks 0-{n - 1} span {len(chips)} chips of a switched system, where "
            f"the collectives engine's permute takes only pairs one link apart (a switch's route "
            f"is two: up and down): use the ranks of one chip, -r {per} (docs/collectives.md)"
        )
    if ring is None:
        raise TrnsimError(
            f"permute: the chips of ranks 0-{n - 1} ({len(chips)} chips) have no ring over "
            f"direct links; permute sends each rank's buffer to a neighbour (docs/collectives.md): "
            f"choose -r so that its chips form one, e.g. all the system's ranks"
        )
    order = [r for c in ring for r in range(c * per, min((c + 1) * per, n))]
    return tuple((order[i], order[(i + 1) % n]) for i in range(n))


def chip_ring(topo, chips: list[int], budget: int = 200_000) -> list[int] | None:
    """A cycle through `chips` whose consecutive chips are neighbours as permute counts them
    (one link, or EFA between nodes): the fabric's own ring when `chips` are a sub-torus, else
    a depth-first search that tries the chips with fewest free neighbours first (None if none
    is found within `budget` steps)."""

    def near(a, b):
        return topo.unit_of(a) != topo.unit_of(b) or len(topo.route(a, b).links) == 1

    if len(chips) <= 2:
        return list(chips) if len(chips) < 2 or near(chips[0], chips[1]) else None
    ring = topo.rings(chips, 1)[0]
    if all(near(ring[i], ring[(i + 1) % len(ring)]) for i in range(len(ring))):
        return ring
    adj = {a: [b for b in chips if b != a and near(a, b)] for a in chips}
    path, on = [chips[0]], {chips[0]}

    def options(c):
        free = [d for d in adj[c] if d not in on]
        return iter(sorted(free, key=lambda d: sum(e not in on for e in adj[d])))

    stack = [options(chips[0])]
    while stack and budget:
        budget -= 1
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            on.discard(path.pop())
        elif nxt not in on:
            path.append(nxt)
            on.add(nxt)
            if len(path) < len(chips):
                stack.append(options(nxt))
            elif chips[0] in adj[nxt]:
                return path
            else:
                on.discard(path.pop())
    return None


# ---------------------------------------------------------------------------------------------
# --check: values against numpy


def _inputs(job: Job, count: int) -> list[np.ndarray]:
    """Each rank's buffer: normal values in the dtype (small whole numbers for integer types,
    small enough that the sum of every rank's fits)."""
    rng = np.random.default_rng(0)
    dt = job.dtype
    if dt.is_float:
        return [
            rng.standard_normal(count).astype(np.float32).astype(dt.np) for _ in range(job.ranks)
        ]
    top = max(np.iinfo(dt.np).max // job.ranks, 0)
    return [rng.integers(0, top + 1, count).astype(dt.np) for _ in range(job.ranks)]


def _expected(op: str, xs, count: int, pairs) -> dict[int, np.ndarray | tuple]:
    """Each rank's output as numpy computes it: an exact array for data moved, or (sum, bound)
    for a reduction (`_verify` allows `bound` per element)."""
    n = len(xs)
    parts = [lo_hi for ((lo_hi),) in chunk_units(count, n)]
    if op == "all_gather":
        whole = np.concatenate([x[lo:hi] for x, (lo, hi) in zip(xs, parts)])
        return dict.fromkeys(range(n), whole)
    if op == "all_to_all":
        return {i: np.concatenate([x[lo:hi] for x in xs]) for i, (lo, hi) in enumerate(parts)}
    if op == "permute":
        return {d: xs[s] for s, d in pairs}
    wide = np.stack([x.astype(np.float64) for x in xs])
    total, spread = wide.sum(axis=0), np.abs(wide).sum(axis=0)
    if op == "all_reduce":
        return dict.fromkeys(range(n), (total, spread))
    return {i: (total[lo:hi], spread[lo:hi]) for i, (lo, hi) in enumerate(parts)}


def _verify(got: dict, want: dict, job: Job) -> str:
    """OK when every rank's output equals numpy's: exactly for data moved; for a sum, within one
    rounding to the dtype per rank of the group (the DMA adds in fp32 and casts at every hop)
    of the sum of the magnitudes, plus the final cast."""
    dt = job.dtype
    eps = float(ml_dtypes.finfo(dt.np).eps) if dt.is_float else 0.0
    for rank, ref in want.items():
        out = got.get(rank)
        if out is None:
            return "FAIL"
        if isinstance(ref, tuple):
            total, spread = ref
            value = out.astype(np.float64)
            if value.shape != total.shape:
                return "FAIL"
            bound = job.ranks * eps * spread + eps * np.abs(total)
            if not np.all(np.abs(value - total) <= bound):
                return "FAIL"
        elif out.shape != ref.shape or not np.array_equal(out, ref, equal_nan=True):
            return "FAIL"
    return "OK"
