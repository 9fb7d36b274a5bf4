"""What an instruction would cost on its engine before it is emitted, from the engine's own cost
model, so a lowering can spread a block's passes over VectorE, ScalarE and GpSimd by their real
speeds on the chip at hand (clocks, fast modes, fixed overheads) instead of by rules of thumb."""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.engines.gpsimd import GpSimdEngine
from trnsim.engines.scalar import ScalarEngine
from trnsim.engines.vector import VectorEngine
from trnsim.isa import Ap, Engine, Instr
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.queues import Queues
from trnsim.memory.buffer import Buffer, bind

__all__ = ["cost_ns", "dma_queues"]

MODELS = {Engine.VECTOR: VectorEngine, Engine.SCALAR: ScalarEngine, Engine.GPSIMD: GpSimdEngine}


def cost_ns(
    b: KernelBuilder,
    cfg: ChipConfig,
    cls: type[Instr],
    engine: Engine | None = None,
    waits: bool = True,
    after: bool = False,
    **fields,
) -> float:
    """Nanoseconds `cls(**fields)` (its operands naming tiles of `b`) would take on `engine`: its
    cost, with the fixed overhead of an instruction that waits on a semaphore when `waits`, and
    the engine's commit latency when it reads what the engine's previous instruction wrote
    (`after`)."""
    engine = cls.ENGINE if engine is None else engine
    model = MODELS[engine](cfg.core)
    bound = {}
    for k, v in fields.items():
        if isinstance(v, Ap):
            t = b.tiles[v.name]
            v = bind(v, Buffer(t.name, t.memory, t.shape, t.dtype), k)
        bound[k] = v
    ins = cls(engine=engine, wait=(("estimate", 1),) if waits else (), **bound)
    cycles = model.cost(ins, None)
    if after:
        cycles += getattr(cfg.core, engine.label).commit_latency_cycles
    return cycles * 1e9 / model.clock_hz


def dma_queues(cfg: ChipConfig, partition_bytes: int, most: int | None = None) -> int:
    """How many queues a stream of [P, partition_bytes] transfers needs (at most `most`, by
    default half of the load queues, `queues.Queues`: 4 of the bundled chips' 8): a
    queue sets up one transfer at a time, so transfers whose data moves faster than the next
    one's setup (small rows) need several queues to keep the engines busy, while large ones go
    best on one, each moving at the engines' full rate in turn instead of sharing them with the
    blocks loaded ahead of it (docs/model.md, DMA)."""
    d = cfg.core.dma
    if most is None:
        most = Queues(cfg).loads(0, 1 / 2).count
    setup = d.transfer_setup + (d.engines - 1) * d.engine_stagger
    data = partition_bytes * (cfg.core.sbuf.partitions // d.engines) / d.engine_bandwidth
    return max(1, min(most, math.ceil(setup / data)))
