"""`cross_entropy` (logits) and `nll_loss` (log-probabilities): input [N, C], target [N] of
class indices, reduction `mean` (the default), `sum` or `none`.

Per block of up to 128 rows (one row per partition), the classes in chunks of up to CHUNK:
- the target's column is picked without a gather: a GpSimd `iota` of the chunk's column
  numbers (made once) compared on GpSimd with the row's target (shifted by the chunk's first
  column) gives a one-hot mask, times the chunk (VectorE and GpSimd in turn), summed along the
  row (VectorE `tensor_reduce`); mask, product and sum are in the input's dtype when it is
  16-bit (exact: one non-zero term), so VectorE runs them at its 16-bit rates;
- `cross_entropy` also keeps an online log-sum-exp: the chunk's max (VectorE, in the input's
  dtype: exact), the running max, exp(x - max) with its row sum in one ScalarE `activation`,
  the running sum rescaled by exp(old max - new max); the loss is log(sum) + max - picked;
- `nll_loss` is -picked.
Chunks are staggered (`reduce.staggered`): the next chunks' loads, masks and maxima are
issued before this chunk's products and exponentials, so the engines overlap.
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
    Engine,
    Iota,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.reduce import Reduce, staggered

__all__ = ["lower_loss"]

CHUNK = 4096  # classes per chunk: 16 KiB of fp32 a partition
SBUF_SHARE = 0.75


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
    L = _Loss(b, cfg, op, inp, target, out, reduction)
    if reduction != "none" and b.part[0] != 0:
        return  # mean and sum: the first core alone
    items = []
    for i, r0 in enumerate(range(0, n, L.P)):
        if reduction == "none" and not L.r.mine(i):
            continue
        chunks = list(range(0, c, L.cw))
        items += [(i, r0, min(L.P, n - r0), k, c0, c0 == chunks[-1]) for k, c0 in
                  enumerate(chunks)]  # fmt: skip
    staggered(enumerate(items), L.first, L.second, L.bufs - 1)
    if reduction != "none":
        L.r.across(L.acc, min(L.P, n), 1, 0)
    L.r.done()


class _Loss:
    """One loss op's tiles and the two halves of a chunk's work (module doc)."""

    def __init__(self, b, cfg, op, inp, target, out, reduction):
        self.b, self.op, self.inp, self.target, self.reduction = b, op, inp, target, reduction
        ti = b.tensors[inp]
        self.r = Reduce(b, cfg, "sum", inp, out, 1.0 / ti.shape[0] if reduction == "mean" else 1)
        self.P, self.cw, self.dt = cfg.core.sbuf.partitions, min(CHUNK, ti.shape[1]), ti.dtype
        self.low = ti.dtype if ti.dtype.itemsize == 2 and ti.dtype.is_float else dtype("float32")
        per = self.cw * (ti.dtype.itemsize + 2 * self.low.itemsize + 2)  # x, mask, prod, exp
        room = int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) - 4 * self.cw  # less the iota
        self.bufs = max(1, min(3, room // per))
        self.iota = self.r.tile("iota", (self.P, self.cw))
        b.emit(Iota, [], [ap(self.iota)], dst=ap(self.iota), start=0, step=1, partition_step=0)
        self.acc = self.r.tile("loss_acc", (self.P, 1)) if reduction != "none" else None
        self.nch = -(-ti.shape[1] // self.cw)  # chunks a row

    def col(self, key: str, i: int, rows: slice, dt=None):
        return ap(self.r.tile(f"{key}{i % 3}", (self.P, 1), dt), rows)

    def first(self, item):
        """Load chunk k of block i; its one-hot mask (GpSimd) and max (VectorE)."""
        j, (i, r0, rb, k, c0, _) = item
        b, P, rows, slot = self.b, self.P, slice(0, rb), j % self.bufs
        if k == 0:  # the block's targets, as fp32
            tg = self.col("tg", i, rows, self.b.tensors[self.target].dtype)
            src = ap(self.target, slice(r0, r0 + rb))
            b.emit(DmaCopy, [src], [tg], src=src, dst=tg, queue=4 + i % 4)
            tf = self.col("tf", i, rows)
            b.emit(TensorCopy, [tg], [tf], src=tg, dst=tf)
        w = min(self.cw, b.tensors[self.inp].shape[1] - c0)
        x = ap(self.r.tile(f"x{slot}", (P, self.cw), self.dt), rows, slice(0, w))
        src = ap(self.inp, slice(r0, r0 + rb), slice(c0, c0 + w))
        b.emit(DmaCopy, [src], [x], src=src, dst=x, queue=j % 4)
        sh, tf = self.col("sh", j, rows), self.col("tf", i, rows)  # the target's column here
        b.emit(TensorScalar, [tf], [sh], src=tf, dst=sh, op0="subtract", operand0=float(c0))
        mask = ap(self.r.tile(f"mask{slot}", (P, self.cw), self.low), rows, slice(0, w))
        io = ap(self.iota, rows, slice(0, w))
        b.emit(TensorScalar, [io, sh], [mask], src=io, dst=mask, op0="equal", operand0=sh,
               engine=Engine.GPSIMD)  # fmt: skip
        mx = None
        if self.op == "cross_entropy":  # the chunk's max, into the block's column k
            mx = ap(self.r.tile(f"maxes{i % 3}", (P, self.nch), self.low), rows, slice(k, k + 1))
            b.emit(TensorReduce, [x], [mx], alu="max", src=x, dst=mx)
        return x, mask, mx

    def second(self, item, got):
        """The picked value and the log-sum-exp of chunk k; at the block's last chunk, its
        losses stored or added up."""
        j, (i, r0, rb, k, c0, last) = item
        x, mask, mx = got
        b, P, rows, slot = self.b, self.P, slice(0, rb), j % self.bufs
        w = x.index[1][1]
        prod = ap(self.r.tile(f"p{slot}", (P, self.cw), self.low), rows, slice(0, w))
        b.emit(TensorTensor, [mask, x], [prod], alu="multiply", src0=mask, src1=x, dst=prod,
               engine=Engine.GPSIMD if j % 2 else Engine.VECTOR)  # fmt: skip
        nch = self.nch
        picks = ap(self.r.tile(f"pick{i % 3}", (P, nch), self.low), rows, slice(k, k + 1))
        b.emit(TensorReduce, [prod], [picks], alu="add", src=prod, dst=picks)
        if self.op == "cross_entropy":  # exp's elementwise results: unread, always on ScalarE
            e = ap(self.r.tile(f"e{slot}", (P, self.cw), dtype("bfloat16")), rows, slice(0, w))
            nm = self.col("nm", j, rows)
            b.emit(TensorScalar, [mx], [nm], src=mx, dst=nm, op0="multiply", operand0=-1.0,
                   engine=Engine.GPSIMD)  # fmt: skip
            sums = ap(self.r.tile(f"sums{i % 3}", (P, nch)), rows, slice(k, k + 1))
            b.emit(Activation, [x, nm], [e, sums], func="exp", src=x, dst=e, bias=nm,
                   reduce="add", reduce_dst=sums)  # fmt: skip
        if last:
            self.finish(i, r0, rb)

    def finish(self, i: int, r0: int, rb: int) -> None:
        """Block i's losses from its chunks' columns: picked = the sum of the picks (one is
        not 0); cross_entropy's log-sum-exp = M + log(sum_k s_k exp(m_k - M)), M the largest
        chunk max m_k, s_k the chunk's sum of exp(x - m_k)."""
        b, P, rows, nch = self.b, self.P, slice(0, rb), self.nch
        pk, t, nm, u = (self.col(key, i, rows) for key in ("pk", "t", "bnm", "u"))
        picks = ap(self.r.tile(f"pick{i % 3}", (P, nch), self.low), rows)
        b.emit(TensorReduce, [picks], [pk], alu="add", src=picks, dst=pk)
        if self.op == "nll_loss":
            b.emit(TensorScalar, [pk], [t], src=pk, dst=t, op0="multiply", operand0=-1.0)
        else:
            maxes = ap(self.r.tile(f"maxes{i % 3}", (P, nch), self.low), rows)
            sums = ap(self.r.tile(f"sums{i % 3}", (P, nch)), rows)
            m = self.col("m", i, rows)
            b.emit(TensorReduce, [maxes], [m], alu="max", src=maxes, dst=m)
            b.emit(TensorScalar, [m], [nm], src=m, dst=nm, op0="multiply", operand0=-1.0)
            sc = ap(self.r.tile(f"scale{i % 3}", (P, nch)), rows)
            b.emit(Activation, [maxes, nm], [sc], func="exp", src=maxes, dst=sc, bias=nm)
            b.emit(TensorTensor, [sc, sums], [sc], alu="multiply", src0=sc, src1=sums, dst=sc)
            b.emit(TensorReduce, [sc], [u], alu="add", src=sc, dst=u)
            b.emit(Activation, [u], [t], func="log", src=u, dst=t)  # log(sum) + M - picked
            b.emit(TensorTensor, [t, m], [t], alu="add", src0=t, src1=m, dst=t)
            b.emit(TensorTensor, [t, pk], [t], alu="subtract", src0=t, src1=pk, dst=t)
        if self.reduction == "none":
            self.r.store(t, rb, r0)
        else:
            _fold_col(b, ap(self.acc, rows), t, i == 0, "add")


def _fold_col(b, acc, col, first: bool, alu: str) -> None:
    """acc = col on the first chunk, else acc = acc <alu> col ([rows, 1] columns)."""
    if first:
        b.emit(TensorCopy, [col], [acc], src=col, dst=acc)
    else:
        b.emit(TensorTensor, [acc, col], [acc], alu=alu, src0=acc, src1=col, dst=acc)
