"""What the row kernels (`softmax`, `norms`, `rows`) share to plan a block's passes: how to
cut a free dim into runs one instruction takes, how to spread a share of the blocks over
engines, and what a run of instructions costs on an engine before it is emitted.

A row kernel splits its passes over VectorE, ScalarE and GpSimd by whole blocks (the builder
orders a tile's accesses tile by tile, so two engines on two halves of one tile would wait for
each other): pass k goes to engine e for a share s[k][e] of the blocks. `Spread` hands out
the engines block by block so that each gets its share, evenly spread over the blocks; `best`
picks the shares that even out the engines' time per block, each engine's time being what its
own cost model (`balance.cost_ns`) gives for the instructions a block sends it."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from trnsim.isa import Engine
from trnsim.kernels.balance import cost_ns

__all__ = ["bank_runs", "runs", "Spread", "slots_ns", "best", "V", "S", "G"]

V, S, G = Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD


def runs(n: int, most: int) -> list[tuple[int, int]]:
    """[lo, hi) runs of at most `most` covering [0, n), as even as can be."""
    if n <= 0:
        return []
    k = -(-n // max(1, most))
    cuts = [n * i // k for i in range(k + 1)]
    return list(zip(cuts, cuts[1:]))


def bank_runs(n: int, step: int) -> list[tuple[int, int]]:
    """[lo, hi) runs covering [0, n) cut at multiples of `step` (a PSUM bank's columns): the
    matmuls that write a PSUM tile's columns a run each (the tile starts on a bank) stay within
    a bank, as `runs`' even cuts do not (513 columns cut 256 + 257 put the second across one)."""
    return [(lo, min(n, lo + step)) for lo in range(0, n, step)]


class Spread:
    """The engine of each next block for a pass whose blocks go to engines in `shares`
    (engine -> fraction of the blocks, summing to 1), evenly spread over the `blocks` blocks,
    counted from the last: block i goes to the engine furthest behind its share of the blocks
    from i to the last, so the last block goes to the first engine listed (the fastest: it is
    done soonest, and nothing overlaps the last block's work)."""

    def __init__(self, shares: dict[Engine, float], blocks: int = 1):
        shares = {e: s for e, s in shares.items() if s > 1e-9} or {V: 1.0}
        self.shares, count, order = shares, dict.fromkeys(shares, 0), []
        for i in range(1, max(1, blocks) + 1):
            e = max(shares, key=lambda e: shares[e] * i - count[e])
            count[e] += 1
            order.append(e)
        self.order, self.i = order[::-1], 0

    def __call__(self) -> Engine:
        e = self.order[min(self.i, len(self.order) - 1)]
        self.i += 1
        return e


def slots_ns(b, cfg, n: int, cls, engine: Engine | None = None, **fields) -> float:
    """ns of `n` like instructions in a row on `engine`: the first waits on a semaphore (its
    fixed overhead), the others follow it."""
    if n <= 0:
        return 0.0
    first = cost_ns(b, cfg, cls, engine, **fields)
    return first + (n - 1) * cost_ns(b, cfg, cls, engine, waits=False, **fields)


def best(fixed: dict[Engine, float], passes: list[dict[Engine, float]], steps: int = 8):
    """(time, shares): the split of each pass over its engines (pass -> {engine: ns of a
    whole block's pass on that engine}) in multiples of 1 / `steps` (of 1 / 6 for a pass of
    three engines) that minimises the busiest engine's time per block, given each engine's
    `fixed` ns per block; ties go to the split listed first (the first engine of a pass)."""
    order = [V, S, G]
    total = np.array([[fixed.get(e, 0.0) for e in order]])
    options, index = [], np.zeros((1, 0), dtype=np.int64)
    for p in passes:
        opts = list(_splits(list(p), steps if len(p) < 3 else 6))
        options.append(opts)
        a = np.array([[o.get(e, 0.0) * p.get(e, 0.0) for e in order] for o in opts])
        total = (total[:, None, :] + a[None, :, :]).reshape(-1, 3)
        n = len(opts)
        index = np.concatenate([np.repeat(index, n, axis=0),
                                np.tile(np.arange(n), len(index))[:, None]], axis=1)  # fmt: skip
    worst = total.max(axis=1)
    i = int(np.argmin(worst))
    return float(worst[i]), [options[k][j] for k, j in enumerate(index[i])]


def _splits(engines: list[Engine], steps: int) -> Iterable[dict[Engine, float]]:
    """Every split of 1 over `engines` in multiples of 1 / steps, the first engine's largest
    share first."""
    if len(engines) == 1:
        yield {engines[0]: 1.0}
        return
    for k in range(steps, -1, -1):
        for rest in _splits(engines[1:], steps - k if steps - k else 1):
            yield {engines[0]: k / steps,
                   **{e: s * (steps - k) / steps for e, s in rest.items()}}  # fmt: skip
