"""`layer_norm` and `rms_norm` over rows too long for one partition whose length is not a
multiple of 128: the pieces with a remainder column (`ragged`), a unit of g rows a tile (or a
row of t segments); fp32 layer_norm rows that are a multiple too, as estimated (no remainder
column: `norms.RAGGED_FP32`).

Per unit, in three stages a unit and two apart (emitted the latest unit's last, then
re-emitted in a list schedule's order, `schedule.Scheduled`):

1. load; layer_norm's **shift** x0, each row's first element (its first partition's, spread
   over the row's partitions by TensorE, `Groups.firsts`); each partition's sums on ScalarE
   (an `activation` with its add reduction, two a segment): layer_norm sum(x - x0) and
   sum((x - x0)^2) (with -x0 as the bias: exact where x and x0 are close, so a row of mean
   10^4 keeps its digits), rms_norm sum(x^2). fp32 layer_norm rows are shifted in place, as
   x0 - x (x times -1 plus x0, read from PSUM), over every column at once: the remainder
   column's empty partitions set to x0 first, so they hold 0 (`first_shift`: no [p, 1] steps
   but that mask before ScalarE's two passes; the sign flips back in the output's subtraction).
   Else the remainder column is masked to 0 where a partition holds no element: in place for
   rms_norm, so the squares' pass takes it with the main columns; 16-bit layer_norm (not
   shifted in place) its x - x0 into a column of its own, and its square;
2. the row's sums over its k partitions (`Groups.sums`, TensorE: each partition gets its
   row's; fp32 layer_norm's S1 and S2 by one matmul, scaled by 1 / d by one instruction),
   mean' = S1 / d, var = S2 / d - mean'^2 (of the shifted values: no cancellation for a spread
   comparable to the mean's distance from x0), rstd = (var + eps)^-0.5;
3. the output in two passes at most: (x - mean) * w then * rstd + b (`scalar_tensor_tensor`s,
   each on VectorE or GpSimd as the list schedule finds either free sooner; the first's main
   columns apart from the remainder column, an even count: N for bf16), rms_norm's
   (x * rstd) * w in one; store.

Every partition of a row holds the same count of its main columns, so no weights are needed;
only the remainder column's empty partitions are masked. The weight and bias are loaded once in
the same layout (each row of a tile its copy)."""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import (
    Activation,
    DmaCopy,
    Engine,
    ScalarTensorTensor,
    Select,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues
from trnsim.kernels.ragged import RaggedLayout, Small, ragged_layout, units
from trnsim.kernels.row_pieces import Groups
from trnsim.kernels.schedule import Scheduled

__all__ = ["lower_norm_ragged"]

V, S, G = Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD
PIECE_BYTES = 4096  # a tile's columns' bytes a partition at most (512 KiB tiles; 8192 ran
# fp32 layer_norm [129, 65537] 422 -> 316 us, but [8, 50257] 26 -> 39)
SHARE = 0.6  # what the units' buffers, the weight and the bias may take of a partition
BUFS = 4  # units resident at most
LAG = (1, 2)  # the row statistics' and the output's stages emitted this many units behind
LAYER_BUFS, LAYER_LAG = 10, (2, 5)  # layer_norm's (its longer chain of passes a unit, its
# [p, 1] steps on VectorE: more units in flight keep the engines busy): trn2 LNC 2, 16 MiB, fp32
# rows of 50257 88.7 -> 67.9 us, of 100000 80.8 -> 69.5, bf16 of 50257 124.1 -> 96.4 (8
# buffers alone: 72.9, 77.4, 110.2; 12: more semaphores than a core has); with fp32's [p, 1]
# steps fewer (`first_shift`), 10 buffers, the output 5 units behind, not 8 and 4: fp32 rows of
# 20000 57.4 -> 55.0 us, of 50257 59.9 -> 54.9, of 100000 57.1 -> 53.2 (10 and 4: 55.0, 56.4,
# 54.0; 12 and 4: 54.7, 57.0, 55.9; 8 and 5: 57.4, 56.7, 56.8; 10 and (3, 6): 55.0, 56.8, 56.3)


def lower_norm_ragged(b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str, weight,
                      bias, eps: float, rows: tuple[int, int],
                      bufs_most: int = BUFS, spread_affine: bool = False) -> float:  # fmt: skip
    """out = layer_norm or rms_norm of this core's flattened rows [lo, hi) (module doc), up to
    `bufs_most` units resident; `spread_affine`: the weight's and bias' copies of a tile of
    several rows over every load queue (each copy lands on its row's partitions, so on DMA
    engines of its own; in one quarter of them they arrive one after another); the list
    schedule's estimated span (0 without rows)."""
    tx, to = b.tensors[x], b.tensors[out]
    d, P = tx.shape[-1], cfg.core.sbuf.partitions
    rag = ragged_layout(d, max(1, PIECE_BYTES // tx.dtype.itemsize), P)
    width = sum(rag.width(s) for s in range(rag.t))  # a unit's columns
    affine = sum(b.tensors[v].dtype.itemsize for v in (weight, bias) if v is not None)
    per = width * (tx.dtype.itemsize + (to.dtype.itemsize if to.dtype != tx.dtype else 0))
    room = int(cfg.core.sbuf.partition_bytes * SHARE) - width * affine
    bufs = min(bufs_most, room // per)
    if bufs < 1:
        most = int(cfg.core.sbuf.partition_bytes * SHARE)
        raise TraceError(
            f"{op}: rows of {d} elements take {per + width * affine} bytes a partition in "
            f"pieces over the {P} partitions, more than {most}; not lowered yet"
        )
    k = _Norm(b, cfg, op, x, out, weight, bias, eps, rag, bufs)
    if spread_affine and rag.g > 1:
        k.affine_loads = Queues(cfg).loads()
    todo = units(tx.shape, rag, rows)
    if not todo:
        return 0.0
    # (rows in segments: the weight and bias, each as large as a row, loaded behind the first
    # unit, not beside it: trn2 LNC 2, 16 MiB, fp32 rows of 10^6 80.5 -> 73.1 us; rows of a
    # tile or less ran slower so, fp32 rows of 20000 57.4 -> 59.7 us, of 100000 57.1 -> 58.9)
    behind = rag.t > 1
    if not behind:
        k.affine()
    # three stages, up to LAG units apart as the buffers allow, the latest unit's last (each
    # engine's queue then holds the work whose inputs are ready soonest first, none waiting on
    # another engine's part of a unit just loaded)
    lag = LAYER_LAG if op == "layer_norm" else LAG
    lags = (0, min(lag[0], bufs - 1), min(lag[1], bufs - 1))
    # (stages of equal lags, few buffers, in their own order: the output's stage emitted
    # before the statistics' read a unit's rstd and mean before they were written, the
    # previous unit's of its buffer or none: fp32 rows of 10^6, 2 buffers, gave the bias)
    order = sorted(zip((k.first, k.stats, k.second), lags, range(3)), key=lambda s: (-s[1], s[2]))
    with Scheduled(b, cfg, shared_dma=True) as sched:
        for n in range(len(todo) + lags[-1]):
            for stage, late, _ in order:
                if 0 <= n - late < len(todo) and (late or n < len(todo)):
                    stage(n - late, *todo[n - late])
                if behind and stage == k.first and n == 0:
                    k.affine()
    k.groups.done()
    b.release(*k.psums.values())
    return sched.makespan


class _Norm:
    """One norm's tiles and the two stages of a unit (module doc)."""

    def __init__(self, b, cfg, op, x, out, weight, bias, eps, rag: RaggedLayout, bufs: int):
        self.b, self.cfg, self.op, self.x, self.out = b, cfg, op, x, out
        self.weight, self.bias, self.eps, self.rag, self.bufs = weight, bias, eps, rag, bufs
        self.P, self.f32 = cfg.core.sbuf.partitions, dtype("float32")
        self.xdt, self.odt = b.tensors[x].dtype, b.tensors[out].dtype
        self.layer = op == "layer_norm"
        # fp32 rows shifted in place (the normalisation then subtracts a small mean)
        self.shift = self.layer and self.xdt.itemsize == 4 and self.odt.itemsize == 4
        self.groups = Groups(b, cfg, rag.k)
        qs, q = Queues(cfg), dma_queues(cfg, rag.f * self.xdt.itemsize)
        self.loads, self.stores = qs.loads().take(max(2, q)), qs.stores().take(max(2, q))
        self.affine_loads = qs.loads(1 / 2, 3 / 4)  # (the weight's and bias', once, beside x's)
        self.na = 0
        self.small = Small(cfg)
        self.nl = self.ns = 0
        self.rows: dict[str, list[str]] = {}  # the weight's and bias' tiles, a segment each
        self.xs: dict[int, list[str]] = {}  # each unit's x tiles, a segment each
        # the remainder column masked in place (0 where empty), so ScalarE's squares take it
        # with the main columns: rms_norm, and fp32 layer_norm shifted in place; else its
        # element apart, a column of the sums of its own
        self.inplace = bool(rag.r) and (not self.layer or self.shift)
        self.cols = rag.t + (1 if rag.r and not self.inplace else 0)  # the sums' columns
        self.psums: dict[int, str] = {}  # layer_norm's PSUM [P, 3] a buffer: x0, S1, S2

    def _load_q(self):
        q = self.loads[self.nl]
        self.nl += 1
        return q

    def _affine_q(self):
        q = self.affine_loads[self.na]
        self.na += 1
        return q

    def _store_q(self):
        q = self.stores[self.ns]
        self.ns += 1
        return q

    def tile(self, key: str, n: int, s: int, dt) -> str:
        shape = (self.P, self.rag.width(s))
        return self.b.scratch_tile(f"nrg.{key}{n % self.bufs}.{s}", key, shape, dt)

    def col(self, key: str, n: int, w: int = 1) -> str:
        return self.b.scratch_tile(f"nrg.{key}{n % self.bufs}", key, (self.P, w), self.f32)

    def ps(self, n: int) -> str:
        """Unit n's PSUM tile (layer_norm): x0 (column 0), the row sums S1 and S2 (1, 2)."""
        slot = n % self.bufs
        if slot not in self.psums:
            self.psums[slot] = self.b.psum("nrg_ps", (self.P, 3), self.f32)
        return self.psums[slot]

    def affine(self) -> None:
        """The weight and bias in the rows' layout: each row slot of a tile its copy (main
        columns, then the remainder column's first r partitions)."""
        b, rag = self.b, self.rag
        for v in (self.weight, self.bias):
            if v is None:
                continue
            tiles = []
            for s in range(rag.t):
                t = b.scratch_tile(f"nrg.{v}.{rag.k}.{s}", f"{v}_rg", (self.P, rag.width(s)),
                                   b.tensors[v].dtype)  # fmt: skip
                lo, hi = rag.cols(s)
                w = hi - lo
                for j in range(rag.g):
                    src = ap(v, slice(rag.k * lo, rag.k * hi))
                    dst = ap(t, slice(j * rag.k, (j + 1) * rag.k), slice(0, w))
                    b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self._affine_q())
                    if s == rag.t - 1 and rag.r:
                        src = ap(v, slice(rag.k * rag.m, rag.d))
                        dst = ap(t, slice(j * rag.k, j * rag.k + rag.r), slice(w, w + 1))
                        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.small.load())
                tiles.append(t)
            self.rows[v] = tiles

    def first(self, n: int, unit, rows: int) -> None:
        """Load; the shift; each partition's sums (a1: of x - x0, a2: of its square; rms_norm:
        a2 of x^2) over its main columns and the remainder column."""
        b, rag = self.b, self.rag
        p = rows * rag.k
        xs = []
        for s in range(rag.t):
            t = self.tile("x", n, s, self.xdt)
            rag.load(b, self.x, unit, rows, s, t, self._load_q, self.small.load)
            xs.append(t)
        if self.shift:
            self.first_shift(n, xs, p)
            return
        nx = ap(self.col("nx", n), slice(0, p))  # -x0 (layer_norm)
        if self.layer:
            c0 = ap(self.col("x0", n), slice(0, p))
            first = ap(xs[0], slice(0, p), slice(0, 1))
            b.emit(TensorCopy, [first], [c0], src=first, dst=c0, engine=G)
            spread = self.groups.firsts(c0, p)
            b.emit(TensorScalar, [spread], [nx], src=spread, dst=nx, op0="multiply",
                   operand0=-1.0)  # fmt: skip
        a1 = ap(self.col("a1", n, self.cols), slice(0, p))
        a2 = ap(self.col("a2", n, self.cols), slice(0, p))
        if self.inplace:  # the remainder column (x - x0 for layer_norm), 0 where empty
            w = rag.main(rag.t - 1)
            col = ap(xs[-1], slice(0, p), slice(w, w + 1))
            if self.layer:
                b.emit(TensorScalar, [col, nx], [col], src=col, dst=col, op0="add", operand0=nx)
            rag.mask(b, xs[-1], 0.0, p)
        for s, t in enumerate(xs):
            xa = ap(t, slice(0, p), slice(0, rag.main(s)))
            c1, c2 = (ap(c.name, slice(0, p), slice(s, s + 1)) for c in (a1, a2))
            if self.layer:
                if self.shift:  # x - x0 in place, and its sum
                    b.emit(Activation, [xa, nx], [xa, c1], func="copy", src=xa, dst=xa,
                           bias=nx, reduce="add", reduce_dst=c1)  # fmt: skip
                    sq_bias = 0.0
                else:
                    junk = self.junk(s, p)
                    b.emit(Activation, [xa, nx], [junk, c1], func="copy", src=xa, dst=junk,
                           bias=nx, reduce="add", reduce_dst=c1)  # fmt: skip
                    sq_bias = nx
            else:
                sq_bias = 0.0
            junk = self.junk(s, p, whole=self.inplace)
            if self.inplace:  # (the remainder column with the main ones)
                xa = ap(t, slice(0, p))
            reads = [xa] + ([sq_bias] if not isinstance(sq_bias, float) else [])
            b.emit(Activation, reads, [junk, c2], func="square", src=xa, dst=junk, bias=sq_bias,
                   reduce="add", reduce_dst=c2)  # fmt: skip
        if rag.r and not self.inplace:  # the remainder column: its x - x0 (and square), 0 where
            # the partition has none
            e1, e2 = (ap(c.name, slice(0, p), slice(rag.t, rag.t + 1)) for c in (a1, a2))
            w = rag.main(rag.t - 1)
            col = ap(xs[-1], slice(0, p), slice(w, w + 1))
            if self.layer and not self.shift:  # (into e1, then masked there)
                b.emit(TensorScalar, [col, nx], [e1], src=col, dst=e1, op0="add", operand0=nx)
                rag.mask_col(b, e1, 0.0, p)
            else:  # (x - x0 in place for fp32 rows, as their main columns)
                if self.layer:
                    b.emit(TensorScalar, [col, nx], [col], src=col, dst=col, op0="add",
                           operand0=nx)  # fmt: skip
                rag.mask(b, xs[-1], 0.0, p, dst=e1)
            b.emit(TensorTensor, [e1, e1], [e2], alu="multiply", src0=e1, src1=e1, dst=e2)
        self.xs[n] = xs

    def first_shift(self, n: int, xs: list[str], p: int) -> None:
        """fp32 layer_norm's stage 1: x0 (TensorE's spread of the first column, read from
        PSUM), the remainder column's empty partitions set to x0, then x0 - x in place over
        every column (ScalarE: x times -1 plus x0, exact where x and x0 are close; 0 where
        empty) with its sum, and its squares' sum: four instructions a unit, none on VectorE
        but the mask (the sign flips back in the output's subtraction, `finish`)."""
        b, rag, ps = self.b, self.rag, self.ps(n)
        x0 = ap(ps, slice(0, p), slice(0, 1))
        self.groups.firsts(ap(xs[0], slice(0, p), slice(0, 1)), p, dst=x0)
        if rag.r:
            w = rag.main(rag.t - 1)
            col = ap(xs[-1], slice(0, p), slice(w, w + 1))
            pred = ap(rag.valid(b), slice(0, p))
            b.emit(Select, [pred, col, x0], [col], predicate=pred, on_true=col, on_false=x0,
                   dst=col)  # fmt: skip
        s12 = self.col("s12", n, 2 * rag.t)  # each segment's S1', then each one's S2
        for s, t in enumerate(xs):
            xa = ap(t, slice(0, p))
            c1, c2 = (ap(s12, slice(0, p), slice(j, j + 1)) for j in (s, rag.t + s))
            b.emit(Activation, [xa, x0], [xa, c1], func="copy", src=xa, dst=xa, scale=-1.0,
                   bias=x0, reduce="add", reduce_dst=c1)  # fmt: skip
            junk = self.junk(s, p, whole=True)
            b.emit(Activation, [xa], [junk, c2], func="square", src=xa, dst=junk,
                   reduce="add", reduce_dst=c2)  # fmt: skip
        self.xs[n] = xs

    def stats_shift(self, n: int, p: int) -> None:
        """fp32 layer_norm's row statistics: S1' = sum(x0 - x) and S2 = sum((x0 - x)^2) over
        the row's partitions by one matmul, mean' = S1' / d and S2 / d by one instruction
        (VectorE or ScalarE), -var = mean'^2 - S2 / d, rstd = (eps - (-var))^-0.5."""
        b, rag = self.b, self.rag
        s12 = ap(self.col("s12", n, 2 * rag.t), slice(0, p))
        if rag.t > 1:  # (segments: S1' and S2 of each summed)
            s12, sums = ap(self.col("s12r", n, 2), slice(0, p)), s12
            for i in (0, 1):
                src = ap(sums.name, slice(0, p), slice(i * rag.t, (i + 1) * rag.t))
                dst = ap(s12.name, slice(0, p), slice(i, i + 1))
                b.emit(TensorReduce, [src], [dst], alu="add", src=src, dst=dst)
        tot = self.groups.sums(s12, p, c=2, dst=ap(self.ps(n), slice(0, p), slice(1, 3)))
        mm = ap(self.col("mm", n, 2), slice(0, p))  # mean', E[x'^2]
        scale = {"src": tot, "dst": mm, "op0": "multiply", "operand0": 1.0 / rag.d}
        other = (TensorScalar, [tot], [mm], {**scale, "engine": S})
        b.emit(TensorScalar, [tot], [mm], choices=[other], **scale)
        mean, ms = (ap(mm.name, slice(0, p), slice(i, i + 1)) for i in (0, 1))
        nv = ap(self.col("nv", n), slice(0, p))
        self.flex(ScalarTensorTensor, [mean, ms], [nv], data=mean, op0="multiply",
                  operand0=mean, op1="subtract", operand1=ms, dst=nv)  # fmt: skip
        rs = ap(self.col("rs", n), slice(0, p))
        self.flex(TensorScalar, [nv], [rs], src=nv, dst=rs, op0="subtract", operand0=self.eps,
                  reverse0=True, op1="pow", operand1=-0.5)  # fmt: skip

    def junk(self, s: int, p: int, whole: bool = False):
        """ScalarE's unread results of segment s: its main columns (`whole`: its tile's)."""
        t = self.b.scratch_tile(f"nrg.junk.{s}", "junk", (self.P, self.rag.width(s)),
                                dtype("bfloat16"))  # fmt: skip
        return ap(t, slice(0, p), slice(0, self.rag.width(s) if whole else self.rag.main(s)))

    def stats(self, n: int, unit, rows: int) -> None:
        """The rows' statistics over their partitions: rstd, and layer_norm's mean."""
        b, rag = self.b, self.rag
        p = rows * rag.k
        if self.shift:
            self.stats_shift(n, p)
            return
        a1 = ap(self.col("a1", n, self.cols), slice(0, p))
        a2 = ap(self.col("a2", n, self.cols), slice(0, p))
        t1, t2 = ap(self.col("t1", n), slice(0, p)), ap(self.col("t2", n), slice(0, p))
        if self.cols > 1:
            b.emit(TensorReduce, [a2], [t2], alu="add", src=a2, dst=t2)
        else:  # (one segment, the remainder column in its squares' sum)
            t2 = a2
        rs = ap(self.col("rs", n), slice(0, p))
        if self.layer:
            if self.cols > 1:
                b.emit(TensorReduce, [a1], [t1], alu="add", src=a1, dst=t1)
            else:
                t1 = a1
            if self.inplace:  # plus the remainder column's x - x0 (0 where empty)
                w = rag.main(rag.t - 1)
                col = ap(self.tile("x", n, rag.t - 1, self.xdt), slice(0, p), slice(w, w + 1))
                t1n = ap(self.col("t1r", n), slice(0, p))
                b.emit(TensorTensor, [t1, col], [t1n], alu="add", src0=t1, src1=col, dst=t1n)
                t1 = t1n
            mean = ap(self.col("mean", n), slice(0, p))
            s1 = self.groups.sums(t1, p, dst=None)
            b.emit(TensorScalar, [s1], [mean], src=s1, dst=mean, op0="multiply",
                   operand0=1.0 / rag.d)  # fmt: skip
            ms = ap(self.col("ms", n), slice(0, p))
            s2 = self.groups.sums(t2, p)
            b.emit(TensorScalar, [s2], [ms], src=s2, dst=ms, op0="multiply",
                   operand0=1.0 / rag.d)  # fmt: skip
            m2 = ap(self.col("m2", n), slice(0, p))  # var = E[x'^2] - mean'^2
            b.emit(TensorTensor, [mean, mean], [m2], alu="multiply", src0=mean, src1=mean,
                   dst=m2)  # fmt: skip
            b.emit(TensorTensor, [ms, m2], [ms], alu="subtract", src0=ms, src1=m2, dst=ms)
            b.emit(TensorScalar, [ms], [rs], src=ms, dst=rs, op0="add", operand0=self.eps,
                   op1="pow", operand1=-0.5)  # fmt: skip
            if not self.shift:  # the full mean, x0 + mean'
                nx = ap(self.col("nx", n), slice(0, p))
                b.emit(TensorTensor, [mean, nx], [mean], alu="subtract", src0=mean, src1=nx,
                       dst=mean)  # fmt: skip
        else:
            s2 = self.groups.sums(t2, p)
            b.emit(TensorScalar, [s2], [rs], src=s2, dst=rs, op0="multiply",
                   operand0=1.0 / rag.d, op1="add", operand1=self.eps)  # fmt: skip
            b.emit(TensorScalar, [rs], [rs], src=rs, dst=rs, op0="pow", operand0=-0.5)

    def second(self, n: int, unit, rows: int) -> None:
        """The output passes, the stores."""
        b, p = self.b, rows * self.rag.k
        rs = ap(self.col("rs", n), slice(0, p))
        mean = ap(self.col("mean", n), slice(0, p)) if self.layer else None
        if self.shift:  # (mean' of x0 - x, `stats_shift`)
            mean = ap(self.col("mm", n, 2), slice(0, p), slice(0, 1))
        for s, t in enumerate(self.xs.pop(n)):
            xa = ap(t, slice(0, p))
            o = xa if self.odt == self.xdt else ap(self.tile("o", n, s, self.odt), slice(0, p))
            self.finish(xa, o, s, p, mean, rs)
            self.rag.store(b, self.out, unit, rows, s, o.name, self._store_q, self.small.store)

    def finish(self, xa, o, s: int, p: int, mean, rs) -> None:
        """o = (x - mean) * rstd * w + b (rms_norm: x * rstd * w), in two passes at most, each
        on VectorE or GpSimd as the list schedule finds either free sooner (`flex`)."""
        w = self.rows[self.weight][s] if self.weight else None
        bias = self.rows[self.bias][s] if self.bias else None
        w = ap(w, slice(0, p)) if w else None
        bias = ap(bias, slice(0, p)) if bias else None
        if not self.layer:
            if w is None:
                self.flex(TensorScalar, [xa, rs], [o], src=xa, dst=o, op0="multiply",
                          operand0=rs)  # fmt: skip
                return
            self.flex(ScalarTensorTensor, [xa, rs, w], [o], data=xa, op0="multiply",
                      operand0=rs, op1="multiply", operand1=w, dst=o)  # fmt: skip
            return
        neg = self.shift  # (x' = x0 - x: mean' - x' = x - mean)
        if w is None:
            self.flex(TensorScalar, [xa, mean, rs], [o], src=xa, dst=o, op0="subtract",
                      operand0=mean, reverse0=neg, op1="multiply", operand1=rs)  # fmt: skip
        else:  # (16-bit: main columns apart from the remainder column, an even count, run
            # at N)
            main, width = self.rag.main(s), self.rag.width(s)
            for lo, hi in ((0, main), (main, width)) if main < width and not neg else ((0, width),):
                xc, wc, oc = (ap(a.name, slice(0, p), slice(lo, hi)) for a in (xa, w, o))
                self.flex(ScalarTensorTensor, [xc, mean, wc], [oc], data=xc, op0="subtract",
                          operand0=mean, reverse0=neg, op1="multiply", operand1=wc,
                          dst=oc)  # fmt: skip
            if bias is None:
                self.flex(TensorScalar, [o, rs], [o], src=o, dst=o, op0="multiply",
                          operand0=rs)  # fmt: skip
                return
            self.flex(ScalarTensorTensor, [o, rs, bias], [o], data=o, op0="multiply",
                      operand0=rs, op1="add", operand1=bias, dst=o)  # fmt: skip
            return
        if bias is not None:
            self.flex(TensorTensor, [o, bias], [o], alu="add", src0=o, src1=bias, dst=o)

    def flex(self, cls, reads, writes, **fields) -> None:
        """`emit` on VectorE, or GpSimd where the list schedule (`schedule.Scheduled`) finds it
        free sooner: the same operations, the same values."""
        other = (cls, reads, writes, {**fields, "engine": G})
        self.b.emit(cls, reads, writes, engine=V, choices=[other], **fields)
