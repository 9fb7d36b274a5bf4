"""`layer_norm` over few rows too long for SBUF (rows of 10^6): the columns cut between the two
cores of an LNC 2 logical core instead of the rows.

Cut by rows, each core of 16 MiB of fp32 rows of 10^6 (4 rows, 2 a core) loads the whole weight
and bias (8 MB) beside its 8 MB of x and 8 MB of out: 24 MB a core, 66 us of DMA against a
bound of 55 us. Cut by columns, each core takes every row's half of the columns and half of
the weight and bias: 20 MB a core. The halves are a row's first and last d / 2 columns, each
laid over k partitions (k dividing d / 2, at least FILL of them) in chunks of a contiguous
k * f_j columns (partition p of chunk j: f_j consecutive columns; the weight and bias alike).

Per core, its rows in GROUPS groups (LNC 1: one), in three phases:

1. load the core's half of every row (all of it stays in SBUF) and each partition's sums of
   x - c and (x - c)^2, c the row's first element (both cores load it: they agree on it), so
   a row of mean 10^4 keeps its digits: ScalarE shifts x in place as c - x with its sum (as
   `norm_ragged.first_shift`), the squares' sums ScalarE's too (`activation` with its add
   reduction) or, for a share of the first group's chunks, VectorE's (`bn_stats` of c - x:
   f (var + mean^2)); a unit's (a row's half) sums over its partitions (TensorE) and chunks
   (VectorE): its totals;
2. the cores exchange a group's totals through `out` (a lowering has no DRAM scratch, only the
   op's tensors): each stores its totals into the other core's columns of out, they meet at a
   `core_barrier` (as `reduce.Reduce.everything` does inside an op), each reads its own
   columns back before it stores its output there (a later generation of out, which the
   builder orders after the read). Both halves' totals are added in half order (the same
   values on either core), mean' and rstd per row, spread over the partitions (TensorE). A
   later group's exchange is emitted part way through the group before's output
   (EXCHANGE_AT), so the output's engines turn to it between their passes;
3. the output by chunks, then units (the first chunks need only the first chunk of the weight
   and bias, loaded behind x): (mean' - x') * w then * rstd + b (`scalar_tensor_tensor`s on
   VectorE or GpSimd, whichever is free sooner by their cost models), stored.

trn2 LNC 2, 16 MiB of fp32 rows of 10^6: 73.1 -> 63.4 us (2^19: 63.9 -> 62.9, 2^20: 70.3 ->
65.0). At LNC 1 one core takes both halves in the same instructions, so the values are the
same bit for bit; by columns only where x stays resident at LNC 1 too (x reloaded for the
output ran fp32 [8, 10^6] at LNC 1 196.7 -> 330.9 us; at LNC 2 117.7 -> 116.8), the weight and
bias loaded a chunk at a time as the output needs them where they do not fit beside x (fp32
[4, 10^6] at LNC 1: 115.3 -> 126.0 us; [2, 10^6] 72.1 -> 69.4). The 16-bit path (its totals
carried in out's dtype as hi + lo, 16 bits of them) is not chosen (DTYPES).
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import (
    Activation,
    BnAggr,
    BnStats,
    CoreBarrier,
    DmaCopy,
    Engine,
    Matmul,
    Memset,
    ScalarTensorTensor,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.balance import cost_ns, dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues

__all__ = ["by_columns", "lower_norm_columns"]

V, S, G = Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD
COLUMN_ROW = 1 << 19  # rows this long or longer (of the scan's widths, 10^6 alone) ...
ROWS_MOST = 64  # ... and this few: the weight and bias a core loads, cut by rows, weigh
FILL = 7 / 8  # a half's pieces fill this share of the partitions at least (10^6: 125)
CHUNK_BYTES = 4096  # a chunk's bytes a partition (a 500 KiB transfer over 125 partitions)
SHARE = 0.75  # what a core's resident x, the weight and the bias may take of a partition
OUT_BUFS = 6  # the output chunks' rotating tiles (4: 64.4 us, 10: 63.2)
STORE_QUEUES = 2  # (`_Columns.stores`)
AFFINE_BUFS = 4  # the weight's and bias' chunks in flight where they do not fit resident
GROUPS = 2  # groups of rows, each exchanged and output in turn: a group's output (VectorE and
# GpSimd) overlaps the next group's statistics (ScalarE) and exchange (fp32 rows of 10^6, 16 MiB,
# trn2 LNC 2: 1 group 66.9 us, 2 63.4, 4 75.8)
EXCHANGE_AT = (0.5, 0.75)  # ... a later group's sending and receiving this far through the
# group before's output chunks ((0.25, 0.5): 63.6 us, (0.5, 0.625): 66.5, (0.75, 0.875): 66.5)
DTYPES = ("float32",)  # x's and out's (bf16 rows of 10^6 ran 72.1 -> 107.6 us so: ScalarE's
# statistics, two passes over 8 rows' halves, 62 us; its values hold, tests/kernels/
# test_norm_columns.py)


def layout(cfg: ChipConfig, d: int) -> tuple[int, list[int]] | None:
    """(k, [f_j]): a half of d columns over k partitions in chunks of f_j columns a partition
    (about CHUNK_BYTES of fp32), or None when d / 2 has no divisor from FILL * 128 to 128."""
    P = cfg.core.sbuf.partitions
    if d % 2 or d < COLUMN_ROW:
        return None
    h = d // 2
    k = next((k for k in range(P, math.ceil(FILL * P) - 1, -1) if h % k == 0), None)
    if k is None:
        return None
    f = h // k
    n = -(-f * 4 // CHUNK_BYTES)
    cuts = [f * i // n for i in range(n + 1)]
    return k, [b - a for a, b in zip(cuts, cuts[1:])]


def by_columns(cfg: ChipConfig, op: str, tx, to, weight, bias) -> bool:
    """Whether a norm goes by columns (module doc): a layer_norm of rows of COLUMN_ROW or more,
    ROWS_MOST or fewer, one core's half of them fitting SBUF with the weight's and bias'
    halves, and the whole of them (LNC 1), on a chip whose cores can meet. By the shapes
    alone, so LNC 1 and 2 agree."""
    if op != "layer_norm" or not cfg.core.core_barrier or len(tx.shape) < 1:
        return False
    if tx.dtype != to.dtype or tx.dtype.name not in DTYPES:
        return False
    d, rows = tx.shape[-1], math.prod(tx.shape[:-1])
    lay = layout(cfg, d)
    if lay is None or rows > ROWS_MOST:
        return False
    f = sum(lay[1])
    affine = sum(t.dtype.itemsize for t in (weight, bias) if t is not None)
    room = cfg.core.sbuf.partition_bytes * SHARE
    half = rows * f * tx.dtype.itemsize
    return half + f * affine <= room and 2 * half <= room


def lower_norm_columns(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, weight, bias,
                       eps: float) -> float:  # fmt: skip
    """out = layer_norm(x) by columns (module doc): this core's half (LNC 2) or both (LNC 1)."""
    _Columns(b, cfg, x, out, weight, bias, eps).run()
    return 0.0


class _Columns:
    """One layer_norm by columns: its tiles and phases (module doc)."""

    def __init__(self, b, cfg, x, out, weight, bias, eps):
        self.b, self.cfg, self.x, self.out, self.eps = b, cfg, x, out, eps
        self.weight, self.bias = weight, bias
        tx = b.tensors[x]
        self.dt = tx.dtype
        self.f32 = dtype("float32")
        self.d = tx.shape[-1]
        self.R = math.prod(tx.shape[:-1])
        self.k, self.fs = layout(cfg, self.d)
        self.f = sum(self.fs)
        self.H = self.d // 2
        self.starts = [sum(self.fs[:j]) for j in range(len(self.fs))]
        c, n = b.part
        self.two = n == 2
        self.halves = [c] if self.two else [0, 1]
        self.units = [(r, h) for h in self.halves for r in range(self.R)]
        self.shift = self.dt.itemsize == 4  # fp32 x shifted in place (c - x)
        # a 16-bit out carries a total as hi + lo
        self.pieces = 1 if b.tensors[out].dtype.itemsize == 4 else 2
        affine = sum(b.tensors[t].dtype.itemsize for t in (weight, bias) if t is not None)
        room = cfg.core.sbuf.partition_bytes * SHARE
        xs = self.f * len(self.units) * self.dt.itemsize  # (x resident: `by_columns`)
        # the weight and bias (else a chunk's loaded as the output needs it: LNC 1)
        self.resident_affine = xs + self.f * len(self.halves) * affine <= room
        qs = Queues(cfg)
        q = dma_queues(cfg, max(self.fs) * self.dt.itemsize)  # (large chunks: few queues, the
        # first arriving first)
        self.loads, self.mail_load = qs.loads(0, 3 / 4).take(q), qs.loads(3 / 4, 1)
        # (stores on STORE_QUEUES: one held each store's setup behind the last, 63.4 -> 64.9 us)
        self.stores, self.mail_store = qs.stores(0, 3 / 4).take(STORE_QUEUES), qs.stores(3 / 4, 1)
        self.nl = self.ns = self.no = 0
        self.busy = {V: 0.0, G: 0.0}
        self.rows: dict = {}
        self.loaded: set = set()  # (half, chunk) of the weight and bias loaded

    # -- tiles ---------------------------------------------------------------------------------

    def tile(self, key: str, shape, dt=None) -> str:
        return self.b.scratch_tile(f"ncol.{key}", key.split(".")[0], shape, dt or self.f32)

    def col(self, key: str, w: int):
        return ap(self.tile(key, (self.k, w)))

    def hbm(self, name: str, r, h: int, j: int):
        """Chunk j of half h of row r of `name` (r None: a vector), as k * f_j columns."""
        lo = h * self.H + self.k * self.starts[j]
        cols = slice(lo, lo + self.k * self.fs[j])
        return ap(name, *([] if r is None else self._index(r)), cols)

    def _index(self, r: int) -> list[int]:
        shape = self.b.tensors[self.x].shape[:-1]
        out = []
        for n in reversed(shape):
            out.append(r % n)
            r //= n
        return out[::-1]

    def load(self, src, dst, queue=None) -> None:
        if queue is None:
            queue = self.loads[self.nl]
            self.nl += 1
        self.b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=queue)

    def x_tile(self, u: int, j: int) -> str:
        """Unit u's chunk j of x: a tile of its own (x resident)."""
        return self.tile(f"x.{u * len(self.fs) + j}", (self.k, max(self.fs)), self.dt)

    # -- phases --------------------------------------------------------------------------------

    def run(self) -> None:
        b, k, R = self.b, self.k, self.R
        ones_k = self.col("ones_k", 1)  # [k, 1]: a column's sum over the partitions
        ones_1 = ap(self.tile("ones_1", (1, k)))  # [1, k]: a row spread over the partitions
        b.emit(Memset, [], [ones_k], dst=ones_k, value=1.0, engine=G)
        b.emit(Memset, [], [ones_1], dst=ones_1, value=1.0, engine=G)
        # c, each row's first element, over the partitions (fp32: exact)
        c_row = ap(self.tile("c_row", (1, R)))
        first = ap(self.x, *([slice(None)] * (len(b.tensors[self.x].shape) - 1)), slice(0, 1))
        self.load(first, c_row, self.mail_load[0])
        ps = ap(b.psum("ncol_ps", (k, R), self.f32), slice(0, k), slice(0, R))
        b.emit(Matmul, [ones_1, c_row], [ps], stationary=ones_1, moving=c_row, dst=ps)
        cs = self.col("c", R)
        if self.shift:
            b.emit(TensorCopy, [ps], [cs], src=ps, dst=cs)
        else:  # -c, ScalarE's bias
            b.emit(TensorScalar, [ps], [cs], src=ps, dst=cs, op0="multiply", operand0=-1.0)
        self.c_row, self.cs = c_row, cs
        nch = len(self.fs)
        # (one group at LNC 1: nothing to exchange; the rows whose squares' sums VectorE
        # shares, `scalar_squares`, are LNC 2's first group's at either LNC: the same values)
        self.vrows = range(R // min(R, GROUPS))
        n = min(R, GROUPS) if self.two else 1
        groups = []
        for g in range(n):
            rows = range(R * g // n, R * (g + 1) // n)
            units = [(u, r, h) for u, (r, h) in enumerate(self.units) if r in rows]
            groups.append((g, list(rows), units))
        # the first group's squares' sums shared with VectorE (`scalar_squares`), the later
        # groups' ScalarE's alone (VectorE by then busy with the output)
        self.jb = self.scalar_squares() if self.shift else nch
        for g, _, units in groups:
            parts = ap(self.tile(f"parts.{g}", (k, len(units), 2, nch)))
            for i, (u, r, h) in enumerate(units):
                for j in range(nch):
                    self.stats(i, u, r, h, j, parts)
                if r in self.vrows and self.jb < nch:
                    self.vector_squares(parts, i, u)
        if self.resident_affine:
            self.affine()  # (behind x: the first output waits for the first exchange anyway)
        # each later group's exchange sent and received part way through the group before's
        # output chunks, so VectorE (in order) takes its steps between that output's passes
        sts = {0: self.receive(self.send(groups[0]))}
        for g, rows, units in groups:
            # (by chunks, then units: the first output chunks need only the first chunk of the
            # weight and bias, which load behind x)
            todo = [(u, r, h, j) for j in range(nch) for u, r, h in units]
            last = g + 1 == len(groups)
            at = (-1, -1) if last else tuple(round(len(todo) * a) for a in EXCHANGE_AT)
            sent = None
            for n, (u, r, h, j) in enumerate(todo):
                if n == at[0]:
                    sent = self.send(groups[g + 1])
                if n == at[1] and sent:
                    sts[g + 1] = self.receive(sent)
                if not self.resident_affine and (h, j) not in self.loaded:
                    self.affine_chunk(h, j)
                self.output(u, r, h, j, sts[g], r - rows[0])
            if not last and g + 1 not in sts:  # (few chunks: after them)
                sts[g + 1] = self.receive(sent or self.send(groups[g + 1]))

    def stats(self, i: int, u: int, r: int, h: int, j: int, parts) -> None:
        """Chunk j of unit u (its group's i-th): load; its partitions' sums of x - c and
        (x - c)^2 (fp32: x shifted in place as c - x) into `parts` ((i, 0, j) and (i, 1, j));
        the rows `vrows`' chunks jb on: the squares' by VectorE (`vector_stats`)."""
        b, k, f = self.b, self.k, self.fs[j]
        t = ap(self.x_tile(u, j), slice(0, k), slice(0, f))
        self.load(self.hbm(self.x, r, h, j), t)
        c1, c2 = (ap(parts.name, slice(0, k), i, s, slice(j, j + 1)) for s in (0, 1))
        c = ap(self.cs.name, slice(0, k), slice(r, r + 1))
        if self.shift:
            b.emit(Activation, [t, c], [t, c1], func="copy", src=t, dst=t, scale=-1.0, bias=c,
                   reduce="add", reduce_dst=c1)  # fmt: skip
            if r in self.vrows and j >= self.jb:
                self.vector_stats(u, j)
                return
            junk = ap(self.tile("junk", (k, max(self.fs)), dtype("bfloat16")), slice(0, k),
                      slice(0, f))  # fmt: skip
            b.emit(Activation, [t], [junk, c2], func="square", src=t, dst=junk, reduce="add",
                   reduce_dst=c2)  # fmt: skip
            return
        junk = ap(self.tile("junk", (k, max(self.fs)), dtype("bfloat16")), slice(0, k),
                  slice(0, f))  # fmt: skip
        b.emit(Activation, [t, c], [junk, c1], func="copy", src=t, dst=junk, bias=c,
               reduce="add", reduce_dst=c1)  # fmt: skip
        b.emit(Activation, [t, c], [junk, c2], func="square", src=t, dst=junk, bias=c,
               reduce="add", reduce_dst=c2)  # fmt: skip

    def vector_stats(self, u: int, j: int) -> None:
        """VectorE's (mean, var) of chunk j of unit u's x': `bn_stats` and `bn_aggr` (its
        squares' sum, `vector_squares`)."""
        b, k, f, jb = self.b, self.k, self.fs[j], self.jb
        t = ap(self.x_tile(u, j), slice(0, k), slice(0, f))
        fmax = self.cfg.core.vector.bn_stats_max_free
        n = -(-f // fmax)
        bn = ap(self.tile(f"bn.{u}.{j}", (k, 6 * n)))
        for m in range(n):
            lo, hi = f * m // n, f * (m + 1) // n
            src = ap(t.name, slice(0, k), slice(lo, hi))
            dst = ap(bn.name, slice(0, k), slice(6 * m, 6 * m + 6))
            b.emit(BnStats, [src], [dst], src=src, dst=dst)
        mv = ap(self.tile(f"mv.{u}", (k, len(self.fs) - jb, 2)), slice(0, k),
                slice(j - jb, j - jb + 1))  # fmt: skip
        b.emit(BnAggr, [bn], [mv], src=bn, dst=mv)

    def scalar_squares(self) -> int:
        """The chunks of a unit of the rows `vrows` (its first ones) whose squares' sums
        ScalarE takes (fp32), the others' VectorE's (`bn_stats` of x'): ScalarE's passes and
        VectorE's even (by their cost models; rows of 10^6, chunks of [125, 1000]: 1 of 4)."""
        b, k, nch = self.b, self.k, len(self.fs)
        f = max(self.fs)
        t = ap(self.tile("cost_x", (k, f)))
        c = ap(self.tile("cost_c", (k, 1)))
        s = cost_ns(b, self.cfg, Activation, func="square", src=t, dst=t, reduce="add",
                    reduce_dst=c)  # fmt: skip
        fmax = self.cfg.core.vector.bn_stats_max_free
        half = ap(self.tile("cost_x", (k, f)), slice(0, k), slice(0, min(f, fmax)))
        bn = ap(self.tile("cost_bn", (k, 6)))
        v = -(-f // fmax) * cost_ns(b, self.cfg, BnStats, src=half, dst=bn)
        return min(range(nch + 1), key=lambda j: max(nch * s + j * s, (nch - j) * v))

    def vector_squares(self, parts, i: int, u: int) -> None:
        """The squares' sums of unit u's (its group's i-th) VectorE chunks: f_j (var + mean^2)
        of each chunk's x', into `parts` ((i, 1, j) of chunks jb on)."""
        b, k, nch, jb = self.b, self.k, len(self.fs), self.jb
        mv = self.tile(f"mv.{u}", (k, nch - jb, 2))
        mean = ap(mv, slice(0, k), slice(0, nch - jb), slice(0, 1))
        var = ap(mv, slice(0, k), slice(0, nch - jb), slice(1, 2))
        sq = ap(self.tile("msq", (k, nch - jb, 1)))
        b.emit(TensorTensor, [mean, mean], [sq], alu="multiply", src0=mean, src1=mean, dst=sq)
        b.emit(TensorTensor, [sq, var], [sq], alu="add", src0=sq, src1=var, dst=sq)
        if len(set(self.fs[jb:])) == 1:  # (chunks of one width: one instruction)
            dst = ap(parts.name, slice(0, k), i, slice(1, 2), slice(jb, nch))
            b.emit(TensorScalar, [sq], [dst], src=sq, dst=dst, op0="multiply",
                   operand0=float(self.fs[jb]))  # fmt: skip
            return
        for j in range(jb, nch):
            src = ap(sq.name, slice(0, k), slice(j - jb, j - jb + 1))
            dst = ap(parts.name, slice(0, k), i, slice(1, 2), slice(j, j + 1))
            b.emit(TensorScalar, [src], [dst], src=src, dst=dst, op0="multiply",
                   operand0=float(self.fs[j]))  # fmt: skip

    def totals(self, parts, U: int, g: int):
        """[1, U, 2]: each of a group's U units' S1 and S2 (over its partitions on TensorE, its
        chunks on VectorE)."""
        b, k, nch = self.b, self.k, len(self.fs)
        ones_k = ap(self.tile("ones_k", (k, 1)))
        most = min(self.cfg.core.psum.bank_bytes // 4, self.cfg.core.tensor.moving_free_max)
        step = max(1, most // (2 * nch))  # units a matmul (a PSUM bank, a moving size)
        ps = b.psum("ncol_tot", (1, min(step, U), 2, nch), self.f32)
        t3 = (
            ap(ps, slice(0, 1), slice(0, U))
            if U <= step
            else ap(self.tile(f"tot3.{g}", (1, U, 2, nch)))
        )
        for u0 in range(0, U, step):  # (reduced from PSUM at once where one matmul takes all)
            u1 = min(U, u0 + step)
            src = ap(parts.name, slice(0, k), slice(u0, u1))
            dst = ap(ps, slice(0, 1), slice(0, u1 - u0))
            b.emit(Matmul, [ones_k, src], [dst], stationary=ones_k, moving=src, dst=dst)
            if U > step:
                got = ap(t3.name, slice(0, 1), slice(u0, u1))
                b.emit(TensorCopy, [dst], [got], src=dst, dst=got)
        tot = ap(self.tile(f"tot.{g}", (1, U, 2)))
        b.emit(TensorReduce, [t3], [tot], alu="add", src=t3, dst=tot)
        return ap(tot.name, slice(0, 1), slice(0, U), slice(0, 2))

    def mail(self, tot, n: int, g: int):
        """`tot` ([1, n] fp32) as out's dtype: [1, n, pieces] (hi, lo for 16-bit)."""
        b, odt = self.b, self.b.tensors[self.out].dtype
        m = ap(self.tile(f"mail.{g}", (1, n, self.pieces), odt))
        hi = ap(m.name, slice(0, 1), slice(0, n), slice(0, 1))
        b.emit(TensorCopy, [tot], [hi], src=tot, dst=hi)
        if self.pieces > 1:
            lo = ap(m.name, slice(0, 1), slice(0, n), slice(1, 2))
            b.emit(TensorTensor, [tot, hi], [lo], alu="subtract", src0=tot, src1=hi, dst=lo)
        return m

    def unmail(self, m, n: int, dst) -> None:
        """dst ([1, n] fp32) = the sum of m's pieces (fp32: m, the totals)."""
        b = self.b
        if self.pieces == 1:
            b.emit(TensorCopy, [m], [dst], src=m, dst=dst)
            return
        hi = ap(m.name, slice(0, 1), slice(0, n), slice(0, 1))
        lo = ap(m.name, slice(0, 1), slice(0, n), slice(1, 2))
        b.emit(TensorTensor, [hi, lo], [dst], alu="add", src0=hi, src1=lo, dst=dst)

    def send(self, group) -> tuple:
        """A group's totals (`totals`); LNC 2: each core's stored into the other's columns of
        out (module doc: a row's in the first columns of its half), the cores' meeting, and
        the other's read back. What `receive` takes."""
        g, rows, units = group
        b, R = self.b, len(rows)
        parts = ap(self.tile(f"parts.{g}", (self.k, len(units), 2, len(self.fs))))
        tot = self.totals(parts, len(units), g)
        n = len(units) * 2
        m = tot if self.pieces == 1 else self.mail(tot, n, g)
        if not self.two:
            return group, m, None
        c, w = self.halves[0], 2 * self.pieces
        if self.pieces == 1:  # (fp32: the totals themselves, the other's straight into both)
            got = self.tile(f"both.{g}", (1, 2, R * 2))
            mine = lambda i, j: ap(tot.name, slice(0, 1), slice(i, j))  # noqa: E731
            theirs = lambda i, j: ap(got, slice(0, 1), slice(1 - c, 2 - c),  # noqa: E731
                                     slice(2 * i, 2 * j))  # fmt: skip
        else:
            got = self.tile(f"got.{g}", (1, n, self.pieces), b.tensors[self.out].dtype)
            mine = lambda i, j: ap(m.name, slice(0, 1), slice(2 * i, 2 * j))  # noqa: E731
            theirs = lambda i, j: ap(got, slice(0, 1), slice(2 * i, 2 * j))  # noqa: E731
        for i, j, hbm in self._runs(rows, (1 - c) * self.H, w):
            src = mine(i, j)
            b.emit(DmaCopy, [src], [hbm], src=src, dst=hbm, queue=self.mail_store.next())
        b.barrier()  # the stores before the meeting, the reads after it
        d = ap(self.out)
        # (the first group's on GpSimd, idle until the output; the later ones' on ScalarE, idle
        # by then)
        b.emit(CoreBarrier, [d], [d], data=d, engine=S if g else G)
        b.barrier()
        for i, j, hbm in self._runs(rows, c * self.H, w):
            self.load(hbm, theirs(i, j), self.mail_load.next())
        b.barrier()  # the output's stores after the reads
        return group, m, ap(got)

    def receive(self, sent) -> str:
        """[k, len(rows) * 2]: a group's rows' statistics (`row_stats`) from both halves'
        totals ([1, 2, rows * 2]: half, row, S1 / S2), each through out's dtype, the halves
        added in half order (the same values on either core and at LNC 1)."""
        (g, rows, units), m, got = sent
        R = len(rows)
        n = len(units) * 2
        both = self.tile(f"both.{g}", (1, 2, R * 2))
        if not self.two:
            self.unmail(m, n, ap(both))
            return self.row_stats(both, rows, g)
        c = self.halves[0]
        own = ap(both, slice(0, 1), slice(c, c + 1), slice(0, R * 2))
        self.unmail(m, n, own)
        if self.pieces > 1:
            self.unmail(got, n, ap(both, slice(0, 1), slice(1 - c, 2 - c), slice(0, R * 2)))
        return self.row_stats(both, rows, g)

    def _runs(self, rows: list[int], lo: int, w: int) -> list:
        """[(i, j, out's w columns from lo of the group's rows i..j)]: a run of rows under one
        index of the leading dims a transfer (a 2D x: one)."""
        runs, i = [], 0
        while i < len(rows):
            head, last = self._index(rows[i])[:-1], self._index(rows[i])[-1]
            j = i + 1
            while j < len(rows) and self._index(rows[j])[:-1] == head:
                j += 1
            runs.append((i, j, ap(self.out, *head, slice(last, last + j - i), slice(lo, lo + w))))
            i = j
        return runs

    def row_stats(self, both, rows: list[int], g: int) -> str:
        """[k, len(rows) * 2]: each row's mean (fp32: mean' of c - x) and rstd over the
        partitions."""
        b, R, k = self.b, len(rows), self.k
        h0 = ap(both, slice(0, 1), slice(0, 1), slice(0, R * 2))
        h1 = ap(both, slice(0, 1), slice(1, 2), slice(0, R * 2))
        s = ap(self.tile(f"s.{g}", (1, R, 2)))
        b.emit(TensorTensor, [h0, h1], [s], alu="add", src0=h0, src1=h1, dst=s)
        mm = ap(self.tile(f"mm.{g}", (1, R, 2)))  # mean', E[x'^2]
        b.emit(TensorScalar, [s], [mm], src=s, dst=mm, op0="multiply", operand0=1.0 / self.d)
        mean = ap(mm.name, slice(0, 1), slice(0, R), slice(0, 1))
        ms = ap(mm.name, slice(0, 1), slice(0, R), slice(1, 2))
        res = self.tile(f"res.{g}", (1, R, 2))  # mean (or mean'), rstd
        rmean = ap(res, slice(0, 1), slice(0, R), slice(0, 1))
        rs = ap(res, slice(0, 1), slice(0, R), slice(1, 2))
        sq = ap(self.tile(f"sq.{g}", (1, R, 1)))
        b.emit(TensorTensor, [mean, mean], [sq], alu="multiply", src0=mean, src1=mean, dst=sq)
        var = ap(self.tile(f"var.{g}", (1, R, 1)))
        b.emit(TensorTensor, [ms, sq], [var], alu="subtract", src0=ms, src1=sq, dst=var)
        b.emit(TensorScalar, [var], [rs], src=var, dst=rs, op0="add", operand0=self.eps,
               op1="pow", operand1=-0.5)  # fmt: skip
        if self.shift:
            b.emit(TensorCopy, [mean], [rmean], src=mean, dst=rmean)
        else:  # the full mean, c + mean'
            c = ap(self.c_row.name, slice(0, 1), slice(rows[0], rows[-1] + 1))
            b.emit(TensorTensor, [mean, c], [rmean], alu="add", src0=mean, src1=c, dst=rmean)
        ones_1 = ap(self.tile("ones_1", (1, k)))
        flat = ap(res, slice(0, 1), slice(0, R), slice(0, 2))
        ps = ap(b.psum("ncol_st", (k, self.R * 2), self.f32), slice(0, k), slice(0, R * 2))
        b.emit(Matmul, [ones_1, flat], [ps], stationary=ones_1, moving=flat, dst=ps)
        st = self.tile(f"st.{g}", (k, R * 2))
        b.emit(TensorCopy, [ps], [ap(st)], src=ps, dst=ap(st))
        return st

    def affine(self) -> None:
        """The weight's and bias' halves in the chunks' layout, a tile a chunk, in the order
        the output takes them (a chunk's weight, then its bias; all the weight, then all the
        bias: 63.4 -> 65.3 us)."""
        for h in self.halves:
            for j in range(len(self.fs)):
                self.affine_chunk(h, j)

    def affine_chunk(self, h: int, j: int) -> None:
        """Chunk j of the weight's and bias' half h: a tile of its own when they are resident,
        else one of AFFINE_BUFS rotating ones, loaded as the output comes to it (LNC 1)."""
        b, k, f = self.b, self.k, self.fs[j]
        n = f"{h}.{j}" if self.resident_affine else str(len(self.loaded) % AFFINE_BUFS)
        for v in (self.weight, self.bias):
            if v is not None:
                t = ap(self.tile(f"{v}.{n}", (k, max(self.fs)), b.tensors[v].dtype), slice(0, k),
                       slice(0, f))  # fmt: skip
                self.load(self.hbm(v, None, h, j), t)
                self.rows[v, h, j] = t
        self.loaded.add((h, j))

    def output(self, u: int, r: int, h: int, j: int, st: str, i: int) -> None:
        """Chunk j of unit u: (mean' - x') * w (16-bit: (x - mean) * w), then * rstd + b, on
        VectorE or GpSimd (whichever is free sooner), stored."""
        b, k, f = self.b, self.k, self.fs[j]
        t = ap(self.x_tile(u, j), slice(0, k), slice(0, f))
        o = ap(self.tile(f"o.{self.no % OUT_BUFS}", (k, max(self.fs)), b.tensors[self.out].dtype),
               slice(0, k), slice(0, f))  # fmt: skip
        self.no += 1
        mean = ap(st, slice(0, k), slice(2 * i, 2 * i + 1))  # (row r, its group's i-th)
        rs = ap(st, slice(0, k), slice(2 * i + 1, 2 * i + 2))
        w, bias = (self.rows.get((v, h, j)) for v in (self.weight, self.bias))
        neg = self.shift
        steps = []
        if w is not None:
            steps.append((ScalarTensorTensor, [t, mean, w], [o],
                          dict(data=t, op0="subtract", operand0=mean, reverse0=neg,
                               op1="multiply", operand1=w, dst=o)))  # fmt: skip
            if bias is not None:
                steps.append((ScalarTensorTensor, [o, rs, bias], [o],
                              dict(data=o, op0="multiply", operand0=rs, op1="add",
                                   operand1=bias, dst=o)))  # fmt: skip
            else:
                steps.append((TensorScalar, [o, rs], [o],
                              dict(src=o, dst=o, op0="multiply", operand0=rs)))  # fmt: skip
        else:
            steps.append((TensorScalar, [t, mean, rs], [o],
                          dict(src=t, dst=o, op0="subtract", operand0=mean, reverse0=neg,
                               op1="multiply", operand1=rs)))  # fmt: skip
            if bias is not None:
                steps.append((TensorTensor, [o, bias], [o],
                              dict(alu="add", src0=o, src1=bias, dst=o)))  # fmt: skip
        eng = min(
            self.busy,
            key=lambda e: (
                self.busy[e]
                + sum(cost_ns(b, self.cfg, cls, engine=e, **fl) for cls, _, _, fl in steps)
            ),
        )
        for cls, reads, writes, fl in steps:
            self.busy[eng] += cost_ns(b, self.cfg, cls, engine=eng, **fl)
            b.emit(cls, reads, writes, engine=eng, **fl)
        dst = self.hbm(self.out, r, h, j)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=self.stores[self.ns])
        self.ns += 1
