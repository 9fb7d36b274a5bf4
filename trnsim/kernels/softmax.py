"""`softmax` and `log_softmax` over the last dim.

The kernel, per block of rows (`per` rows to each of up to 128 partitions, the whole row in the
free dim: short rows go several to a partition, up to ROW_ELEMENTS, `layout.row_tiles`, so the
max, the [rows, 1] steps and the transfers take a whole block at once): load; the row maximum
on VectorE (`tensor_reduce max`, into a column of x's dtype, which holds it exactly and lets a
bf16 row reduce at two elements a cycle); its negation on GpSimd ([rows, 1]); exp(x - max) on
ScalarE with the row sum accumulated by the same instruction (`activation exp, bias = -max,
reduce add`, row by row); then
- softmax: 1 / sum on GpSimd ([rows, 1]) and e * (1 / sum) on VectorE (`tensor_scalar` row by
  row, four elements a cycle for 16-bit data), in place;
- log_softmax: log(sum) on ScalarE, -(max + log(sum)) on GpSimd ([rows, 1]), and x plus that on
  VectorE (`tensor_scalar add`), in place;
and store. So each engine makes at most one pass over a row (ScalarE the exp, VectorE the max
and the scale, at less than a pass's cost each), and the [rows, 1] steps go to the otherwise
idle GpSimd. Blocks rotate through up to BUFS buffers (fewer for long rows: within
BUFFER_SHARE of SBUF, so a kernel of several ops fits), and the stages are emitted one block
apart (block n + 1's load and max before block n's exp and scale), so VectorE takes the next
block's max while ScalarE computes this one's exp.

Short rows (SHORT_ROW or fewer elements), whose row-by-row instructions cost an engine's MIN_II
(64 cycles) however few their elements, go in three stages, each a block behind the one
before: load and max; exp row by row into an fp32 scratch block (no dearer than one
instruction for the block: 64 cycles a row of 64), the sums of the first `js` row slots by
ScalarE's reduction (its accumulator read, ~64 cycles a row) and the others' by one VectorE
`tensor_reduce` over the block's last axis, `js` evening the two engines out (`_split`); then
the factor, the scale or shift on GpSimd row by row (64 cycles a row: VectorE's four elements
a cycle do not help rows under its MIN_II) and the store. So ScalarE's exp of block n, VectorE's
max of block n + 1 and GpSimd's scale of block n - 1 run at once (with two stages, ScalarE's
log and GpSimd's factor waited for VectorE's sum of the same block).
Rows in pieces over the partitions are in `softmax_pieces`.
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import Activation, DmaCopy, Engine, TensorReduce, TensorScalar, TensorTensor
from trnsim.kernels.balance import cost_ns, dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import core_rows, row_tiles
from trnsim.kernels.queues import Queues, Stream
from trnsim.kernels.ragged import ragged_layout
from trnsim.kernels.row_pieces import layout as pieces_layout
from trnsim.kernels.rows import core_share, even_share, rows_fit
from trnsim.kernels.softmax_pieces import lower_softmax_pieces
from trnsim.kernels.softmax_ragged import lower_softmax_ragged

__all__ = ["lower_softmax"]

BUFS = 4
ROW_ELEMENTS = 4096  # short rows are grouped up to this many elements a partition
SBUF_SHARE = 0.75  # rows that need more than this for one buffer are refused
BUFFER_SHARE = 0.3  # what the rotating buffers may take
GPSIMD = Engine.GPSIMD
SHORT_ROW = 256  # rows this short (`_Kernel.exps`): exp row by row to fp32 scratch, the sums
# split between ScalarE's reduction and VectorE, the scale on GpSimd, in three stages
SHORT_ELEMENTS = 2048  # grouped up to this many elements a partition (blocks of 512 KiB for
# 16-bit rows: 16 a core at 16 MiB, so the chain after the last load is short)
SHORT_BUFS = 8  # rotating through this many buffers (loads run that far ahead)
E_SLOTS = 3  # scratch blocks of exp's values (written in stage 2, read in stage 3)
SHORT_SHARE = 0.45  # their buffers' share of SBUF (with the scratch: 8 blocks of fp32 rows)
PIECE_BYTES = 8192  # a piece tile's bytes a partition (1 MiB tiles: many, so loads overlap)
PIECE_SHARE = 0.45  # what piece tiles may take (a row of 2^20 fp32 and the next one)
PIECE_ROWS = 1024  # rows this long go in pieces (`softmax_pieces`; a row a partition, k = 1,
# for rows up to a tile's share), whatever their count: its three stages under the list
# schedule keep every engine busy where the packed plan's blocks, few in flight, left the load,
# the passes and the store in turn (trn2 LNC 2, 16 MiB: fp32 rows of 4544 and 5120 71% and
# 65% -> 93%, bf16 of 10240 64% -> 86%; rows of 2048 to 8K packed 82-96%, in pieces 86-98%);
# a length not a multiple of 128 goes with a remainder column (`softmax_ragged`)


def evenly(cfg: ChipConfig, tx) -> bool:
    """Whether x's rows, though they fit (`rows.rows_fit`), are cut evenly between the cores
    (the op alone, `kernels.isolated`): rows in pieces (PIECE_ROWS or more) whose cut at
    multiples of 128 rows (`layout.core_rows`) gives one core more than the other, each core's
    time in pieces going by its rows (bf16 rows of 14336, 585 rows: 256 and 329, 57.1 us, 81%
    of the bound; at 292 and 293 51.0 us, 91%). A meeting costs a `core.barrier_latency`, and
    an even 128-row cut (the attention's scores of many rows) none."""
    if not tx.shape or tx.shape[-1] < PIECE_ROWS or not rows_fit(cfg, tx):
        return False
    total = math.prod(tx.shape[:-1])
    return core_rows(tuple(tx.shape), (0, 2)) != (0, total // 2)


def _pieces(cfg: ChipConfig, tx, d: int):
    """(layout, room): rows of d in pieces of PIECE_BYTES a partition (`row_pieces.layout`),
    and the bytes of a partition their tiles may take (PIECE_SHARE of it, less a scratch
    tile)."""
    f = max(1, PIECE_BYTES // tx.dtype.itemsize)
    return pieces_layout(d, f, cfg.core.sbuf.partitions), room_for(cfg, tx)


def room_for(cfg: ChipConfig, tx) -> int:
    """The bytes of a partition piece tiles may take: PIECE_SHARE of it, less a scratch tile."""
    return int(cfg.core.sbuf.partition_bytes * PIECE_SHARE) - PIECE_BYTES


def lower_softmax(
    b: KernelBuilder, cfg: ChipConfig, x: str, out: str, dim: int = -1, log: bool = False
) -> None:
    """out = softmax(x, dim) (or log_softmax); dim must be the last."""
    tx, to = b.tensors[x], b.tensors[out]
    name = "log_softmax" if log else "softmax"
    if tuple(tx.shape) != tuple(to.shape):
        raise TraceError(
            f"{name}: x {list(tx.shape)} and out {list(to.shape)} differ; expected one shape"
        )
    if dim not in (-1, len(tx.shape) - 1):
        raise TraceError(f"{name}: dim {dim}; only the last dim (-1) is lowered yet")
    d = tx.shape[-1]
    in_place = tx.dtype == to.dtype  # the result overwrites x
    per_row = d * (tx.dtype.itemsize + (0 if in_place else to.dtype.itemsize))
    sbuf = cfg.core.sbuf.partition_bytes
    budget = int(sbuf * SBUF_SHARE) - (d * tx.dtype.itemsize if log else 0)
    bufs = min(BUFS, budget // per_row)
    vmax = cfg.core.vector.dve_max_free_elements
    # rows that do not fit, or in pieces with an uneven 128-row cut: split evenly (isolated)
    share = even_share(b, tx) if b.part[1] > 1 and evenly(cfg, tx) else core_share(b, cfg, tx)
    long = bufs < 1 or d > vmax or d >= PIECE_ROWS
    lay, room = _pieces(cfg, tx, d) if long else (None, 0)
    if lay is not None:
        lower_softmax_pieces(b, cfg, x, out, lay, log, room, share)
        return
    if bufs < 1 or d > vmax or long:  # long, not a multiple of 128: with a remainder column
        rag = ragged_layout(d, max(1, PIECE_BYTES // tx.dtype.itemsize), cfg.core.sbuf.partitions)
        lower_softmax_ragged(b, cfg, x, out, rag, log, room_for(cfg, tx), share)
        return
    P = cfg.core.sbuf.partitions
    # rows per partition: short rows go several to a partition, so each instruction and
    # transfer does more (the [rows, 1] steps take a whole block's rows at once)
    # buffers within BUFFER_SHARE of SBUF (the kernel's other ops keep their own tiles)
    short = d <= SHORT_ROW  # `exps` and `scaled`, three stages a block apart
    room = min(budget, int(sbuf * (SHORT_SHARE if short else BUFFER_SHARE)))
    if short:  # the scratch blocks of exp's fp32 values (`e_block`)
        room -= E_SLOTS * SHORT_ELEMENTS * 4
    most = min(SHORT_ELEMENTS if short else ROW_ELEMENTS, vmax) // d
    per, blocks = row_tiles(tx.shape, P, share, most, room // (BUFS * per_row))
    bufs = max(1, min(SHORT_BUFS if short else BUFS, room // (per * per_row)))
    k = _Kernel(b, x, out, tx.dtype, to.dtype, d, P, bufs, in_place, log)
    q, qs = dma_queues(cfg, per * d * tx.dtype.itemsize), Queues(cfg)  # load (and store) queues
    k.per, k.loads, k.stores = per, qs.loads().take(q), qs.stores().take(q)
    if short:
        k.js = _split(b, cfg, k)
        lag = (0, min(1, bufs - 1), min(2, bufs - 1))
        for n in range(len(blocks) + lag[2]):
            for stage, late in zip((k.first, k.exps, k.scaled), lag):
                if 0 <= n - late < len(blocks) and (late or n < len(blocks)):
                    stage(n - late, *blocks[n - late])
        return
    skew = 1 if bufs > 1 else 0  # stage 1 of block n + skew is emitted before stage 2 of n
    for n in range(len(blocks) + skew):
        if n < len(blocks):
            k.first(n, *blocks[n])
        if n >= skew:
            k.second(n - skew, *blocks[n - skew])


class _Kernel:
    """The two stages of a block: `first` (load, max, -max) and `second` (exp with the row sum,
    the scale or shift, store); tiles per buffer slot."""

    def __init__(self, b, x, out, xdt, odt, d, P, bufs, in_place, log):
        self.b, self.x, self.out, self.d, self.P, self.bufs = b, x, out, d, P, bufs
        self.xdt, self.odt, self.in_place, self.log = xdt, odt, in_place, log
        self.f32, self.per = dtype("float32"), 1
        self.loads = self.stores = Stream(0, 1)  # the block's queues (`lower_softmax`)
        self.js = 0  # short rows: the row slots whose sums ScalarE takes (`exps`)

    def tile(self, key: str, n: int, shape, dt) -> str:
        return self.b.scratch_tile(f"softmax.{key}{n % self.bufs}", key, shape, dt)

    def col(self, key: str, n: int, p: int, j=None, dt=None, k=None):
        """Block n's [rows, 1] column tile (p partitions): its first k row slots (all), or
        slot j."""
        t = self.tile(key, n, (self.P, self.per), dt or self.f32)
        return ap(t, slice(0, p), slice(0, k or self.per) if j is None else slice(j, j + 1))

    def rows(self, key: str, n: int, p: int, dt, j=None, k=None):
        """Block n's [p, k, D] tile of `key` (k row slots of its per: all but in a block of
        the rows left over, `layout.row_tiles`), or its row slot j ([p, D])."""
        t = self.tile(key, n, (self.P, self.per, self.d), dt)
        if j is None:
            return ap(t, slice(0, p), slice(0, k or self.per))
        return ap(t, slice(0, p), j)

    def first(self, n: int, index: tuple, rows: int, k: int) -> None:
        b, p = self.b, rows // k
        xa, src = self.rows("x", n, p, self.xdt, k=k), ap(self.x, *index)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=self.loads[n])
        m, nm = self.col("mx", n, p, dt=self.xdt, k=k), self.col("nmx", n, p, k=k)
        b.emit(TensorReduce, [xa], [m], alu="max", src=xa, dst=m)
        b.emit(TensorScalar, [m], [nm], src=m, dst=nm, op0="multiply", operand0=-1.0,
               engine=GPSIMD)  # fmt: skip

    def second(self, n: int, index: tuple, rows: int, k: int) -> None:
        b, p, x, o = self.b, rows // k, "x", "x" if self.in_place else "o"
        odt = self.xdt if self.in_place else self.odt
        for j in range(k):  # exp(x - max) with the row sum, row slot by row slot
            xa, nm, s = self.rows(x, n, p, self.xdt, j), self.col("nmx", n, p, j), \
                self.col("sum", n, p, j)  # fmt: skip
            # in place (softmax), or into a scratch row of ScalarE's (log_softmax, which adds
            # to x afterwards)
            e = ap(self.tile("e", 0, (self.P, self.d), self.xdt), slice(0, p)) if self.log \
                else self.rows(o, n, p, odt, j)  # fmt: skip
            b.emit(Activation, [xa, nm], [e, s], func="exp", src=xa, dst=e, bias=nm,
                   reduce="add", reduce_dst=s)  # fmt: skip
        self.factor(n, p, k)
        for j in range(k):  # e * (1 / sum), or x - (max + log(sum))
            src = self.rows(x if self.log else o, n, p, self.xdt if self.log else odt, j)
            oj, cj = self.rows(o, n, p, odt, j), self.col("c", n, p, j)
            op = "add" if self.log else "multiply"
            b.emit(TensorScalar, [src, cj], [oj], src=src, dst=oj, op0=op, operand0=cj)
        src, dst = self.rows(o, n, p, odt, k=k), ap(self.out, *index)
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.stores[n])

    def factor(self, n: int, p: int, k: int) -> None:
        """Column c, the rows' factor from their sums and negated maxima: 1 / sum, or
        -(max + log(sum)) for log_softmax (ScalarE's log, the rest on GpSimd)."""
        b = self.b
        s, nm, c = self.col("sum", n, p, k=k), self.col("nmx", n, p, k=k), self.col("c", n, p, k=k)
        if self.log:
            ls = self.col("ls", n, p, k=k)
            b.emit(Activation, [s], [ls], func="log", src=s, dst=ls)
            b.emit(TensorTensor, [nm, ls], [c], alu="subtract", src0=nm, src1=ls, dst=c,
                   engine=GPSIMD)  # fmt: skip
        else:
            b.emit(TensorScalar, [s], [c], src=s, dst=c, op0="divide", operand0=1.0,
                   reverse0=True, engine=GPSIMD)  # fmt: skip

    def e_block(self, n: int, p: int, k: int):
        """Short rows: block n's exp(x - max), fp32 scratch (written in stage 2, read by the
        sum and, for softmax, by the scale in stage 3)."""
        t = self.b.scratch_tile(f"softmax.e32{n % E_SLOTS}", "e32", (self.P, self.per, self.d),
                                self.f32)  # fmt: skip
        return ap(t, slice(0, p), slice(0, k))

    def exps(self, n: int, index: tuple, rows: int, k: int) -> None:
        """Short rows, stage 2: exp(x - max) row by row on ScalarE (a row of 64 costs its
        MIN_II either way), the sums of the first `js` row slots by its reduction, the others'
        by one VectorE `tensor_reduce` over the last axis of the block (into x's dtype at two
        elements a cycle when `sdt` is 16-bit, else fp32)."""
        b, p, js = self.b, rows // k, min(self.js, k)
        e = self.e_block(n, p, k)
        s = self.col("sum", n, p, k=k)
        for j in range(k):
            xj, nm = self.rows("x", n, p, self.xdt, j), self.col("nmx", n, p, j)
            ej = ap(e.name, slice(0, p), j)
            if j < js:
                sj = self.col("sum", n, p, j)
                b.emit(Activation, [xj, nm], [ej, sj], func="exp", src=xj, dst=ej, bias=nm,
                       reduce="add", reduce_dst=sj)  # fmt: skip
            else:
                b.emit(Activation, [xj, nm], [ej], func="exp", src=xj, dst=ej, bias=nm)
        if js < k:
            rest = ap(e.name, slice(0, p), slice(js, k))
            sr = ap(s.name, slice(0, p), slice(js, k))
            b.emit(TensorReduce, [rest], [sr], alu="add", src=rest, dst=sr)

    def scaled(self, n: int, index: tuple, rows: int, k: int) -> None:
        """Short rows, stage 3: the factor ([rows, per]), the scale or shift on GpSimd row by
        row, the store."""
        b, p = self.b, rows // k
        self.factor(n, p, k)
        o, odt = ("x", self.xdt) if self.in_place else ("o", self.odt)
        e = None if self.log else self.e_block(n, p, k)
        for j in range(k):
            src = self.rows("x", n, p, self.xdt, j) if self.log else ap(e.name, slice(0, p), j)
            oj, cj = self.rows(o, n, p, odt, j), self.col("c", n, p, j)
            b.emit(TensorScalar, [src, cj], [oj], src=src, dst=oj, engine=GPSIMD,
                   op0="add" if self.log else "multiply", operand0=cj)  # fmt: skip
        src, dst = self.rows(o, n, p, odt, k=k), ap(self.out, *index)
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.stores[n])


def _split(b: KernelBuilder, cfg: ChipConfig, k: _Kernel) -> int:
    """Short rows: the row slots of a block whose sums ScalarE takes by its reduction (the
    rest: one VectorE reduction), evening out the two engines' time per block as their cost
    models give it (`balance.cost_ns`: VectorE's max and sum, each after a wait; ScalarE's
    exps, and log_softmax's log)."""
    c, f32 = KernelBuilder({}), dtype("float32")
    P, per, d = k.P, k.per, k.d
    x = ap(c.tile("x", "sbuf", (P, per, d), k.xdt))
    e = c.tile("e", "sbuf", (P, per, d), f32)
    col, sums = ap(c.tile("c", "sbuf", (P, 1), f32)), c.tile("s", "sbuf", (P, per), f32)
    row = ap(x.name, slice(None), 0)
    with_sum = cost_ns(c, cfg, Activation, waits=False, func="exp", src=row, dst=row, bias=col,
                       reduce="add", reduce_dst=col)  # fmt: skip
    plain = cost_ns(c, cfg, Activation, waits=False, func="exp", src=row, dst=row, bias=col)
    log = cost_ns(c, cfg, Activation, func="log", src=ap(sums), dst=ap(sums)) if k.log else 0
    vmax = cost_ns(c, cfg, TensorReduce, alu="max", src=x,
                   dst=ap(c.tile("m", "sbuf", (P, per), k.xdt)))  # fmt: skip

    def worst(js: int) -> float:
        v = vmax
        if js < per:
            rest, dst = ap(e, slice(None), slice(js, per)), ap(sums, slice(None), slice(js, per))
            v += cost_ns(c, cfg, TensorReduce, alu="add", src=rest, dst=dst)
        return max(js * with_sum + (per - js) * plain + log, v)

    return min(range(per + 1), key=lambda js: (worst(js), -js))
