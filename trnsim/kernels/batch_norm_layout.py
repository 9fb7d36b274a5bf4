"""How batch norm (`batch_norm`, `batch_norm_backward`) lays [N, C, ...] out on a core: a
block of cb <= 128 channels over P = cb G partitions, each channel's plane of S elements cut
into G contiguous pieces (G the largest at most 128 / cb that divides S), so x[n, c0:c0 + cb]
(cb planes, one run of HBM) is one DMA onto [P, S / G]: partition c G + j holds piece j of
channel c's plane. `Channels` sums a column over each channel's partitions, and spreads a
channel's value back over them, on TensorE; `Loader` moves a block's images and the
per-channel tensors. At LNC 2 the channels are split between the physical cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import AffineSelect, Ap, DmaCopy, Matmul, Memset
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues
from trnsim.kernels.spread import V

__all__ = ["Block", "Plan", "plan", "Channels", "Loader", "col", "resident", "F32"]

F32 = dtype("float32")
TILE = 2048  # elements a partition of a tile of images at most
BUFS = 3  # rotating tiles when they do not stay


@dataclass
class Block:
    """cb channels from c0 over P = cb G partitions, each a piece of f = S / G elements of
    every image; `groups`: the images of each tile, (n0, n1)."""

    c0: int
    cb: int
    G: int
    f: int
    groups: list[tuple[int, int]]

    @property
    def P(self) -> int:
        return self.cb * self.G


@dataclass
class Plan:
    N: int
    C: int
    S: int
    blocks: list[Block]


def plan(op: str, shape: tuple, cfg: ChipConfig, part: tuple[int, int], tile: int = TILE) -> Plan:
    """The channel blocks of this physical core (`part` = (core, cores)) for x of `shape`, the
    images grouped into tiles of up to `tile` elements a partition."""
    if len(shape) < 3:
        raise TraceError(
            f"{op}: input {list(shape)}: batch norm over [N, C] is not lowered yet; expected "
            "[N, C, ...] with spatial dims"
        )
    N, C, S = shape[0], shape[1], math.prod(shape[2:])
    P = cfg.core.sbuf.partitions
    c, cores = part
    lo, hi = C * c // cores, C * (c + 1) // cores
    blocks = []
    for c0 in range(lo, hi, P):
        cb = min(P, hi - c0)
        G = max(g for g in range(1, P // cb + 1) if S % g == 0)
        f = S // G
        if f > TILE * 4:
            raise TraceError(
                f"{op}: input {list(shape)}: planes of {S} elements over {G} partitions a "
                f"channel ({f} a partition) are not lowered yet; expected at most {TILE * 4}"
            )
        nb = max(1, min(N, tile // f))
        blocks.append(Block(c0, cb, G, f, [(n, min(N, n + nb)) for n in range(0, N, nb)]))
    return Plan(N, C, S, blocks)


class Channels:
    """A block's G partitions per channel meeting on TensorE (module doc)."""

    def __init__(self, b: KernelBuilder, blk: Block):
        self.b, self.blk, self.taken = b, blk, []
        if blk.G == 1:
            return
        P, cb, G = blk.P, blk.cb, blk.G
        ones = b.scratch_tile("bn.ones", "bn_ones", (P, max(P, cb)), F32)
        b.emit(Memset, [], [ap(ones)], dst=ap(ones), value=1.0)
        self.B = b.tile("bn_b", "sbuf", (P, cb), F32)  # [p, c]: p // G == c
        self.BT = b.tile("bn_bt", "sbuf", (cb, P), F32)  # [c, p]
        for t, rows, cols, ps, st in ((self.B, P, cb, 1, -G), (self.BT, cb, P, -G, 1)):
            src, dst = ap(ones, slice(0, rows), slice(0, cols)), ap(t)
            b.emit(AffineSelect, [src], [dst], on_true=src, dst=dst, on_false=0.0,
                   cmp="greater_equal", start=0, partition_step=ps, step=st)  # fmt: skip
            b.emit(AffineSelect, [dst], [dst], on_true=dst, dst=dst, on_false=0.0,
                   cmp="greater_equal", start=G - 1, partition_step=-ps, step=-st)  # fmt: skip

    def sum(self, cols: Ap, n: int) -> Ap:
        """Each channel's sum of `cols` ([P, n]) over its partitions: PSUM [cb, n]."""
        if self.blk.G == 1:
            return cols
        return self._matmul("bn_sum", self.B, cols, self.blk.cb, n)

    def spread(self, cols: Ap, n: int) -> Ap:
        """Each channel's `cols` ([cb, n]) on its partitions: PSUM [P, n]."""
        if self.blk.G == 1:
            return cols
        return self._matmul("bn_spread", self.BT, cols, self.blk.P, n)

    def _matmul(self, base: str, st: str, cols: Ap, rows: int, n: int) -> Ap:
        name = self.b.psum(base, (rows, n), F32)
        self.taken.append(name)
        ps, s = ap(name, slice(0, rows), slice(0, n)), ap(st)
        self.b.emit(Matmul, [s, cols], [ps], stationary=s, moving=cols, dst=ps)
        return ps

    def release(self) -> None:
        """The PSUM tiles taken so far, for later ops and blocks."""
        self.b.release(*self.taken)
        self.taken = []


def col(t: str, k: int = 0, rows: int | None = None) -> Ap:
    """Column k of tile t (its first `rows` partitions)."""
    return ap(t, slice(0, rows), slice(k, k + 1))


class Loader:
    """The tiles of a block's images: loaded by one DMA per image, kept (resident: each block
    its own, so the next block loads while this one computes) or rotating through BUFS
    buffers. The DMAs go on as many queues as keep the engines busy with transfers of this
    size (`balance.dma_queues`, twice: a block's images arrive about in order)."""

    def __init__(self, b: KernelBuilder, cfg: ChipConfig, names: list[str], blk: Block, keep):
        self.b, self.names, self.blk, self.keep = b, names, blk, keep
        qs = Queues(cfg)
        size = blk.f * max(b.tensors[n].dtype.itemsize for n in names)
        n = 2 * dma_queues(cfg, size, qs.loads().count)
        self.loads, self.stores = qs.loads().take(n), qs.stores().take(n)
        self.width = max(n1 - n0 for n0, n1 in blk.groups) * blk.f

    def tile(self, name: str, i: int, dt=None) -> str:
        """Group i's tile of tensor `name` (of dtype `dt`: the tensor's by default)."""
        dt = dt or self.b.tensors[name].dtype
        slot = f"{self.blk.c0}.{i}" if self.keep else i % BUFS
        return self.b.scratch_tile(f"bn.{name}.{slot}", "bn_x", (self.blk.P, self.width), dt)

    def scratch(self, kind: str, slot: int, dt) -> str:
        """A temporary the size of a tile: buffer `slot` of `kind`."""
        return self.b.scratch_tile(f"bn.{kind}.{slot}", "bn_t", (self.blk.P, self.width), dt)

    def load(self, i: int) -> dict[str, Ap]:
        """Group i of every tensor loaded: name -> its tile's region."""
        blk = self.blk
        n0, n1 = blk.groups[i]
        out = {}
        for name in self.names:
            t = self.tile(name, i)
            for k, n in enumerate(range(n0, n1)):
                src = ap(name, n, slice(blk.c0, blk.c0 + blk.cb))
                dst = ap(t, slice(0, blk.P), slice(k * blk.f, (k + 1) * blk.f))
                self.b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.loads.next())
            out[name] = ap(t, slice(0, blk.P), slice(0, (n1 - n0) * blk.f))
        return out

    def store(self, i: int, t: Ap, out: str) -> None:
        blk = self.blk
        n0, n1 = blk.groups[i]
        for k, n in enumerate(range(n0, n1)):
            src = ap(t.name, slice(0, blk.P), slice(k * blk.f, (k + 1) * blk.f))
            dst = ap(out, n, slice(blk.c0, blk.c0 + blk.cb))
            self.b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.stores.next())

    def channel(self, name: str | None, into: Ap, default: float | None = None) -> None:
        """Per-channel tensor `name` ([C]) of the block into column `into` ([cb, 1]); a
        constant when absent."""
        if name is None:
            self.b.emit(Memset, [], [into], dst=into, value=default, engine=V)
            return
        src = ap(name, slice(self.blk.c0, self.blk.c0 + self.blk.cb))
        self.b.emit(DmaCopy, [src], [into], src=src, dst=into, queue=self.loads.next())

    def out_channel(self, name: str, src: Ap) -> None:
        dst = ap(name, slice(self.blk.c0, self.blk.c0 + self.blk.cb))
        self.b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.stores.next())


def resident(b: KernelBuilder, cfg: ChipConfig, p: Plan, names: list[str], share: float) -> bool:
    """Whether the tensors `names` of every block stay in SBUF between the passes, in
    `share` of a partition."""
    per = sum(b.tensors[n].dtype.itemsize for n in names) * p.N
    return per * sum(blk.f for blk in p.blocks) <= share * cfg.core.sbuf.partition_bytes
