"""The DMA queues a lowering puts its transfers on, by role, from the chip config.

A core's DMA engines each have `core.dma.queues_per_engine` queues; a transfer on queue q uses
queue q of every engine it touches. A queue is FIFO and sets up one transfer at a time, so a
lowering spreads its transfers over several queues (the next transfer's setup overlaps this
one's data), and gives loads and stores queues of their own (a store waiting for its block to
be computed never holds up the next block's load behind it).

`Queues(cfg)` is the one place the queue numbers come from. The queues are cut in two halves:
the first for loads (HBM -> SBUF, and HBM -> HBM copies), the second for stores (SBUF -> HBM).
A lowering asks for a `Stream` by role, as a fraction of a half: `loads()` is every load queue,
`loads(0, 1/2)` the first half of them, `loads(1/2, 1)` the second (say, a second kind of load
that must not wait behind the first), `stores(0, 1/2)` the first half of the store queues.
`stream[i]` is the queue of the stream's i-th transfer (the stream's queues in turn), and
`stream.next()` counts the transfers itself.

On the bundled chips' 16 queues a half is 8 queues: `loads(0, 1/2)` is queues 0..3,
`stores()` 8..15. With fewer queues a role keeps its fraction of its half, at least one
queue, so roles share queues once a half has fewer queues than roles (on 2 queues every load
is on queue 0 and every store on 1; on 1 queue, everything on queue 0); with more, each role
spreads over more queues. Which queue a transfer uses never decides what it computes: the
builder orders every access by semaphores (`builder`), whatever the queues.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trnsim.config import ChipConfig

__all__ = ["Queues", "Stream", "Turns"]


@dataclass
class Stream:
    """Queues `first` .. `first + count - 1`, taken in turn."""

    first: int
    count: int
    turn: int = 0  # transfers `next` has handed out

    def __getitem__(self, i: int) -> int:
        """The queue of the stream's i-th transfer."""
        return self.first + i % self.count

    def next(self) -> int:
        """The queue of the next transfer (counting the calls)."""
        self.turn += 1
        return self[self.turn - 1]

    def take(self, count: int) -> Stream:
        """The stream's first `count` queues (at least one, at most all of them)."""
        return Stream(self.first, max(1, min(count, self.count)))


class Queues:
    """A core's DMA queues cut into roles (module doc)."""

    def __init__(self, cfg: ChipConfig):
        n = cfg.core.dma.queues_per_engine
        self.total = n
        self.n_loads = max(1, n // 2)
        self.n_stores = max(1, n - self.n_loads)
        self.first_store = self.n_loads if n > 1 else 0  # one queue: loads and stores share it

    def loads(self, lo: float = 0.0, hi: float = 1.0) -> Stream:
        """The load queues from fraction `lo` to `hi` of the load half."""
        return _part(0, self.n_loads, lo, hi)

    def stores(self, lo: float = 0.0, hi: float = 1.0) -> Stream:
        """The store queues from fraction `lo` to `hi` of the store half."""
        return _part(self.first_store, self.n_stores, lo, hi)

    def turns(self) -> Turns:
        """Loads over every load queue and stores over every store queue, each in turn."""
        return Turns(self.loads(), self.stores())


@dataclass
class Turns:
    """A lowering's loads and stores, each stream counting its own transfers."""

    loads: Stream
    stores: Stream

    def load(self) -> int:
        return self.loads.next()

    def store(self) -> int:
        return self.stores.next()


def _part(first: int, n: int, lo: float, hi: float) -> Stream:
    """Queues [lo n, hi n) of the n from `first`, rounded down, at least one."""
    start = min(math.floor(lo * n), n - 1)
    end = max(start + 1, min(n, math.floor(hi * n)))
    return Stream(first + start, end - start)
