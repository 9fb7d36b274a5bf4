"""A pointwise kernel whose blocks' steps are software-pipelined `depth` deep: the frame of the
activations and their backward ops (`activations`, `activations_backward`).

As `pointwise` does, the tensors (all of the outputs' shape) are walked in flat blocks over all
partitions, each input loaded once per block and each output stored once; the body emits a
block's compute as a generator of steps. Here `depth` blocks are in flight: each new block's
load is followed by one step of every block in flight, oldest first, so an engine's queue holds
steps of several blocks in turn and never waits on a chain of dependent steps of one block
(a body of four steps over ScalarE, VectorE and GpSimd needs four blocks in flight to keep all
three busy). Each operand rotates through depth + 2 buffers (the block loading, the ones in
flight, the one storing); the block size shrinks so they fit the kernel's share of SBUF.

Two blocks' loads are in flight at a time and the stores go one after another (two queues per
input, one for the stores): a transfer then moves at the engines' full rate instead of sharing
them with every block loaded ahead of it, so the first block arrives, and the pipeline fills,
sooner (on trn2 at [8, 64, 64, 64]: leaky_relu 87% -> 97% of its roofline in fp32,
hardsigmoid_backward 91% -> 93% in bf16). The first block is half the others (RAMP), so the
engines start when its smaller load lands (hardtanh_backward 87% -> 91%, hardswish 84% -> 88%
in bf16; within 0.1% either way for the rest).
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from trnsim.config import ChipConfig
from trnsim.dtypes import DType
from trnsim.errors import TraceError
from trnsim.isa import Ap, DmaCopy
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import flat_blocks, flat_ranges, flat_walk
from trnsim.kernels.pointwise import Block, _advance  # its blocks in flight, stored in turn
from trnsim.kernels.queues import Queues

__all__ = ["pipelined"]

FREE = 1024  # elements per partition of a block at most: a short pipeline's fill and drain
# cost less than with pointwise's 2048, and the engines' fixed costs stay below a seventh
RAMP = 2  # the first block is this many times smaller than the others (module doc)
SBUF_SHARE = 0.6  # of a partition's bytes for this kernel's buffers


def pipelined(
    b: KernelBuilder,
    cfg: ChipConfig,
    name: str,
    inputs: list[str],
    outs: list[str],
    body: Callable[[Block], Generator],
    temps: int,
    depth: int,
) -> None:
    """outs = body(inputs), every tensor of outs[0]'s shape (module doc); `temps`: the bytes
    per element of the temporaries the body takes at most; `depth`: blocks in flight."""
    shape = tuple(b.tensors[outs[0]].shape)
    for n_ in [*inputs, *outs]:
        if tuple(b.tensors[n_].shape) != shape:
            given = ", ".join(f"{t} {list(b.tensors[t].shape)}" for t in [*inputs, *outs])
            raise TraceError(f"{name}: {given}: shapes differ; expected one shape")
    loads = list(dict.fromkeys(inputs))
    bufs = depth + 2
    per_elem = sum(b.tensors[t].dtype.itemsize for t in [*loads, *outs]) + temps
    P = cfg.core.sbuf.partitions
    free = min(FREE, int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) // (bufs * per_elem))
    blocks = _ramped(shape, P, free, b.share(shape))
    if not blocks:  # a core with none of the elements (LNC 2)
        return
    big = (max(p for _, p, _ in blocks), max(f for _, _, f in blocks))
    qs = Queues(cfg)  # two blocks' loads at a time, the stores one after another (module doc)
    lq, sq = qs.loads().take(2 * len(loads)), qs.stores().take(1)
    active: list = []
    for n, (index, p, f) in enumerate(blocks):
        r = (slice(0, p), slice(0, f))

        def buf(kind: str, dt: DType, n=n, r=r) -> Ap:
            return ap(b.scratch_tile(f"pipe.{kind}{n % bufs}:{big}", kind, big, dt), *r)

        tiles = {}
        for k, t in enumerate(loads):
            tiles[t] = buf(f"in{k}_", b.tensors[t].dtype)
            src = ap(t, *index)
            b.emit(DmaCopy, [src], [tiles[t]], src=src, dst=tiles[t], queue=lq[n * len(loads) + k])
        out_tiles = [buf(f"out{k}_", b.tensors[t].dtype) for k, t in enumerate(outs)]
        steps = body(Block([tiles[t] for t in inputs], out_tiles, n, buf))
        active.append((steps, out_tiles, index, n))
        active = _advance(b, outs, sq, active, depth - 1)
    _advance(b, outs, sq, active, 0)


def _ramped(shape: tuple[int, ...], P: int, free: int, rows) -> list[tuple]:
    """`layout.flat_blocks`, but the first block RAMP times smaller than the others (module
    doc)."""
    if not shape or 0 in shape:
        return flat_blocks(shape, P, free, rows)
    runs = flat_ranges(tuple(shape), rows)
    if not runs:
        return []
    (lo, hi), first = runs[0], max(1, free // RAMP)
    head = min(hi, lo + P * first)
    rest = [blk for a, z in runs[1:] for blk in flat_walk(shape, a, z, P, free)]
    return flat_walk(shape, lo, head, P, first) + flat_walk(shape, head, hi, P, free) + rest
