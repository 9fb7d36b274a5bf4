"""Reductions (`sum`, `mean`, `amax`, `amin`) over any dims.

`rows.lower_reduction` keeps the last-dim case (a row per partition, one `tensor_reduce`);
the others come here. x's dims are sorted into kept and reduced ones (dims of size 1 left
out), runs of one kind merged into groups, so x is [..., K, R] or [..., R, K] in flat order:
- **[..., K, R]** (the last group reduced): up to 128 of K's rows on the partitions, R in the
  free dim in chunks of CHUNK elements: one VectorE `tensor_reduce` per chunk into a [rows, 1]
  column, columns (and outer reduced groups) combined by `tensor_tensor`, scaled for `mean`,
  stored;
- **[..., R, K]** (the last group kept): blocks of 128 of R's rows by up to 512 of K's columns
  loaded as they lie (contiguous rows: full-rate DMA) and combined elementwise into one fp32
  accumulator (the first block lands there, cast by the DMA); then the partitions are reduced by
  turning 128-column chunks on TensorE (`transpose` into PSUM) and one `tensor_reduce` each;
- **[..., R, K] with few R and a long K** (`kept_slabs`: a sum over the batch, as the
  gradient of a [T, D] broadcast over [B, T, D] is, or of GQA's repeated heads): each of the R
  slabs of K elements laid flat over all 128 partitions (`layout.flat_walk`, the same blocks
  for every slab) and the slabs added elementwise, alternating VectorE and GpSimd, when that
  takes fewer DMAs than blocks of R's few rows (R of the 128 partitions busy) by 512 columns;
- **[O, R, K]** with an item's R x K in a partition (`kept_small`; [O, R], the reduced dims
  last and R short, as [O, R, 1]: a CNN's global average pool): O's items on the
  partitions (several to one when many), one load and one `tensor_reduce` over the R axis a
  block, not blocks of R's rows by K's few columns for every item of O;
- **everything reduced**: flat blocks over all 128 partitions, combined into a [128, 1]
  column, turned into a row on TensorE and reduced once more.
Outer kept groups are loops (one output block each); outer reduced groups are combined into
the same accumulator.

With LNC 2 the output blocks alternate between the cores (`b.part`); the op is then isolated
(`kernels.ALONE`). Everything reduced has one output: its input blocks alternate instead, and
the cores' partials meet at a `core_barrier` (`Reduce.everything`).
"""

from __future__ import annotations

import itertools
import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import (
    Activation,
    CoreBarrier,
    DmaCopy,
    Engine,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    Transpose,
)
from trnsim.kernels.balance import cost_ns
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.column_folds import BUFS, ByEngines, ByMatmul
from trnsim.kernels.layout import _blocks, flat_blocks, flat_walk, row_groups
from trnsim.kernels.queues import Queues

__all__ = ["lower_any", "meets_exactly", "on_last_dim", "reduce_dims", "Reduce", "staggered"]

ALU = {"sum": "add", "mean": "add", "amax": "max", "amin": "min"}
CHUNK = 4096  # free elements of a [K, R] chunk (16 KiB of fp32 a partition)
LOADS = 8  # load buffers of [R, K] blocks in flight
SPREAD = 4  # K blocks a core of `kept_slabs` at least (when each keeps SLAB_MIN a partition)
FOLD_BLOCKS = 16  # blocks a core at least of everything reduced (`everything`), when ...
FOLD_MIN = 512  # ... each keeps this many elements a partition (2 KiB of fp32) at least
FOLD_BUFS = 6  # rotating load buffers of everything reduced
SLAB_MIN = 128  # elements a partition of a `kept_slabs` block at least (512 B of fp32)


def reduce_dims(op: str, dim, nd: int) -> list[int]:
    """The sorted dims `dim` names (an int, a list, or None: all) of an nd-dim x."""
    dims = list(range(nd)) if dim is None or dim == [] else dim if isinstance(dim, list) else [dim]
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims) or any(
        not -max(nd, 1) <= d < max(nd, 1) for d in dims
    ):
        raise TraceError(f"{op}: dim {dim!r}; expected dims in {-nd}..{nd - 1} (or a list)")
    out = sorted({d % max(nd, 1) for d in dims})
    if len(out) != len(dims):
        raise TraceError(f"{op}: dim {dim!r} names a dim twice")
    return out if nd else []


def meets_exactly(cfg: ChipConfig, op: str, out_dtype) -> bool:
    """Whether everything reduced may be shared by the cores (`Reduce.everything`): they can
    meet (`core.core_barrier`) and out can carry the second core's partial to the first
    exactly: fp32, or a max or min (rounding to out's dtype keeps their order)."""
    exact = out_dtype.name == "float32" or (ALU[op] in ("max", "min") and out_dtype.is_float)
    return cfg.core.core_barrier and exact


def on_last_dim(dim, nd: int) -> bool:
    """Whether `dim` is x's last dim only (the row reduction of `rows`)."""
    try:
        return nd <= 1 or reduce_dims("", dim, nd) == [nd - 1]
    except TraceError:
        return False  # lower_any reports it


def _out_shape(shape, dims, keepdim) -> list[int]:
    return [1 if d in dims else n for d, n in enumerate(shape) if keepdim or d not in dims]


def _groups(shape, dims) -> list[tuple[bool, list[int], int]]:
    """(reduced?, x's dims, elements) per group: runs of dims of one kind, size 1 left out."""
    out: list = []
    for d, n in enumerate(shape):
        if n == 1:
            continue
        red = d in dims
        if out and out[-1][0] == red:
            out[-1][1].append(d)
            out[-1] = (red, out[-1][1], out[-1][2] * n)
        else:
            out.append((red, [d], n))
    return out


class _Index:
    """Builds x's index: per dim an int or a slice, from flat positions inside groups."""

    def __init__(self, shape):
        self.shape, self.entries = shape, [slice(None)] * len(shape)

    def at(self, dims: list[int], flat: int) -> _Index:
        """Group `dims` at its element `flat` (one int per dim)."""
        for d, i in zip(dims, _unravel(flat, [self.shape[d] for d in dims])):
            self.entries[d] = i
        return self

    def run(self, dims: list[int], index: tuple) -> _Index:
        """Group `dims` at `index` (a `_blocks` index: leading ints, a slice, then whole)."""
        for k, d in enumerate(dims):
            self.entries[d] = index[k] if k < len(index) else slice(None)
        return self


def _unravel(flat: int, sizes) -> tuple[int, ...]:
    """The index of row-major position `flat` in an array of `sizes`."""
    out = []
    for n in reversed(tuple(sizes)):
        out.append(flat % n)
        flat //= n
    return tuple(reversed(out))


def _runs(sizes: list[int], lo: int, hi: int, most: int):
    """(index, n, offset): contiguous runs of at most `most` elements covering [lo, hi) of an
    array of `sizes` (`layout._blocks`), offset from lo."""
    off = 0
    for index, n in _blocks(tuple(sizes), most, lo, hi):
        yield index, n, off
        off += n


def lower_any(b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str, dim, keepdim) -> None:
    """out = op(x, dim, keepdim) for any dims (module doc)."""
    tx, to = b.tensors[x], b.tensors[out]
    dims = reduce_dims(op, dim, len(tx.shape))
    want = _out_shape(tx.shape, dims, keepdim)
    if list(to.shape) != want and not (want == [] and list(to.shape) == [1]):
        raise TraceError(
            f"{op}: x {list(tx.shape)} reduced over dims {dims} gives {want}, but out is "
            f"{list(to.shape)}; expected out of shape {want}"
        )
    groups = _groups(tx.shape, dims)
    count = math.prod(tx.shape[d] for d in dims)
    r = Reduce(b, cfg, op, x, out, 1.0 / count if op == "mean" and count else 1.0)
    if not any(red for red, _, _ in groups):  # nothing but size-1 dims reduced: a copy
        src, dst = ap(x), ap(out)
        if b.part[0] == 0:
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=r.loads[0])
    elif len(groups) == 1:
        r.everything()
    elif [g[0] for g in groups] == [False, True] and groups[1][2] <= CHUNK:
        r.kept_small([*groups, (False, [], 1)], dims, keepdim)  # [O, R] as [O, R, 1]
    elif groups[-1][0]:
        r.kept_rows(groups)
    elif [g[0] for g in groups] == [False, True, False] and groups[1][2] * groups[2][2] <= CHUNK:
        r.kept_small(groups, dims, keepdim)
    elif r.slabs_fewer(groups):
        r.kept_slabs(groups, dims, keepdim)
    else:
        r.kept_cols(groups)
    r.done()


class Reduce:
    """One reduction's tiles and the steps shared by its three shapes (module doc)."""

    def __init__(self, b, cfg, op, x, out, scale):
        self.b, self.cfg, self.op, self.x, self.out, self.scale = b, cfg, op, x, out, scale
        self.alu, self.P, self.f32 = ALU[op], cfg.core.sbuf.partitions, dtype("float32")
        # columns of an [R, K] block: one PSUM bank of fp32 (and a matmul's moving free size)
        self.cols = min(cfg.core.psum.bank_bytes // 4, cfg.core.tensor.moving_free_max)
        self.n = 0  # stores so far (buffer rotation, queues)
        self.q = 0  # loads so far (queues)
        self.queues = Queues(cfg)
        self.loads, self.stores = self.queues.loads(), self.queues.stores()
        self.q2 = -1  # load buffers handed out (`next_x`)
        self.rows: list[str] = []  # PSUM rows of column sums (`ByMatmul`)
        self.m = -1  # column blocks summed so far
        self.psum = []

    def tile(self, key: str, shape, dt=None) -> str:
        return self.b.scratch_tile(f"reduce.{key}", key, shape, dt or self.f32)

    def mine(self, i: int) -> bool:
        return i % self.b.part[1] == self.b.part[0]

    def load(self, idx: _Index, dst) -> None:
        self.load_at(idx.entries, dst)

    def load_at(self, entries: list, dst) -> None:
        src = ap(self.x, *entries)
        self.b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.loads[self.q])
        self.q += 1

    def combine(self, acc, part) -> None:
        self.b.emit(TensorTensor, [acc, part], [acc], alu=self.alu, src0=acc, src1=part, dst=acc)

    def store(self, col, rows: int, lo: int) -> None:
        """Scale `col` ([rows, 1] fp32) for mean, cast it, store it to out's flat [lo, lo +
        rows)."""
        b, to = self.b, self.b.tensors[self.out]
        res = ap(self.tile(f"res{self.n % BUFS}", (self.P, 1), to.dtype), slice(0, rows))
        if self.scale != 1.0:
            b.emit(TensorScalar, [col], [res], src=col, dst=res, op0="multiply",
                   operand0=self.scale)  # fmt: skip
        else:
            b.emit(TensorCopy, [col], [res], src=col, dst=res)
        for index, n, off in _runs(list(to.shape) or [1], lo, lo + rows, rows):
            dst = ap(self.out, *index) if to.shape else ap(self.out)
            part = ap(res.name, slice(off, off + n))
            b.emit(DmaCopy, [part], [dst], src=part, dst=dst, queue=self.stores[self.n])
        self.n += 1

    def store_row(self, row, cn: int, lo: int) -> None:
        """Scale `row` ([1, cn] fp32, in PSUM) for mean, cast it, store it to out's flat [lo,
        lo + cn)."""
        b, to = self.b, self.b.tensors[self.out]
        res = ap(self.tile(f"resrow{self.n % BUFS}", (1, self.cols), to.dtype), slice(0, 1),
                 slice(0, cn))  # fmt: skip
        b.emit(TensorScalar, [row], [res], src=row, dst=res, op0="multiply", operand0=self.scale)
        for index, n, off in _runs(list(to.shape) or [1], lo, lo + cn, cn):
            dst = ap(self.out, *index) if to.shape else ap(self.out)
            part = ap(res.name, slice(0, 1), slice(off, off + n))
            b.emit(DmaCopy, [part], [dst], src=part, dst=dst, queue=self.stores[self.n])
        self.n += 1

    def kept_rows(self, groups) -> None:
        """[..., K, R]: K's rows on the partitions, R chunked in the free dim."""
        (_, kd, kn), (_, rd, rn) = groups[-2], groups[-1]
        outer = groups[:-2]
        kept = [g for g in outer if not g[0]]
        red = [g for g in outer if g[0]]
        rsizes = [self.b.tensors[self.x].shape[d] for d in rd]
        ksizes = [self.b.tensors[self.x].shape[d] for d in kd]
        dt = self.b.tensors[self.x].dtype
        chunks = list(_runs(rsizes, 0, rn, CHUNK))
        block = 0
        for okc in itertools.product(*(range(g[2]) for g in kept)):
            base = _flat(okc, [g[2] for g in kept]) * kn
            for k0 in range(0, kn, self.P):
                kb, block = min(self.P, kn - k0), block + 1
                if not self.mine(block - 1):
                    continue
                slot = self.n % BUFS
                acc = ap(self.tile(f"acc{slot}", (self.P, 1)), slice(0, kb))
                first = True
                for orc in itertools.product(*(range(g[2]) for g in red)):
                    for cidx, cn, _ in chunks:
                        t = self.tile(f"x{slot}", (self.P, min(CHUNK, rn)), dt)
                        for kidx, n, off in _runs(ksizes, k0, k0 + kb, self.P):
                            idx = self.outer(kept, okc, red, orc).run(kd, kidx).run(rd, cidx)
                            self.load(idx, ap(t, slice(off, off + n), slice(0, cn)))
                        xa = ap(t, slice(0, kb), slice(0, cn))
                        dst = acc if first else ap(self.tile(f"c{slot}", (self.P, 1)), slice(0, kb))
                        self.b.emit(TensorReduce, [xa], [dst], alu=self.alu, src=xa, dst=dst)
                        if not first:
                            self.combine(acc, dst)
                        first = False
                self.store(acc, kb, base + k0)

    def kept_cols(self, groups) -> None:
        """[..., R, K]: blocks of R's rows by up to `cols` of K's columns, loaded as they lie.
        Sums: TensorE adds each block's partitions into PSUM (a ones column as the stationary
        operand, accumulating over the blocks). Max and min: the blocks folded elementwise into
        two accumulators (VectorE and GpSimd in turn, in x's dtype when 16-bit: exact), then
        the partitions reduced through TensorE transposes (`across`)."""
        (_, rd, rn), (_, kd, kn) = groups[-2], groups[-1]
        outer = groups[:-2]
        kept = [g for g in outer if not g[0]]
        red = [g for g in outer if g[0]]
        shape = self.b.tensors[self.x].shape
        rsizes, ksizes = [shape[d] for d in rd], [shape[d] for d in kd]
        block = 0
        for okc in itertools.product(*(range(g[2]) for g in kept)):
            base = _flat(okc, [g[2] for g in kept]) * kn
            for cidx, cn, coff in _runs(ksizes, 0, kn, self.cols):
                block += 1
                if not self.mine(block - 1):
                    continue
                fold = ByMatmul(self, cn) if self.by_matmul() else ByEngines(self, cn)
                for orc in itertools.product(*(range(g[2]) for g in red)):
                    for r0 in range(0, rn, self.P):
                        rb = min(self.P, rn - r0)
                        t = fold.target(rb)
                        for ridx, n, off in _runs(rsizes, r0, r0 + rb, self.P):
                            idx = self.outer(kept, okc, red, orc).run(rd, ridx).run(kd, cidx)
                            self.load(idx, ap(t, slice(off, off + n), slice(0, cn)))
                        fold.add(t, rb)
                fold.done(base + coff)

    def slabs_fewer(self, groups) -> bool:
        """Whether [..., R, K] (the last group kept) takes fewer loads as R slabs of K laid
        flat over the partitions (`kept_slabs`) than as blocks of R's rows by `cols` of K's
        columns (`kept_cols`)."""
        rn, kn = groups[-2][2], groups[-1][2]
        slabs = rn * math.ceil(kn / (self.P * CHUNK))
        return rn < self.P and slabs < math.ceil(kn / self.cols) * math.ceil(rn / self.P)

    def kept_slabs(self, groups, dims: list[int], keepdim: bool) -> None:
        """[..., R, K], R few: per outer kept item and block of K's elements over the
        partitions (`flat_walk`), every slab's block (outer reduced groups and R) loaded and
        added into one fp32 accumulator, in turn on VectorE and GpSimd; scaled, cast, stored
        at the block's place in out."""
        (_, rd, rn), (_, kd, kn) = groups[-2], groups[-1]
        outer = groups[:-2]
        kept = [g for g in outer if not g[0]]
        red = [g for g in outer if g[0]]
        tx, to = self.b.tensors[self.x], self.b.tensors[self.out]
        out_dims = [d for d in range(len(tx.shape)) if keepdim or d not in dims]
        ksizes = tuple(tx.shape[d] for d in kd)
        # at least SPREAD blocks a core when K allows: their loads and stores on several queues
        most = min(CHUNK, max(SLAB_MIN, -(-kn // (self.P * SPREAD * self.b.part[1]))))
        blocks = flat_walk(ksizes, 0, kn, self.P, most)
        width = max(f for _, _, f in blocks)
        engines = (Engine.VECTOR, Engine.GPSIMD)
        n = loaded = 0
        for okc in itertools.product(*(range(g[2]) for g in kept)):
            for kidx, p, f in blocks:
                n += 1
                if not self.mine(n - 1):
                    continue
                slot = self.n % BUFS
                acc = ap(self.tile(f"sacc{slot}", (self.P, width)), slice(0, p), slice(0, f))
                parts = []
                for orc in itertools.product(*(range(g[2]) for g in red)):
                    for r in range(rn):
                        idx = self.outer(kept, okc, red, orc).at(rd, r).run(kd, kidx)
                        k, loaded = len(parts), loaded + 1
                        t = ap(self.tile(f"slab{loaded % LOADS}", (self.P, width), tx.dtype),
                               slice(0, p), slice(0, f))  # fmt: skip
                        self.load(idx, t)
                        parts.append((t, idx))
                        if k == 1:
                            first = parts[0][0]
                            self.b.emit(TensorTensor, [first, t], [acc], alu=self.alu, src0=first,
                                        src1=t, dst=acc, engine=engines[k % 2])  # fmt: skip
                        elif k > 1:
                            self.b.emit(TensorTensor, [acc, t], [acc], alu=self.alu, src0=acc,
                                        src1=t, dst=acc, engine=engines[k % 2])  # fmt: skip
                res = ap(self.tile(f"sres{slot}", (self.P, width), to.dtype), slice(0, p),
                         slice(0, f))  # fmt: skip
                src = acc if len(parts) > 1 else parts[0][0]
                if self.scale != 1.0:
                    self.b.emit(TensorScalar, [src], [res], src=src, dst=res, op0="multiply",
                                operand0=self.scale)  # fmt: skip
                else:
                    self.b.emit(TensorCopy, [src], [res], src=src, dst=res)
                entries = parts[0][1].entries
                dst = ap(self.out, *(0 if d in dims else entries[d] for d in out_dims))
                self.b.emit(DmaCopy, [res], [dst], src=res, dst=dst, queue=self.stores[self.n])
                self.n += 1

    def kept_small(self, groups, dims: list[int], keepdim: bool) -> None:
        """[O, R, K] with an item's R x K in a partition (CHUNK elements or fewer): O's items
        on the partitions, several to one when they are many (`layout.row_groups`: blocks of
        [p, per, R, K], one DMA each), one `tensor_reduce` over the R axis into [p, per, K],
        stored as out's rows."""
        (_, od, on), (_, rd, rn), (_, kd, kn) = groups
        tx, to = self.b.tensors[self.x], self.b.tensors[self.out]
        osizes = tuple(tx.shape[d] for d in od)
        kept = [d for d in range(len(tx.shape)) if keepdim or d not in dims]  # out's dims
        cores = self.b.part[1]  # a block or more for each core
        per, blocks = row_groups((*osizes, rn * kn), self.P, None, max(1, CHUNK // (rn * kn)),
                                 max(1, -(-on // (self.P * cores))))  # fmt: skip
        for block, (oidx, n) in enumerate(blocks):
            if not self.mine(block):
                continue
            p, slot = n // per, self.n % BUFS
            t = ap(self.tile(f"xs{slot}", (self.P, per, rn, kn), tx.dtype), slice(0, p))
            entries = _Index(tx.shape).run(od, oidx).entries
            self.load_at(entries, t)
            acc = ap(self.tile(f"accs{slot}", (self.P, per, kn)), slice(0, p))
            self.b.emit(TensorReduce, [t], [acc], alu=self.alu, src=t, dst=acc, axis=2)
            res = ap(self.tile(f"ress{slot}", (self.P, per, kn), to.dtype), slice(0, p))
            if self.scale != 1.0:
                self.b.emit(TensorScalar, [acc], [res], src=acc, dst=res, op0="multiply",
                            operand0=self.scale)  # fmt: skip
            else:
                self.b.emit(TensorCopy, [acc], [res], src=acc, dst=res)
            dst = ap(self.out, *(entries[d] for d in kept))
            self.b.emit(DmaCopy, [res], [dst], src=res, dst=dst, queue=self.stores[self.n])
            self.n += 1

    def outer(self, kept, okc, red, orc) -> _Index:
        """An index of x placed at the outer kept groups' `okc` and reduced groups' `orc`."""
        idx = _Index(self.b.tensors[self.x].shape)
        for g, i in (*zip(kept, okc), *zip(red, orc)):
            idx.at(g[1], i)
        return idx

    def by_matmul(self) -> bool:
        dt = self.b.tensors[self.x].dtype
        return self.alu == "add" and dt.name in ("bfloat16", "float16", "float32")

    def low(self):
        """x's dtype when it is a 16-bit float (max and min are exact in it), else fp32."""
        dt = self.b.tensors[self.x].dtype
        return dt if dt.is_float and dt.itemsize == 2 else self.f32

    def next_x(self, cols: int, dt) -> str:
        """The next of LOADS rotating load buffers (small blocks: many in flight hide each
        copy's setup and completion latency)."""
        self.q2 += 1
        return self.tile(f"xb{self.q2 % LOADS}", (self.P, cols), dt)

    def across(self, acc: str, filled: int, cn: int, lo: int) -> None:
        """Reduce acc[0:filled, 0:cn] over its partitions into out's flat [lo, lo + cn)."""
        slot = self.n % BUFS
        for c0 in range(0, cn, self.P):
            w = min(self.P, cn - c0)
            self.store(self.column(acc, filled, c0, w, slot), w, lo + c0)

    def column(self, acc: str, filled: int, c0: int, w: int = 1, slot: int = 0):
        """acc[0:filled, c0:c0 + w] reduced over its partitions: a [w, 1] column (turned on
        TensorE into PSUM, then one `tensor_reduce`)."""
        b, P = self.b, self.P
        if len(self.psum) < 2:
            self.psum.append(b.psum("tp", (P, P), self.f32))
        ps = self.psum[(self.n + c0 // P) % 2]
        src = ap(acc, slice(0, filled), slice(c0, c0 + w))
        tp = ap(ps, slice(0, w), slice(0, filled))
        b.emit(Transpose, [src], [tp], src=src, dst=tp)
        col = ap(self.tile(f"col{slot}", (P, 1)), slice(0, w))
        b.emit(TensorReduce, [tp], [col], alu=self.alu, src=tp, dst=col)
        return col

    def everything(self) -> None:
        """All of x into one number: flat blocks into a [128, 1] column, then across. With LNC
        2 the blocks alternate between the cores when their partials meet exactly (`split`):
        the second core stores its partial to out, both meet at a `core_barrier`, and the
        first loads it back and combines it with its own; otherwise the first core does all."""
        b = self.b
        shape, c, cores = b.tensors[self.x].shape, *b.part
        # at least FOLD_BLOCKS blocks a core, so each core's reductions run while its later
        # blocks load (four blocks of 4096 a partition a core loaded all at once, the cores'
        # engines idle until the last came: 16 MiB of fp32 at 57% of the DMA bound)
        most = max(FOLD_MIN, min(CHUNK, -(-math.prod(shape) // (self.P * cores * FOLD_BLOCKS))))
        blocks = flat_blocks(shape, self.P, most)
        split = cores == 2 and len(blocks) > 1 and self.split()
        if not split and c:
            return
        acc, filled = self.fold(blocks[c::cores] if split else blocks)
        if not split:
            self.across(acc, filled, 1, 0)
        elif c:
            scale, self.scale = self.scale, 1.0  # the partial, unscaled: out is its mailbox
            self.across(acc, filled, 1, 0)
            self.scale = scale
            self.meet()
        else:
            col = self.column(acc, filled, 0, 1, self.n % BUFS)
            self.meet()
            other = ap(self.tile("peer", (self.P, 1)), slice(0, 1))
            src = ap(self.out, *[0] * len(b.tensors[self.out].shape))
            b.emit(DmaCopy, [src], [other], src=src, dst=other, queue=self.loads[0])
            self.combine(col, other)
            self.store(col, 1, 0)

    def split(self) -> bool:
        """`meets_exactly` for this op."""
        return meets_exactly(self.cfg, self.op, self.b.tensors[self.out].dtype)

    def meet(self) -> None:
        """Both cores meet at a barrier over out: the second core's store of its partial is
        done before it, the first core's load after it (op boundaries order them)."""
        b, d = self.b, ap(self.out)
        b.barrier()
        b.emit(CoreBarrier, [d], [d], data=d)
        b.barrier()

    def fold(self, blocks: list) -> tuple[str, int]:
        """`blocks` of x reduced into one [128, 1] accumulator: (the tile, its rows filled).
        Each block's reduction on VectorE or, for a sum or a max where ScalarE's activation
        reduces so, ScalarE (its copy's reduction, the copy into scratch unread): the engine
        that is free soonest by their cost models, so two engines keep up with the loads."""
        b, P, tx = self.b, self.P, self.b.tensors[self.x]
        acc, loads = self.tile("acc", (P, 1)), self.queues.loads(0, 1 / 2)
        # the block on the most partitions first: it fills the accumulator's rows that the
        # others combine into (a core's share of [2, 130, 600] began with a block of 114)
        widest = max(range(len(blocks)), key=lambda i: blocks[i][1])
        blocks = [blocks[widest], *blocks[:widest], *blocks[widest + 1 :]]
        width = max(f for _, _, f in blocks)
        on_scalar = self.alu == "add" or (self.alu == "max" and self.cfg.core.scalar.reduce_max)
        busy = {Engine.VECTOR: 0.0, Engine.SCALAR: 0.0 if on_scalar else math.inf}
        for n, (index, p, f) in enumerate(blocks):
            t = ap(self.tile(f"x{n % FOLD_BUFS}", (P, width), tx.dtype), slice(0, p), slice(0, f))
            src = ap(self.x, *index)
            b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=loads[n])
            dst = ap(acc, slice(0, p)) if n == 0 else ap(self.tile(f"c{n % FOLD_BUFS}", (P, 1)),
                                                          slice(0, p))  # fmt: skip
            junk = ap(self.tile("fold_junk", (P, width), dtype("bfloat16")), slice(0, p),
                      slice(0, f))  # fmt: skip
            kinds = {
                Engine.VECTOR: (TensorReduce, {"alu": self.alu, "src": t, "dst": dst}),
                Engine.SCALAR: (Activation, {"func": "copy", "src": t, "dst": junk,
                                             "reduce": self.alu, "reduce_dst": dst}),
            }  # fmt: skip
            eng = min(
                busy,
                key=lambda e: (
                    busy[e]
                    + (
                        0.0
                        if math.isinf(busy[e])
                        else cost_ns(b, self.cfg, kinds[e][0], **kinds[e][1])
                    )
                ),
            )
            cls, fields = kinds[eng]
            busy[eng] += cost_ns(b, self.cfg, cls, **fields)
            outs = [junk, dst] if eng == Engine.SCALAR else [dst]
            b.emit(cls, [t], outs, **fields)
            if n:
                self.combine(ap(acc, slice(0, p)), dst)
        return acc, blocks[0][1]

    def done(self) -> None:
        self.b.release(*self.psum, *self.rows)


def _flat(index: tuple, sizes: list[int]) -> int:
    out = 0
    for i, n in zip(index, sizes):
        out = out * n + i
    return out


def staggered(items, first, second, lag: int) -> None:
    """first(item) for every item, and second(item, what first returned) `lag` items later:
    an engine that runs both halves in order works on item n + lag while another engine
    finishes item n (the buffers of lag + 1 items are live at once)."""
    pending = []
    for item in items:
        pending.append((item, first(item)))
        if len(pending) > lag:
            second(*pending.pop(0))
    for item, got in pending:
        second(item, got)
