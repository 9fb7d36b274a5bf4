"""Batch normalization over [N, C, ...] (`native_batch_norm`, training and inference): the
statistics of each channel over the batch and the spatial dims, then y = x a + s per channel.

Layout: channels on partitions, each channel's plane of S elements cut into G contiguous
pieces (G the largest at most 128 / cb that divides S, for a block of cb <= 128 channels), so
x[n, c0:c0 + cb] (cb planes, one run of HBM) is ONE DMA onto [cb G, S / G]: partition c G + j
holds piece j of channel c's plane (a DMA walks both sides in flat order). With 64 channels
G = 2 and all 128 partitions, so all 16 DMA engines, take part (an engine serves 8
partitions). The images of a block go to tiles of up to 2048 elements a partition, each of
its own so the statistics of one overlap the loads of the next; when x's share of a partition
fits (RESIDENT bytes) it stays in SBUF for the normalisation, else it is loaded again.

Statistics (`Stats`): VectorE's bn_stats per 512 elements (bn_stats_fmax), one bn_aggr per
partition (mean, var over its N S / G elements); a channel's G partitions meet on TensorE
(`Channels`): B [cb G, cb] (1 where p // G = c, two GpSimd affine_selects) as the stationary
operand sums a column over a channel's partitions into PSUM [cb, 1], and B^T spreads a
channel's value back over its partitions. mean = sum(mean_p) / G and var = sum(var_p +
(mean_p - mean)^2) / G (Chan's combination of equal counts). Per channel: invstd = (var +
eps)^-1/2, a = weight invstd, s = bias - mean a (save_mean, save_invstd and the running
statistics, momentum-weighted with the unbiased variance, are stored from these [cb, 1]
columns); (a, s) are spread over the partitions and y = x a + s is one `tensor_scalar` per
tile, on ScalarE, VectorE or GpSimd (`spread`), as the stores go out.

Inference (training false): a and s from the running statistics, one pass. The channels are
split between the physical cores of an LNC 2 logical core (each computes its channels whole).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import Activation, AffineSelect, Ap, BnAggr, BnStats, DmaCopy, Matmul, Memset
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues
from trnsim.kernels.spread import G, S, Spread, V

__all__ = ["lower_batch_norm", "Plan", "Channels", "plan"]

F32 = dtype("float32")
TILE = 2048  # elements a partition of a tile of images at most
RESIDENT = 96 * 1024  # bytes a partition may keep of the inputs between the two passes
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


def plan(op: str, shape: tuple, cfg: ChipConfig, part: tuple[int, int]) -> Plan:
    """The channel blocks of this physical core (`part` = (core, cores)) for x of `shape`."""
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
        nb = max(1, min(N, TILE // f))
        blocks.append(Block(c0, cb, G, f, [(n, min(N, n + nb)) for n in range(0, N, nb)]))
    return Plan(N, C, S, blocks)


class Channels:
    """A block's G partitions per channel meeting on TensorE (module doc)."""

    def __init__(self, b: KernelBuilder, blk: Block):
        self.b, self.blk = b, blk
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
        ps = ap(self.b.psum("bn_sum", (self.blk.cb, n), F32), slice(None), slice(0, n))
        b = ap(self.B)
        self.b.emit(Matmul, [b, cols], [ps], stationary=b, moving=cols, dst=ps)
        return ps

    def spread(self, cols: Ap, n: int) -> Ap:
        """Each channel's `cols` ([cb, n]) on its partitions: PSUM [P, n]."""
        if self.blk.G == 1:
            return cols
        ps = ap(self.b.psum("bn_spread", (self.blk.P, n), F32), slice(None), slice(0, n))
        bt = ap(self.BT)
        self.b.emit(Matmul, [bt, cols], [ps], stationary=bt, moving=cols, dst=ps)
        return ps

    def release(self) -> None:
        self.b.release(*(n for n in self.b.tiles if n.startswith(("bn_sum", "bn_spread"))))


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
        """Group i's tile of tensor `name` (or a scratch of dtype `dt`)."""
        dt = dt or self.b.tensors[name].dtype
        slot = f"{self.blk.c0}.{i}" if self.keep else i % BUFS
        return self.b.scratch_tile(f"bn.{name}.{slot}", "bn_x", (self.blk.P, self.width), dt)

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


def resident(b: KernelBuilder, p: Plan, names: list[str]) -> bool:
    """Whether the tensors `names` of every block stay in SBUF between the passes."""
    per = sum(b.tensors[n].dtype.itemsize for n in names) * p.N
    return per * sum(blk.f for blk in p.blocks) <= RESIDENT


class Stats:
    """A block's per-partition statistics: (count, mean, M2) triples in one tile's columns,
    combined by one bn_aggr. A tile's share comes from VectorE's bn_stats (one per 512
    elements, two triples each) or, for 16-bit inputs, from ScalarE: the sum and the sum of
    squares of the tile in two activations with their add reduction, then mean = sum / F and
    M2 = sum of squares - sum mean (GpSimd; exact enough at bf16's precision). A tile goes to
    the engine that would finish it first (VectorE's bn_stats takes a 16-bit element a cycle
    at 0.96 GHz on NC-v3, slower than the DMA brings bf16 in)."""

    def __init__(self, b: KernelBuilder, cfg: ChipConfig, sp: Spread, blk: Block, x: str):
        self.b, self.sp, self.P = b, sp, blk.P
        self.scalar = b.tensors[x].dtype.is_16bit_float
        widths = [(n1 - n0) * blk.f for n0, n1 in blk.groups]
        cols = sum(6 * math.ceil(w / 512) for w in widths)
        if cols > cfg.core.vector.dve_max_free_elements:
            raise ValueError(cols)
        self.st = b.tile("bn_st", "sbuf", (self.P, cols), F32)
        self.k = 0  # columns used

    def add(self, x: Ap) -> None:
        """The statistics of tile region x ([P, F])."""
        b, sp, P = self.b, self.sp, self.P
        lo, hi = x.index[1][0] or 0, x.index[1][1]
        n = math.ceil((hi - lo) / 512)
        chunk = ap(x.name, slice(0, P), slice(lo, min(hi, lo + 512)))
        v = n * sp.cost(BnStats, V, {"src": chunk, "dst": ap(self.st, slice(0, P), slice(0, 6))})
        s = 2 * sp.cost(Activation, S, {"func": "square", "src": x, "dst": x, "scale": 1.0,
                                        "bias": 0.0, "reduce": "add", "reduce_dst": col(self.st)})
        if self.scalar and sp.load[S] + s < sp.load[V] + v:
            sp.add(S, s)
            self._scalar(x, hi - lo)
            return
        sp.add(V, v)
        for a in range(lo, hi, 512):
            src = ap(x.name, slice(0, P), slice(a, min(hi, a + 512)))
            dst = ap(self.st, slice(0, P), slice(self.k, self.k + 6))
            b.emit(BnStats, [src], [dst], src=src, dst=dst)
            self.k += 6

    def _scalar(self, x: Ap, F: int) -> None:
        b, P, k = self.b, self.P, self.k
        sums = b.scratch_tile(f"bn.sums{k % 4}", "bn_sums", (P, 2), F32)
        junk = b.scratch_tile("bn.junk", "bn_junk", (P, F), b.tiles[x.name].dtype)
        j = ap(junk, slice(0, P), slice(0, F))
        for c, func in enumerate(("identity", "square")):
            r = col(sums, c, P)
            b.emit(Activation, [x], [j, r], func=func, src=x, dst=j, reduce="add", reduce_dst=r)
        cnt, mean, m2 = (col(self.st, k + c, P) for c in range(3))
        b.emit(Memset, [], [cnt], dst=cnt, value=float(F), engine=G)
        self.sp.ts(col(sums, 0, P), mean, "multiply", 1 / F, engines=(G,))
        t = col(b.scratch_tile(f"bn.t{k % 4}", "bn_t", (P, 1), F32), 0, P)
        self.sp.tt("multiply", col(sums, 0, P), mean, t, engines=(G,))
        self.sp.tt("subtract", col(sums, 1, P), t, m2, engines=(G,))
        self.k += 3

    def aggregate(self) -> str:
        """bn_aggr of the triples: [P, 2] (mean, var) per partition."""
        mv = self.b.tile("bn_mv", "sbuf", (self.P, 2), F32)
        src = ap(self.st, slice(0, self.P), slice(0, self.k))
        self.b.emit(BnAggr, [src], [ap(mv)], src=src, dst=ap(mv))
        return mv


def lower_batch_norm(b: KernelBuilder, cfg: ChipConfig, op: str, args: dict) -> None:
    """out = batch_norm(input) (module doc); `out`: [out], or [out, save_mean, save_invstd]
    (training), then the running_mean and running_var updated (training with running
    statistics: name the same tensors, updated in place as aten does)."""
    x, outs = args["input"], args["out"]
    outs = outs if isinstance(outs, list) else [outs]
    training = bool(args.get("training", True))
    eps = float(args.get("eps", 1e-5))
    momentum = float(args.get("momentum", 0.1))
    p = plan(op, tuple(b.tensors[x].shape), cfg, b.part)
    rm, rv = args.get("running_mean"), args.get("running_var")
    want = 3 if training else 1
    if len(outs) not in (want, want + 2 * (training and rm is not None)) or (
        not training and (rm is None or rv is None)
    ):
        raise TraceError(
            f"{op}: out {outs}: expected [out, save_mean, save_invstd] in training (then the "
            "updated running_mean and running_var when given), [out] in inference (which "
            "needs running_mean and running_var)"
        )
    sp = Spread(b, cfg)
    for blk in p.blocks:
        _block(b, cfg, op, sp, p, blk, args, outs, training, eps, momentum)


def _block(b, cfg, op, sp: Spread, p: Plan, blk: Block, args, outs, training, eps, momentum):
    x = args["input"]
    ch = Channels(b, blk)
    keep = training and resident(b, p, [x])
    ld = Loader(b, cfg, [x], blk, keep)
    cb, P = blk.cb, blk.P
    prm = b.tile("bn_prm", "sbuf", (cb, 4), F32)  # weight, bias, running mean, running var
    for k, (name, default) in enumerate((("weight", 1.0), ("bias", 0.0))):
        ld.channel(args.get(name), col(prm, k), default)
    if args.get("running_mean") is not None:
        ld.channel(args["running_mean"], col(prm, 2))
        ld.channel(args["running_var"], col(prm, 3))
    stt = b.tile("bn_stat", "sbuf", (cb, 3), F32)  # mean, var, invstd
    tiles = {}
    if training:
        try:
            acc = Stats(b, cfg, sp, blk, x)
        except ValueError:
            raise TraceError(
                f"{op}: {p.N * blk.f} elements a partition take more bn_stats than one bn_aggr "
                "combines; not lowered yet"
            ) from None
        for i in range(len(blk.groups)):
            tiles[i] = ld.load(i)[x]
            acc.add(tiles[i])
        mv = acc.aggregate()
        _channel_stats(b, sp, ch, blk, mv, stt)
        mean, var = col(stt, 0), col(stt, 1)
    else:
        mean, var = col(prm, 2), col(prm, 3)
    inv = col(stt, 2)
    sp.ts(var, inv, "add", eps, "pow", -0.5, engines=(V,))
    if training:
        ld.out_channel(outs[1], mean)
        ld.out_channel(outs[2], inv)
    cf = b.tile("bn_cf", "sbuf", (cb, 2), F32)  # a, s
    a, s = col(cf, 0), col(cf, 1)
    sp.tt("multiply", inv, col(prm, 0), a)
    sp.tt("multiply", mean, a, s)
    sp.tt("subtract", col(prm, 1), s, s)
    if training and len(outs) == 5:
        _running(b, sp, ld, prm, mean, var, outs, momentum, p.N * p.S)
    coef = cf
    if blk.G > 1:
        coef = b.tile("bn_coef", "sbuf", (P, 2), F32)
        sp.ts(ch.spread(ap(cf), 2), ap(coef), "multiply", 1.0, engines=(V,))
    out = outs[0]
    odt = b.tensors[out].dtype
    sp.sync()
    for i in range(len(blk.groups)):
        t = tiles[i] if keep else ld.load(i)[x]
        y = t if odt == b.tensors[x].dtype else ap(ld.tile(out, i, odt), *_slices(t))
        sp.ts(t, y, "multiply", col(coef, 0, P), "add", col(coef, 1, P))
        ld.store(i, y, out)
    ch.release()


def _slices(a: Ap) -> tuple:
    return tuple(slice(*i) for i in a.index)


def _channel_stats(b, sp: Spread, ch: Channels, blk: Block, mv: str, stt: str) -> None:
    """(mean, var) of each channel into stt's columns 0, 1 from the partitions' (mv)."""
    cb, G = blk.cb, blk.G
    if G == 1:
        sp.ts(ap(mv), ap(stt, slice(0, cb), slice(0, 2)), "multiply", 1.0, engines=(V,))
        return
    mean = col(stt, 0)
    sp.ts(ch.sum(col(mv, 0), 1), mean, "multiply", 1 / G, engines=(V,))
    dev = b.tile("bn_dev", "sbuf", (blk.P, 1), F32)
    sp.tt("subtract", col(mv, 0), ch.spread(mean, 1), ap(dev), engines=(V,))
    sp.tt("multiply", ap(dev), ap(dev), ap(dev))
    sp.tt("add", ap(dev), col(mv, 1), ap(dev))
    sp.ts(ch.sum(ap(dev), 1), col(stt, 1), "multiply", 1 / G, engines=(V,))


def _running(b, sp: Spread, ld: Loader, prm: str, mean, var, outs, momentum, count) -> None:
    """running = (1 - momentum) running + momentum stat (the variance unbiased)."""
    run = b.tile("bn_run", "sbuf", (ld.blk.cb, 2), F32)
    for k, (stat, scale) in enumerate(((mean, 1.0), (var, count / max(1, count - 1)))):
        t = col(run, k)
        sp.ts(stat, t, "multiply", momentum * scale)
        old = b.tile("bn_old", "sbuf", (ld.blk.cb, 1), F32)
        sp.ts(col(prm, 2 + k), ap(old), "multiply", 1 - momentum)
        sp.tt("add", ap(old), t, t)
        ld.out_channel(outs[3 + k], t)
