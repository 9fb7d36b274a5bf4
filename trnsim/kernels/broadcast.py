"""Broadcasts: a [D] row spread over all partitions (`spread_rows`), and binary elementwise ops
of a tensor and a row ([D] or [1, ..., D]) or a column (out's shape with a last dim of 1)
broadcast over it (`lower_broadcast`).

NKI kernels broadcast along partitions on TensorE, as a ones column times the row (`matmul`
with K = 1), since DMA copies element for element. Out's rows (all dims but the last; this
core's share, `layout.core_rows`) are walked in one of three layouts, each keeping the
broadcast operand cheap:

- short rows (D up to FREE / 2): rows grouped, up to FREE / D of them to a partition, by
  `layout.flat_blocks` over the row dims (so rows fill the 128 partitions, and a remainder its
  own small tile). A row is spread once, repeated along the free dim to [128, per x D]; a
  column block is loaded as [p, per] (each partition's values contiguous) and widened to
  [p, per, D] by ScalarE copies doubling along the last dim, then a `tensor_tensor`;
- long rows (D above FREE / 2, enough rows): up to 128 rows a block, one to a partition, in
  even column chunks of at most FREE; a row's chunk is spread once and serves every row block
  (chunks outside, row blocks inside); a column is loaded once per row block, a `tensor_scalar`
  operand;
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
    Ap,
    DmaCopy,
    Engine,
    Matmul,
    Memset,
    TensorCopy,
    TensorScalar,
)
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import flat_ranges, flat_walk, row_blocks
from trnsim.kernels.queues import Queues, Stream
from trnsim.kernels.spread import G, Spread, V

__all__ = ["spread_rows", "spread", "lower_broadcast"]

FREE = 2048  # elements per partition of a block at most (as `elementwise.FREE`)
DEPTH = 4  # rotating buffers per operand (as `elementwise.DEPTH`)
WIDEN = (Engine.SCALAR, Engine.GPSIMD)  # the engines that widen columns
ROWWISE = 128  # elements of a row from which a column goes by one tensor_scalar per row
SBUF_SHARE = 0.25  # of a partition for the op's buffers (as `elementwise.SBUF_SHARE`)
ROW_SLOTS = 4  # rotating buffers of the row's pieces (few long rows): loaded ahead of their use


def spread_rows(b: KernelBuilder, cfg: ChipConfig, name: str, d: int) -> str:
    """A [128, d] tile (of the tensor's dtype) holding tensor `name` (d elements) on every
    partition: loaded into one partition, multiplied by a ones column on TensorE (K = 1) into
    PSUM, copied out."""
    return spread(b, cfg, [(ap(name), d)], b.tensors[name].dtype, f"{name}_rows")


def spread(
    b: KernelBuilder, cfg: ChipConfig, srcs: list[tuple[Ap, int]], dt, base: str,
    repeat: int = 1, tile: str | None = None, queue: int | None = None,
) -> str:  # fmt: skip
    """A [128, repeat x d] tile (`tile`, or a new one named after `base`) holding on every
    partition the d elements that `srcs` (operands and their element counts) select, in
    order, `repeat` times along the free dim: loaded into one partition (on `queue`, by
    default the first load queue), spread by TensorE (a ones column times the row, K = 1) in
    PSUM banks, copied out, then doubled along the free dim by copies."""
    P, f32 = cfg.core.sbuf.partitions, dtype("float32")
    d = sum(n for _, n in srcs)
    row = b.tile("row", "sbuf", (1, d), dt)
    ones = b.tile("ones", "sbuf", (1, P), dt)
    out = tile or b.tile(base, "sbuf", (P, repeat * d), dt)
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
        b.emit(TensorCopy, [acc], [o], src=acc, dst=o)
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
    if len(runs) > 1:  # the same columns of each row (`layout.by_columns`)
        k.few(rdims, {a // d: (a % d, a % d + z - a) for a, z in runs}, d, is_row)
        return
    ((lo, hi),) = runs
    rows = hi // d - lo // d
    if lo % d or hi % d or rows * (d // k.P + 256) < d:  # few long rows, or a share cut in one
        spans = {r: (max(lo - r * d, 0), min(hi - r * d, d)) for r in range(lo // d, -(-hi // d))}
        k.few(rdims, spans, d, is_row)
    elif 2 * d <= k.free:
        k.short(rdims, lo // d, hi // d, d, is_row)
    else:
        k.long(rdims, lo // d, hi // d, d, is_row)


class _Kernel:
    """One broadcast op's blocks: loads of `full`, the op against the broadcast operand,
    stores, through DEPTH rotating buffers (in `full`'s buffer when out has its dtype)."""

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
        room = int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) // per_col
        self.free = max(1, min(FREE, room))
        qs, nq = Queues(cfg), dma_queues(cfg, self.free * self.fdt.itemsize)
        self.loads, self.stores = qs.loads(0, 1 / 2).take(nq), qs.stores().take(nq)
        # blocks on fewer partitions (a row part's last elements) on queues of their own: their
        # setups overlap the full blocks' transfers instead of queueing before them
        self.small = (_after(qs.loads(0, 1 / 2), nq), _after(qs.stores(), nq))
        self.side = qs.loads(1 / 2, 1)  # the row's or column's loads, not behind full's
        self.n = 0  # blocks so far
        self.turns = {}  # buffers so far of each kind with a count of its own (`_buf`)
        self.sp = Spread(b, cfg)  # each pass on the engine that finishes it first

    def _buf(self, kind: str, shape: tuple, dt, slots: int = DEPTH, own: bool = False) -> str:
        """Buffer `kind`'s next slot in turn: by the blocks so far, or when `own` by the
        buffers of that kind so far."""
        n = self.n
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
        if is_row:
            w = spread(self.b, self.cfg, [(ap(self.vec), d)], self.vdt, "bc_row", per)
            for index, p, f in blocks:
                wa = ap(w, slice(0, p), slice(0, f * d))
                self.block(index, (p, f * d), (self.P, per * d), lambda x, o, wa=wa: self.tt(
                    x, wa, o))  # fmt: skip
            return
        for index, p, f in blocks:
            c = ap(self._buf("c", (self.P, per), self.vdt), slice(0, p), slice(0, f))
            src = ap(self.vec, *index)
            self.b.emit(DmaCopy, [src], [c], src=src, dst=c, queue=self.side[self.n])
            e = self._buf("e", (self.P, per, d), self.vdt)
            self.block(index, (p, f, d), (self.P, per, d), lambda x, o, c=c, e=e, p=p, f=f:
                       self._widened(x, o, c, e, p, f, d))  # fmt: skip

    def _widened(self, x, o, c, e, p, f, d) -> None:
        """x <alu> the column c [p, f] along [p, f, d]: for rows of `ROWWISE` or more elements
        one `tensor_scalar` per row of a partition (c's column j its operand), VectorE and
        GpSimd in turn; for shorter rows c widened to [p, f, d] in tile `e` (ScalarE copies,
        doubling along the last dim, on ScalarE or GpSimd: the one that would finish the block's
        copies first), then one `tensor_tensor`."""
        rows, grp = slice(0, p), slice(0, f)
        if d >= ROWWISE:
            for j in range(f):
                xj, oj = ap(x.name, rows, j, slice(0, d)), ap(o.name, rows, j, slice(0, d))
                cj = ap(c.name, rows, slice(j, j + 1))
                self.ts(xj, cj, oj)
            return
        first = ap(e, rows, grp, slice(0, 1))
        steps = [(c, first)]
        w = 1
        while w < d:
            n = min(w, d - w)
            steps.append((ap(e, rows, grp, slice(0, n)), ap(e, rows, grp, slice(w, w + n))))
            w += n
        cost = {g: sum(self.sp.cost(TensorCopy, g, {"src": a, "dst": t}) for a, t in steps)
                for g in WIDEN}  # fmt: skip
        eng = min(WIDEN, key=lambda g: self.sp.load[g] + cost[g])  # a block's copies on one
        for a, t in steps:
            self.b.emit(TensorCopy, [a], [t], src=a, dst=t, engine=eng)
        self.sp.add(eng, cost[eng])
        self.tt(x, ap(e, rows, grp, slice(0, d)), o)

    def long(self, rdims, lo, hi, d, is_row) -> None:
        """Up to 128 rows a block, in column chunks; a row's chunk spread once (module doc)."""
        chunks = -(-d // self.free)
        size = -(-d // chunks)
        blocks = flat_walk(rdims, lo, hi, self.P, 1) if rdims else [((), 1, 1)]
        big = (self.P, size)

        def cols(index: tuple, c0: int, c: int) -> tuple:  # index: rows; then a column chunk
            return (*index, *(slice(None),) * (len(rdims) - len(index)), slice(c0, c0 + c))

        if is_row:
            for j, c0 in enumerate(range(0, d, size)):
                c = min(size, d - c0)
                key = f"bc.w{j % 2}:{self.vdt.name}:{size}"
                if key not in self.b.scratch:
                    self.b.scratch[key] = self.b.tile("bc_row", "sbuf", big, self.vdt)
                src = ap(self.vec, *self.lead, slice(c0, c0 + c))
                w = spread(self.b, self.cfg, [(src, c)], self.vdt, "", tile=self.b.scratch[key],
                           queue=self.side[j])  # fmt: skip
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
        for j, (ix, p, f) in enumerate(pieces):
            s0 = ix[0].start if isinstance(ix[0], slice) else ix[0]
            s1 = s0 + p * f
            rows = [r for r, (a, z) in spans.items() if a <= s0 and s1 <= z]
            parts += [(r, max(a, s0), min(z, s1)) for r, (a, z) in spans.items()
                      if a < s1 and s0 < z and r not in rows]  # fmt: skip
            self._rows_of(rdims, ix, p, f, rows, r0, j, cols if not is_row else None)
        for r, a, z in parts:
            for ix, p, f in flat_walk((d,), a, z, self.P, self.free):
                self._rows_of(rdims, ix, p, f, [r], r0, r, cols if not is_row else None)

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
