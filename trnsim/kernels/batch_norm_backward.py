"""`native_batch_norm_backward` over [N, C, ...], laid out as the forward (`batch_norm_layout`:
channels on partitions, a channel's plane in G pieces over G partitions, one DMA per image).

With x^ = (x - mean) invstd and M = N S elements a channel (PyTorch's formulas):

    grad_bias = sum(g), grad_weight = sum(g x^) = invstd (sum(g x) - mean sum(g))
    grad_input = k1 g + k2 x + k3 in training: k1 = weight invstd,
        k2 = -k1 invstd grad_weight / M, k3 = -k1 grad_bias / M - k2 mean
    grad_input = k1 g in inference (train false: the running statistics' invstd)

Pass 1 loads g and x per tile of images and sums, per partition, g (a ScalarE activation's
add reduction, or VectorE's tensor_reduce, whichever finishes first) and g x (the product on
VectorE or GpSimd, then its sum the same way); the tiles' columns are added, each channel's
partitions summed on TensorE. In inference grad_input is k1 g in that pass. In training pass
2 computes k2 x + k3 and k1 g (ScalarE, VectorE or GpSimd) and their sum, in g's tile, and
stores it; g and x stay in SBUF between the passes when they fit (RESIDENT of a partition),
else they are loaded again. `out` lists the outputs output_mask asks for, in aten's order
(default: grad_input, and grad_weight and grad_bias when a weight is given).
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import Activation, Ap, TensorReduce
from trnsim.kernels.batch_norm_layout import (
    F32,
    Block,
    Channels,
    Loader,
    Plan,
    col,
    plan,
    resident,
)
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.pointwise import work_dtype
from trnsim.kernels.spread import S, Spread, V

__all__ = ["lower_batch_norm_backward"]

RESIDENT = 0.6  # of a partition for g and x between the passes (trn2: 134 KiB)
BF16 = dtype("bfloat16")


def lower_batch_norm_backward(b: KernelBuilder, cfg: ChipConfig, op: str, args: dict) -> None:
    """(grad_input, grad_weight, grad_bias) as output_mask asks (module doc)."""
    g, x = args["grad_out"], args["input"]
    train = bool(args.get("train", True))
    w = args.get("weight")
    mask = [bool(m) for m in (args.get("output_mask") or [True, w is not None, w is not None])]
    outs = args["out"] if isinstance(args["out"], list) else [args["out"]]
    if len(mask) != 3 or len(outs) != sum(mask):
        raise TraceError(
            f"{op}: out {outs} for output_mask {mask}: expected one output for each true entry "
            "(grad_input, grad_weight, grad_bias)"
        )
    named = dict(zip([k for k, m in zip(("gi", "gw", "gb"), mask) if m], outs))
    need = ("save_mean", "save_invstd") if train else ("running_mean", "running_var")
    if any(args.get(k) is None for k in need):
        raise TraceError(f"{op}: train {train} needs {need[0]} and {need[1]}")
    if tuple(b.tensors[g].shape) != tuple(b.tensors[x].shape):
        raise TraceError(f"{op}: grad_out and input differ in shape; expected one shape")
    p = plan(op, tuple(b.tensors[x].shape), cfg, b.part)
    sp = Spread(b, cfg)
    for blk in p.blocks:
        _block(b, cfg, sp, p, blk, args, named, train)


def _block(b, cfg, sp: Spread, p: Plan, blk: Block, args, named: dict, train: bool) -> None:
    g, x = args["grad_out"], args["input"]
    ch = Channels(b, blk)
    keep = train and "gi" in named and resident(b, cfg, p, [g, x], RESIDENT)
    ld = Loader(b, cfg, [g, x], blk, keep)
    cb, P = blk.cb, blk.P
    prm = b.tile("bnb_prm", "sbuf", (cb, 3), F32)  # weight, mean, invstd
    ld.channel(args.get("weight"), col(prm, 0), 1.0)
    if train:
        ld.channel(args["save_mean"], col(prm, 1))
        ld.channel(args["save_invstd"], col(prm, 2))
    else:
        ld.channel(args["running_mean"], col(prm, 1))
        ld.channel(args["running_var"], col(prm, 2))
        sp.ts(col(prm, 2), col(prm, 2), "add", float(args.get("eps", 1e-5)), "pow", -0.5,
              engines=(V,))  # fmt: skip
    k = b.tile("bnb_k", "sbuf", (cb, 3), F32)  # k1, k2, k3
    sp.tt("multiply", col(prm, 0), col(prm, 2), col(k, 0))
    gi = named.get("gi")
    wdt = work_dtype(b.tensors[g].dtype, b.tensors[gi].dtype) if gi else F32
    k1p = ap(_spread(b, sp, ch, blk, ap(k, slice(0, cb), slice(0, 1)), 1, "bnb_k1"))
    ngroups = len(blk.groups)
    sums = b.tile("bnb_sums", "sbuf", (P, 2 * ngroups), F32)  # sum g, sum g x per tile
    tiles = {}
    for i in range(ngroups):
        t = tiles[i] = ld.load(i)
        _sums(b, sp, ld, i, t[g], t[x], col(sums, i, P), col(sums, ngroups + i, P))
        if gi is not None and not train:
            y = t[g] if b.tensors[gi].dtype == b.tensors[g].dtype else _like(ld, gi, i, t[g])
            sp.ts(t[g], y, "multiply", col(k1p.name, 0, P))
            ld.store(i, y, gi)
    tot = b.tile("bnb_tot", "sbuf", (P, 2), F32)
    for c in range(2):
        src = ap(sums, slice(0, P), slice(c * ngroups, (c + 1) * ngroups))
        b.emit(TensorReduce, [src], [col(tot, c, P)], alu="add", src=src, dst=col(tot, c, P))
    chan = b.tile("bnb_chan", "sbuf", (cb, 2), F32)  # grad_bias, then grad_weight
    sp.ts(ch.sum(ap(tot), 2), ap(chan), "multiply", 1.0, engines=(V,))
    gb, gw = col(chan, 0), col(chan, 1)
    t = b.tile("bnb_t", "sbuf", (cb, 1), F32)
    sp.tt("multiply", col(prm, 1), gb, ap(t))
    sp.tt("subtract", gw, ap(t), gw)
    sp.tt("multiply", gw, col(prm, 2), gw)
    for key, c in (("gb", gb), ("gw", gw)):
        if key in named:
            ld.out_channel(named[key], c)
    if gi is None or not train:
        ch.release()
        return
    M = p.N * p.S
    k1, k2, k3 = (col(k, c) for c in range(3))
    sp.ts(gw, k2, "multiply", -1.0 / M)  # k2 = -k1 invstd gw / M
    sp.tt("multiply", k2, col(prm, 2), k2)
    sp.tt("multiply", k2, k1, k2)
    sp.ts(gb, k3, "multiply", -1.0 / M)  # k3 = -k1 gb / M - k2 mean
    sp.tt("multiply", k3, k1, k3)
    sp.tt("multiply", k2, col(prm, 1), ap(t))
    sp.tt("subtract", k3, ap(t), k3)
    kp = _spread(b, sp, ch, blk, ap(k), 3, "bnb_kp")
    sp.sync()
    for i in range(ngroups):
        t = tiles[i] if keep else ld.load(i)
        tg, tx = t[g], t[x]
        u = ap(ld.scratch("u", i % 2, wdt), *_slices(tx))
        sp.ts(tx, u, "multiply", col(kp, 1, P), "add", col(kp, 2, P))
        y = tg if b.tensors[gi].dtype == b.tensors[g].dtype else _like(ld, gi, i, tg)
        sp.ts(tg, y, "multiply", col(kp, 0, P))
        sp.tt("add", y, u, y)
        ld.store(i, y, gi)
    ch.release()


def _sums(b, sp: Spread, ld: Loader, i: int, tg: Ap, tx: Ap, sg: Ap, sgx: Ap) -> None:
    """sum(g) into sg and sum(g x) into sgx (columns), each by a ScalarE activation's add
    reduction or VectorE's tensor_reduce, whichever finishes first (`spread`)."""
    prod = ap(ld.scratch("prod", i % 2, F32), *_slices(tg))
    sp.tt("multiply", tg, tx, prod)
    for k, (src, dst) in enumerate(((tg, sg), (prod, sgx))):  # the activation's own output
        j = ap(ld.scratch("junk", (2 * i + k) % 4, BF16), *_slices(src))  # is not kept: bf16
        act = {"func": "copy", "src": src, "dst": j, "scale": 1.0, "bias": 0.0, "reduce": "add",
               "reduce_dst": dst}  # fmt: skip
        red = {"alu": "add", "src": src, "dst": dst}
        on_s = sp.load[S] + sp.cost(Activation, S, act, True)
        on_v = sp.load[V] + sp.cost(TensorReduce, V, red, True)
        if on_s <= on_v:
            sp.load[S] = on_s
            b.emit(Activation, [src], [j, dst], **act)
        else:
            sp.load[V] = on_v
            b.emit(TensorReduce, [src], [dst], **red)


def _spread(b, sp: Spread, ch: Channels, blk: Block, cols: Ap, n: int, name: str) -> str:
    """Per-channel columns ([cb, n]) on every partition of their channel: an SBUF tile."""
    if blk.G == 1:
        return cols.name
    t = b.tile(name, "sbuf", (blk.P, n), F32)
    sp.ts(ch.spread(cols, n), ap(t), "multiply", 1.0, engines=(V,))
    return t


def _like(ld: Loader, name: str, i: int, t: Ap) -> Ap:
    return ap(ld.tile(name, i, ld.b.tensors[name].dtype), *_slices(t))


def _slices(a: Ap) -> tuple:
    return tuple(slice(*i) for i in a.index)
