"""`cross_entropy` (logits) and `nll_loss` (log-probabilities): input [N, C], target [N] of
class indices, reduction `mean` (the default), `sum` or `none`.

Per block of up to 128 rows (one row per partition):
- the target's value input[i, target[i]] is gathered by DMA: the flat positions i * C +
  target[i] are made on GpSimd (an `iota` of i * C, plus the targets, in exact int32), and one
  gather `dma_copy` (`indices`) reads those elements of input from HBM into a [rows, 1] column;
- `cross_entropy` walks the classes in chunks of up to CHUNK: per chunk its row max (VectorE,
  in the input's dtype: exact) and its sum of exp(x - max) (ScalarE, one `activation` with its
  add reduction) land in the block's columns k; at the block's end log-sum-exp = M +
  log(sum_k s_k exp(m_k - M)), M the largest chunk max, on [rows, chunks]; the loss is that
  minus the picked logit. Chunks are staggered (`reduce.staggered`): the next chunks' loads
  and maxima issue before this chunk's exponentials, so VectorE and ScalarE overlap;
- `nll_loss` is minus the picked value (the input is read only there: N elements).
With `none` each block's [rows, 1] losses are stored; with `mean` or `sum` they add up in a
[128, 1] column, turned into a row on TensorE and summed (`reduce.Reduce.across`), scaled by
1 / N for the mean, and stored as one number.

Targets are integers (int32: the simulator has no int64; floats holding them are rounded).
They are not checked (PyTorch raises for one outside [0, C)): such a target picks another
row's element, or fails the gather when that position is outside the input. `ignore_index`
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
    Memset,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.loss_ragged import lower_cross_entropy_ragged
from trnsim.kernels.loss_rows import ROW_BYTES, lower_cross_entropy_rows, piece_layout
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
    c_ = c
    if list(tt.shape) != [n]:
        raise TraceError(f"{op}: target {list(tt.shape)}; expected [{n}] (input's rows)")
    want = {"none": [[n]], "mean": [[], [1]], "sum": [[], [1]]}.get(reduction)
    if want is None:
        raise TraceError(f"{op}: reduction {reduction!r}; expected mean, sum or none")
    if list(to.shape) not in want:
        raise TraceError(f"{op}: out {list(to.shape)}; expected {want[0]} for {reduction}")
    if n * c >= 2**31:
        raise TraceError(f"{op}: input of {n * c} elements; int32 positions reach 2^31 - 1")
    L = _Loss(b, cfg, op, inp, target, out, reduction)
    c, cores = b.part
    # the rows split evenly between the cores; mean and sum then add the two partials (exact
    # in fp32 out, through a core_barrier), else the first core takes them all
    split = cores > 1 and (reduction == "none" or (
        cfg.core.core_barrier and to.dtype.name == "float32" and n >= cores))  # fmt: skip
    if cores > 1 and not split and c:
        return
    rows = (n * c // cores, n * (c + 1) // cores) if split else (0, n)
    lay = None
    if op == "cross_entropy":
        lay = piece_layout(c_, ti.dtype.itemsize, rows[1] - rows[0], L.P)
    if op == "cross_entropy" and (lay is not None or c_ * ti.dtype.itemsize <= ROW_BYTES):
        col = lower_cross_entropy_rows(b, cfg, L.r, inp, target, rows, reduction, lay)
    elif op == "cross_entropy":  # in pieces with a remainder column (not a multiple of 128,
        # or its even segments too narrow: `row_pieces.layout`)
        col = lower_cross_entropy_ragged(b, cfg, L.r, inp, target, rows, reduction)
    else:
        items = []
        for i, r0 in enumerate(range(rows[0], rows[1], L.P)):
            chunks = list(range(0, c_, L.cw)) if op == "cross_entropy" else [0]
            items += [(i, r0, min(L.P, rows[1] - r0), k, c0, c0 == chunks[-1]) for k, c0 in
                      enumerate(chunks)]  # fmt: skip
        staggered(enumerate(items), L.first, L.second, L.bufs - 1)
        col = L.r.column(L.acc, L.P, 0, 1, 0) if reduction != "none" else None
    if col is not None:
        _combine(L.r, col, split and cores > 1, c)
    L.r.done()


def _combine(r: Reduce, col, split: bool, c: int) -> None:
    """Store the loss total `col` ([1, 1] fp32, scaled for mean): split between the cores, the
    second stores its partial unscaled to out, both meet, the first adds it to its own."""
    if not split:
        r.store(col, 1, 0)
        return
    if c:
        scale, r.scale = r.scale, 1.0
        r.store(col, 1, 0)
        r.scale = scale
        r.meet()
        return
    r.meet()
    b = r.b
    other = ap(r.tile("peer", (r.P, 1)), slice(0, 1))
    src = ap(r.out, *[0] * len(b.tensors[r.out].shape))
    b.emit(DmaCopy, [src], [other], src=src, dst=other, queue=r.loads[0])
    r.combine(col, other)
    r.store(col, 1, 0)


class _Loss:
    """One loss op's tiles and the two halves of a chunk's work (module doc)."""

    def __init__(self, b, cfg, op, inp, target, out, reduction):
        self.b, self.op, self.inp, self.target, self.reduction = b, op, inp, target, reduction
        ti = b.tensors[inp]
        self.n, self.c = ti.shape
        self.r = Reduce(b, cfg, "sum", inp, out, 1.0 / self.n if reduction == "mean" else 1)
        self.P, self.cw, self.dt = cfg.core.sbuf.partitions, min(CHUNK, self.c), ti.dtype
        self.low = ti.dtype if ti.dtype.itemsize == 2 and ti.dtype.is_float else dtype("float32")
        per = self.cw * (ti.dtype.itemsize + 2)  # x, and exp's unread results (bf16)
        self.bufs = max(1, min(3, int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) // per))
        self.acc = None
        if reduction != "none":
            self.acc = self.r.tile("loss_acc", (self.P, 1))
            b.emit(Memset, [], [ap(self.acc)], dst=ap(self.acc), value=0.0, engine=Engine.GPSIMD)
        self.nch = -(-self.c // self.cw)  # chunks a row
        # the chunks' loads on the first half of the load queues, the picks' on the second
        self.xq, self.pq = self.r.queues.loads(0, 1 / 2), self.r.queues.loads(1 / 2, 1)

    def col(self, key: str, i: int, rows: slice, dt=None, width: int = 1):
        return ap(self.r.tile(f"{key}{i % 3}", (self.P, width), dt), rows)

    def pick(self, i: int, r0: int, rows: slice) -> None:
        """Gather input[r, target[r]] for the block's rows into its `pick` column."""
        b, i32 = self.b, dtype("int32")
        tt = b.tensors[self.target]
        tg = self.col("tg", i, rows, tt.dtype)
        src = ap(self.target, slice(r0, r0 + rows.stop))
        b.emit(DmaCopy, [src], [tg], src=src, dst=tg, queue=self.pq[i])
        if tt.dtype.is_float:
            ti = self.col("ti", i, rows, i32)
            b.emit(TensorCopy, [tg], [ti], src=tg, dst=ti)
            tg = ti
        pos = self.col("pos", i, rows, i32)  # r * C, then + target: exact int32 on GpSimd
        b.emit(Iota, [], [pos], dst=pos, start=r0 * self.c, step=0, partition_step=self.c)
        b.emit(TensorTensor, [pos, tg], [pos], alu="add", src0=pos, src1=tg, dst=pos,
               engine=Engine.GPSIMD)  # fmt: skip
        pk, table = self.col("pick", i, rows, self.dt), ap(self.inp)
        b.emit(DmaCopy, [table, pos], [pk], src=table, dst=pk, indices=pos, queue=self.pq[i])

    def first(self, item):
        """The block's pick (at its first chunk); load chunk k and take its max (VectorE)."""
        j, (i, r0, rb, k, c0, _) = item
        b, P, rows, slot = self.b, self.P, slice(0, rb), j % self.bufs
        if k == 0:
            self.pick(i, r0, rows)
        if self.op != "cross_entropy":
            return None
        w = min(self.cw, self.c - c0)
        x = ap(self.r.tile(f"x{slot}", (P, self.cw), self.dt), rows, slice(0, w))
        src = ap(self.inp, slice(r0, r0 + rb), slice(c0, c0 + w))
        b.emit(DmaCopy, [src], [x], src=src, dst=x, queue=self.xq[j])
        mx = ap(self.r.tile(f"mx{slot}", (P, 1), self.low), rows)  # its own tile: a read of
        b.emit(TensorReduce, [x], [mx], alu="max", src=x, dst=mx)  # a tile waits for all writes
        return x, mx

    def second(self, item, got):
        """Chunk k's sum of exp(x - max) (ScalarE); at the block's last chunk, the losses."""
        j, (i, r0, rb, k, c0, last) = item
        b, P, rows, slot = self.b, self.P, slice(0, rb), j % self.bufs
        if got is not None:
            x, mx = got
            w = x.index[1][1]
            e = ap(self.r.tile(f"e{slot}", (P, self.cw), dtype("bfloat16")), rows, slice(0, w))
            nm = self.col("nm", j, rows)
            b.emit(TensorScalar, [mx], [nm], src=mx, dst=nm, op0="multiply", operand0=-1.0,
                   engine=Engine.GPSIMD)  # fmt: skip
            keep = ap(self.r.tile(f"maxes{i % 3}", (P, self.nch), self.low), rows, slice(k, k + 1))
            b.emit(TensorCopy, [mx], [keep], src=mx, dst=keep, engine=Engine.GPSIMD)
            sums = self.col("sums", i, rows, width=self.nch)
            s = ap(sums.name, rows, slice(k, k + 1))
            b.emit(Activation, [x, nm], [e, s], func="exp", src=x, dst=e, bias=nm,
                   reduce="add", reduce_dst=s)  # fmt: skip
        if last:
            self.finish(i, r0, rb)

    def finish(self, i: int, r0: int, rb: int) -> None:
        """Block i's losses: -pick (nll_loss), or log-sum-exp - pick from the chunks' columns
        (module doc); stored, or added to the running total."""
        b, rows, nch = self.b, slice(0, rb), self.nch
        pk, t, nm, u = self.col("pick", i, rows, self.dt), self.col("t", i, rows), \
            self.col("bnm", i, rows), self.col("u", i, rows)  # fmt: skip
        if self.op == "nll_loss":
            b.emit(TensorScalar, [pk], [t], src=pk, dst=t, op0="multiply", operand0=-1.0)
        else:
            maxes = self.col("maxes", i, rows, self.low, nch)
            sums = self.col("sums", i, rows, width=nch)
            m = self.col("m", i, rows)
            b.emit(TensorReduce, [maxes], [m], alu="max", src=maxes, dst=m)
            b.emit(TensorScalar, [m], [nm], src=m, dst=nm, op0="multiply", operand0=-1.0)
            sc = self.col("scale", i, rows, width=nch)
            b.emit(Activation, [maxes, nm], [sc], func="exp", src=maxes, dst=sc, bias=nm)
            b.emit(TensorTensor, [sc, sums], [sc], alu="multiply", src0=sc, src1=sums, dst=sc)
            b.emit(TensorReduce, [sc], [u], alu="add", src=sc, dst=u)
            b.emit(Activation, [u], [t], func="log", src=u, dst=t)  # log(sum) + M - picked
            b.emit(TensorTensor, [t, m], [t], alu="add", src0=t, src1=m, dst=t)
            b.emit(TensorTensor, [t, pk], [t], alu="subtract", src0=t, src1=pk, dst=t)
        if self.reduction == "none":
            self.r.store(t, rb, r0)
        else:
            a = ap(self.acc, rows)
            b.emit(TensorTensor, [a, t], [a], alu="add", src0=a, src1=t, dst=a)
