"""`nll_loss_backward`: grad_input[n, c] = -scale[n] where c = target[n] (and target[n] is not
ignore_index), else 0; scale[n] = weight[target[n]] * grad_output (reduction 'sum'), divided
by total_weight ('mean', the forward's), or times grad_output[n] ('none').

The output is mostly zeros: the kernel writes it in row blocks of up to 128 rows (one row per
partition) and column chunks of up to CHUNK classes. A [128, CHUNK] iota of the class numbers
is made once on GpSimd; per row block the targets come in as a [rows, 1] column and the
per-row scale is formed on [rows, 1] columns (the scalar grad_output and total_weight spread
over the partitions once by TensorE, the class weight picked by a one-hot product and a row
sum); then each chunk is ONE `tensor_scalar`: (iota == target - c0) * -scale, on VectorE and
GpSimd in turn, and stored. The kernel is bound by the stores of the output.
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import DmaCopy, Engine, Iota, TensorReduce
from trnsim.kernels.backward import ts, tt
from trnsim.kernels.broadcast import spread_rows
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks
from trnsim.kernels.queues import Queues
from trnsim.kernels.softmax_backward import row_tile

__all__ = ["lower_nll_loss_backward"]

CHUNK = 2048  # classes per chunk: 4 KiB of bf16 a partition per store
# a class weight spread over the partitions at most: bytes a partition, and at most this share
# of the partition (for a config with a smaller SBUF)
WEIGHT_BYTES = (64 * 1024, 1 / 3)
REDUCTIONS = {0: "none", 1: "mean", 2: "sum", "none": "none", "mean": "mean", "sum": "sum"}


def lower_nll_loss_backward(b: KernelBuilder, cfg: ChipConfig, op: str, args: dict) -> None:
    """out = nll_loss_backward(grad_output, x, target, weight, reduction, ignore_index,
    total_weight) (module doc)."""
    x, target, out, go = args["x"], args["target"], args["out"], args["grad_output"]
    tx, tt_, to = (b.tensors[n] for n in (x, target, out))
    reduction = REDUCTIONS.get(args.get("reduction", "mean"))
    if reduction is None:
        raise TraceError(f"{op}: reduction {args['reduction']!r}; expected none, mean or sum")
    shape = tuple(tx.shape)
    c = shape[-1]
    if tuple(to.shape) != shape or tuple(tt_.shape) not in (shape[:-1], shape[:-1] + (1,)):
        raise TraceError(
            f"{op}: x {list(shape)}, target {list(tt_.shape)}, out {list(to.shape)}: expected "
            "out of x's shape [N, C] and target [N]"
        )
    if reduction == "mean" and args.get("total_weight") is None:
        raise TraceError(f"{op}: reduction 'mean' needs total_weight (the forward's)")
    weight = args.get("weight")
    most = min(WEIGHT_BYTES[0], int(cfg.core.sbuf.partition_bytes * WEIGHT_BYTES[1]))
    if weight is not None and c * 4 > most:
        raise TraceError(f"{op}: a class weight over {c} classes is not lowered yet")
    P, f32 = cfg.core.sbuf.partitions, dtype("float32")
    chunk = min(CHUNK, c)
    iota = b.tile("classes", "sbuf", (P, chunk), f32)
    b.emit(Iota, [], [ap(iota)], dst=ap(iota), start=0, step=1)
    gscale = None
    if reduction != "none":  # grad_output (/ total_weight) on every partition
        gscale = spread_rows(b, cfg, go, 1)
        if reduction == "mean":
            tw = spread_rows(b, cfg, args["total_weight"], 1)
            tt(b, "divide", ap(gscale), ap(tw), ap(gscale))
    wrow = spread_rows(b, cfg, weight, c) if weight is not None else None
    qs = Queues(cfg)
    for n, (index, rows) in enumerate(row_blocks(shape, P, b.share(shape))):
        scale = _row_scale(b, cfg, qs, args, n, index, rows, gscale, wrow, iota)
        _chunks(b, qs.stores(), out, shape, index, n, rows, scale, iota, chunk)


def _row_scale(b, cfg, qs: Queues, args, n, index, rows, gscale, wrow, iota):
    """(target column, -scale column) of a block of rows: both [rows, 1] fp32 (the targets
    loaded on the first half of the load queues, grad_output on the second)."""
    P, f32, slot, r = cfg.core.sbuf.partitions, dtype("float32"), n % 3, slice(0, rows)
    target = args["target"]
    tcol = ap(row_tile(b, f"tgt{slot}", (P, 1), b.tensors[target].dtype), r)
    src = ap(target, *index)
    b.emit(DmaCopy, [src], [tcol], src=src, dst=tcol, queue=qs.loads(0, 1 / 2)[n])
    s = ap(row_tile(b, f"scale{slot}", (P, 1), f32), r)  # -(target != ignore_index)
    ignore = float(args.get("ignore_index", -100))
    ts(b, tcol, s, "not_equal", ignore, "multiply", -1.0, engine=Engine.VECTOR)
    if gscale is not None:
        tt(b, "multiply", s, ap(gscale, r), s)
    else:  # reduction none: grad_output per row
        g = ap(row_tile(b, f"go{slot}", (P, 1), b.tensors[args["grad_output"]].dtype), r)
        gsrc = ap(args["grad_output"], *index)
        b.emit(DmaCopy, [gsrc], [g], src=gsrc, dst=g, queue=qs.loads(1 / 2, 1)[n])
        tt(b, "multiply", s, g, s)
    if wrow is not None:  # weight[target]: a one-hot over the classes times the spread weight
        c = b.tiles[wrow].shape[1]
        oh = ap(row_tile(b, "onehot", (P, c), f32), r)
        iw = b.tiles[iota].shape[1]
        for c0 in range(0, c, iw):
            w = min(iw, c - c0)
            dst = ap(oh.name, r, slice(c0, c0 + w))
            shifted = ap(row_tile(b, f"tsh{slot}", (P, 1), f32), r)
            ts(b, tcol, shifted, "add", float(-c0), engine=Engine.VECTOR)
            src = ap(iota, r, slice(0, w))
            ts(b, src, dst, "equal", shifted, engine=Engine.VECTOR)
        tt(b, "multiply", oh, ap(wrow, r), oh)
        wt = ap(row_tile(b, f"wt{slot}", (P, 1), f32), r)
        b.emit(TensorReduce, [oh], [wt], alu="add", src=oh, dst=wt)
        tt(b, "multiply", s, wt, s)
    return tcol, s


def _chunks(b, stores, out, shape, index, n, rows, scale, iota, chunk):
    """The block's rows of out, CHUNK classes at a time: (iota == target - c0) * -scale,
    stored on the `stores` queues."""
    tcol, s = scale
    P, f32, r = b.tiles[iota].shape[0], dtype("float32"), slice(0, rows)
    full = index + (slice(None),) * (len(shape) - 1 - len(index))
    c = shape[-1]
    for j, c0 in enumerate(range(0, c, chunk)):
        w = min(chunk, c - c0)
        slot = (n * ((c + chunk - 1) // chunk) + j) % 4
        shifted = ap(row_tile(b, f"tc{slot}", (P, 1), f32), r)
        ts(b, tcol, shifted, "add", float(-c0), engine=Engine.VECTOR)
        o = ap(row_tile(b, f"nll{slot}", (P, chunk), b.tensors[out].dtype), r, slice(0, w))
        engine = Engine.GPSIMD if slot % 2 else Engine.VECTOR
        src = ap(iota, r, slice(0, w))
        ts(b, src, o, "equal", shifted, "multiply", s, engine=engine)
        dst = ap(out, *full, slice(c0, c0 + w)) if shape[:-1] else ap(out, slice(c0, c0 + w))
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=stores[slot * 2])
