"""`argmax` over the last dim by chunk maxima and a gather: one pass over x instead of four.

A tile is [p, L]: partition q holds L consecutive elements of one row (a whole row's column
span in `rows` mode, k = 1; a piece of it over k partitions in `pieces` mode, `row_pieces`), at
offset off_q in its row. Per tile:
- the maxima of its chunks of C elements (VectorE, one `tensor_reduce` over the innermost axis
  of [p, L / C, C], in x's dtype when it is 16-bit: exact, at two elements a cycle): the only
  pass over the whole tile;
- the partition's max m (ScalarE's max reduction of the chunk maxima) and its first chunk c
  whose max is m: (cm != m) x BIG + chunk index (GpSimd), its minimum (ScalarE, the max of
  the negation);
- that chunk gathered again from HBM (`dma_copy` with `indices`: q L / C + c, rows of C of
  the tile's region of x), and the first index l in it equal to m as above, on C elements;
- the partition's index off_q + C c + l.
Rows that no even piece layout fits (50257, GPT-2's vocab) go in k pieces of f = d // k and
a column of the last r = d - k f elements, one on each of the row's first r partitions
(`remainder_layout`): at the group's end each partition's (m, index) takes its remainder
element's where that is strictly larger (`with_rest`), before the pieces meet.
A group (128 rows in `rows` mode, g rows of k pieces, or one row of t segments) keeps each
partition's (m, index) per tile in columns; at its end each partition takes the max over its
tiles and the first index where it is reached, the k pieces of a row meet on TensorE
(`row_pieces.Groups`: the row's max, each piece's index where its max is the row's, else BIG,
and the row's smallest), and the indices are cast and stored. Ties give the first index, as
PyTorch. The tiles are staggered (`reduce.staggered`): a tile's gather and search run while the
next tiles load and reduce."""

from __future__ import annotations

import math
from dataclasses import dataclass

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import (
    Activation,
    DmaCopy,
    Engine,
    Iota,
    Matmul,
    Memset,
    Select,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    Transpose,
)
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks
from trnsim.kernels.queues import Queues
from trnsim.kernels.ragged import RaggedLayout
from trnsim.kernels.reduce import _runs, _unravel, staggered
from trnsim.kernels.row_pieces import Groups, PieceLayout
from trnsim.kernels.row_pieces import layout as pieces_layout
from trnsim.kernels.schedule import Scheduled

__all__ = ["lower_argmax_chunks", "chunk", "piece_layout", "remainder_layout"]

G = Engine.GPSIMD
TILE_BYTES = 8192  # a row's tile's bytes a partition (1 MiB tiles: several a core, so loads
# overlap; 4 KiB gained a point at 16 MiB but lost 11 on trn3's [8192, 8192] bench, twice the
# tiles' chains on GpSimd and ScalarE)
PIECE_BYTES = 4096  # a piece tile's bytes a partition, and a segment's past 128 pieces (512
# KiB tiles: many a core, so the last one's pass and chain after its load are short; 8 KiB
# ran 1-3 points slower, 2 KiB 20)
REST_BYTES = 8192  # a piece's bytes at most with a remainder column (`remainder_layout`;
# 4 KiB, as PIECE_BYTES: fp32 rows of 50257 44.4 us, in 64 pieces; 8 KiB: 36.4, in 32; 16 KiB
# 39.8)
BUFS = 5  # x tiles resident
BATCH = 32  # groups of pieces whose rows meet on TensorE together
LAG = 2  # tiles between a tile's chunk maxima and its gather's search


def chunk(n: int) -> int | None:
    """C: the chunk length for a partition's n elements (about sqrt(n), a power of two of at
    least 32 dividing n; else the divisor of n of at least 32 nearest sqrt(n): Llama 3's vocab
    of 128256 is 128 pieces of 1002 = 6 x 167), or None when n has none."""
    c = 1 << max(5, (n.bit_length() - 1) // 2)
    while c >= 32 and n % c:
        c //= 2
    if c >= 32 and n // c >= 2:
        return c
    odd = [c for c in range(32, n // 2 + 1) if n % c == 0]
    return min(odd, key=lambda c: abs(c * c - n)) if odd else None


def piece_layout(d: int, itemsize: int, partitions: int) -> PieceLayout | None:
    """Rows of d in pieces (or segments) of PIECE_BYTES a partition."""
    lay = pieces_layout(d, max(1, PIECE_BYTES // itemsize), partitions)
    return lay if lay is not None and chunk(lay.f) is not None else None


def remainder_layout(d: int, itemsize: int, partitions: int) -> PieceLayout | None:
    """Rows of d that `piece_layout` refuses (d not a multiple of `partitions`, or 128 x a
    prime) as k pieces of f = d // k, the r = d - k f < k last elements a column of their own
    (element k f + i on the row's piece i): the layout of the main part, k f. k a power of two,
    the fewest whose f fits REST_BYTES and has a chunk length of at most a quarter of f (50257
    fp32: 32 x 1570 + 17, chunks of 157), else the most below `partitions` whose f has one
    (151936 = 128 x 1187, prime: 127 x 1196 + 44, a tile one row on 127 partitions); None
    where none has."""
    most = max(1, REST_BYTES // itemsize)

    def fits(f: int) -> bool:
        return f <= most and chunk(f) is not None and f // chunk(f) >= 4

    ks = [k for k in range(1, partitions + 1) if fits(d // k)]
    pow2 = [k for k in ks if k & (k - 1) == 0 and 2 * k <= partitions]
    if not ks:
        return None
    # the fewest power of two pieces where a tile holds two rows or more, else the most rows
    # a tile and partitions filled (bf16 151936 in 64 x 2374 has chunks of 1187: 41 x 3705)
    k = pow2[0] if pow2 else max(ks, key=lambda k: (partitions // k, partitions // k * k))
    return PieceLayout(k * (d // k), d // k, k, partitions // k, 1)


@dataclass(frozen=True)
class _Tile:
    group: int  # its group's number
    s: int  # its segment in the group (columns of the group's tiles)
    last: bool  # the group's last tile
    src: object  # x's region (Ap)
    p: int  # partitions


@dataclass(frozen=True)
class _Group:
    rows: int  # rows
    r0: int  # flat row of x (and element of out) of the first


def lower_argmax_chunks(b: KernelBuilder, cfg: ChipConfig, x: str, out: str,
                        rows: tuple[int, int], lay: PieceLayout | None) -> None:  # fmt: skip
    """out = argmax(x, -1) over rows [lo, hi) of x (this core's): one row a partition
    (`lay` None) or in pieces (`lay`) (module doc)."""
    if rows[0] >= rows[1]:
        return
    k = _Chunks(b, cfg, x, out, lay)
    with Scheduled(b, cfg):
        staggered(enumerate(k.tiles(rows)), k.first, k.second, LAG)
        if k.groups is not None:
            k.flush()
    if k.groups is not None:
        k.groups.done()


class _Chunks:
    def __init__(self, b: KernelBuilder, cfg: ChipConfig, x: str, out: str, lay):
        self.b, self.cfg, self.x, self.out, self.lay = b, cfg, x, out, lay
        tx = b.tensors[x]
        self.P, self.f32, self.xdt = cfg.core.sbuf.partitions, dtype("float32"), tx.dtype
        self.low = tx.dtype if tx.dtype.itemsize == 2 and tx.dtype.is_float else self.f32
        self.d = tx.shape[-1]
        # the remainder column (`remainder_layout`): elements k f .. d of each row
        self.r = self.d - lay.k * lay.f if lay is not None and lay.t == 1 else 0
        if lay is None:  # a row a partition, its columns in T tiles of L
            most = max(1, TILE_BYTES // tx.dtype.itemsize)
            t = max(1, -(-self.d // most))
            while self.d % t or chunk(self.d // t) is None:
                t += 1
            self.L, self.T, self.kk = self.d // t, t, 1
        else:
            self.L, self.T, self.kk = lay.f, lay.t, min(lay.k, self.P)
        self.C = chunk(self.L)
        self.nch = self.L // self.C
        self.big = float(2 ** math.ceil(math.log2(2 * self.d + 2)))  # above any index
        self.groups = Groups(b, cfg, lay.k) if lay is not None and self.kk > 1 else None
        qs, q = Queues(cfg), dma_queues(cfg, self.L * tx.dtype.itemsize)
        # large tiles one after another on few queues (the first arrives first), the gathers
        # on queues of their own (each waits for its tile's chunk maxima)
        self.loads, self.gathers = qs.loads().take(q), qs.loads(1 / 2, 1)
        self.stores = qs.stores(0, 1 / 2)
        self.info: dict[int, _Group] = {}
        self.batch: list[_Group] = []  # pieces: groups whose rows meet together (`flush`)
        self.nb = 0  # batches flushed
        self.made = False

    # -- tiles ---------------------------------------------------------------------------------

    def tiles(self, rows: tuple[int, int]):
        """The tiles of rows [lo, hi), in order, each group's last marked."""
        tx, L, P = self.b.tensors[self.x], self.L, self.P
        dims = tuple(tx.shape[:-1])
        if self.lay is None or self.lay.t == 1:
            most = P if self.lay is None else self.lay.g
            spans = [(list(index) + [slice(None)] * (len(dims) - len(index)), nr)
                     for index, nr in row_blocks(tuple(tx.shape), most, rows)]  # fmt: skip
        else:
            spans = [(list(_unravel(r, dims)), 1) for r in range(*rows)]
        r0 = rows[0]
        for n, (index, nr) in enumerate(spans):
            self.info[n] = _Group(nr, r0)
            r0 += nr
            for s in range(self.T):
                if self.lay is None:
                    src, p = ap(self.x, *index, slice(s * L, (s + 1) * L)), nr
                elif self.lay.t == 1:
                    cols = slice(0, self.lay.k * L) if self.r else slice(None)
                    src, p = ap(self.x, *index, cols), nr * self.kk
                else:
                    seg = L * P
                    src, p = ap(self.x, *index, slice(s * seg, (s + 1) * seg)), P
                yield _Tile(n, s, s == self.T - 1, src, p)

    def tile(self, key: str, n: int, shape, dt=None, bufs: int = 3) -> str:
        return self.b.scratch_tile(f"amc.{key}{n % bufs}", key, shape, dt or self.f32)

    def consts(self) -> None:
        """The index columns: chunk and element iotas, p nch (the gather's rows), and the
        partitions' offsets in their rows (pieces)."""
        if self.made:
            return
        self.made = True
        b, P = self.b, self.P
        self.iota_n = self.b.scratch_tile(f"amc.in{self.nch}", "in", (P, self.nch), self.f32)
        self.iota_c = self.b.scratch_tile(f"amc.ic{self.C}", "ic", (P, self.C), self.f32)
        self.rowq = self.b.scratch_tile("amc.rq", "rq", (P, 1), self.f32)
        for t, n in ((self.iota_n, 0), (self.iota_c, 0)):
            b.emit(Iota, [], [ap(t)], dst=ap(t), start=n, step=1, partition_step=0)
        b.emit(Iota, [], [ap(self.rowq)], dst=ap(self.rowq), start=0, step=0,
               partition_step=self.nch)  # fmt: skip
        # each partition's offset in its row, at segment 0: (q mod kk) L = q L - sum_r E[r, q] r
        # kk L (pieces); 0 (rows)
        self.off = self.b.scratch_tile("amc.off", "off", (P, 1), self.f32)
        b.emit(Iota, [], [ap(self.off)], dst=ap(self.off), start=0, step=0,
               partition_step=self.L if self.kk > 1 else 0)  # fmt: skip
        if self.groups is not None and self.groups.g > 1:
            gr = self.groups
            base = b.scratch_tile("amc.base", "base", (gr.g, 1), self.f32)
            b.emit(Iota, [], [ap(base)], dst=ap(base), start=0, step=0,
                   partition_step=-self.kk * self.L)  # fmt: skip
            ps = ap(gr._ps((P, 1)))
            b.emit(Matmul, [ap(gr.e), ap(base)], [ps], stationary=ap(gr.e), moving=ap(base),
                   dst=ps)  # fmt: skip
            b.emit(TensorTensor, [ap(self.off), ps], [ap(self.off)], alu="add",
                   src0=ap(self.off), src1=ps, dst=ap(self.off))  # fmt: skip
        if self.r:  # the remainder column's indices: k f + (q mod kk) = k f + off / L
            self.ridx = self.b.scratch_tile("amc.ridx", "ridx", (P, 1), self.f32)
            ri = ap(self.ridx)
            b.emit(TensorScalar, [ap(self.off)], [ri], src=ap(self.off), dst=ri,
                   op0="multiply", operand0=1.0 / self.L, op1="add",
                   operand1=float(self.lay.k * self.L), engine=G)  # fmt: skip

    # -- a tile's two halves ----------------------------------------------------------------------

    def first(self, item):
        """Load tile n, its chunk maxima, the partition's max and first chunk, the gather."""
        n, t = item
        self.consts()
        b, P, p, C, nch = self.b, self.P, t.p, self.C, self.nch
        rr = slice(0, p)
        xt = self.tile("x", n, (P, nch, C), self.xdt, BUFS)
        xa = ap(xt, rr)
        b.emit(DmaCopy, [t.src], [xa], src=t.src, dst=xa, queue=self.loads[n])
        if self.r:
            self.load_rest(t, n)
        cm2 = ap(self.tile("cm", n, (P, nch), self.low), rr)
        b.emit(TensorReduce, [xa], [cm2], alu="max", src=xa, dst=cm2)
        m = self.col("m", t, n)
        junk = ap(self.tile("junk", 0, (P, max(nch, C)), dtype("bfloat16"), 1), rr,
                  slice(0, nch))  # fmt: skip
        self.reduce(cm2, m, junk, False)
        key = ap(self.tile("key", n, (P, nch)), rr)
        b.emit(TensorScalar, [cm2, m], [key], src=cm2, dst=key, op0="not_equal", operand0=m,
               op1="multiply", operand1=self.big, engine=G)  # fmt: skip
        io = ap(self.iota_n, rr)
        b.emit(TensorTensor, [key, io], [key], alu="add", src0=key, src1=io, dst=key, engine=G)
        nc = ap(self.tile("nc", n, (P, 1)), rr)  # -c
        self.reduce(key, nc, junk, True)
        pos = ap(self.tile("pos", n, (P, 1), dtype("int32")), rr)  # q nch + c
        rq = ap(self.rowq, rr)
        b.emit(TensorTensor, [rq, nc], [pos], alu="subtract", src0=rq, src1=nc, dst=pos,
               engine=G)  # fmt: skip
        gt = ap(self.tile("g", n, (P, C), self.xdt, LAG + 2), rr)
        b.emit(DmaCopy, [t.src, pos], [gt], src=t.src, dst=gt, indices=pos,
               queue=self.gathers[n])  # fmt: skip
        return nc, gt, m

    def load_rest(self, t: _Tile, n: int) -> None:
        """The tile's rows' remainders (`remainder_layout`) into a column (`with_rest` masks
        the partitions that have none)."""
        b, grp, kk = self.b, self.info[t.group], self.kk
        col = ap(self.tile("rest", n, (self.P, 1), self.xdt, BUFS), slice(0, t.p))
        dims = tuple(b.tensors[self.x].shape[:-1])
        for j in range(grp.rows):
            src = ap(self.x, *_unravel(grp.r0 + j, dims), slice(self.d - self.r, self.d))
            dst = ap(col.name, slice(j * kk, j * kk + self.r))
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.gathers[n * kk + j])

    def reduce(self, src, dst, junk, neg: bool) -> None:
        """dst = each partition's max of src (`neg`: minus its min): ScalarE's reduction of
        the copy (its elementwise results unread), or VectorE's where ScalarE reduces by add
        only (NC-v2)."""
        b = self.b
        if self.cfg.core.scalar.reduce_max:
            b.emit(Activation, [src], [junk, dst], func="copy", src=src, dst=junk,
                   scale=-1.0 if neg else 1.0, reduce="max", reduce_dst=dst)  # fmt: skip
            return
        b.emit(TensorReduce, [src], [dst], alu="min" if neg else "max", src=src, dst=dst)
        if neg:
            b.emit(TensorScalar, [dst], [dst], src=dst, dst=dst, op0="multiply",
                   operand0=-1.0, engine=G)  # fmt: skip

    def col(self, key: str, t: _Tile, n: int):
        """Column s of the group's per-tile `key` ([p, T])."""
        tl = self.tile(key, t.group, (self.P, self.T), bufs=LAG + 2)
        return ap(tl, slice(0, t.p), slice(t.s, t.s + 1))

    def second(self, item, got):
        """The first index of m in the gathered chunk, the partition's index in its row; at
        the group's last tile, the rows' indices stored."""
        n, t = item
        nc, gt, m = got
        b, P, C, p = self.b, self.P, self.C, t.p
        rr = slice(0, p)
        key = ap(self.tile("kl", n, (P, C)), rr)
        b.emit(TensorScalar, [gt, m], [key], src=gt, dst=key, op0="not_equal", operand0=m,
               op1="multiply", operand1=self.big, engine=G)  # fmt: skip
        io = ap(self.iota_c, rr)
        b.emit(TensorTensor, [key, io], [key], alu="add", src0=key, src1=io, dst=key, engine=G)
        junk = ap(self.tile("junk", 0, (P, max(self.nch, C)), dtype("bfloat16"), 1), rr,
                  slice(0, C))  # fmt: skip
        nl = ap(self.tile("nl", n, (P, 1)), rr)  # -l
        self.reduce(key, nl, junk, True)
        # index = off + s seg - C (-c) - (-l); seg = kk L (a segment's span of the row)
        i = self.col("i", t, n)
        off = ap(self.off, rr)
        b.emit(TensorScalar, [nc, off], [i], src=nc, dst=i, op0="multiply", operand0=-float(C),
               op1="add", operand1=off, engine=G)  # fmt: skip
        b.emit(TensorScalar, [i, nl], [i], src=i, dst=i, op0="subtract", operand0=nl,
               op1="add", operand1=float(t.s * self.kk * self.L), engine=G)  # fmt: skip
        if t.last:
            self.finish(t)

    def finish(self, t: _Tile) -> None:
        """The group's rows' indices: over its tiles per partition, then over a row's pieces."""
        b, P, p = self.b, self.P, t.p
        rr = slice(0, p)
        grp = self.info[t.group]
        ms = ap(self.tile("m", t.group, (P, self.T), bufs=LAG + 2), rr)
        ix = ap(self.tile("i", t.group, (P, self.T), bufs=LAG + 2), rr)
        m, i = ms, ix
        if self.T > 1:  # the partition's max over its tiles, the first index reaching it
            m = ap(self.tile("mp", t.group, (P, 1)), rr)
            junk = ap(self.tile("junkT", 0, (P, self.T), dtype("bfloat16"), 1), rr)
            self.reduce(ms, m, junk, False)
            key = ap(self.tile("kt", t.group, (P, self.T)), rr)
            b.emit(TensorScalar, [ms, m], [key], src=ms, dst=key, op0="not_equal", operand0=m,
                   op1="multiply", operand1=self.big * 2, engine=G)  # fmt: skip
            b.emit(TensorTensor, [key, ix], [key], alu="add", src0=key, src1=ix, dst=key,
                   engine=G)  # fmt: skip
            i = ap(self.tile("ip", t.group, (P, 1)), rr)
            self.reduce(key, i, junk, True)
            b.emit(TensorScalar, [i], [i], src=i, dst=i, op0="multiply", operand0=-1.0,
                   engine=G)  # fmt: skip
        if self.r:
            m, i = self.with_rest(t, m, i)
        to = b.tensors[self.out]
        if self.groups is None:  # a row a partition
            res = ap(self.tile("r", t.group, (P, 1), to.dtype), rr)
            b.emit(TensorCopy, [i], [res], src=i, dst=res, engine=Engine.SCALAR)
            self.store(res, grp, t.group, False)
            return
        # pieces: the partition's (max, index) into the batch's columns; the batch's rows
        # meet on TensorE together (`flush`), BATCH groups at a time or at the end
        j = len(self.batch)
        if j == 0:
            for key in ("bm", "bi"):
                col = ap(self.bcol(key))
                b.emit(Memset, [], [col], dst=col, value=0.0, engine=G)
        for key, src in (("bm", m), ("bi", i)):
            dst = ap(self.bcol(key), rr, slice(j, j + 1))
            b.emit(TensorCopy, [src], [dst], src=src, dst=dst, engine=G)
        self.batch.append(grp)
        if len(self.batch) == BATCH:
            self.flush()

    def with_rest(self, t: _Tile, m, i):
        """The partition's (max, index) with its remainder element: the remainder's where it is
        strictly larger (its index is past the row's main part: a tie keeps the first)."""
        b, P, rr = self.b, self.P, slice(0, t.p)
        rest = ap(self.tile("rest", t.group * self.T + t.s, (P, 1), self.xdt, BUFS), rr)
        rf = ap(self.tile("rf", t.group, (P, 1)), rr)  # -inf where no element: never wins
        ok = ap(RaggedLayout(self.d, 1, self.kk, P).valid(b), rr)
        b.emit(Select, [ok, rest], [rf], predicate=ok, on_true=rest, on_false=float("-inf"),
               dst=rf)  # fmt: skip
        gt = ap(self.tile("rgt", t.group, (P, 1)), rr)
        b.emit(TensorTensor, [rf, m], [gt], alu="greater", src0=rf, src1=m, dst=gt, engine=G)
        m2, i2 = (ap(self.tile(k, t.group, (P, 1)), rr) for k in ("rm", "ri"))
        b.emit(TensorTensor, [rf, m], [m2], alu="max", src0=rf, src1=m, dst=m2, engine=G)
        ri = ap(self.ridx, rr)
        b.emit(Select, [gt, ri, i], [i2], predicate=gt, on_true=ri, on_false=i, dst=i2)
        return m2, i2

    def bcol(self, key: str) -> str:
        return self.b.scratch_tile(f"amc.{key}{self.nb % 2}", key, (self.P, BATCH), self.f32)

    def flush(self) -> None:
        """The batch's rows' indices (pieces): each row's max over its pieces (`Groups`), each
        piece's index where its max is the row's (else BIG), each row's smallest; stored."""
        if not self.batch:
            return
        b, P, gr, c = self.b, self.P, self.groups, len(self.batch)
        kk, g = self.kk, gr.g
        pp = g * kk  # the partitions the rows fill (127 for rows in 127 pieces)
        m, i = (ap(self.bcol(key), slice(0, pp), slice(0, c)) for key in ("bm", "bi"))
        row_max = ap(self.tile("M", self.nb, (P, BATCH), bufs=2), slice(0, pp), slice(0, c))
        gr.maxes(m, pp, c, row_max)
        cand = ap(self.tile("cand", self.nb, (P, BATCH), bufs=2), slice(0, pp), slice(0, c))
        b.emit(TensorTensor, [m, row_max], [cand], alu="not_equal", src0=m, src1=row_max,
               dst=cand, engine=G)  # fmt: skip
        b.emit(TensorScalar, [cand], [cand], src=cand, dst=cand, op0="multiply",
               operand0=self.big * 2, engine=G)  # fmt: skip
        b.emit(TensorTensor, [cand, i], [cand], alu="add", src0=cand, src1=i, dst=cand,
               engine=G)  # fmt: skip
        tp = ap(gr._ps((BATCH, g, kk)), slice(0, c), slice(None), slice(None))
        b.emit(Transpose, [cand], [tp], src=cand, dst=tp)
        first = ap(self.tile("first", self.nb, (BATCH, g), bufs=2), slice(0, c))
        b.emit(TensorReduce, [tp], [first], alu="min", src=tp, dst=first)
        to = b.tensors[self.out]
        res = self.tile("r1", self.nb, (BATCH, g), to.dtype, bufs=2)
        b.emit(TensorCopy, [first], [ap(res, slice(0, c))], src=first, dst=ap(res, slice(0, c)),
               engine=Engine.SCALAR)  # fmt: skip
        lo, n = self.batch[0].r0, sum(grp.rows for grp in self.batch)
        whole = all(grp.rows == g for grp in self.batch) and len(to.shape) == 1
        if whole:  # the batch's rows are one run of out: one store
            src, dst = ap(res, slice(0, c)), ap(self.out, slice(lo, lo + n))
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.stores[self.nb])
        else:
            for j, grp in enumerate(self.batch):
                self.store(ap(res, slice(j, j + 1)), grp, self.nb * BATCH + j, True, j)
        self.batch = []
        self.nb += 1

    def store(self, res, grp: _Group, n: int, along_free: bool, j: int = 0) -> None:
        """Store `res` (the group's indices: [rows, 1], or [1, rows] `along_free` on
        partition j) to out's flat elements of its rows."""
        b, to = self.b, self.b.tensors[self.out]
        for index, k, off in _runs(list(to.shape) or [1], grp.r0, grp.r0 + grp.rows, grp.rows):
            dst = ap(self.out, *index) if to.shape else ap(self.out)
            part = ap(res.name, slice(j, j + 1), slice(off, off + k)) if along_free else \
                ap(res.name, slice(off, off + k))  # fmt: skip
            b.emit(DmaCopy, [part], [dst], src=part, dst=dst, queue=self.stores[n])
