"""`cross_entropy` (logits) and `nll_loss` (log-probabilities): input [N, C], target [N] of
class indices, reduction `mean` (the default), `sum` or `none`.

Per block of up to 128 rows (one row per partition), the classes in chunks of up to CHUNK:
- the target's column is picked without a gather: a GpSimd `iota` of the chunk's column
  numbers (made once) compared on VectorE with the row's target (shifted by the chunk's first
  column) gives a one-hot mask, times the chunk, summed along the row (`tensor_reduce`);
- `cross_entropy` also keeps an online log-sum-exp: the chunk's max (VectorE), the running
  max, exp(x - max) with its row sum in one ScalarE `activation`, the running sum rescaled by
  exp(old max - new max); the loss is log(sum) + max - picked;
- `nll_loss` is -picked.
With `none` each block's [rows, 1] losses are stored; with `mean` or `sum` they add up in a
[128, 1] column, turned into a row on TensorE and summed (`reduce.Reduce.across`), scaled by
1 / N for the mean, and stored as one number.

Targets are integers (int32, the simulator's widest) or floats holding them; `ignore_index`
and class weights are not lowered. With LNC 2, `none` alternates blocks between the cores and
`mean` and `sum` run on the first core alone (the op is isolated: `kernels.ALONE`).
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import (
    Activation,
    DmaCopy,
    Iota,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.reduce import Reduce

__all__ = ["lower_loss"]

CHUNK = 4096  # classes per chunk: 16 KiB of fp32 a partition
BUFS = 2


def lower_loss(
    b: KernelBuilder, cfg: ChipConfig, op: str, inp: str, target: str, out: str, reduction="mean"
) -> None:
    """out = op(input, target, reduction) (module doc)."""
    ti, tt, to = b.tensors[inp], b.tensors[target], b.tensors[out]
    if len(ti.shape) != 2:
        raise TraceError(f"{op}: input {list(ti.shape)}; expected [N, C] (only 2-D is lowered)")
    n, c = ti.shape
    if list(tt.shape) != [n]:
        raise TraceError(f"{op}: target {list(tt.shape)}; expected [{n}] (input's rows)")
    want = {"none": [[n]], "mean": [[], [1]], "sum": [[], [1]]}.get(reduction)
    if want is None:
        raise TraceError(f"{op}: reduction {reduction!r}; expected mean, sum or none")
    if list(to.shape) not in want:
        raise TraceError(f"{op}: out {list(to.shape)}; expected {want[0]} for {reduction}")
    r = Reduce(b, cfg, "sum", inp, out, 1.0 / n if reduction == "mean" and n else 1.0)
    P, cw = cfg.core.sbuf.partitions, min(CHUNK, c)
    iota = r.tile("iota", (P, cw))
    b.emit(Iota, [], [ap(iota)], dst=ap(iota), start=0, step=1, partition_step=0)
    acc = r.tile("loss_acc", (P, 1)) if reduction != "none" else None
    one_core = reduction != "none" and b.part[0] != 0
    blocks = [] if one_core else range(0, n, P)
    for i, r0 in enumerate(blocks):
        if reduction == "none" and not r.mine(i):
            continue
        rows = slice(0, min(P, n - r0))
        rb = rows.stop
        slot = i % BUFS
        tg = ap(r.tile(f"tg{slot}", (P, 1), tt.dtype), rows)
        src = ap(target, slice(r0, r0 + rb))
        b.emit(DmaCopy, [src], [tg], src=src, dst=tg, queue=4 + i % 4)
        tf = ap(r.tile(f"tf{slot}", (P, 1)), rows)
        b.emit(TensorCopy, [tg], [tf], src=tg, dst=tf)
        loss = _block(b, r, op, inp, ti.dtype, r0, rows, slot, tf, ap(iota, rows), c, cw, i)
        if reduction == "none":
            r.store(loss, rb, r0)
        elif i == 0:
            b.emit(TensorCopy, [loss], [ap(acc, rows)], src=loss, dst=ap(acc, rows))
        else:
            a = ap(acc, rows)
            b.emit(TensorTensor, [a, loss], [a], alu="add", src0=a, src1=loss, dst=a)
    if reduction != "none" and not one_core:
        r.across(acc, min(P, n), 1, 0)
    r.done()


def _block(b, r: Reduce, op, inp, dt, r0, rows, slot, tf, iota, c, cw, i):
    """The [rows, 1] fp32 losses of rows r0 + rows (module doc)."""
    P = r.P
    col = {k: ap(r.tile(f"{k}{slot}", (P, 1)), rows) for k in ("pk", "m", "s", "t", "u", "nm")}
    pk, m, s, t, u, nm = (col[k] for k in ("pk", "m", "s", "t", "u", "nm"))
    for k, c0 in enumerate(range(0, c, cw)):
        w = min(cw, c - c0)
        x = ap(r.tile(f"x{slot}", (P, cw), dt), rows, slice(0, w))
        src = ap(inp, slice(r0, r0 + rows.stop), slice(c0, c0 + w))
        b.emit(DmaCopy, [src], [x], src=src, dst=x, queue=(i + k) % 4)
        sh = ap(r.tile(f"sh{slot}", (P, 1)), rows)  # the target's column in this chunk
        b.emit(TensorScalar, [tf], [sh], src=tf, dst=sh, op0="subtract", operand0=float(c0))
        mask = ap(r.tile(f"mask{slot}", (P, cw), dtype("bfloat16")), rows, slice(0, w))
        io = ap(iota.name, rows, slice(0, w))
        b.emit(TensorScalar, [io, sh], [mask], src=io, dst=mask, op0="equal", operand0=sh)
        prod = ap(r.tile(f"p{slot}", (P, cw)), rows, slice(0, w))
        b.emit(TensorTensor, [mask, x], [prod], alu="multiply", src0=mask, src1=x, dst=prod)
        _fold(b, TensorReduce, pk, t, k == 0, "add", prod)
        if op == "cross_entropy":  # exp's elementwise results: unread, always on ScalarE
            e = ap(r.tile(f"e{slot}", (P, cw), dtype("bfloat16")), rows, slice(0, w))
            _lse_step(b, x, e, m, s, t, u, nm, k == 0)
    if op == "nll_loss":
        b.emit(TensorScalar, [pk], [t], src=pk, dst=t, op0="multiply", operand0=-1.0)
        return t
    b.emit(Activation, [s], [t], func="log", src=s, dst=t)  # loss = log(sum) + max - picked
    b.emit(TensorTensor, [t, m], [t], alu="add", src0=t, src1=m, dst=t)
    b.emit(TensorTensor, [t, pk], [t], alu="subtract", src0=t, src1=pk, dst=t)
    return t


def _fold(b, cls, acc, tmp, first: bool, alu: str, src) -> None:
    """acc = reduce(src) on the first chunk, else acc = acc <alu> reduce(src) (via tmp)."""
    dst = acc if first else tmp
    b.emit(cls, [src], [dst], alu=alu, src=src, dst=dst)
    if not first:
        b.emit(TensorTensor, [acc, tmp], [acc], alu=alu, src0=acc, src1=tmp, dst=acc)


def _lse_step(b, x, e, m, s, t, u, nm, first: bool) -> None:
    """The running max m and sum s of exp(x - m) updated by chunk x (e: scratch of its size)."""
    if first:
        b.emit(TensorReduce, [x], [m], alu="max", src=x, dst=m)
        b.emit(TensorScalar, [m], [nm], src=m, dst=nm, op0="multiply", operand0=-1.0)
        b.emit(Activation, [x, nm], [e, s], func="exp", src=x, dst=e, bias=nm, reduce="add",
               reduce_dst=s)  # fmt: skip
        return
    b.emit(TensorReduce, [x], [t], alu="max", src=x, dst=t)  # the chunk's max
    b.emit(TensorTensor, [t, m], [t], alu="max", src0=t, src1=m, dst=t)  # the new max
    b.emit(TensorTensor, [m, t], [u], alu="subtract", src0=m, src1=t, dst=u)  # old - new
    b.emit(Activation, [u], [u], func="exp", src=u, dst=u)
    b.emit(TensorTensor, [s, u], [s], alu="multiply", src0=s, src1=u, dst=s)  # rescaled sum
    b.emit(TensorCopy, [t], [m], src=t, dst=m)
    b.emit(TensorScalar, [m], [nm], src=m, dst=nm, op0="multiply", operand0=-1.0)
    b.emit(Activation, [x, nm], [e, u], func="exp", src=x, dst=e, bias=nm, reduce="add",
           reduce_dst=u)  # fmt: skip
    b.emit(TensorTensor, [s, u], [s], alu="add", src0=s, src1=u, dst=s)
