"""What the DMA system keeps per transfer, per distinct copy and per queue: a submitted copy
(`Transfer`), how a distinct copy runs on a core (`CopyPlan`), and one queue of one core with
its transfers waiting in order (`Lane`). Plain records with slots: there is one Transfer per
DMA instruction run, so they are built without dataclass machinery."""

from __future__ import annotations

from collections import deque

from trnsim.dma.fluid import Flow
from trnsim.report.tracks import dma_track

__all__ = ["Transfer", "CopyPlan", "Lane"]


class Transfer:
    """One submitted copy: its endpoints, its flow, its queue, and who to tell."""

    __slots__ = (
        "core",
        "queue",
        "ins",
        "index",
        "kernel",
        "on_done",
        "start",
        "src",
        "dst",
        "transpose",
        "ready_at",
        "lane",
        "flow",
        "costs",
        "plan",
        "data_start",
    )

    def __init__(
        self, core, queue, ins, index, kernel, on_done, start, src, dst, transpose, lane, costs
    ):
        self.core, self.queue, self.ins, self.index, self.kernel = core, queue, ins, index, kernel
        self.on_done, self.start = on_done, start
        self.src, self.dst, self.transpose = src, dst, transpose
        self.ready_at = 0  # ps at which its setup is done
        self.lane: Lane | None = lane
        self.flow: Flow | None = None
        self.costs: tuple[int, int, int, str] = costs  # see DmaSystem._costs
        self.plan: CopyPlan | None = None
        self.data_start = 0


class CopyPlan:
    """How one distinct copy runs on one core: its flow's work and uses, its setup time, its
    completion latency, the engines it touches and the setup it costs beyond its bytes (ps)."""

    __slots__ = ("work", "uses", "costs", "setup", "latency", "engines", "overhead")

    def __init__(self, work, uses, costs, setup, latency, engines, overhead):
        self.work, self.uses, self.costs, self.setup = work, uses, costs, setup
        self.latency, self.engines, self.overhead = latency, engines, overhead


class Lane:
    """One queue of one core: transfers waiting in FIFO order, at most one moving data."""

    __slots__ = ("waiting", "busy", "track", "setup_free")

    def __init__(self, queue: int):
        self.waiting: deque[Transfer] = deque()
        self.busy = False
        self.track = dma_track(queue)
        self.setup_free = 0  # ps at which the queue's setup stage is free
