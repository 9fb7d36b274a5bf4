"""Broadcasts: a [D] row spread over all partitions (`spread_rows`), and binary elementwise ops
of a tensor and a row ([D] or [1, ..., D]) or a column (out's shape with a last dim of 1)
broadcast over it (`lower_broadcast`).

NKI kernels broadcast along partitions on TensorE, as a ones column times the row (`matmul`
with K = 1), since DMA copies element for element. Out's rows (all dims but the last; this
core's share, `layout.core_rows`) are walked in one of three layouts, each keeping the
broadcast operand cheap:

- short rows (D up to FREE / 2): rows grouped, up to FREE / D of them to a partition, by
  `layout.flat_blocks` over the row dims (so rows fill the 128 partitions, and a remainder its
  own small tile). A row is spread once to [128, D] and read along a partition's rows with
  stride 0 ([p, *per, D]); a column block is loaded as [p, per] (each partition's values
  contiguous) and read along the row with stride 0 ([p, per, *D]): one `tensor_tensor`; the
  largest blocks first;
- long rows (D above FREE / 2, enough rows): up to 128 rows a block, one to a partition, in
  even column chunks of at most FREE; a row's chunk is spread once and serves every row block
  (chunks outside, row blocks inside); a column is loaded once per row block, a `tensor_scalar`
  operand. A block of up to 64 rows is folded (`_Kernel.folded`), and one of 65 to 127 cut
  into folded ones where that takes fewer steps (`_Kernel._cut`);
- few long rows (a row has more elements than it would take partitions' worth of fixed costs
  to walk it on its own, `layout._few`'s rule), or a core's share cut inside a row (at LNC 2
  a vector, or 3 rows, are shared by elements, `flat_split`), or the same columns of each row
  (a row broadcast over 2 to 8 long rows at LNC 2, `layout.by_columns`: each core reads half
  the row, not all of it): each row's part walked flat as [128, f] blocks; the row's matching
  block is loaded once by DMA (it lies in the same order, ROW_SLOTS ahead) for every row with
  that part; a column's values are spread over the partitions once, one column of the spread
  tile per row. A part's last elements, on fewer partitions, go first, on queues and buffers
  of their own, so their transfers' fixed costs overlap the full blocks'.
"""

from __future__ import annotations

import numpy as np

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import (
    AffineSelect,
    Ap,
    DmaCopy,
    Matmul,
    Memset,
    TensorCopy,
    TensorScalar,
)
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import flat_ranges, flat_walk, row_blocks
from trnsim.kernels.queues import Queues, Stream
from trnsim.kernels.spread import G, S, Spread, V

__all__ = ["spread_rows", "spread", "lower_broadcast"]

FREE = 2048  # elements per partition of a block at most (as `elementwise.FREE`)
DEPTH = 4  # rotating buffers per operand (as `elementwise.DEPTH`), at least
MOST_DEPTH = 8  # ... and at most, as many as SBUF_SHARE holds at the blocks' width (`_Kernel`)
ROWWISE = 128  # elements of a row from which a column goes by one tensor_scalar per row
SBUF_SHARE = 0.25  # of a partition for the op's buffers (as `elementwise.SBUF_SHARE`)
FOLD_BYTES = 4096  # a folded row block's columns at most, a partition (`_Kernel._fold`)
ROW_SLOTS = 4  # rotating buffers of the row's pieces (few long rows): loaded ahead of their use


def spread_rows(b: KernelBuilder, cfg: ChipConfig, name: str, d: int) -> str:
    """A [128, d] tile (of the tensor's dtype) holding tensor `name` (d elements) on every
    partition: loaded into one partition, multiplied by a ones column on TensorE (K = 1) into
    PSUM, copied out."""
    return spread(b, cfg, [(ap(name), d)], b.tensors[name].dtype, f"{name}_rows")


def spread(
    b: KernelBuilder, cfg: ChipConfig, srcs: list[tuple[Ap, int]], dt, base: str,
    repeat: int = 1, tile: str | None = None, queue: int | None = None, slot: int | None = None,
    sp: Spread | None = None, pins: dict | None = None,
) -> str:  # fmt: skip
    """A [128, repeat x d] tile (`tile`, or a new one named after `base`) holding on every
    partition the d elements that `srcs` (operands and their element counts) select, in
    order, `repeat` times along the free dim: loaded into one partition (on `queue`, by
    default the first load queue), spread by TensorE (a ones column times the row, K = 1) in
    PSUM banks, copied out, then doubled along the free dim by copies. With a `slot` (an op
    spreading many pieces of a row in turn) the one-partition row is that slot's scratch tile
    and the ones column one set once, not new tiles each call (a row of 83886 fp32 in 47
    pieces took 47 of each: more than SBUF). With `sp` (and `pins`) the copies out of PSUM go
    to VectorE or ScalarE, the one that finishes them first, each piece of the tile after the
    first time to the engine that wrote it then (`pins`: a block of fewer rows reads only part
    of a piece, and another engine's write over the part unread could not be ordered after
    it); on VectorE alone a row over one row block of [300, 27962] bf16 copied as much there
    as it computed, 57% of the DMA bound."""
    P, f32 = cfg.core.sbuf.partitions, dtype("float32")
    d = sum(n for _, n in srcs)
    if slot is None:
        row, ones = b.tile("row", "sbuf", (1, d), dt), b.tile("ones", "sbuf", (1, P), dt)
        fresh = True
    else:
        row = b.scratch_tile(f"spread.row{slot}", "row", (1, d), dt)
        fresh = f"spread.ones:{dt.name}:{(1, P)}" not in b.scratch
        ones = b.scratch_tile("spread.ones", "ones", (1, P), dt)
    out = tile or b.tile(base, "sbuf", (P, repeat * d), dt)
    if fresh:
        b.emit(Memset, [], [ap(ones)], dst=ap(ones), value=1.0)
    at = 0
    for src, n in srcs:
        dst = ap(row) if n == d else ap(row, slice(None), slice(at, at + n))
        q = Queues(cfg).loads()[0] if queue is None else queue
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=q)
        at += n
    step = min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)
    # a tile of d columns when fewer: one that an earlier op released fits it (a linear's bias
    # after 8 accumulators of [128, 300] filled PSUM's 8 banks: a [128, 512] one overflowed)
    ps = [b.psum("spread", (P, min(step, d)), f32)]
    ps.append(b.psum("spread", (P, step), f32) if d > step else ps[0])
    for c in range(0, d, step):  # two banks in turn: the next matmul runs during this copy
        w = min(step, d - c)
        acc = ap(ps[c // step % 2], slice(None), slice(0, w))
        mv = ap(row, slice(None), slice(c, c + w))
        b.emit(Matmul, [ap(ones), mv], [acc], stationary=ap(ones), moving=mv, dst=acc)
        o = ap(out, slice(None), slice(c, c + w))
        if sp is None:
            b.emit(TensorCopy, [acc], [o], src=acc, dst=o)
        else:  # a piece of the tile on the engine that wrote it before, if any (`pins`)
            eng = sp.emit(TensorCopy, [acc], [o], pins.get((out, c), (V, S)), src=acc, dst=o)
            pins[(out, c)] = (eng,)
    b.release(*dict.fromkeys(ps))
    w = d
    while w < repeat * d:  # the row repeated along the free dim, doubling
        n = min(w, repeat * d - w)
        s, o = ap(out, slice(None), slice(0, n)), ap(out, slice(None), slice(w, w + n))
        b.emit(TensorCopy, [s], [o], src=s, dst=o)
        w += n
    return out


def lower_broadcast(
    b: KernelBuilder, cfg: ChipConfig, alu: str, full: str, vec: str, out: str, first: bool,
    is_row: bool,
) -> None:  # fmt: skip
    """out = full <alu> vec (vec <alu> full when `first`), vec a row or a column of out's
    shape (module doc); `full` has out's shape."""
    shape = tuple(b.tensors[out].shape)
    d, rdims = shape[-1], shape[:-1]
    runs = flat_ranges(shape, b.share(shape))  # this core's elements (`flat_split`)
    if not runs:
        return
    k = _Kernel(b, cfg, alu, full, vec, out, first)
    if not is_row and d >= ROWWISE:  # tensor_scalar blocks, 4x on 16-bit VectorE: 4 buffers
        k.depth = DEPTH  # keep the DMA busy (with 8, col bf16 [1449, 1447] 13.7 -> 14.3 us)
    if len(runs) > 1:  # the same columns of each row (`layout.by_columns`)
        k.few(rdims, {a // d: (a % d, a % d + z - a) for a, z in runs}, d, is_row)
        return
    ((lo, hi),) = runs
    rows = hi // d - lo // d
    if lo % d or hi % d or _few_cheaper(rows, d, k.P, k.free, is_row):  # or a share cut in one
        spans = {r: (max(lo - r * d, 0), min(hi - r * d, d)) for r in range(lo // d, -(-hi // d))}
        k.few(rdims, spans, d, is_row)
    elif 2 * d <= k.free:
        k.short(rdims, lo // d, hi // d, d, is_row)
    else:
        k.long(rdims, lo // d, hi // d, d, is_row)


FIXED = 256  # a block's fixed cost in element-steps a partition (as `layout.FIXED`)


def _few_cheaper(rows: int, d: int, P: int, free: int, is_row: bool) -> bool:
    """Whether `rows` rows of d are walked flat (`_Kernel.few`: a block a row's [128, f]
    piece) in fewer element-steps a partition than in row blocks by column chunks
    (`_Kernel.long`, a block of up to 64 rows folded onto k pieces a row): rows x (d / 128 +
    FIXED) against d / k + FIXED a chunk, and for a row folded half as much again (an
    assumption: its chunks' copies out of PSUM, a pass that only the one block takes, beside
    the DMA; 64 rows of 132104 bf16 folded took 138 us, walked flat 110 us)."""
    k = max(1, P // rows)
    chunks = -(-d // (k * free))
    long = d // k + FIXED * chunks + (d // (2 * k) if is_row and k > 1 else 0)
    return rows * (d // P + FIXED) < long


class _Kernel:
    """One broadcast op's blocks: loads of `full`, the op against the broadcast operand,
    stores, through `depth` rotating buffers (in `full`'s buffer when out has its dtype)."""

    def __init__(self, b, cfg, alu, full, vec, out, first):
        self.b, self.cfg, self.alu, self.first = b, cfg, alu, first
        self.full, self.vec, self.out = full, vec, out
        self.P = cfg.core.sbuf.partitions
        self.fdt, self.odt = b.tensors[full].dtype, b.tensors[out].dtype
        self.vdt, vshape = b.tensors[vec].dtype, tuple(b.tensors[vec].shape)
        self.lead = (0,) * (len(vshape) - 1)  # a row [1, ..., D]: its one row
        self.inplace = self.fdt == self.odt
        per_elem = self.fdt.itemsize + (0 if self.inplace else self.odt.itemsize)
        per_col = DEPTH * per_elem + ROW_SLOTS * self.vdt.itemsize  # bytes a column of a block
        share = int(cfg.core.sbuf.partition_bytes * SBUF_SHARE)
        self.free = max(1, min(FREE, share // per_col))
        # as many rotating buffers as the share holds at that width: blocks whose
        # tensor_tensor (VectorE's 16-bit one element a cycle, GpSimd's two) takes about their
        # DMA's time hold a buffer through load, compute and store, and 4 left the loads of a
        # row over [1449, 1447] bf16's last blocks waiting for one (16.0 us at LNC 2, 13.3 with
        # 8)
        rest = share - ROW_SLOTS * self.vdt.itemsize * self.free
        self.depth = max(DEPTH, min(MOST_DEPTH, rest // (per_elem * self.free)))
        self.queues(self.free)
        self.side = Queues(cfg).loads(1 / 2, 1)  # the row's or column's loads, not behind full's
        self.n = 0  # blocks so far
        self.turns = {}  # buffers so far of each kind with a count of its own (`_buf`)
        self.sp = Spread(b, cfg)  # each pass on the engine that finishes it first
        self.pins: dict = {}  # (tile, column) -> the engine that copies into it (`spread`)

    def queues(self, free: int) -> None:
        """The load and store queues for blocks of up to `free` elements a partition
        (`balance.dma_queues`: more for smaller blocks, whose setups would otherwise leave the
        engines idle; rows of 125829 bf16 walked flat in [128, 983] pieces on the one queue of
        [128, 2048] blocks took 72% of the DMA bound)."""
        qs, nq = Queues(self.cfg), dma_queues(self.cfg, free * self.fdt.itemsize)
        self.loads, self.stores = qs.loads(0, 1 / 2).take(nq), qs.stores().take(nq)
        # blocks on fewer partitions (a row part's last elements) on queues of their own: their
        # setups overlap the full blocks' transfers instead of queueing before them
        self.small = (_after(qs.loads(0, 1 / 2), nq), _after(qs.stores(), nq))

    def _buf(self, kind: str, shape: tuple, dt, slots: int = 0, own: bool = False) -> str:
        """Buffer `kind`'s next slot of `slots` (by default `depth`) in turn: by the blocks so
        far, or when `own` by the buffers of that kind so far."""
        n, slots = self.n, slots or self.depth
        if own:
            n = self.turns[kind] = self.turns.get(kind, -1) + 1
        return self.b.scratch_tile(f"bc.{kind}{n % slots}", kind, shape, dt)

    def block(self, index: tuple, shape: tuple, big: tuple, compute, small=False) -> None:
        """Load full[index] into the first `shape` of a buffer of `big`, `compute(x, o)`,
        store o to out[index] (a `small` block on the small blocks' queues)."""
        b, n = self.b, self.n
        loads, stores = self.small if small else (self.loads, self.stores)
        kind = "s" if small else ""  # small blocks in buffers of their own, not the full ones'
        part = tuple(slice(0, s) for s in shape)
        x = ap(self._buf(f"x{kind}", big, self.fdt, own=small), *part)
        src = ap(self.full, *index)
        b.emit(DmaCopy, [src], [x], src=src, dst=x, queue=loads[n])
        o = x if self.inplace else ap(self._buf(f"o{kind}", big, self.odt, own=small), *part)
        compute(x, o)
        dst = ap(self.out, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=stores[n])
        self.n += 1

    def tt(self, x: Ap, w: Ap, o: Ap) -> None:
        s0, s1 = (w, x) if self.first else (x, w)
        self.sp.tt(self.alu, s0, s1, o)

    def ts(self, x: Ap, c: Ap, o: Ap) -> None:
        self.sp.emit(TensorScalar, [x, c], [o], (V, G), src=x, dst=o, op0=self.alu, operand0=c,
                     reverse0=self.first)  # fmt: skip

    def short(self, rdims, lo, hi, d, is_row) -> None:
        """Rows grouped up to `per` to a partition (module doc)."""
        per = max(1, min(self.free // d, -(-(hi - lo) // self.P)))
        blocks = flat_walk(rdims, lo, hi, self.P, per) if rdims else [((), 1, 1)]
        # the largest blocks first: a partial one last (rows of an item's end) ends the op
        # sooner after its load ([3, 699, 1000] bf16 at LNC 2 15.7 us, 16.7 in order)
        blocks.sort(key=lambda blk: -blk[1] * blk[2])
        if is_row:  # the spread row read f times along a partition's rows (stride 0); its load
            # on a side queue, not ahead of the first block's (0.6 us sooner)
            src = [(ap(self.vec), d)]
            w = spread(self.b, self.cfg, src, self.vdt, "bc_row", queue=self.side[0])
            for index, p, f in blocks:
                wa = ap(w, slice(0, p), slice(0, d))._replace(bcast=((1, f),))
                self.block(index, (p, f, d), (self.P, per, d), lambda x, o, wa=wa: self.tt(
                    x, wa, o))  # fmt: skip
            return
        for index, p, f in blocks:
            c = ap(self._buf("c", (self.P, per), self.vdt), slice(0, p), slice(0, f))
            src = ap(self.vec, *index)
            self.b.emit(DmaCopy, [src], [c], src=src, dst=c, queue=self.side[self.n])
            self.block(index, (p, f, d), (self.P, per, d), lambda x, o, c=c, p=p, f=f:
                       self._widened(x, o, c, p, f, d))  # fmt: skip

    def _widened(self, x, o, c, p, f, d) -> None:
        """x <alu> the column c [p, f] along [p, f, d]: for rows of `ROWWISE` or more elements
        one `tensor_scalar` per row of a partition (c's column j its operand), VectorE and
        GpSimd in turn; for shorter rows one `tensor_tensor` with c read d times along the
        last dim (stride 0: on trn2 it costs what a widened [p, f, d] tile would, where ScalarE
        copies doubling along the dim took 2.7 us before a block of [4095, 100] fp32 could
        start)."""
        rows, grp = slice(0, p), slice(0, f)
        if d >= ROWWISE:
            for j in range(f):
                xj, oj = ap(x.name, rows, j, slice(0, d)), ap(o.name, rows, j, slice(0, d))
                cj = ap(c.name, rows, slice(j, j + 1))
                self.ts(xj, cj, oj)
            return
        self.tt(x, ap(c.name, rows, grp)._replace(bcast=((2, d),)), o)

    def long(self, rdims, lo, hi, d, is_row) -> None:
        """Up to 128 rows a block, in column chunks; a row's chunk spread once (module doc)."""
        chunks = -(-d // self.free)
        size = -(-d // chunks)
        walk = self._cut(rdims, lo, hi, d, size, is_row)
        blocks = [blk for blk in walk if 2 * blk[1] > self.P]
        big = (self.P, size)

        def cols(index: tuple, c0: int, c: int) -> tuple:  # index: rows; then a column chunk
            return (*index, *(slice(None),) * (len(rdims) - len(index)), slice(c0, c0 + c))

        for _, p, _ in walk:  # the folded blocks' selectors first, before any block's work
            if 2 * p <= self.P and is_row:
                self._selector(self.P // p, self.P // p * p, True)
        for index, p, _ in walk:  # blocks of half the partitions or fewer: folded
            if 2 * p <= self.P:
                self.folded(p, d, size, lambda c0, c, index=index: cols(index, c0, c),
                            index, is_row)  # fmt: skip
        if is_row and blocks:  # the row's chunks spread only for blocks that take them
            for j, c0 in enumerate(range(0, d, size)):
                c = min(size, d - c0)
                key = f"bc.w{j % 2}:{self.vdt.name}:{size}"
                if key not in self.b.scratch:
                    self.b.scratch[key] = self.b.tile("bc_row", "sbuf", big, self.vdt)
                src = ap(self.vec, *self.lead, slice(c0, c0 + c))
                w = spread(self.b, self.cfg, [(src, c)], self.vdt, "", tile=self.b.scratch[key],
                           queue=self.side[j], slot=j % 2, sp=self.sp, pins=self.pins)  # fmt: skip
                for index, p, _ in blocks:
                    wa = ap(w, slice(0, p), slice(0, c))
                    self.block(cols(index, c0, c), (p, c), big, lambda x, o, wa=wa: self.tt(
                        x, wa, o))  # fmt: skip
            return
        for index, p, _ in blocks:
            col = ap(self._buf("c", (self.P, 1), self.vdt), slice(0, p), slice(0, 1))
            src = ap(self.vec, *index)
            self.b.emit(DmaCopy, [src], [col], src=src, dst=col, queue=self.side[self.n])
            for c0 in range(0, d, size):
                c = min(size, d - c0)
                self.block(cols(index, c0, c), (p, c), big, lambda x, o, col=col: self.ts(
                    x, col, o))  # fmt: skip

    def _cut(self, rdims, lo: int, hi: int, d: int, size: int, is_row: bool) -> list:
        """Rows [lo, hi) in blocks of up to 128 (`flat_walk`), a block of more than half the
        partitions but not all of them cut in two folded ones (64 rows and the rest) where
        their chunks take fewer element-steps a partition (`_steps`: a block of 65 rows, its
        DMA on the engines of its partitions only, takes d, folded 64 rows d / 2 and one row
        d / 128) and, for a row, only a lone such block (the others' spread shared; a lone
        one spreads d columns, the folded ones d / 2 and d / 128: TensorE takes 4 cycles a
        column in fp32, [65, 8128] took 13.5 us to spread, more than its DMA's 11.7)."""
        P, half = self.P, self.P // 2
        walk = flat_walk(rdims, lo, hi, P, 1) if rdims else [((), 1, 1)]
        wide = sum(2 * p > P for _, p, _ in walk)
        out, r0 = [], lo
        for blk in walk:
            p = blk[1]
            cut = [blk]
            if half < p < P and (wide == 1 or not is_row):
                cut = flat_walk(rdims, r0, r0 + half, P, 1) + flat_walk(rdims, r0 + half, r0 + p,
                                                                        P, 1)  # fmt: skip
                steps = sum(self._steps(q, d, size, is_row) for _, q, _ in cut)
                cut = cut if steps < self._steps(p, d, size, is_row) else [blk]
            out += cut
            r0 += p
        return out

    def _steps(self, p: int, d: int, size: int, is_row: bool) -> int:
        """Element-steps a partition of a block of p rows of d on its queues: each of its
        chunks' transfers the larger of its columns and a transfer's setup in steps (a queue
        sets up one transfer while the one before it moves its data, `balance.dma_queues`);
        `folded`'s tails, on queues of their own, FIXED each."""
        dma, P = self.cfg.core.dma, self.P
        step = P // dma.engines * self.fdt.itemsize / dma.engine_bandwidth  # ns, a column
        setup = (dma.transfer_setup + (dma.engines - 1) * dma.engine_stagger) / step
        if 2 * p > P:
            return sum(max(min(size, d - c0), setup) for c0 in range(0, d, size))
        k, _, f = self._fold(p, d, size, is_row)
        pieces = [min(k * f, d - c0) for c0 in range(0, d, k * f)]
        return sum(max(w // k, setup) + (FIXED if w % k else 0) for w in pieces)

    def _fold(self, p: int, d: int, size: int, is_row: bool) -> tuple[int, int, int]:
        """(k, n, f) of `folded`: k pieces a row, n chunks of k f columns; for a row f at most
        FOLD_BYTES a partition (the DMA's full rate, `elementwise.FREE`), so the first block
        waits for a short spread: [64, 8128] fp32 in chunks of 1355 columns took 17.1 us, of
        1016 16.1 us, of 508 17.0 us."""
        k = self.P // p
        most = min(size, FOLD_BYTES // self.vdt.itemsize) if is_row else size
        n = -(-d // (k * most))
        return k, n, -(-d // (n * k))

    def folded(self, p: int, d: int, size: int, cols, index: tuple, is_row: bool) -> None:
        """A block of p <= 64 rows (`index`; `cols(c0, c)` its columns [c0, c0 + c)) folded
        onto k = 128 // p partitions a row (module doc): chunks of k f columns as [p k, f]
        tiles, f <= `size`, partition j holding row j // k's piece j % k; the row's chunk
        loaded as [k, f] and put on the pieces' partitions by a matmul with the selector T
        (T[m, j] = 1 where j % k = m), the column widened once by S (S[i, j] = 1 where
        j // k = i); a chunk's last columns that do not fill k pieces as [p, c] with the
        row's piece spread (or the column as is)."""
        b, P = self.b, self.P
        k, n, f = self._fold(p, d, size, is_row)
        q, f32 = p * k, dtype("float32")
        big = (P, size)
        if is_row:
            sel = self._selector(k, q, True)
        else:
            c = ap(self._buf("c", (P, 1), self.vdt), slice(0, p), slice(0, 1))
            src = ap(self.vec, *index)
            b.emit(DmaCopy, [src], [c], src=src, dst=c, queue=self.side[self.n])
            ps = ap(b.psum("fold", (P, 1), f32), slice(0, q), slice(0, 1))
            sel = self._selector(p, q, False)
            b.emit(Matmul, [sel, c], [ps], stationary=sel, moving=c, dst=ps)
            cw = ap(self._buf("cw", (P, 1), self.vdt), slice(0, q), slice(0, 1))
            b.emit(TensorCopy, [ps], [cw], src=ps, dst=cw)
            b.release(ps.name)
        step = min(self.cfg.core.tensor.moving_free_max, self.cfg.core.psum.bank_bytes // 4)
        banks, turn = [], 0
        for c0 in range(0, d, k * f):
            w = min(k * f, d - c0)
            fc, tail = w // k, w % k
            if fc and is_row:
                vk = ap(self._buf("vk", (P, size), self.vdt, 2, own=True), slice(0, k),
                        slice(0, fc))  # fmt: skip
                src = ap(self.vec, *self.lead, slice(c0, c0 + k * fc))
                b.emit(DmaCopy, [src], [vk], src=src, dst=vk, queue=self.side[self.n])
                wt = self._buf("wf", big, self.vdt, 2, own=True)
                for s0 in range(0, fc, step):
                    sw = min(step, fc - s0)
                    if len(banks) < 2:  # two banks in turn: the next matmul runs during a copy
                        banks.append(b.psum("fold", (P, min(step, size)), f32))
                    ps = ap(banks[turn % 2], slice(0, q), slice(0, sw))
                    turn += 1
                    mv = ap(vk.name, slice(0, k), slice(s0, s0 + sw))
                    b.emit(Matmul, [sel, mv], [ps], stationary=sel, moving=mv, dst=ps)
                    o = ap(wt, slice(0, q), slice(s0, s0 + sw))
                    pin = self.pins.get((wt, s0), (V, S))  # as `spread`'s
                    self.pins[(wt, s0)] = (self.sp.emit(TensorCopy, [ps], [o], pin, src=ps, dst=o),)
                wa = ap(wt, slice(0, q), slice(0, fc))
                self.block(cols(c0, k * fc), (q, fc), big, lambda x, o, wa=wa: self.tt(x, wa, o))
            elif fc:
                self.block(cols(c0, k * fc), (q, fc), big, lambda x, o, cw=cw: self.ts(x, cw, o))
            if not tail:
                continue
            t0 = c0 + k * fc
            if is_row:
                src = ap(self.vec, *self.lead, slice(t0, t0 + tail))
                tw = self._buf("tw", (P, tail), self.vdt, 1, own=True)
                spread(b, self.cfg, [(src, tail)], self.vdt, "", tile=tw, queue=self.side[0],
                       slot=2)  # fmt: skip
                wa = ap(tw, slice(0, p), slice(0, tail))
                self.block(cols(t0, tail), (p, tail), big, lambda x, o, wa=wa: self.tt(x, wa, o))
            else:  # on the small blocks' queues: its transfers' setups overlap the chunks' own
                # (a row's tail waits for its piece's spread anyway: there 0.5-1% slower)
                op = lambda x, o, c=c: self.ts(x, c, o)  # noqa: E731
                self.block(cols(t0, tail), (p, tail), (P, tail), op, True)
        b.release(*banks)

    def _selector(self, rows: int, q: int, by_piece: bool) -> Ap:
        """The [rows, q] 0/1 matrix of `folded` (made once an op): T (rows = k; by_piece)
        from a [k, k] identity repeated along the free dim by copies, or S (rows = p),
        ones where rows * i <= j < rows * i + q / rows, by two affine selects."""
        b = self.b
        key = f"bc.sel:{rows}:{q}:{by_piece}:{self.vdt.name}"
        if key in b.scratch:
            return ap(b.scratch[key], slice(0, rows), slice(0, q))
        t = b.scratch[key] = b.tile("fold_sel", "sbuf", (rows, q), self.vdt)
        if by_piece:
            eye = ap(t, slice(0, rows), slice(0, rows))
            b.emit(Memset, [], [eye], dst=eye, value=0.0, engine=G)
            b.emit(AffineSelect, [eye], [eye], on_true=eye, dst=eye, on_false=1.0,
                   cmp="not_equal", start=0, partition_step=1, step=-1)  # fmt: skip
            w = rows
            while w < q:
                n = min(w, q - w)
                s0, o = ap(t, slice(0, rows), slice(0, n)), ap(t, slice(0, rows), slice(w, w + n))
                b.emit(TensorCopy, [s0], [o], src=s0, dst=o)
                w += n
            return ap(t)
        k = q // rows
        a = ap(t)
        b.emit(Memset, [], [a], dst=a, value=1.0, engine=G)
        b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=0.0, cmp="greater_equal",
               start=0, partition_step=-k, step=1)  # fmt: skip
        b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=0.0, cmp="greater_equal",
               start=k - 1, partition_step=k, step=-1)  # fmt: skip
        return a

    def few(self, rdims, spans: dict, d, is_row) -> None:
        """The elements [a, z) of each row r of out (`spans`: r -> (a, z), rows in order), each
        row's part walked flat; the row's blocks (once for all the rows that take them whole)
        or the column's values loaded once (module doc)."""
        r0, r1 = min(spans), max(spans) + 1
        cols = None
        if not is_row:  # this core's rows' values, on every partition
            runs = [(ap(self.vec, *ix), n) for ix, n in row_blocks(rdims + (1,), r1 - r0,
                                                                    (r0, r1))]  # fmt: skip
            cols = spread(self.b, self.cfg, runs, self.vdt, "bc_col", queue=self.side[0])
        a0, z0 = min(a for a, _ in spans.values()), max(z for _, z in spans.values())
        parts = []  # (row, [a, z)) the pieces below cover only in part: walked on their own
        pieces = flat_walk((d,), a0, z0, self.P, self.free)
        # a piece on fewer partitions (a row part's last elements) first: its transfers' fixed
        # costs hide behind the full pieces' instead of trailing after them
        pieces.sort(key=lambda piece: piece[1] == self.P)
        self.queues(max(f for _, _, f in pieces))
        for j, (ix, p, f) in enumerate(pieces):
            s0 = ix[0].start if isinstance(ix[0], slice) else ix[0]
            s1 = s0 + p * f
            rows = [r for r, (a, z) in spans.items() if a <= s0 and s1 <= z]
            parts += [(r, max(a, s0), min(z, s1)) for r, (a, z) in spans.items()
                      if a < s1 and s0 < z and r not in rows]  # fmt: skip
            if p < self.P and len(rows) > 1:
                self.tails(rdims, d, s0, s1, rows, is_row)
                continue
            self._rows_of(rdims, ix, p, f, rows, r0, j, cols if not is_row else None)
        for r, a, z in parts:
            for ix, p, f in flat_walk((d,), a, z, self.P, self.free):
                self._rows_of(rdims, ix, p, f, [r], r0, r, cols if not is_row else None)

    def tails(self, rdims, d: int, s0: int, s1: int, rows: list, is_row: bool) -> None:
        """Columns [s0, s1) (a piece on fewer than 128 partitions: the last elements of rows
        walked flat) of each of `rows` together, a row to a partition ([n, s1 - s0] blocks of
        up to 128 rows), with the row's piece spread once or the rows' column values loaded
        (they were a block a row: 50 rows of 20971 bf16 took 50 loads of [107, 1] on one
        queue, 2 us each, 16% of the DMA bound)."""
        b, w = self.b, s1 - s0
        wa = None
        if is_row:
            src = ap(self.vec, *self.lead, slice(s0, s1))
            tw = self._buf("tw", (self.P, w), self.vdt, 1, own=True)
            wa = spread(b, self.cfg, [(src, w)], self.vdt, "", tile=tw, queue=self.side[0],
                        slot=2)  # fmt: skip
        runs, start = [], 0
        for i in range(1, len(rows) + 1):  # runs of consecutive rows
            if i == len(rows) or rows[i] != rows[i - 1] + 1:
                runs.append((rows[start], rows[i - 1] + 1))
                start = i
        for ra, rb in runs:
            for index, n in row_blocks(rdims + (d,), self.P, (ra, rb)):
                lead = (*index, *(slice(None),) * (len(rdims) - len(index)))
                if is_row:
                    t = ap(wa, slice(0, n), slice(0, w))
                    op = lambda x, o, t=t: self.tt(x, t, o)  # noqa: E731
                else:
                    t = ap(self._buf("c", (self.P, 1), self.vdt), slice(0, n), slice(0, 1))
                    src = ap(self.vec, *lead, slice(0, 1))
                    b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=self.side[self.n])
                    op = lambda x, o, t=t: self.ts(x, t, o)  # noqa: E731
                self.block((*lead, slice(s0, s1)), (n, w), (self.P, w), op, True)

    def _rows_of(self, rdims, ix, p, f, rows, r0, j, cols) -> None:
        """Piece `ix` ([p, f] elements of a row) of each of `rows`: with the row's piece loaded
        once, or with each row's column value (`cols`, spread)."""
        small = p < self.P
        big = (self.P, f) if small else (self.P, self.free)
        if cols is None and rows:
            kind = "ws" if small else "w"
            w = ap(self._buf(kind, big, self.vdt, ROW_SLOTS, own=True), slice(0, p), slice(0, f))
            src = ap(self.vec, *self.lead, *ix)
            self.b.emit(DmaCopy, [src], [w], src=src, dst=w, queue=self.side[j])
        for r in rows:
            row = tuple(int(i) for i in np.unravel_index(r, rdims)) if rdims else ()
            if cols is None:
                op = lambda x, o, w=w: self.tt(x, w, o)  # noqa: E731
            else:
                cc = ap(cols, slice(0, p), slice(r - r0, r - r0 + 1))
                op = lambda x, o, cc=cc: self.ts(x, cc, o)  # noqa: E731
            self.block((*row, *ix), (p, f), big, op, small)


def _after(stream: Stream, n: int) -> Stream:
    """The queues of `stream` after its first `n` (its last one when it has no more)."""
    if stream.count <= n:
        return Stream(stream.first + stream.count - 1, 1)
    return Stream(stream.first + n, stream.count - n)
