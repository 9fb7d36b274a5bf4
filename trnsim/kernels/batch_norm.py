"""Batch normalization over [N, C, ...] (`native_batch_norm`, training and inference): the
statistics of each channel over the batch and the spatial dims, then y = x a + s per channel.

Layout: channels on partitions, each channel's plane of S elements cut into G contiguous
pieces (G the largest at most 128 / cb that divides S, for a block of cb <= 128 channels), so
x[n, c0:c0 + cb] (cb planes, one run of HBM) is ONE DMA onto [cb G, S / G]: partition c G + j
holds piece j of channel c's plane (a DMA walks both sides in flat order). With 64 channels
G = 2 and all 128 partitions, so all 16 DMA engines, take part (an engine serves 8
partitions). The images of a block go to tiles of up to 2048 elements a partition, each of
its own so the statistics of one overlap the loads of the next; when x's share of a partition
fits (RESIDENT of it) it stays in SBUF for the normalisation, else it is loaded again.

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

fp32 training: the statistics are of shifted values. Each channel's first element x[0, c, 0,
...] (one small DMA, spread over the channel's partitions on TensorE) is subtracted from every
tile as it arrives (in place; exact when the values are close), so bn_stats' chunk means and
Chan's combination work on small numbers and y = x' a + s' (s' = bias - mean' a, mean' the
shifted mean) cancels nothing: at a channel mean of 10^4, bn_stats' fp32 chunk means are only
good to 5e-4, which gave invstd 7e-5 off and y 4e-3 off (`--check` failed at 10^3 and 10^4).
save_mean and the running mean are mean' + the shift. A tile loaded again for y is shifted
again. Training groups its images in tiles of TRAIN_TILE (half of inference's), so the last
tile's shift and statistics, which nothing overlaps, are short.

Inference (training false): a and s from the running statistics, one pass. The channels are
split between the physical cores of an LNC 2 logical core (each computes its channels whole).
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.isa import Activation, Ap, BnAggr, BnStats, DmaCopy, Memset
from trnsim.kernels.batch_norm_layout import (
    F32,
    TILE,
    Block,
    Channels,
    Loader,
    Plan,
    col,
    plan,
    resident,
)
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.spread import G, S, Spread, V

__all__ = ["lower_batch_norm", "Stats"]

RESIDENT = 0.45  # of a partition for x between the passes (trn2: 100 KiB)
TRAIN_TILE = TILE // 2  # elements a partition of a tile of images in training


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
        s = 2 * sp.cost(
            Activation,
            S,
            {
                "func": "square",
                "src": x,
                "dst": x,
                "scale": 1.0,
                "bias": 0.0,
                "reduce": "add",
                "reduce_dst": col(self.st),
            },
        )
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
    # training: smaller tiles, so the statistics (and the fp32 shift) of the last one, which
    # nothing overlaps, are short
    tile = TRAIN_TILE if training else TILE
    p = plan(op, tuple(b.tensors[x].shape), cfg, b.part, tile)
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
    keep = training and resident(b, cfg, p, [x], RESIDENT)
    ld = Loader(b, cfg, [x], blk, keep)
    cb, P = blk.cb, blk.P
    prm = b.tile("bn_prm", "sbuf", (cb, 4), F32)  # weight, bias, running mean, running var
    for k, (name, default) in enumerate((("weight", 1.0), ("bias", 0.0))):
        ld.channel(args.get(name), col(prm, k), default)
    if args.get("running_mean") is not None:
        ld.channel(args["running_mean"], col(prm, 2))
        ld.channel(args["running_var"], col(prm, 3))
    stt = b.tile("bn_stat", "sbuf", (cb, 4), F32)  # mean, var, invstd, the shifted mean
    tiles = {}
    # fp32 statistics of shifted values (module doc): each channel minus its first element
    nsh = _shift(b, ld, ch, blk, x, sp) if training and b.tensors[x].dtype.itemsize >= 4 else None
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
            if nsh is not None:
                sp.ts(tiles[i], tiles[i], "add", nsh)
            acc.add(tiles[i])
        mv = acc.aggregate()
        _channel_stats(b, sp, ch, blk, mv, stt)
        mean, var = col(stt, 0), col(stt, 1)
    else:
        mean, var = col(prm, 2), col(prm, 3)
    shifted = mean  # the mean of the values y's pass reads (shifted ones: x minus the shift)
    if nsh is not None:  # the channel's mean: the shifted values' plus the shift
        mean = col(stt, 3)
        sp.ts(shifted, mean, "add", col(ld.shift, 0, cb), engines=(V,))
    inv = col(stt, 2)
    sp.ts(var, inv, "add", eps, "pow", -0.5, engines=(V,))
    if training:
        ld.out_channel(outs[1], mean)
        ld.out_channel(outs[2], inv)
    cf = b.tile("bn_cf", "sbuf", (cb, 2), F32)  # a, s
    a, s = col(cf, 0), col(cf, 1)
    sp.tt("multiply", inv, col(prm, 0), a)
    sp.tt("multiply", shifted, a, s)
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
        if nsh is not None and not keep:  # loaded again: shifted again
            sp.ts(t, t, "add", nsh)
        y = t if odt == b.tensors[x].dtype else ap(ld.tile(out, i, odt), *_slices(t))
        sp.ts(t, y, "multiply", col(coef, 0, P), "add", col(coef, 1, P))
        ld.store(i, y, out)
    ch.release()


def _shift(b, ld: Loader, ch: Channels, blk: Block, x: str, sp: Spread) -> Ap:
    """[P, 1]: minus each partition's channel's first element x[0, c, 0, ...], loaded by one
    DMA into ld.shift ([cb, 1]) and spread over the channel's partitions on TensorE."""
    ld.shift = b.tile("bn_shift", "sbuf", (blk.cb, 1), F32)
    nd = len(b.tensors[x].shape)
    src, dst = ap(x, 0, slice(blk.c0, blk.c0 + blk.cb), *([0] * (nd - 2))), ap(ld.shift)
    b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=ld.loads.next())
    nsh = ap(b.tile("bn_nshift", "sbuf", (blk.P, 1), F32))
    sp.ts(ch.spread(ap(ld.shift), 1), nsh, "multiply", -1.0, engines=(V,))
    return nsh


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
