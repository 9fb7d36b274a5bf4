"""`softmax` and `log_softmax` over rows too long for one partition: the rows in pieces over
the partitions (`row_pieces`), each partition's max and sum of exp combined across a row's
pieces as online softmax does.

A group is g whole rows in one [128, f] tile (row r, piece i on partition r k + i), or one row
of t segments, each a [128, f] tile. Per tile: each piece's max m (VectorE, one
`tensor_reduce` for the tile, in x's dtype when 16-bit: exact) and its sum s of exp(x - m)
(ScalarE, one `activation` for the tile with -m as its bias: every row at once). Per group:
each partition's max over its segments M_p and sum S_p = sum s exp(m - M_p); the row's max M
over its partitions (`Groups.maxes`) and sum S = sum S_p exp(M_p - M) (`Groups.sums`, on
TensorE); then each tile's output by one per-partition `tensor_scalar`: e * exp(m - M) / S
(softmax; VectorE for 16-bit data, else GpSimd), or x - (M + log S) (log_softmax). A group
whose tiles do not all fit SBUF (with the next group's, loading meanwhile) is read twice: the
second pass writes exp(x - M - log S) by one ScalarE `activation` (softmax) or x - (M + log S).
"""

from __future__ import annotations

import copy

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import (
    Activation,
    DmaCopy,
    Engine,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks
from trnsim.kernels.queues import Queues
from trnsim.kernels.reduce import _unravel
from trnsim.kernels.row_pieces import Groups, PieceLayout
from trnsim.kernels.schedule import Scheduled

__all__ = ["lower_softmax_pieces", "staged"]

G, V, S = Engine.GPSIMD, Engine.VECTOR, Engine.SCALAR
LOWEST = -3.4028234663852886e38  # the most negative fp32: a piece's max at least this
BUFS = 8  # groups resident at most (loads run this many groups ahead of the stores)
# (6 before: fp32 rows of 8K to 256K, 16 MiB, trn2 LNC 2, 92% -> 97% of the DMA bound with 8;
# bf16 rows, bound by VectorE, the same; 10 no better)
SEM_SPARE = 4  # semaphores left for x's and out's counters of an earlier op's generation
# (`builder`: a tensor an earlier op touched counts on two sets), which a trial alone lacks


def lower_softmax_pieces(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, lay: PieceLayout,
                         log: bool, room: int, rows: tuple[int, int]) -> None:  # fmt: skip
    """out = softmax(x) (or log_softmax) over rows [lo, hi) (this core's) laid out as `lay`,
    its tiles within `room` bytes of a partition (module doc)."""
    k = _Pieces(b, cfg, x, out, lay, log, room)
    tx = b.tensors[x]
    if lay.t == 1:  # groups of up to g whole rows, each one index expression of x
        groups = [(index, n) for index, n in row_blocks(tx.shape, lay.g, rows)]
    else:
        groups = [(_unravel(r, tx.shape[:-1]), 1) for r in range(*rows)]
    staged(k, groups)


def staged(k: _Pieces, groups: list) -> None:
    """The groups' three stages, a group apart: load and max (VectorE), exp (ScalarE), the
    rest; each engine's queue then holds work of different groups, none waiting on another's.
    Emitted in the list schedule's order (`schedule.Scheduled`, the transfers sharing the DMA
    engines as the chip's do): a group's chain of small steps (its row max and sum over the
    partitions on TensorE, VectorE, ScalarE and GpSimd in turn) then no longer holds each
    engine's queue in turn while the next group's bulk passes wait behind it (bf16 rows of
    12288, trn2 LNC 2, 16 MiB: 64.1 -> 54.1 us)."""
    k.bufs = _fitting_bufs(k, groups)
    _emit(k, groups)


def _emit(k: _Pieces, groups: list) -> None:
    """`staged`'s stages with k.bufs as set."""
    skew = max(0, min(2, k.bufs - 2))
    with Scheduled(k.b, k.cfg, shared_dma=True, fluid=True):
        for n in range(len(groups) + skew):
            for stage, late in ((k.first, 0), (k.mid, min(1, skew)), (k.second, skew)):
                if 0 <= n - late < len(groups) and (late or n < len(groups)):
                    stage(n - late, *groups[n - late])
    k.groups.done()


def _fitting_bufs(k: _Pieces, groups: list) -> int:
    """k.bufs, or fewer where its tiles would count on more semaphores than the core has (two a
    tile; each slot has 3 t + 10 tiles or so: fp32 rows of 262400 to 262784 in two segments, 8
    slots, 262 and 280 semaphores at softmax and log_softmax, refused): tried on a builder of
    its own, a slot fewer each time, where `_most_sems` says it may not fit."""
    limit = k.cfg.core.semaphores - SEM_SPARE
    bufs = k.bufs
    if not k.resident or _most_sems(k, min(bufs, len(groups))) <= limit:
        return bufs
    while bufs > 2:
        tb = KernelBuilder(k.b.tensors)
        tb.part = k.b.part
        trial = k.on(tb)
        trial.bufs = bufs
        _emit(trial, groups)
        if len({s for ins in tb.instructions for s, _ in ins.wait + ins.signal}) <= limit:
            break
        bufs -= 1
    return bufs


def _most_sems(k: _Pieces, slots: int) -> int:
    """More than the semaphores `slots` of k's tiles count on (an upper bound: per slot t
    tiles of x, of out, of each piece's raw and negated max, and 12 columns; the exp's scratch,
    the `Groups` and remainder tiles; x's and out's counters)."""
    t = k.lay.t
    per_slot = 4 * t + 12
    return 2 * (slots * per_slot + t + 16) + 8


class _Pieces:
    """One op's tiles and the two stages of a group (`first`, `second`)."""

    def __init__(self, b, cfg, x, out, lay: PieceLayout, log: bool, room: int):
        self.b, self.cfg, self.x, self.out, self.lay, self.log = b, cfg, x, out, lay, log
        self.P, self.f32 = cfg.core.sbuf.partitions, dtype("float32")
        self.xdt, self.odt = b.tensors[x].dtype, b.tensors[out].dtype
        self.low = self.xdt if self.xdt.itemsize == 2 and self.xdt.is_float else self.f32
        self.groups = Groups(b, cfg, lay.k)
        qs, q = Queues(cfg), dma_queues(cfg, lay.f * self.xdt.itemsize)
        self.loads, self.stores = qs.loads().take(q), qs.stores().take(q)
        self.nl = self.ns = 0  # loads and stores so far
        # the scale e * factor: VectorE's four elements a cycle for 16-bit data, else GpSimd
        self.scale = V if self.xdt.itemsize == 2 and self.odt.itemsize == 2 else G
        per = lay.f * (self.xdt.itemsize + (self.odt.itemsize if self.odt != self.xdt else 0))
        # two groups' tiles resident (the next one loads while this one is finished), else
        # two tiles at a time and every group read twice
        self.resident = 2 * lay.t * per <= room
        # (else each pass's segments through rotating buffers, as many as fit up to BUFS)
        self.bufs = max(1, min(BUFS, room // ((lay.t if self.resident else 1) * per)))
        self.bufs = self.bufs if self.resident else max(2, self.bufs)

    def on(self, b: KernelBuilder) -> _Pieces:
        """A copy of this plan emitting into `b` (a trial, `_fitting_bufs`)."""
        k = copy.copy(self)
        k.b, k.groups, k.nl, k.ns = b, Groups(b, self.cfg, self.lay.k), 0, 0
        return k

    def tile(self, key: str, n: int, s: int, shape, dt=None) -> str:
        if not self.resident:  # every segment through the same few buffers
            slot = (n * self.lay.t + s) % self.bufs
            return self.b.scratch_tile(f"smp.{key}{slot}", key, shape, dt or self.f32)
        return self.b.scratch_tile(f"smp.{key}{n % self.bufs}.{s}", key, shape, dt or self.f32)

    def seg(self, s: int) -> int:
        """The tag of segment s's own columns: s, or (read twice: `first` finishes a segment
        before the next takes its buffer) one of the buffers' (a row of 2^24 fp32 in 256
        segments took two columns each: more semaphores than a core has)."""
        return s if self.resident or self.lay.t == 1 else s % self.bufs

    def col(self, key: str, n: int, p: int, w: int = 1, dt=None):
        t = self.b.scratch_tile(f"smp.{key}{n % self.bufs}", key, (self.P, w), dt or self.f32)
        return ap(t, slice(0, p))

    def xtile(self, n: int, s: int, p: int):
        return ap(self.tile("x", n, s, (self.P, self.lay.f), self.xdt), slice(0, p))

    def hbm(self, name: str, index: tuple, s: int):
        """Tensor `name`'s elements of segment s of the group at `index`."""
        if self.lay.t == 1:
            return ap(name, *index)
        seg = self.lay.f * self.P
        return ap(name, *index, slice(s * seg, (s + 1) * seg))

    def load(self, n: int, s: int, index: tuple, p: int):
        xa, src = self.xtile(n, s, p), self.hbm(self.x, index, s)
        self.b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=self.loads[self.nl])
        self.nl += 1
        return xa

    def store(self, o, index: tuple, s: int) -> None:
        dst = self.hbm(self.out, index, s)
        self.b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=self.stores[self.ns])
        self.ns += 1

    def maxes(self, n: int, s: int, xa, p: int) -> None:
        """Column s of m: each piece's max, at least LOWEST (a piece all -inf, as a causal
        mask leaves the first pieces of a row, would give exp(-inf + inf) = NaN, and TensorE
        0 * -inf = NaN for every row of its tile); and its negation (the exp's bias)."""
        b = self.b
        m = ap(self.col("m", n, p, self.lay.t).name, slice(0, p), slice(s, s + 1))
        # 16-bit: the max at two elements a cycle (exact), then fp32
        raw = self.col(f"m16.{self.seg(s)}.", n, p, 1, self.low)
        b.emit(TensorReduce, [xa], [raw], alu="max", src=xa, dst=raw)
        b.emit(TensorScalar, [raw], [m], src=raw, dst=m, op0="max", operand0=LOWEST, engine=G)
        nm = self.col(f"nm{self.seg(s)}.", n, p)
        b.emit(TensorScalar, [m], [nm], src=m, dst=nm, op0="multiply", operand0=-1.0, engine=G)

    def exps(self, n: int, s: int, xa, p: int) -> None:
        """Column s of z: the piece's sum of exp(x - m) (exp written in place for a resident
        softmax, to scratch otherwise)."""
        z = ap(self.col("z", n, p, self.lay.t).name, slice(0, p), slice(s, s + 1))
        nm = self.col(f"nm{self.seg(s)}.", n, p)
        keep = self.resident and not self.log
        # (kept: into the output's tile, in out's dtype: an fp32 output of 16-bit x keeps the
        # exp unrounded to x's dtype)
        e = self.out_tile(n, s, xa, p) if keep else ap(self.b.scratch_tile(
            "smp.e", "e", (self.P, self.lay.f), self.xdt), slice(0, p))  # fmt: skip
        self.b.emit(Activation, [xa, nm], [e, z], func="exp", src=xa, dst=e, bias=nm,
                    reduce="add", reduce_dst=z)  # fmt: skip

    def first(self, n: int, index: tuple, rows: int) -> None:
        p = rows * min(self.lay.k, self.P)
        for s in range(self.lay.t):
            xa = self.load(n, s, index, p)
            self.maxes(n, s, xa, p)
            if not self.resident:  # its buffer is loaded again before `mid`
                self.exps(n, s, xa, p)

    def mid(self, n: int, index: tuple, rows: int) -> None:
        if not self.resident:  # (`first`)
            return
        p = rows * min(self.lay.k, self.P)
        for s in range(self.lay.t):
            self.exps(n, s, self.xtile(n, s, p), p)

    def second(self, n: int, index: tuple, rows: int) -> None:
        b, t, P = self.b, self.lay.t, self.P
        p = rows * min(self.lay.k, P)
        m, z = self.col("m", n, p, t), self.col("z", n, p, t)
        if t > 1:  # per partition: M_p = max m, S_p = sum z exp(m - M_p)
            mp, nmp, c = self.col("Mp", n, p), self.col("nMp", n, p), self.col("cs", n, p, t)
            b.emit(TensorReduce, [m], [mp], alu="max", src=m, dst=mp)
            b.emit(TensorScalar, [mp], [nmp], src=mp, dst=nmp, op0="multiply", operand0=-1.0,
                   engine=G)  # fmt: skip
            b.emit(Activation, [m, nmp], [c], func="exp", src=m, dst=c, bias=nmp)
            b.emit(TensorTensor, [c, z], [c], alu="multiply", src0=c, src1=z, dst=c, engine=G)
            sp = self.col("Sp", n, p)
            b.emit(TensorReduce, [c], [sp], alu="add", src=c, dst=sp)
        else:
            mp, sp = m, z
        if self.lay.k == 1:  # a row a partition: its max and sum are the partition's
            nbig, total = self.col("nm0.", n, p), sp
        else:
            nbig = self.col("nM", n, p)  # the row's max M, negated
            self.groups.maxes(mp, p, 1, nbig, negated=True)
            c = self.col("c", n, p)  # exp(M_p - M), times S_p, summed over the row
            b.emit(Activation, [mp, nbig], [c], func="exp", src=mp, dst=c, bias=nbig)
            b.emit(TensorTensor, [c, sp], [c], alu="multiply", src0=c, src1=sp, dst=c, engine=G)
            total = self.groups.sums(c, p)
        if self.log or not self.resident:  # bias -(M + log S): x + bias, or exp(x + bias)
            ls, bias = self.col("ls", n, p), self.col("bias", n, p)
            b.emit(Activation, [total], [ls], func="log", src=total, dst=ls)
            b.emit(TensorTensor, [nbig, ls], [bias], alu="subtract", src0=nbig, src1=ls,
                   dst=bias, engine=G)  # fmt: skip
            for s in range(t):
                xa = self.xtile(n, s, p) if self.resident else self.load(n, s, index, p)
                o = self.out_tile(n, s, xa, p)
                if self.log:
                    self.scaled(xa, o, "add", bias)
                else:
                    b.emit(Activation, [xa, bias], [o], func="exp", src=xa, dst=o, bias=bias)
                self.store(o, index, s)
            return
        f = self.col("f", n, p, t)  # exp(m - M) / S per segment
        if self.lay.k == 1:  # 1 / S
            b.emit(TensorScalar, [total], [f], src=total, dst=f, op0="divide", operand0=1.0,
                   reverse0=True, engine=G)  # fmt: skip
        else:
            b.emit(Activation, [m, nbig], [f], func="exp", src=m, dst=f, bias=nbig)
            b.emit(TensorScalar, [f, total], [f], src=f, dst=f, op0="divide", operand0=total)
        for s in range(t):
            xa, fs = self.xtile(n, s, p), ap(f.name, slice(0, p), slice(s, s + 1))
            o = self.out_tile(n, s, xa, p)  # (holding the exp: `exps`)
            self.scaled(o, o, "multiply", fs)
            self.store(o, index, s)

    def scaled(self, src, dst, op: str, c) -> None:
        """dst = src op c (a per-partition column), on `scale`'s engine."""
        self.b.emit(TensorScalar, [src, c], [dst], src=src, dst=dst, op0=op, operand0=c,
                    engine=self.scale)  # fmt: skip

    def out_tile(self, n: int, s: int, xa, p: int):
        if self.odt == self.xdt:
            return xa
        return ap(self.tile("o", n, s, (self.P, self.lay.f), self.odt), slice(0, p))
