"""A kernel of several inputs and outputs of one shape computed element by element: the frame the
backward ops' and the optimizer's elementwise kernels share.

`pointwise(b, cfg, inputs, outs, body)` walks the outputs' shape in flat blocks of up to 128 x
FREE elements (`layout.flat_blocks`: every block fills all partitions whatever the rank and
size, an optimizer's 1-D parameters as a matrix's rows, and at LNC 2 each core takes its share
of the elements); per block each input is loaded once (inputs on separate DMA queues), `body`
emits the compute on the block's SBUF tiles, and each output is stored, through rotating buffers
so the next block loads while this one computes and the last one stores. A body that is a
generator emits its compute in steps, and two blocks' steps alternate, so that an engine does
not wait for another inside one block. The block size shrinks when the buffers (inputs, outputs
and the body's temporaries, BUFS of each) would not fit the kernel's share of SBUF.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field

from trnsim.config import ChipConfig
from trnsim.dtypes import DType, dtype
from trnsim.errors import TraceError
from trnsim.isa import Ap, DmaCopy
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import flat_blocks
from trnsim.kernels.queues import Queues

__all__ = ["pointwise", "Block", "work_dtype"]

FREE = 2048  # elements per partition of a block at most (4 KiB of bf16: DMA at full rate)
BUFS = 3  # rotating buffers per operand
SBUF_SHARE = 0.6  # of a partition's bytes for this kernel's buffers
F32 = dtype("float32")
IN_FLIGHT = 2  # blocks whose steps alternate (with BUFS = 3 buffers, the next one loads)
_DONE = object()


@dataclass
class Block:
    """One block as the body sees it: the inputs' and outputs' SBUF tiles, and `tmp(kind,
    dtype)` for a temporary of the block's size (its own rotating buffer per kind)."""

    ins: list[Ap]
    outs: list[Ap]
    n: int
    tmp: Callable[[str, DType], Ap] = field(repr=False)


def work_dtype(*dts: DType) -> DType:
    """The dtype of a factor multiplied into a 16-bit gradient: that 16-bit dtype when every
    one given is it (VectorE's tensor_tensor runs at its fast rate only on 16-bit operands, and
    the factor is rounded once from fp32), else fp32."""
    first = dts[0]
    if first.is_16bit_float and all(d == first for d in dts):
        return first
    return F32


def pointwise(
    b: KernelBuilder,
    cfg: ChipConfig,
    name: str,
    inputs: list[str],
    outs: list[str],
    body: Callable[[Block], None],
    temps: int = 3,
) -> None:
    """outs = body(inputs), every tensor of outs[0]'s shape (module doc); `temps`: how many
    fp32 temporaries of a block's size the body takes at most (for the SBUF budget)."""
    shape = tuple(b.tensors[outs[0]].shape)
    for n_ in [*inputs, *outs]:
        if tuple(b.tensors[n_].shape) != shape:
            given = ", ".join(f"{t} {list(b.tensors[t].shape)}" for t in [*inputs, *outs])
            raise TraceError(f"{name}: {given}: shapes differ; expected one shape")
    loads = list(dict.fromkeys(inputs))  # a tensor read twice is loaded once
    per_elem = sum(b.tensors[t].dtype.itemsize for t in [*loads, *outs]) + 4 * temps
    P = cfg.core.sbuf.partitions
    free = min(FREE, int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) // (BUFS * per_elem))
    blocks = flat_blocks(shape, P, free, b.share(shape))
    if not blocks:  # a core with none of the elements (LNC 2: a short vector is one core's)
        return
    big = (max(p for _, p, _ in blocks), max(f for _, _, f in blocks))
    active: list = []  # blocks whose body has steps left (IN_FLIGHT at most)
    # as many queues per tensor as keep its blocks moving (one for blocks of 4 KiB a
    # partition or more: each transfer at the engines' full rate in turn, `elementwise`)
    nq = dma_queues(cfg, big[1] * max(b.tensors[t].dtype.itemsize for t in [*loads, *outs]))
    qs = Queues(cfg)
    lq, sq = qs.loads().take(len(loads) * nq), qs.stores().take(len(outs) * nq)
    for n, (index, p, f) in enumerate(blocks):
        r = (slice(0, p), slice(0, f))

        def buf(kind: str, dt: DType, n=n, r=r) -> Ap:
            key = f"pw.{kind}{n % BUFS}:{dt.name}:{big}"
            if key not in b.scratch:
                b.scratch[key] = b.tile(kind, "sbuf", big, dt)
            return ap(b.scratch[key], *r)

        tiles = {}
        for k, t in enumerate(loads):
            tiles[t] = buf(f"in{k}_", b.tensors[t].dtype)
            src = ap(t, *index)
            b.emit(DmaCopy, [src], [tiles[t]], src=src, dst=tiles[t], queue=lq[n * len(loads) + k])
        out_tiles = [buf(f"out{k}_", b.tensors[t].dtype) for k, t in enumerate(outs)]
        steps = body(Block([tiles[t] for t in inputs], out_tiles, n, buf))
        active.append((steps if isinstance(steps, Generator) else iter(()), out_tiles, index, n))
        active = _advance(b, outs, sq, active, IN_FLIGHT - 1)
    _advance(b, outs, sq, active, 0)


def _advance(b: KernelBuilder, outs: list[str], queues, active: list, keep: int) -> list:
    """One step of every block in flight (a body that is a generator yields between its
    steps, so that each engine alternates between blocks instead of waiting within one), then
    more of the oldest until at most `keep` are left; a finished block is stored (on the
    `queues` stream)."""
    still = []
    for item in active:
        if next(item[0], _DONE) is _DONE:
            _store(b, outs, queues, *item[1:])
        else:
            still.append(item)
    while len(still) > keep:
        item = still.pop(0)
        for _ in item[0]:
            pass
        _store(b, outs, queues, *item[1:])
    return still


def _store(b: KernelBuilder, outs: list[str], queues, out_tiles: list[Ap], index, n) -> None:
    for k, (t, o) in enumerate(zip(outs, out_tiles)):
        dst = ap(t, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=queues[n * len(outs) + k])
