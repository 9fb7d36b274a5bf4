"""Reductions over the last dim of rows in pieces over the partitions (`rows` module doc).

A unit is g whole rows in one [128, f] tile, or one row of t segments (t tiles). Each tile's
partials per partition (VectorE's `tensor_reduce`, or ScalarE's `activation` with its add or
max reduction: tiles in turn, in the shares that even out their cost models; a 16-bit max in
x's dtype, exact), a unit's segments reduced into one column; J units' columns ([128, J]) meet
on TensorE at once: a sum as partials^T @ E^T ([J, g]: unit j's rows along the free dim), a max
or min by a transpose into PSUM and one `tensor_reduce` over [J, g, k]. The [J, g] results, in
row order, are scaled (mean), cast and stored by one DMA (a run of out for a 2-D x). The rows
are shared evenly between the cores of an LNC 2 logical core (the op is isolated)."""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import (
    Activation,
    DmaCopy,
    Engine,
    Matmul,
    TensorCopy,
    TensorReduce,
    TensorScalar,  # fmt: skip
    Transpose,
)
from trnsim.kernels.balance import cost_ns, dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks
from trnsim.kernels.queues import Queues
from trnsim.kernels.reduce import _unravel
from trnsim.kernels.row_pieces import Groups, PieceLayout
from trnsim.kernels.row_plan import Spread
from trnsim.kernels.rows import even_share

__all__ = ["lower_reduction_pieces"]

BUFS = 6
STORE_ROWS = 512  # results of a batch of units at most (one store)
V, S, G = Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD
ALU = {"sum": "add", "mean": "add", "amax": "max", "amin": "min"}


def lower_reduction_pieces(b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str,
                           lay: PieceLayout, f: int) -> None:  # fmt: skip
    """out = op(x, -1) over rows laid out as `lay` (module doc)."""
    from trnsim.kernels.rows_ragged import last_rows  # (which imports this module)

    tx = b.tensors[x]
    rows = even_share(b, tx)
    if rows[0] >= rows[1]:
        return
    k = _Red(b, cfg, op, x, out, lay)
    rows, tail = last_rows(b, cfg, op, x, out, lay.k if lay.t == 1 else 0, rows)
    tail()  # (the last rows first: their chain hidden behind the others' loads)
    if lay.t == 1:
        units = list(row_blocks(tx.shape, lay.g, rows))
    else:
        units = [((r,), 1) for r in range(*rows)]
    k.spread = Spread(k.shares(), len(units) * lay.t)
    r0 = rows[0]
    for batch in batches(units, k.P, lay.g, len(tx.shape)):
        for j, (index, n) in enumerate(batch):
            k.unit(j, index, n)
        k.combine(batch, r0)
        r0 += sum(n for _, n in batch)
    k.groups.done()


def batches(units: list, P: int, g: int, rank: int) -> list[list]:
    """`units` ((index, rows) pairs) in batches whose partials combine and store at once:
    consecutive units of one run of out (2-D x), up to P and STORE_ROWS rows (g rows a unit);
    a last unit of fewer rows a batch of its own."""
    per = max(1, min(P, STORE_ROWS // g)) if rank <= 2 else 1
    out = []
    for j0 in range(0, len(units), per):
        batch = units[j0 : j0 + per]
        if len(batch) > 1 and batch[-1][1] < batch[0][1]:
            out += [batch[:-1], batch[-1:]]
        else:
            out.append(batch)
    return out


class _Red:
    """One reduction's tiles and steps (module doc)."""

    def __init__(self, b, cfg, op, x, out, lay):
        self.b, self.cfg, self.op, self.x, self.out, self.lay = b, cfg, op, x, out, lay
        self.alu, self.P, self.f32 = ALU[op], cfg.core.sbuf.partitions, dtype("float32")
        self.xdt, self.odt = b.tensors[x].dtype, b.tensors[out].dtype
        self.low = self.xdt if self.xdt.itemsize == 2 and self.xdt.is_float else self.f32
        self.groups = Groups(b, cfg, lay.k)
        q = dma_queues(cfg, lay.f * self.xdt.itemsize)
        qs = Queues(cfg)
        # two load queues at least: a load waiting for its buffer holds up only its own queue
        self.loads, self.stores = qs.loads().take(max(2, q)), qs.stores(0, 1 / 2)
        self.nl = self.ns = self.batches = 0
        self.short = self.low is not self.f32 and self.alu != "add"  # a 16-bit max: exact

    def shares(self) -> dict:
        """The partials on VectorE and ScalarE (a sum; a max or min where ScalarE reduces by
        max) in the shares that even out their time per tile."""
        if self.alu != "add" and not self.cfg.core.scalar.reduce_max:
            return {V: 1.0}
        t = self.b.scratch_tile("rp.x0", "x", (self.P, self.lay.f), self.xdt)
        c = self.b.scratch_tile("rp.cost", "c", (self.P, 1), self.low if self.short
                                else self.f32)  # fmt: skip
        v = cost_ns(self.b, self.cfg, TensorReduce, alu=self.alu, src=ap(t), dst=ap(c))
        s = cost_ns(self.b, self.cfg, Activation, func="copy", src=ap(t), dst=ap(t),
                    reduce="add" if self.alu == "add" else "max", reduce_dst=ap(c))  # fmt: skip
        return {V: s / (v + s), S: v / (v + s)}

    def parts(self):
        """The batch's partials, [128, J]: a column per unit."""
        return self.b.scratch_tile(f"rp.parts{self.batches % 2}", "parts", (self.P, self.P),
                                   self.f32)  # fmt: skip

    def unit(self, j: int, index: tuple, rows: int) -> None:
        """Unit j of the batch: its tiles loaded and reduced into column j of the partials."""
        b, lay, P = self.b, self.lay, self.P
        p = rows * min(lay.k, P)
        col = ap(self.parts(), slice(0, p), slice(j, j + 1))
        segs = None
        if lay.t > 1:
            segs = ap(b.scratch_tile(f"rp.segs{j % 2}", "segs", (P, lay.t), self.f32))
        for s in range(lay.t):
            xa = ap(b.scratch_tile(f"rp.x{self.nl % BUFS}", "x", (P, lay.f), self.xdt),
                    slice(0, p))  # fmt: skip
            if lay.t == 1:
                src = ap(self.x, *index)
            else:
                seg = lay.f * P
                src = ap(self.x, *_unravel(index[0], b.tensors[self.x].shape[:-1]),
                         slice(s * seg, (s + 1) * seg))  # fmt: skip
            b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=self.loads[self.nl])
            self.nl += 1
            self.partial(
                xa, p, col if segs is None else ap(segs.name, slice(0, p), slice(s, s + 1))
            )
        if segs is not None:
            b.emit(TensorReduce, [segs], [col], alu=self.alu, src=segs, dst=col)

    def partial(self, xa, p: int, dst) -> None:
        """dst ([p, 1] fp32) = each partition's reduction of tile xa."""
        b = self.b
        if self.spread() == S:  # ScalarE: the sum, or max(x) (min(x) = -max(-x))
            junk = ap(b.scratch_tile("rp.junk", "junk", (self.P, self.lay.f),
                                     dtype("bfloat16")), slice(0, p))  # fmt: skip
            neg = self.alu == "min"
            b.emit(Activation, [xa], [junk, dst], func="copy", src=xa, dst=junk,
                   scale=-1.0 if neg else 1.0, reduce="add" if self.alu == "add" else "max",
                   reduce_dst=dst)  # fmt: skip
            if neg:
                b.emit(TensorScalar, [dst], [dst], src=dst, dst=dst, op0="multiply",
                       operand0=-1.0, engine=G)  # fmt: skip
        elif self.short:  # 16-bit max: exact, fast
            m = ap(b.scratch_tile(f"rp.m{self.nl % 2}", "m", (self.P, 1), self.low),
                   slice(0, p))  # fmt: skip
            b.emit(TensorReduce, [xa], [m], alu=self.alu, src=xa, dst=m)
            b.emit(TensorCopy, [m], [dst], src=m, dst=dst, engine=G)
        else:
            b.emit(TensorReduce, [xa], [dst], alu=self.alu, src=xa, dst=dst)

    def combine(self, batch, r0: int) -> None:
        """The batch's results [J, g] (unit j's rows along the free dim, in row order) from
        its partials, on TensorE; scaled for mean, cast, stored."""
        b, gr, P = self.b, self.groups, self.P
        J, g, k = len(batch), max(n for _, n in batch), min(self.lay.k, P)
        p = g * k
        parts = ap(self.parts(), slice(0, p), slice(0, J))
        if self.alu == "add":  # parts^T @ E^T: [J, g]
            got = ap(gr._ps((P, gr.g)), slice(0, J), slice(0, g))
            et = ap(gr.et, slice(0, p), slice(0, g))
            b.emit(Matmul, [parts, et], [got], stationary=parts, moving=et, dst=got)
        else:  # turned into [J, g, k], reduced over k
            tp = ap(gr._ps((P, gr.g, k)), slice(0, J), slice(0, g), slice(None))
            b.emit(Transpose, [parts], [tp], src=parts, dst=tp)
            got = ap(b.scratch_tile("rp.got", "got", (P, gr.g), self.f32), slice(0, J),
                     slice(0, g))  # fmt: skip
            b.emit(TensorReduce, [tp], [got], alu=self.alu, src=tp, dst=got)
        res = ap(b.scratch_tile(f"rp.res{self.batches % 2}", "res", (P, gr.g), self.odt),
                 slice(0, J), slice(0, g))  # fmt: skip
        scale = 1.0 / self.lay.d if self.op == "mean" else 1.0
        b.emit(Activation, [got], [res], func="copy", src=got, dst=res, scale=scale)
        n = J * g
        to = b.tensors[self.out]
        if not to.shape:
            dst = ap(self.out)
        elif len(b.tensors[self.x].shape) <= 2:
            dst = ap(self.out, slice(r0, r0 + n))
        elif self.lay.t > 1:
            dst = ap(self.out, *_unravel(batch[0][0][0], b.tensors[self.x].shape[:-1]))
        else:
            dst = ap(self.out, *batch[0][0])
        b.emit(DmaCopy, [res], [dst], src=res, dst=dst, queue=self.stores[self.ns])
        self.ns += 1
        self.batches += 1
