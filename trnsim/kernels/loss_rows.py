"""`cross_entropy`'s log-sum-exp over rows of any length (`loss` module doc): short rows
several to a partition, long ones in pieces over the partitions.

**Rows** ([p, per, C] blocks, `per` rows a partition up to ROW_ELEMENTS): each row's max by one
VectorE `tensor_reduce` over the innermost axis (in x's dtype when 16-bit: exact, two elements
a cycle); its negation on GpSimd; exp(x - max) on ScalarE row slot by row slot (the bias is a
per-partition operand), with the row's sum by the same instruction, or, for rows of TINY or
fewer elements (where the accumulator read would cost more than the row), into an fp32 scratch
block summed by one VectorE `tensor_reduce` for the block (the slots shared between the two as
their cost models even out); log(sum) on ScalarE, + max and - the picked logit on GpSimd, for
the block's [p, per] losses at once. The picks: positions r C + target[r] for the block (an
`iota` plus the targets, exact int32 on GpSimd) and one gather `dma_copy`.

**Pieces** (`row_pieces`: rows too long for a partition, or fewer than two blocks of them): per
tile each partition's max m (VectorE) and sum s of exp(x - m) (ScalarE, one `activation` with
-m as its bias: every row at once); per row (`Groups`, TensorE): M = max m, S = sum s exp(m -
M), log-sum-exp M + log S, taken per row ([1, rows] on one partition) less the picked logits.
A row of more than 128 pieces is t segments, each a tile; a partition first combines its
segments (M_p = max m, S_p = sum s exp(m - M_p)).

`none` stores each block's losses; `mean` and `sum` add them into an fp32 accumulator, reduced
at the end to this core's partial (`Reduce.column`), which the cores combine (`loss`)."""

from __future__ import annotations

import contextlib
import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
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
    Transpose,
)
from trnsim.kernels.balance import cost_ns, dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks, row_groups
from trnsim.kernels.queues import Queues
from trnsim.kernels.reduce import Reduce, staggered
from trnsim.kernels.row_pieces import Groups, PieceLayout
from trnsim.kernels.row_pieces import layout as pieces_layout
from trnsim.kernels.schedule import Scheduled
from trnsim.kernels.softmax_pieces import LOWEST

__all__ = ["lower_cross_entropy_rows", "piece_layout", "ROW_ELEMENTS"]

G, S, V = Engine.GPSIMD, Engine.SCALAR, Engine.VECTOR
ROW_ELEMENTS = 4096  # short rows are grouped up to this many elements a partition
ROW_BYTES = 16384  # rows up to this many bytes go a row (or more) a partition
CHUNK_BYTES = 4096  # a row a partition: its columns in chunks of up to this many bytes
PIECE_BYTES = 4096  # a piece tile's bytes a partition (and a segment's past 128 pieces): many
# tiles, so ScalarE's exp starts soon after the first load (2 and 8 KiB ran 1-6% slower)
TINY_ROW_ELEMENTS = 2048  # ... and rows of TINY or fewer up to this many
TINY = 256  # rows this short: exp into fp32 scratch, sums split between ScalarE and VectorE
BUFS = 4
BATCH = 32  # groups of pieces whose rows meet on TensorE together


def piece_layout(d: int, itemsize: int, rows: int, partitions: int) -> PieceLayout | None:
    """Rows of d in pieces, when they are too long for a partition or too few (under two
    blocks of a row a partition) and d is a multiple of the partitions; else None."""
    if d * itemsize <= ROW_BYTES and rows >= 2 * partitions:
        return None
    return pieces_layout(d, max(1, PIECE_BYTES // itemsize), partitions)


def lower_cross_entropy_rows(b: KernelBuilder, cfg: ChipConfig, r: Reduce, inp: str,
                             target: str, rows: tuple[int, int], reduction: str,
                             lay: PieceLayout | None):  # fmt: skip
    """This core's rows [lo, hi): their losses stored (`none`), or their sum as a [1, 1]
    column (returned, fp32)."""
    k = _Rows(b, cfg, r, inp, target, reduction, lay)
    if lay is None:
        most = TINY_ROW_ELEMENTS if k.c <= TINY else ROW_ELEMENTS
        per, blocks = row_groups(tuple(b.tensors[inp].shape), k.P, rows, max(1, most // k.c))
        k.per = per
        if k.c <= TINY:
            k.js = k.split()
        t = 1  # a row a partition: its columns in t chunks of up to CHUNK_BYTES
        if per == 1:
            t = _chunks(k.c, k.dt.itemsize)
        k.T, k.w = t, k.c // t
        r0 = rows[0]
        items = []
        for bi, (index, n) in enumerate(blocks):
            items += [(bi, index, n, r0, s) for s in range(t)]
            r0 += n
        # a list schedule where it ends sooner (`schedule.Scheduled`): for rows of more than
        # 512 (its estimate favoured orders that ran slower for shorter rows, bf16 by 1-5%)
        if k.c <= TINY:  # three stages a block apart: load and max; exp; sums, losses
            _three(k, items)
        else:
            with Scheduled(b, cfg) if k.c > 512 else contextlib.nullcontext():
                staggered(enumerate(items), k.first, k.second, 1)
    else:
        with Scheduled(b, cfg):
            k.pieces(rows)
        k.groups.done()
    return k.total()


def _chunks(c: int, itemsize: int) -> int:
    """Even chunks of a row of c (a row a partition): the fewest of up to CHUNK_BYTES, or up to
    4 times as many that divide c; else the row whole (at most ROW_BYTES). Rows of a prime
    length (1031 fp32, 2053 bf16) went in c chunks of one element: 736 us for [5, 1031]."""
    least = -(-c * itemsize // CHUNK_BYTES)
    return next((t for t in range(least, 4 * least + 1) if c % t == 0), 1)


def _three(k, items) -> None:
    """Short rows' blocks in three stages a block apart (`_Rows.first`, `exps`, `sums`): each
    engine's queue then holds work of different blocks, none waiting on the one before."""
    got: dict = {}
    for n in range(len(items) + 2):
        if n < len(items):
            got[n] = k.first((n, items[n]))
        if 0 <= n - 1 < len(items):
            k.exps((n - 1, items[n - 1]), got[n - 1])
        if 0 <= n - 2 < len(items):
            k.sums((n - 2, items[n - 2]), got.pop(n - 2))


class _Rows:
    def __init__(self, b, cfg, r: Reduce, inp, target, reduction, lay):
        self.b, self.cfg, self.r, self.inp, self.target = b, cfg, r, inp, target
        self.reduction, self.lay = reduction, lay
        ti = b.tensors[inp]
        self.n, self.c = ti.shape
        self.P, self.f32, self.dt = cfg.core.sbuf.partitions, dtype("float32"), ti.dtype
        self.low = ti.dtype if ti.dtype.itemsize == 2 and ti.dtype.is_float else self.f32
        self.per, self.js, self.pks = 1, 0, {}
        width = self.c if lay is None else lay.f
        q, qs = dma_queues(cfg, ROW_ELEMENTS * ti.dtype.itemsize), Queues(cfg)
        if lay is not None:
            q = dma_queues(cfg, width * ti.dtype.itemsize)
        self.loads, self.picks = qs.loads().take(max(1, q)), qs.loads(1 / 2, 1)
        self.stores = qs.stores(0, 1 / 2)
        self.acc = None
        if reduction != "none":
            self.acc = b.scratch_tile("ce.acc", "acc", (self.P, 1), self.f32)
            b.emit(Memset, [], [ap(self.acc)], dst=ap(self.acc), value=0.0, engine=G)

    def tile(self, key: str, n: int, shape, dt=None, bufs: int = BUFS) -> str:
        return self.b.scratch_tile(f"ce.{key}{n % bufs}", key, shape, dt or self.f32)

    # -- picks -----------------------------------------------------------------------------------

    def pick(self, n: int, r0: int, p: int, w: int):
        """input[r, target[r]] of rows r0 .. r0 + p w, as [p, w] (row r0 + q w + j at [q, j])."""
        b, i32 = self.b, dtype("int32")
        tt = b.tensors[self.target]
        tg = ap(self.tile("tg", n, (self.P, w), tt.dtype), slice(0, p))
        src = ap(self.target, slice(r0, r0 + p * w))
        b.emit(DmaCopy, [src], [tg], src=src, dst=tg, queue=self.picks[n])
        if tt.dtype.is_float:
            ti = ap(self.tile("ti", n, (self.P, w), i32), slice(0, p))
            b.emit(TensorCopy, [tg], [ti], src=tg, dst=ti, engine=G)
            tg = ti
        pos = ap(self.tile("pos", n, (self.P, w), i32), slice(0, p))  # r C, then + target
        b.emit(Iota, [], [pos], dst=pos, start=r0 * self.c, step=self.c,
               partition_step=w * self.c)  # fmt: skip
        b.emit(TensorTensor, [pos, tg], [pos], alu="add", src0=pos, src1=tg, dst=pos, engine=G)
        pk = ap(self.tile("pick", n, (self.P, w), self.dt), slice(0, p))
        table = ap(self.inp)
        b.emit(DmaCopy, [table, pos], [pk], src=table, dst=pk, indices=pos, queue=self.picks[n])
        return pk

    def losses(self, n: int, lse, pk, p: int, w: int, r0: int) -> None:
        """loss = lse - pick ([p, w]): stored (none), or added to the accumulator."""
        b = self.b
        t = ap(self.tile("loss", n, (self.P, w)), slice(0, p))
        b.emit(TensorTensor, [lse, pk], [t], alu="subtract", src0=lse, src1=pk, dst=t, engine=G)
        if self.reduction == "none":
            to = b.tensors[self.r.out]
            res = ap(self.tile("res", n, (self.P, w), to.dtype), slice(0, p))
            b.emit(TensorCopy, [t], [res], src=t, dst=res, engine=S)
            dst = ap(self.r.out, slice(r0, r0 + p * w))
            b.emit(DmaCopy, [res], [dst], src=res, dst=dst, queue=self.stores[n])
            return
        part = ap(self.tile("part", n, (self.P, 1)), slice(0, p))
        if w > 1:
            b.emit(TensorReduce, [t], [part], alu="add", src=t, dst=part)
        else:
            part = t
        a = ap(self.acc, slice(0, p))
        b.emit(TensorTensor, [a, part], [a], alu="add", src0=a, src1=part, dst=a, engine=G)

    def total(self):
        """This core's sum of losses, [1, 1] fp32 (mean and sum), or None."""
        if self.acc is None:
            return None
        return self.r.column(self.acc, self.P, 0, 1, 0)

    # -- rows ------------------------------------------------------------------------------------

    def split(self) -> int:
        """The row slots whose sums ScalarE takes (the rest: one VectorE `tensor_reduce`),
        evening out the two engines' time per block as their cost models give it."""
        c = KernelBuilder({})
        P, per, d = self.P, self.per, self.c
        x = ap(c.tile("x", "sbuf", (P, d), self.dt))
        e = c.tile("e", "sbuf", (P, per, d), self.f32)
        col = ap(c.tile("c", "sbuf", (P, 1), self.f32))
        with_sum = cost_ns(c, self.cfg, Activation, waits=False, func="exp", src=x, dst=x,
                           bias=col, reduce="add", reduce_dst=col)  # fmt: skip
        plain = cost_ns(c, self.cfg, Activation, waits=False, func="exp", src=x, dst=x, bias=col)
        xb = ap(c.tile("xb", "sbuf", (P, per * d), self.dt))
        vmax = cost_ns(c, self.cfg, TensorReduce, alu="max", src=xb, dst=col)

        def worst(js: int) -> float:
            rest = ap(e, slice(None), slice(js, per)) if js < per else None
            v = vmax + (cost_ns(c, self.cfg, TensorReduce, alu="add", src=rest, dst=col)
                        if rest else 0)  # fmt: skip
            return max(js * with_sum + (per - js) * plain, v)

        return min(range(per + 1), key=lambda js: (worst(js), -js))

    def first(self, item):
        """Tile n (block bi's column chunk s): its load, the rows' maxima and their negation,
        the picks (at the block's first)."""
        n, (bi, index, rows, r0, s) = item
        b, P, per, w = self.b, self.P, self.per, self.w
        p = rows // per
        x = ap(self.tile("x", n, (P, per, w), self.dt), slice(0, p))
        src = ap(self.inp, *index) if self.T == 1 else ap(self.inp, *index,
                                                          slice(s * w, (s + 1) * w))  # fmt: skip
        b.emit(DmaCopy, [src], [x], src=src, dst=x, queue=self.loads[n])
        m = self.bcols("m", bi, p, s)
        if self.T > 1 and self.low is not self.f32:  # the max at two elements a cycle
            m16 = ap(self.tile("m16", n, (P, 1), self.low), slice(0, p))
            b.emit(TensorReduce, [x], [m16], alu="max", src=x, dst=m16)
            b.emit(TensorScalar, [m16], [m], src=m16, dst=m, op0="max", operand0=LOWEST, engine=G)
        else:
            b.emit(TensorReduce, [x], [m], alu="max", src=x, dst=m)
        nm = ap(self.tile("nm", n, (P, per)), slice(0, p))
        # -max, the max at least LOWEST: a column chunk all -inf (masked) would give
        # exp(-inf + inf) = NaN; its m stays -inf, which block_end's exp(m - M) takes as 0
        b.emit(TensorScalar, [m], [nm], src=m, dst=nm, op0="max", operand0=LOWEST,
               op1="multiply", operand1=-1.0, engine=G)  # fmt: skip
        pk = self.pick(bi, r0, p, per) if s == 0 else None
        return x, nm, pk

    def bcols(self, key: str, bi: int, p: int, s: int | None = None):
        """Block bi's [p, per] columns of `key` (fp32; the max in x's dtype for short rows),
        or [p, T] of its chunks; column s."""
        if self.T == 1:
            t = self.tile(key, bi, (self.P, self.per), self.low if key == "m" else None)
            return ap(t, slice(0, self.P if p is None else p))
        t = self.tile(key + "T", bi, (self.P, self.T))
        return ap(t, slice(0, p)) if s is None else ap(t, slice(0, p), slice(s, s + 1))

    def second(self, item, got):
        """Tile n: exp(x - max) with the rows' sums; at the block's last, log-sum-exp and the
        losses."""
        self.exps(item, got)
        self.sums(item, got)

    def exps(self, item, got) -> None:
        """Tile n's exp(x - max), row slot by row slot, with ScalarE's sums where it takes
        them."""
        n, (bi, index, rows, r0, s) = item
        x, nm, pk = got
        b, P, per, d = self.b, self.P, self.per, self.w
        p = rows // per
        if pk is not None:
            self.pks[bi] = pk
        z = self.bcols("s", bi, p, s)
        tiny = self.c <= TINY  # short rows, not a long row's narrow chunks (their sums by ScalarE)
        e = ap(self.tile("e32" if tiny else "e", n if tiny else 0, (P, per, d) if tiny else
                         (P, d), self.f32 if tiny else dtype("bfloat16"), 3 if tiny else 1),
               slice(0, p))  # fmt: skip
        for j in range(per):
            xj, nj = ap(x.name, slice(0, p), j), ap(nm.name, slice(0, p), slice(j, j + 1))
            sj = z if self.T > 1 else ap(z.name, slice(0, p), slice(j, j + 1))
            ej = ap(e.name, slice(0, p), j) if tiny else e
            if not tiny or j < self.js:
                b.emit(Activation, [xj, nj], [ej, sj], func="exp", src=xj, dst=ej, bias=nj,
                       reduce="add", reduce_dst=sj)  # fmt: skip
            else:
                b.emit(Activation, [xj, nj], [ej], func="exp", src=xj, dst=ej, bias=nj)

    def sums(self, item, got) -> None:
        """Tile n's sums VectorE takes (short rows); at the block's last, log-sum-exp and the
        losses."""
        n, (bi, index, rows, r0, s) = item
        b, P, per, d = self.b, self.P, self.per, self.w
        p = rows // per
        if self.c <= TINY and self.js < per:
            e = self.tile("e32", n, (P, per, d), self.f32, 3)
            z = self.bcols("s", bi, p, s)
            rest = ap(e, slice(0, p), slice(self.js, per))
            sr = ap(z.name, slice(0, p), slice(self.js, per))
            b.emit(TensorReduce, [rest], [sr], alu="add", src=rest, dst=sr)
        if s == self.T - 1:
            self.block_end(bi, p, r0)

    def block_end(self, bi: int, p: int, r0: int) -> None:
        """Block bi's log-sum-exp (over its column chunks first: M = max m, S = sum s exp(m -
        M)) and losses."""
        b, P, per = self.b, self.P, self.per
        m, z = self.bcols("m", bi, p), self.bcols("s", bi, p)
        if self.T > 1:
            mt, zt = m, z
            m = ap(self.tile("mr", bi, (P, 1)), slice(0, p))
            b.emit(TensorReduce, [mt], [m], alu="max", src=mt, dst=m)
            nm = ap(self.tile("nmr", bi, (P, 1)), slice(0, p))
            b.emit(TensorScalar, [m], [nm], src=m, dst=nm, op0="multiply", operand0=-1.0,
                   engine=G)  # fmt: skip
            c = ap(self.tile("cT", bi, (P, self.T)), slice(0, p))
            b.emit(Activation, [mt, nm], [c], func="exp", src=mt, dst=c, bias=nm)
            b.emit(TensorTensor, [c, zt], [c], alu="multiply", src0=c, src1=zt, dst=c, engine=G)
            z = ap(self.tile("zr", bi, (P, 1)), slice(0, p))
            b.emit(TensorReduce, [c], [z], alu="add", src=c, dst=z)
        lse = ap(self.tile("lse", bi, (P, per)), slice(0, p))
        b.emit(Activation, [z], [lse], func="log", src=z, dst=lse)
        b.emit(TensorTensor, [lse, m], [lse], alu="add", src0=lse, src1=m, dst=lse, engine=G)
        self.losses(bi, lse, self.pks.pop(bi), p, per, r0)

    # -- pieces ----------------------------------------------------------------------------------

    def pieces(self, rows: tuple[int, int]) -> None:
        lay, tx = self.lay, self.b.tensors[self.inp]
        self.groups = Groups(self.b, self.cfg, lay.k)
        self.kk = min(lay.k, self.P)
        items, self.bpick = [], {}
        groups = []  # (rows, first row, [(segment, x's region)])
        if lay.t == 1:
            r0 = rows[0]
            for index, nr in row_blocks(tuple(tx.shape), lay.g, rows):
                groups.append((nr, r0, [(0, self.source(index, r0, 0))]))
                r0 += nr
        else:
            for r in range(*rows):
                groups.append((1, r, [(s, self.source((r,), r, s)) for s in range(lay.t)]))
        # full groups meet BATCH at a time (`flush`: one combination on TensorE for all their
        # rows, their picks gathered together); a short last group on its own (`group_end`)
        self.batches: dict = {}  # batch -> (first row, groups)
        member: dict = {}  # group -> (batch, its place)
        nb = 0
        for gi, (nr, r0, _) in enumerate(groups):
            if nr != lay.g:
                continue
            if not self.batches or len(self.batches[nb - 1][1]) == BATCH or \
                    member.get(gi - 1, (None,))[0] != nb - 1:  # fmt: skip
                self.batches[nb] = (r0, [])
                nb += 1
            member[gi] = (nb - 1, len(self.batches[nb - 1][1]))
            self.batches[nb - 1][1].append(gi)
        self.member = member
        for gi, (nr, r0, tiles) in enumerate(groups):
            for s, src in tiles:
                items.append((gi, s, src, nr, r0, s == lay.t - 1))
        staggered(enumerate(items), self.tile_first, self.tile_second, 1)

    def source(self, index: tuple, r0: int, s: int):
        """Segment s of the group of rows at `index` (the first r0): x's region."""
        if self.lay.t == 1:
            return ap(self.inp, *index)
        seg = self.lay.f * self.P
        return ap(self.inp, *index, slice(s * seg, (s + 1) * seg))

    def load(self, n: int, s: int, src, x, p: int) -> None:
        """Tile n (segment s) from `source`'s region."""
        self.b.emit(DmaCopy, [src], [x], src=src, dst=x, queue=self.loads[n])

    def width(self, s: int) -> int:
        """Segment s's tile columns."""
        return self.lay.f

    def cols(self, key: str, gi: int, p: int, s: int | None = None):
        t = self.tile(key, gi, (self.P, self.lay.t), bufs=3)
        return ap(t, slice(0, p)) if s is None else ap(t, slice(0, p), slice(s, s + 1))

    def tile_first(self, item):
        """A tile's load and its partitions' maxima (VectorE), their negation (GpSimd)."""
        n, (gi, s, src, nr, r0, last) = item
        b, P = self.b, self.P
        p = nr * self.kk
        x = ap(self.tile("px", n, (P, self.width(s)), self.dt), slice(0, p))
        self.load(n, s, src, x, p)
        m = self.cols("pm", gi, p, s)
        if self.low is not self.f32:  # 16-bit: the max at two elements a cycle, then fp32
            m16 = ap(self.tile("pm16", n, (P, 1), self.low), slice(0, p))
            b.emit(TensorReduce, [x], [m16], alu="max", src=x, dst=m16)
            b.emit(TensorScalar, [m16], [m], src=m16, dst=m, op0="max", operand0=LOWEST, engine=G)
        else:
            b.emit(TensorReduce, [x], [m], alu="max", src=x, dst=m)
        nm = ap(self.tile("pnm", n, (P, 1)), slice(0, p))
        # -max, the max at least LOWEST (a segment all -inf: exp(-inf + inf) = NaN); the
        # partitions' maxima are kept so too in `per_partition`, before TensorE sees them
        b.emit(TensorScalar, [m], [nm], src=m, dst=nm, op0="max", operand0=LOWEST,
               op1="multiply", operand1=-1.0, engine=G)  # fmt: skip
        pk = None
        if s == 0 and gi not in self.member:
            pk = self.pick(gi, r0, 1, nr)
        elif s == 0 and self.member[gi][1] == 0:  # the batch's picks, [groups, rows]
            bi = self.member[gi][0]
            first, members = self.batches[bi]
            self.bpick[bi] = self.pick(bi, first, len(members), self.lay.g)
        return x, nm, pk

    def tile_second(self, item, got):
        """The tile's sums of exp(x - m) (ScalarE); at the group's last, its rows' losses."""
        n, (gi, s, src, nr, r0, last) = item
        x, nm, pk = got
        b, P, p = self.b, self.P, nr * self.kk
        if pk is not None:
            self.pk = pk
        e = ap(self.tile("pe", 0, (P, self.width(s)), dtype("bfloat16"), 1), slice(0, p))
        z = self.cols("pz", gi, p, s)
        b.emit(Activation, [x, nm], [e, z], func="exp", src=x, dst=e, bias=nm, reduce="add",
               reduce_dst=z)  # fmt: skip
        if last:
            self.group_end(gi, nr, r0)

    def per_partition(self, gi: int, p: int):
        """The group's partitions' (max, sum of exp) over their segments."""
        b, P, t = self.b, self.P, self.lay.t
        m, z = self.cols("pm", gi, p), self.cols("pz", gi, p)
        if t > 1:  # per partition over its segments
            mp = ap(self.tile("mp", gi, (P, 1)), slice(0, p))
            b.emit(TensorReduce, [m], [mp], alu="max", src=m, dst=mp)
            nmp = ap(self.tile("nmp", gi, (P, 1)), slice(0, p))
            b.emit(TensorScalar, [mp], [nmp], src=mp, dst=nmp, op0="max", operand0=LOWEST,
                   op1="multiply", operand1=-1.0, engine=G)  # fmt: skip
            c = self.cols("pc", gi, p)
            b.emit(Activation, [m, nmp], [c], func="exp", src=m, dst=c, bias=nmp)
            b.emit(TensorTensor, [c, z], [c], alu="multiply", src0=c, src1=z, dst=c, engine=G)
            sp = ap(self.tile("sp", gi, (P, 1)), slice(0, p))
            b.emit(TensorReduce, [c], [sp], alu="add", src=c, dst=sp)
        else:
            mp, sp = m, z
        # at least LOWEST: TensorE's transposes and spread would make a partition's -inf
        # (all its segments masked) 0 * -inf = NaN for every row of the group
        b.emit(TensorScalar, [mp], [mp], src=mp, dst=mp, op0="max", operand0=LOWEST, engine=G)
        return mp, sp

    def group_end(self, gi: int, nr: int, r0: int) -> None:
        """log-sum-exp of the group's rows from their partitions' (m, s) (module doc): into
        its batch's columns, or on its own."""
        b, P = self.b, self.P
        p = nr * self.kk
        mp, sp = self.per_partition(gi, p)
        if gi in self.member:
            bi, j = self.member[gi]
            if j == 0:
                for key, v in (("bm", 0.0), ("bs", 1.0)):
                    col = ap(self.bcol(key, bi))
                    b.emit(Memset, [], [col], dst=col, value=v, engine=G)
            for key, src in (("bm", mp), ("bs", sp)):
                dst = ap(self.bcol(key, bi), slice(0, p), slice(j, j + 1))
                b.emit(TensorCopy, [src], [dst], src=src, dst=dst, engine=G)
            if j == len(self.batches[bi][1]) - 1:
                self.flush(bi)
            return
        big = ap(self.tile("M", gi, (P, 1)), slice(0, p))
        self.groups.maxes(mp, p, 1, big)
        nbig = ap(self.tile("nM", gi, (P, 1)), slice(0, p))
        b.emit(TensorScalar, [big], [nbig], src=big, dst=nbig, op0="multiply", operand0=-1.0,
               engine=G)  # fmt: skip
        c2 = ap(self.tile("c2", gi, (P, 1)), slice(0, p))
        b.emit(Activation, [mp, nbig], [c2], func="exp", src=mp, dst=c2, bias=nbig)
        b.emit(TensorTensor, [c2, sp], [c2], alu="multiply", src0=c2, src1=sp, dst=c2, engine=G)
        total = self.groups.sums(c2, p)
        lse = ap(self.tile("plse", gi, (P, 1)), slice(0, p))
        b.emit(Activation, [total], [lse], func="log", src=total, dst=lse)
        b.emit(TensorTensor, [lse, big], [lse], alu="add", src0=lse, src1=big, dst=lse, engine=G)
        row = self.groups.row_maxes(lse, p, "max")  # [1, rows]: each row's (all equal)
        self.losses(gi, row, self.pk, 1, nr, r0)

    def bcol(self, key: str, bi: int) -> str:
        return self.b.scratch_tile(f"ce.{key}{bi % 2}", key, (self.P, BATCH), self.f32)

    def flush(self, bi: int) -> None:
        """Batch bi's rows' log-sum-exp at once: M = each row's max of its partitions' maxima
        (`Groups.maxes` over the batch's columns), S = sum s exp(m - M) (`Groups.sums`),
        M + log S turned into [groups, rows] and taken per row; the losses."""
        b, P, gr = self.b, self.P, self.groups
        r0, members = self.batches[bi]
        c, g, kk = len(members), self.lay.g, self.kk
        m = ap(self.bcol("bm", bi), slice(None), slice(0, c))
        sp = ap(self.bcol("bs", bi), slice(None), slice(0, c))
        big = ap(self.tile("bM", bi, (P, BATCH), bufs=2), slice(None), slice(0, c))
        gr.maxes(m, P, c, big)
        e = ap(self.tile("be", bi, (P, BATCH), bufs=2), slice(None), slice(0, c))
        b.emit(TensorTensor, [m, big], [e], alu="subtract", src0=m, src1=big, dst=e, engine=G)
        b.emit(Activation, [e], [e], func="exp", src=e, dst=e)
        b.emit(TensorTensor, [e, sp], [e], alu="multiply", src0=e, src1=sp, dst=e, engine=G)
        total = gr.sums(e, P, c)
        lse = ap(self.tile("blse", bi, (P, BATCH), bufs=2), slice(None), slice(0, c))
        b.emit(Activation, [total], [lse], func="log", src=total, dst=lse)
        b.emit(TensorTensor, [lse, big], [lse], alu="add", src0=lse, src1=big, dst=lse, engine=G)
        tp = ap(gr._ps((BATCH, g, kk)), slice(0, c), slice(None), slice(None))
        b.emit(Transpose, [lse], [tp], src=lse, dst=tp)
        rows = ap(self.tile("brow", bi, (BATCH, g), bufs=2), slice(0, c))
        b.emit(TensorReduce, [tp], [rows], alu="max", src=tp, dst=rows)
        self.losses(bi, rows, self.bpick.pop(bi), c, g, r0)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


_ = math
