"""One norm's tiles and its stages per block, as `norms` lowers layer_norm and rms_norm
(`NormStages`: stage 1 load, shift and statistics; 2 mean, rstd and the normalisation; 3 the
weight, the bias and the store; 4 TensorE's bias), with the knobs `norms.VARIANTS` set on it.
The module doc of `norms` says what each stage does and why."""

from __future__ import annotations

import math

from trnsim.dtypes import dtype
from trnsim.isa import (
    Activation,
    AffineSelect,
    Ap,
    BnAggr,
    BnStats,
    DmaCopy,
    Matmul,
    Memset,
    ScalarTensorTensor,
    TensorCopy,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels import norm_tail
from trnsim.kernels.builder import ap
from trnsim.kernels.norm_affine import PE_TILES
from trnsim.kernels.norm_pad import correct as pad_correct
from trnsim.kernels.norm_pad import load_main, load_short, pad_of, rows_of, store_rows
from trnsim.kernels.norm_plan import Lane
from trnsim.kernels.norm_sums import square_stats, sum_stats
from trnsim.kernels.norm_tsums import applies as tsum_applies
from trnsim.kernels.norm_tsums import row_mean
from trnsim.kernels.queues import Queues
from trnsim.kernels.row_plan import G, S, Spread, V, runs

__all__ = ["NormStages", "BUFS", "F_BUFS", "LONG_ROW", "OUT_BUFS", "S_GROUP"]

BUFS = 6
LONG_ROW = 8192  # rows this long: two lanes (and `norms.LONG_SHARE` of SBUF)
F_BUFS = 2  # buffers of TensorE's copies out (the bias added on TensorE)
S_GROUP = 4  # ... those of the last `srows` of every S_GROUP row slots (`NormStages.s_slot`)
STD_COLS = (V,)  # `std_scales`' [p, 2u] steps' engines (trn2 LNC 2, bf16 rows of 64K: 63.1
# us; GpSimd 66.6, either as the list schedule picks 64.3)
STD_DIAGS = ((V,), (G,))  # ... and its dh's and C's (63.1 us; either as the list schedule picks
# 66.5)
SUM_COMBINE = True  # `NormStages.sum_combine` (VectorE's [p, 1] steps 7 -> 4 a block): trn2
# LNC 2, 16 MiB, fp32 rows of 12288 (16 pieces of 768, 22 blocks a core; VectorE busy 49.8 us)
# 65.6 -> 57.7 us, 14336 63.6 -> 58.3, 24576 64.4 -> 57.4, 32000 62.0 -> 58.2
PSUM_SHIFT = True  # rows in pieces whose shift is all ScalarE's: -x0 its bias from PSUM (no
# [p, 1] ScalarE step a block): trn2 LNC 2, 16 MiB, with SUM_COMBINE, fp32 rows of 12288 57.7
# -> 56.6 us, 14336 58.3 -> 55.3, 24576 57.4 -> 55.4, 32000 58.2 -> 54.0; not for tiles on part
# of the partitions (`norms._any_divisor`): fp32 rows of 50257 (29 pieces, 116 partitions) were
# estimated 68.9 us so in pieces and ran 77.5 (with a remainder column, taken otherwise: 67.9)
LAST_HALVES = True  # a lane's store of the last block (bias tiles `banked`) in two by partitions
# on two queues (`last_halves`)
OUT_BUFS = 3  # ... the blocks whose output pieces rotate through tiles of their own


class NormStages:
    """One norm's tiles, its plan (`norm_plan.plan`) and its three stages per block (`first`,
    `second`, `third`). A block is [p, per, D]: `per` rows to each of p partitions; lane i's
    columns of it are tile x{i} ([p, per, hi - lo])."""

    def __init__(self, b, cfg, op, x, out, d, eps):
        self.b, self.cfg, self.op, self.x, self.out, self.d, self.eps = b, cfg, op, x, out, d, eps
        self.P, self.f32 = cfg.core.sbuf.partitions, dtype("float32")
        self.xdt, self.odt = b.tensors[x].dtype, b.tensors[out].dtype
        self.layer = op == "layer_norm"
        # module doc; in place, so x's own dtype must hold the shifted values exactly
        self.shift = self.layer and self.odt.itemsize >= 4 and self.xdt.itemsize >= 4
        self.bn = cfg.core.vector.bn_stats_max_free
        self.most = cfg.core.vector.dve_max_free_elements
        self.per, self.bufs, self.blocks, self.c = 1, 1, 0, 0
        self.plan_per = 1  # the rows a partition of the layout `_plan` costs
        self.plan_blocks = 0  # ... and its blocks (0: k.blocks)
        self.long_row = LONG_ROW
        self.small_waits = True  # the plan costs its [p, per] steps as waiting on a semaphore
        self.small_after = True  # ... and as reading what the step before wrote (VectorE's
        # commit latency; the list schedule may put another block's work between them)
        self.pe_pieces = False  # TensorE may add the bias of rows in pieces (not in segments)
        self.in_pieces = False  # rows that fit a partition lowered in pieces all the same
        self.pe_fp32 = False  # ... an fp32 bias of rows that fit (its two fp32 matmuls take
        # TensorE 8 cycles an element; a 16-bit one always may)
        self.weight = self.bias = None
        self.lanes: list[Lane] = []  # the current block's (`at`)
        self.block_lanes: list[list[Lane]] = []  # each block's
        self.rows: dict[str, str] = {}  # weight and bias spread over the partitions
        self.flex = False  # the list schedule picks the engine of each normalisation, weight
        # and bias instruction (`schedule.Scheduled`: the same values on any)
        self.flex_norm = "SVG"  # ... the normalisation's engines it picks from
        self.dma_parts = False  # the estimate's transfers on their partitions' DMA engines
        # only (`schedule.Scheduled`)
        self.fluid = False  # ... its transfers sharing the DMA engines as the chip's do
        self.search = 0  # ... a descent over `flex`'s choices of at most this many schedules
        self.psum_combine = False  # ... the row's mean and variance read from PSUM (`combine`)
        self.psum_cols: dict = {}  # (key, buffer) -> its PSUM tile (`psum_col`)
        self.piece_bufs = BUFS  # buffers of rows in pieces
        self.piece_big = False  # ... loaded as BIG_LOADS are
        self.row_tiles = False  # (a variant's tag: rows of a tile each, `norms.ROW_TILES`)
        self.psum_affine = False  # fp32 rows in pieces: VectorE's weight and bias out of PSUM
        self.psum_rows: dict[str, str] = {}  # ... copies of `rows` there (`_psum_copy`)
        self.psum_width = 1 << 30  # ... the columns there (`_spread_psum`)
        self.psum_lo = 0  # ... from this one
        self.fit_psum = False  # fp32 rows that fit: their weight and bias too (`_spread_psum`)
        self.sub_lanes = 0  # lanes cut in sub-lanes of at most this many columns (`_split`)
        self.c_share = 1.0  # ScalarE's statistics take at most this share of the columns
        self.c_min = 0.0  # ... and at least this one
        self.bufs_most = BUFS  # buffers of rows that fit, at most
        self.pe_ok = self.pe_bias = False  # TensorE may add (adds) the bias
        self.shifts = Spread({V: 1.0})
        self.spread = lambda: None  # emits the weight and bias spread (`lower_norm`)
        self.spread_first = False  # ... after the first block's stage 1
        self.spread_at = 0  # ... (or this block's; a row in segments' stages then behind it)
        self.rows_first = False  # ... after every row in segments' stage 1 (`_emit_rows_first`)
        self.seg_rows: dict[str, list[str]] = {}  # ... then in a tile a segment (`_segment_rows`)
        self.lane_rows: dict[str, list[str]] = {}  # ... or a lane (`piece_lanes`, `_lane_rows`)
        self.seg_affine = False  # rows in segments: their weight and bias so, behind the first
        self.sums = False  # ... (16-bit) their statistics as sums (`norm_sums`)
        self.seg_cycle: tuple[str, ...] = ()  # ... segment m's engines (`norms._seg_cycle`)
        self.tail_weights = 0  # ... the last this many segments' weight on VectorE
        self.pieces = None  # a `row_pieces.PieceLayout`: rows in pieces, d the piece
        self.groups = None
        self.lag = None  # the stages' lags behind stage 1, in blocks (`_emit`), if set
        self.pipe = False  # pipelined (module doc): output pieces, the weight's and bias'
        # engines picked by the list schedule, the first and last blocks cut smaller
        self.s_share = 0.0  # ... or (instead of the last) this share of a block's row slots'
        # statistics on ScalarE, whole rows (`srows`)
        self.out_pieces = 0  # columns of an output piece, each a tile of its own (`piece`)
        self.srows = 0  # row slots in S_GROUP whose statistics ScalarE takes (`s_slot`)
        self.tper = 1  # rows a partition of the tiles (the largest block's)
        self.block_per: list[int] = []  # each block's rows a partition, if they differ
        self.stored = 0  # output pieces stored (their queues in turn)
        self.split_first = True  # ... its first block in two lanes (`_lower`)
        self.pe_step = min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)
        self.pslots = 1  # row slots of an output piece (`piece`)
        self.pe_span = 1  # PSUM banks of TensorE's bias tiles (`PeBias.add`)
        self.pe_rstd = False  # pipelined with TensorE's bias: rstd applied by it (`fused`)
        self.stt = False  # 16-bit rows in pieces, TensorE's bias: (x - mean) * weight in one
        # scalar_tensor_tensor (`_third_stt`), rstd applied by TensorE (`stt_scales`)
        self.stt_lo = True  # ... as diag(rstd) in two bf16 parts (hi + lo), not one
        self.split_loads = False  # rows in pieces: a block's load in two halves (`load_halves`)
        self.load_parts = 2  # ... or in this many parts, a queue each
        self.behind: dict = {}  # block -> loads emitted behind its own (`norms._emit`)
        self.affine_at: tuple[int, int] | None = None  # ... the weight's row copies loaded
        # behind block a's loads, the bias' behind block b's (`norms._load_behind`)
        self.piece_lanes = 1  # ... a block's columns in this many lanes (`norms._lower_pieces`)
        self.tail_flex = 0  # `stt`: the last this many blocks' passes on the engine the list
        # schedule picks (`flex`)
        self.stt_std = False  # `stat_group`: rstd as ScalarE's scale as it copies PSUM out,
        # TensorE's identity times the values and C times the bias (`std_scales`)
        self.std_of: dict = {}  # ... each block's rstd, the scale (blocks that take it)
        self.tsums = False  # `stat_group`: the row's mean on TensorE, ScalarE's statistics one
        # pass (`norm_tsums`)
        self.stat_group = 1  # `stt`: this many blocks' [p, 1] steps taken together, each
        # step over their [p, stat_group] columns at once (`_second_group`)
        self.std_rolled = False  # `stt_std` with rows of fewer than 32 pieces too (the row
        # back's sums by `Groups.sum_matrix` rolled, not memsets at partition starts)
        self.stat_slots = 0  # ... their groups' tiles in this many buffers, not `bufs` (two
        # semaphores a buffer: a core has 256; a group's tiles live about bufs / g blocks)
        self.parts_of: dict[int, int] = {}  # each block's partitions (`first`)
        self.nx_psum: dict = {}  # block -> its -x0 in PSUM (`shifted`, PSUM_SHIFT)
        self.pe_tiles = PE_TILES  # rows in pieces: TensorE's bias' PSUM tiles, in turn
        self.tail_copies = 0  # ... the last this many blocks' copies out a bank each, on ScalarE
        # and VectorE in turn (the last copies end sooner: the last store goes sooner)
        self.banked = False  # ... TensorE's bias tiles ordered bank by bank (`PeBias.banked`)
        self.shared: dict[int, set[int]] = {}  # block -> the lanes this core weights, biases
        # and stores (`norm_shared`: a tile both cores of a logical core take; all if absent)
        self.segs: dict[int, tuple[int, int]] = {}  # `fused`: block -> (g, k), its rows in k
        # segments each (`norm_tail`)
        self.tail_tiles: dict = {}  # ... (g, k) -> their tiles (`norm_tail._setup`)
        self.tail_bias: set[int] = set()  # ... the k whose bias segments are loaded
        self.tail_pm = None  # ... their PSUM sums
        # padded pieces' queues (`norm_pad`): the short partitions' loads on the half of the
        # load queues a block's parts leave, the rows' stores on half the store queues, the
        # short partitions' on the other, their pad zeros (a buffer's first loads) on all
        qs = Queues(cfg)
        self.pad_loads, self.pad_zeros = qs.loads(1 / 2, 1), qs.stores()
        self.pad_stores, self.pad_shorts = qs.stores(0, 1 / 2), qs.stores(1 / 2, 1)

    def at(self, n: int) -> None:
        """Block n's lanes (the plan may mix two choices of engines over the blocks) and rows a
        partition."""
        if self.block_per:
            self.per = self.block_per[n]
        if self.block_lanes:
            self.lanes = self.block_lanes[min(n, len(self.block_lanes) - 1)]

    # -- tiles ---------------------------------------------------------------------------------

    def tile(self, key: str, n: int, shape, dt=None) -> str:
        slot = n % (min(F_BUFS, self.bufs) if key.startswith("f") else self.bufs)
        return self.b.scratch_tile(f"norm.{key}{slot}", key, shape, dt or self.f32)

    def lane_tile(self, kind: str, n: int, i: int, p: int, j=None, cols=(0, None)):
        """Lane i's tile `kind` (x: its columns of x; o: its output, x's own when the dtypes
        agree; f: TensorE's copies out) in block n: [p, per, w], or slot j's [p, w]."""
        lane = self.lanes[i]
        if kind == "o" and self.odt == self.xdt:
            kind = "x"
        dt = self.xdt if kind == "x" else self.odt
        t = self.tile(f"{kind}{i}.{lane.lo}.", n, (self.P, self.tper, lane.hi - lane.lo), dt)
        return ap(t, slice(0, p), slice(0, self.per) if j is None else j, slice(*cols))

    @property
    def pad(self) -> int:
        """The elements a row's last piece lacks (`norm_pad`: 0 but for padded pieces)."""
        return pad_of(self.pieces) if self.pieces else 0

    def padded_lane(self, i: int) -> bool:
        """Whether lane i holds the rows' padding (`norm_pad`: the last lane)."""
        return bool(self.pad) and self.lanes[i].hi == self.d

    @property
    def segments(self) -> bool:
        """Whether the rows are in segments (`_lower_pieces`): one lane each."""
        return bool(self.pieces and self.pieces.t > 1)

    @property
    def interleave(self) -> bool:
        """Segments each normalised, weighted and biased in turn (not each pass over all the
        row's segments first), so the first store goes soonest; not with TensorE's bias, whose
        copies out on ScalarE then wait behind the next segment's normalisation."""
        return self.segments and not self.pe_bias

    def xcols(self, lane: Lane) -> tuple[int, int]:
        """Lane's columns of x's rows: its own, or, rows in pieces (k a row's partitions in a
        tile), the row's [lo k, hi k): a segment (columns [s f, (s + 1) f) of each partition)
        the row's [s 128 f, (s + 1) 128 f), a lane of a tile of whole rows (`piece_lanes`)
        partition i's columns [lo k + i (hi - lo), lo k + (i + 1) (hi - lo))."""
        if self.pieces:
            kk = min(self.pieces.k, self.P)
            return lane.lo * kk, lane.hi * kk
        return lane.lo, lane.hi

    def lane_cols(self, lo: int, hi: int):
        """(lane, lane-local lo, hi) of the lanes' columns covering [lo, hi)."""
        for i, lane in enumerate(self.lanes):
            a, z = max(lo, lane.lo), min(hi, lane.hi)
            if a < z:
                yield i, a - lane.lo, z - lane.lo

    def col(self, key: str, n: int, p: int, j=None):
        """Block n's [p, per] column tile `key`, or its slot j ([p, 1])."""
        t = self.tile(key, n, (self.P, self.tper))
        return ap(t, slice(0, p), slice(0, self.per) if j is None else slice(j, j + 1))

    @property
    def chunks(self) -> list[tuple[int, int, int]]:
        """VectorE's bn_stats chunks: (lane, lo, hi) of up to bn_stats' limit, from c on."""
        return [(i, lo + a, lo + z) for i, lo, hi in self.lane_cols(self.c, self.d)
                for a, z in runs(hi - lo, self.bn)]  # fmt: skip

    @property
    def spieces(self) -> list[tuple[int, int, int]]:
        """ScalarE's pieces of the first c columns, one per lane they touch."""
        return list(self.lane_cols(0, self.c))

    @property
    def width(self) -> int:
        """A row's statistics: six per bn_stats chunk, a triple per ScalarE piece."""
        return 6 * len(self.chunks) + (3 * len(self.spieces) if self.layer else 0)

    def stat(self, n: int, p: int, j=None, cols=(0, None)):
        """Block n's statistics ([p, per, width]), or slot j's ([p, width]), over cols."""
        t, a = self.stile(f"st{self.c}.{self.width}.", n, max(1, self.width))
        return ap(t, slice(0, p), slice(a, a + self.per) if j is None else a + j, slice(*cols))

    def agg(self, n: int, p: int, k: int, j=None):
        """Block n's mean (k = 0) or variance (k = 1): [p, per], or slot j's [p, 1]."""
        t, a = self.stile("ag", n, 2)
        if j is None:
            return ap(t, slice(0, p), slice(a, a + self.per), k)
        return ap(t, slice(0, p), a + j, slice(k, k + 1))

    def stile(self, key: str, n: int, width: int) -> tuple[str, int]:
        """(tile, first row slot) of block n's statistics tile `key` ([P, per, width]); with
        `stat_group` (one row slot a block) the group's tile, a row slot a block of it."""
        g = self.stat_group
        if g == 1:
            return self.tile(key, n, (self.P, self.tper, width)), 0
        return self.gtile(key, n, (self.P, g, width)), n % g

    def gtile(self, key: str, n: int, shape) -> str:
        """Block n's `stat_group` tile `key` (`stat_slots` buffers of it, if set)."""
        if not self.stat_slots:
            return self.tile(key, n // self.stat_group, shape)
        return self.b.scratch_tile(f"norm.{key}{self.gindex(n)}", key, shape, self.f32)

    def gindex(self, n: int) -> int:
        """Block n's group's buffer of the `stat_group` tiles (`gtile`, `gpsum`)."""
        return n // self.stat_group % (self.stat_slots or self.bufs)

    def gcol(self, key: str, n: int, p: int, whole: bool = False):
        """Block n's [p, 1] column `key` of a `stat_group` tile ([p, blocks of the group]:
        `whole`); without one, `col`."""
        g = self.stat_group
        if g == 1:
            return self.col(key, n, p, None if whole else 0)
        t = self.gtile(f"g{key}", n, (self.P, g))
        lo = n - n % g
        cols = slice(0, min(g, self.blocks - lo)) if whole else slice(n % g, n % g + 1)
        return ap(t, slice(0, p), cols)

    @property
    def halves(self) -> bool:
        """A row of one bn_stats chunk, several to a partition: its halves are combined for
        the whole block at once (`_halves`) instead of a `bn_aggr` per row."""
        return (len(self.chunks) == 1 and not self.c and self.plan_per >= 4 and self.d > 1
                and not self.srows)  # fmt: skip

    def s_slot(self, j: int) -> bool:
        """Whether ScalarE takes row slot j's statistics (`row_stats`): the last `srows` of
        each S_GROUP slots."""
        return bool(self.srows) and j % S_GROUP >= S_GROUP - self.srows

    # -- stage 1: load, shift, statistics ------------------------------------------------------

    def parts(self, rows: int) -> int:
        """The partitions a block of `rows` rows takes."""
        return rows * min(self.pieces.k, self.P) if self.pieces else rows // self.per

    def first(self, n: int, index: tuple, rows: int) -> None:
        if n in self.segs:
            norm_tail.first(self, n, index, rows)
            return
        self.at(n)
        b, p = self.b, self.parts(rows)
        self.parts_of[n] = p
        full = tuple(index) + (slice(None),) * (len(b.tensors[self.x].shape) - 1 - len(index))
        # (`split_loads`: a block a range of rows of x's last batch dim, as `load_halves` cuts)
        halves = (self.split_loads and self.pieces and (len(self.lanes) == 1 or not self.segments)
                  and rows > 1 and len(index) == len(b.tensors[self.x].shape) - 1
                  and isinstance(index[-1], slice))  # fmt: skip
        for i, lane in enumerate(self.lanes):
            if halves or self.padded_lane(i):  # (`split_loads`; `norm_pad`'s lane: its own)
                self.load_halves(n, index, rows, p, i)
                continue
            xa = self.lane_tile("x", n, i, p)
            src = (
                ap(self.x, *index)
                if len(self.lanes) == 1
                else ap(self.x, *full, slice(*self.xcols(lane)))
            )
            b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=self.loads[len(self.lanes) * n + i])
        if self.sums:  # (`norm_sums`)
            square_stats(self, n, p)
            return
        if self.shift:
            self.shifted(n, p, self.shifts())
        if self.srows:
            self.row_stats(n, p)
        for j in range(self.per):
            if self.s_slot(j):
                continue
            for q, (i, lo, hi) in enumerate(self.chunks):
                xs, st = (
                    self.lane_tile("x", n, i, p, j, (lo, hi)),
                    self.stat(n, p, j, (6 * q, 6 * q + 6)),
                )
                b.emit(BnStats, [xs], [st], src=xs, dst=st)
        if self.c and tsum_applies(self):  # (`norm_tsums`)
            row_mean(self, n, p)
        elif self.c:
            self.scalar_stats(n, p)

    def load_cuts(self, rows: int) -> list[int]:
        """The first row of each of a block's `load_parts` parts (`load_halves`), and rows."""
        m = max(1, min(self.load_parts, rows))
        return [rows * i // m for i in range(m + 1)]

    def load_halves(self, n: int, index: tuple, rows: int, p: int, i: int = 0) -> None:
        """Block n's tile of rows in pieces (lane i's) loaded as two copies (`load_parts`), its
        first rows' partitions on one queue and the rest's on another: each copy on DMA engines
        of its own, so a block's load takes the engines whole and the blocks arrive one after
        another, the first soonest (two blocks at once on the two queues shared every engine:
        the first arrived with the second)."""
        b, kk, last = self.b, min(self.pieces.k, self.P), index[-1]
        if self.padded_lane(i):  # (`norm_pad`: a row at a time, the short partitions apart)
            lane, rows, cuts = self.lanes[i], p // kk, self.load_cuts(p // kk)
            xa = self.lane_tile("x", n, i, p)
            w, a = lane.hi - lane.lo, lane.lo * kk + (kk - 1) * (lane.hi - lane.lo)
            each = rows_of(index, b.tensors[self.x].shape[:-1])

            def dst_of(p0, p1, step, c0, c1):
                return ap(xa.name, slice(p0, p1, step), slice(0, 1), slice(c0, c1))

            for r, row in enumerate(each):
                q = next(q for q in range(len(cuts) - 1) if r < cuts[q + 1])
                load_main(b, lambda a, z, row=row: ap(self.x, *row, slice(a, z)), dst_of,
                          lane.lo, w, self.pieces, r, self.loads[q])  # fmt: skip
            load_short(b, lambda r: ap(self.x, *each[r], slice(a, self.pieces.d)), dst_of, w,
                       self.pieces, rows, self.pad_loads,
                       self.pad_zeros if n < self.bufs else None)  # fmt: skip
            return
        cuts = [last.start + r for r in self.load_cuts(rows)]
        xa = self.lane_tile("x", n, i, p)
        cols = (slice(*self.xcols(self.lanes[i])),) if len(self.lanes) > 1 else ()
        for q, (r0, r1) in enumerate(zip(cuts, cuts[1:])):
            src = ap(self.x, *index[:-1], slice(r0, r1), *cols)
            a, z = (r0 - last.start) * kk, (r1 - last.start) * kk
            dst = ap(xa.name, slice(a, z), slice(0, self.per), slice(None))
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.loads[q])

    def row_stats(self, n: int, p: int) -> None:
        """ScalarE's statistics of whole rows (the row slots of `s_slot`; layer_norm, one
        lane): the mean by an `activation` with its add reduction, then the M2 about it by a
        `square` with its reduction, into tile ss ([p, per, 6], its own) as bn_stats' six (count
        D, mean, M2; an empty odd half: counts and the rest set once per buffer), which
        `bn_aggr` then reads as VectorE's: each of ScalarE's reductions serves a whole row, not
        one of its pieces as in `scalar_stats`, and VectorE copies no triples."""
        b, d = self.b, self.d
        junk = ap(self.tile("rjunk", 0, (self.P, d), self.xdt), slice(0, p))
        ss = self.tile("ss", n, (self.P, self.tper, 6))
        if n < self.bufs:  # the counts and the empty half, once per buffer
            for cols, v in (((0, 1), float(d)), ((3, 6), 0.0)):
                a = ap(ss, slice(None), slice(None), slice(*cols))
                b.emit(Memset, [], [a], dst=a, value=v)
        slots = [j for j in range(self.per) if self.s_slot(j)]
        for j in slots:
            xs, m = self.lane_tile("x", n, 0, p, j), ap(ss, slice(0, p), j, slice(1, 2))
            b.emit(Activation, [xs], [junk, m], func="copy", src=xs, dst=junk, scale=1.0 / d,
                   reduce="add", reduce_dst=m)  # fmt: skip
        for j in slots:  # (x - m)^2, as (m - x)^2 (`scalar_stats`)
            xs, m = self.lane_tile("x", n, 0, p, j), ap(ss, slice(0, p), j, slice(1, 2))
            m2 = ap(ss, slice(0, p), j, slice(2, 3))
            b.emit(Activation, [xs, m], [junk, m2], func="square", src=xs, dst=junk, scale=-1.0,
                   bias=m, reduce="add", reduce_dst=m2)  # fmt: skip

    def scalar_stats(self, n: int, p: int) -> None:
        """ScalarE's statistics of the first c columns, piece by piece (one per lane): layer_norm
        the mean and then the M2 about it, into tile sa (its own: VectorE writes the others);
        rms_norm the sum of squares / D, into ss{piece}."""
        pieces = self.spieces
        seg = self.pieces and self.pieces.t > 1  # a scratch of a segment's width, else c's
        most = max(hi - lo for _, lo, hi in pieces) if seg else self.c
        b, junk = self.b, ap(self.tile("junk", 0, (self.P, most), self.xdt), slice(0, p))
        sa, a0 = self.stile(f"sa{len(pieces)}.", n, 2 * len(pieces))
        for q, (i, lo, hi) in enumerate(pieces):
            jk = ap(junk.name, slice(0, p), slice(0, hi - lo))
            for j in range(self.per):
                xs = self.lane_tile("x", n, i, p, j, (lo, hi))
                if not self.layer:
                    ss = self.col(f"ss{q}.", n, p, j)
                    b.emit(Activation, [xs], [jk, ss], func="square", src=xs, dst=jk,
                           scale=1 / math.sqrt(self.d), reduce="add", reduce_dst=ss)  # fmt: skip
                    continue
                m = ap(sa, slice(0, p), a0 + j, slice(2 * q, 2 * q + 1))
                if self.folded:  # x - x0 in place, and its sum S
                    nx = self.nx_psum.get(n)
                    nx = self.col("nx", n, p, j) if nx is None else nx
                    b.emit(Activation, [xs, nx], [xs, m], func="copy", src=xs, dst=xs, bias=nx,
                           reduce="add", reduce_dst=m)  # fmt: skip
                    continue
                b.emit(Activation, [xs], [jk, m], func="copy", src=xs, dst=jk,
                       scale=1.0 / (hi - lo), reduce="add", reduce_dst=m)  # fmt: skip
            if not self.layer:
                continue
            # their M2 about the mean m: (m - x)^2; folded, (S - n x)^2 = n^2 (m - x)^2
            scale = -float(hi - lo) if self.folded else -1.0
            for j in range(self.per):
                xs = self.lane_tile("x", n, i, p, j, (lo, hi))
                m = ap(sa, slice(0, p), a0 + j, slice(2 * q, 2 * q + 1))
                m2 = ap(sa, slice(0, p), a0 + j, slice(2 * q + 1, 2 * q + 2))
                b.emit(Activation, [xs, m], [jk, m2], func="square", src=xs, dst=jk, scale=scale,
                       bias=m, reduce="add", reduce_dst=m2)  # fmt: skip

    @property
    def one_triple(self) -> bool:
        """Rows in pieces whose statistics are all ScalarE's, shifted (`folded`) over a power
        of two of columns: the mean and variance straight from its sums (`second`: the same
        values as through a triple and `bn_aggr`, the scalings by powers of two exact)."""
        c = self.c
        return (bool(self.pieces) and self.folded and c == self.d and c & (c - 1) == 0
                and len(self.spieces) == 1)  # fmt: skip

    @property
    def sum_combine(self) -> bool:
        """Rows in pieces whose statistics are all ScalarE's, shifted (`folded`): the row's
        mean and variance straight from ScalarE's sums S and n^2 M2, summed on TensorE and
        read from PSUM (`_second_sum_combine`), four [p, 1] steps, not seven (two scalings of
        the triple, bn_aggr, the combine's two, rstd, -mean * rstd), whatever the variant (so
        all give the same values)."""
        return (bool(self.pieces) and self.folded and self.c == self.d
                and len(self.spieces) == 1 and not self.stt and self.stat_group == 1
                and SUM_COMBINE)  # fmt: skip

    @property
    def folded(self) -> bool:
        """Whether ScalarE's first statistics pass shifts its c columns (`scalar_stats`), the
        shift pass then only over the columns from c on."""
        return self.shift and self.c > 0 and not self.segments

    def shifted(self, n: int, p: int, e) -> None:
        """x minus each row's first element, in place, on engine e (its first c columns by
        ScalarE's statistics, `folded`; their -x0 on ScalarE when it has them all)."""
        if self.folded and self.c >= self.d:
            e = S
        b, nx, ne = self.b, self.col("nx", n, p), e
        first = ap(self.lane_tile("x", n, 0, p).name, slice(0, p), slice(0, self.per), 0)
        whole = self.pieces and self.pieces.g * min(self.pieces.k, self.P) == self.P
        if whole and self.folded and self.c >= self.d and PSUM_SHIFT:  # -x0 (GpSimd's
            # negated copy, exact) spread by TensorE, read from PSUM as ScalarE's bias
            # (`scalar_stats`): no step between
            f32 = self.col("x0", n, p)
            b.emit(TensorScalar, [first], [f32], src=first, dst=f32, op0="multiply",
                   operand0=-1.0, engine=G)  # fmt: skip
            self.nx_psum[n] = self.groups.firsts(f32, p)
            return
        if self.pieces:  # the row's first element is its first partition's
            f32 = self.col("x0", n, p)
            b.emit(TensorCopy, [first], [f32], src=first, dst=f32, engine=G)
            first = self.groups.firsts(f32, p)
            # -x0 out of PSUM, which GpSimd does not read (its shift passes stay on e)
            ne = e if e != G else V
        b.emit(TensorScalar, [first], [nx], src=first, dst=nx, op0="multiply", operand0=-1.0,
               engine=ne)  # fmt: skip
        for i, lo, hi in self.lane_cols(self.c if self.folded else 0, self.d):
            for j in range(self.per):
                xj, c = self.lane_tile("x", n, i, p, j, (lo, hi)), self.col("nx", n, p, j)
                if e == S:
                    b.emit(Activation, [xj, c], [xj], func="copy", src=xj, dst=xj, bias=c)
                else:
                    b.emit(TensorScalar, [xj, c], [xj], src=xj, dst=xj, op0="add", operand0=c,
                           engine=e)  # fmt: skip

    # -- stage 2: mean and rstd, normalisation -------------------------------------------------

    def second(self, n: int, index: tuple, rows: int) -> None:
        if n in self.segs:
            norm_tail.second(self, n, index, rows)
            return
        self.at(n)
        b, p, c = self.b, self.parts(rows), self.c
        if self.sums:  # (`norm_sums`)
            self._second_sums(n, p)
            return
        if self.stat_group > 1:
            if n % self.stat_group == self.stat_group - 1 or n == self.blocks - 1:
                self._second_group(n, p)
            return
        if self.sum_combine:
            self._second_sum_combine(n, p)
            return
        if self.one_triple:  # mean = S / n, var = n^2 M2 / n^3 (no triple, no bn_aggr)
            sa = self.tile("sa1.", n, (self.P, self.tper, 2))
            for u, f in ((0, 1.0 / c), (1, 1.0 / c**3)):
                src = ap(sa, slice(0, p), slice(0, self.per), u)
                self.alu(self.agg(n, p, u), src, ("multiply", f))
        elif c and self.layer:  # ScalarE's triples: count (once per buffer), mean and M2
            pieces = self.spieces
            sa = self.tile(f"sa{len(pieces)}.", n, (self.P, self.tper, 2 * len(pieces)))
            for q, (_, lo, hi) in enumerate(pieces):
                a = 6 * len(self.chunks) + 3 * q
                if n < self.bufs:  # (every row slot of the buffer: a block may have fewer)
                    cnt = ap(self.stat(n, self.P).name, slice(None), slice(None), slice(a, a + 1))
                    b.emit(Memset, [], [cnt], dst=cnt, value=float(hi - lo))
                if self.folded:  # S / n and n^2 M2 / n^2
                    for u, f in ((0, 1.0 / (hi - lo)), (1, 1.0 / (hi - lo) ** 2)):
                        src = ap(sa, slice(0, p), slice(0, self.per), 2 * q + u)
                        st = ap(self.stat(n, p).name, slice(0, p), slice(0, self.per), a + 1 + u)
                        b.emit(TensorScalar, [src], [st], src=src, dst=st, op0="multiply",
                               operand0=f)  # fmt: skip
                    continue
                src = ap(sa, slice(0, p), slice(0, self.per), slice(2 * q, 2 * q + 2))
                st = self.stat(n, p, None, (a + 1, a + 3))
                b.emit(TensorCopy, [src], [st], src=src, dst=st, engine=self.small_g)
        rs, mean, var = self.col("rs", n, p), self.agg(n, p, 0), self.agg(n, p, 1)
        if (self.layer or c < self.d) and not self.one_triple:
            if self.halves:
                self._halves(n, p)
            else:
                for j in range(self.per):
                    st, ag = self.stat(n, p, j), ap(self.tile("ag", n, (self.P, self.tper, 2)),
                                                    slice(0, p), j)  # fmt: skip
                    if self.s_slot(j):  # (ScalarE's, `row_stats`)
                        st = ap(self.tile("ss", n, (self.P, self.tper, 6)), slice(0, p), j)
                    b.emit(BnAggr, [st], [ag], src=st, dst=ag)
        if self.pieces and self.layer:  # the row's mean and variance over its partitions
            mean, var = self.combine(n, p, mean, var)
        if self.layer:
            self.alu(rs, var, ("add", self.eps), ("pow", -0.5))
        else:  # mean(x^2) = ScalarE's sums / D + (D - c) / D (var + mean^2) of VectorE's part
            ms = self.col("ms", n, p)
            parts = [self.col(f"ss{q}.", n, p) for q in range(len(self.spieces))]
            if c < self.d:
                self.alu(ms, mean, ("multiply", mean), ("add", var))
                self.alu(ms, ms, ("multiply", (self.d - c) / self.d))
            else:
                ms = parts.pop(0)
            for part in parts:
                self.alu(self.col("ms", n, p), ms, ("add", part))
                ms = self.col("ms", n, p)
            if self.pieces:  # the row's mean of x^2 over its partitions
                total = self.groups.sums(ms, p)
                ms = self.col("ms", n, p)
                self.alu(ms, total, ("multiply", 1.0 / min(self.pieces.k, self.P)))
            self.alu(rs, ms, ("add", self.eps), ("pow", -0.5))
        if self.fused:  # rstd on TensorE's diagonal, the rest with the weight (`third`)
            self.diagonals(n, p)
            return
        if self.stt:  # (no -mean * rstd, no normalisation: `_third_stt`, `stt_scales`)
            self.stt_scales(n, p, mean, rs)
            return
        if self.centred:  # (no -mean * rstd: `normalized`)
            pass
        elif self.layer and self.halves and self.per > 1 and not self.pieces:  # (-mean) * rstd
            # (`_halves` left -mean in dm): the same value as -mean * rstd
            self.alu(self.col("nb", n, p), self.col("dm", n, p), ("multiply", rs))
        elif self.layer:  # the normalisation's bias, -mean * rstd
            self.alu(self.col("nb", n, p), mean, ("multiply", rs), ("multiply", -1.0))
        if not self.interleave:  # (else each normalised with its weight, `third`)
            for i in range(len(self.lanes)):
                for j in range(self.per):
                    self.normalized(n, p, i, j)

    def _second_group(self, n: int, p: int) -> None:
        """`second` of `stt` for the `stat_group` blocks up to n (one row slot a block, in the
        group's statistics tiles, `stile`): ScalarE's triples copied, each block's `bn_aggr`,
        then each [p, 1] step of `combine` and `stt_scales` once over the group's columns (each
        step's cost is almost all its fixed overhead), and each block's diag(rstd)."""
        b, g, c = self.b, self.stat_group, self.c
        lo = n - n % g
        blocks = range(lo, n + 1)
        u, p = len(blocks), max(self.parts_of[m] for m in range(lo, n + 1))  # (the first's)
        k, gr = min(self.pieces.k, self.P), self.groups
        ts = tsum_applies(self)  # (`norm_tsums`: the row's mean TensorE's, S2 ScalarE's)
        if c and not ts:  # ScalarE's triples: count (once per buffer), mean and M2
            sa, _ = self.stile(f"sa{len(self.spieces)}.", n, 2 * len(self.spieces))
            st, _ = self.stile(f"st{c}.{self.width}.", n, max(1, self.width))
            a = 6 * len(self.chunks)
            if lo // g < self.bufs:
                cnt = ap(st, slice(None), slice(None), slice(a, a + 1))
                b.emit(Memset, [], [cnt], dst=cnt, value=float(c))
            src = ap(sa, slice(0, p), slice(0, u), slice(0, 2))
            dst = ap(st, slice(0, p), slice(0, u), slice(a + 1, a + 3))
            b.emit(TensorCopy, [src], [dst], src=src, dst=dst, engine=self.small_g)
        for m in blocks:
            q = self.parts_of[m]
            st, ag = self.stat(n=m, p=q, j=0), ap(self.stile("ag", m, 2)[0], slice(0, q), m % g)
            if ts:  # (VectorE's chunks only)
                st = self.stat(n=m, p=q, j=0, cols=(0, 6 * len(self.chunks)))
            b.emit(BnAggr, [st], [ag], src=st, dst=ag)
        ag = self.stile("ag", n, 2)[0]
        mean, var = (ap(ag, slice(0, p), slice(0, u), x) for x in (0, 1))
        if ts:  # (`row_mean`'s)
            rm = self.gpsum("rm", n, p, u)
        else:
            rm = gr.sums(mean, p, scale=1.0 / k, dst=self.gpsum("rm", n, p, u))
        d = self.gcol("dm", n, p, whole=True)
        b.emit(TensorTensor, [mean, rm], [d], alu="subtract", src0=mean, src1=rm, dst=d)
        b.emit(TensorTensor, [d, d], [d], alu="multiply", src0=d, src1=d, dst=d,
               engine=self.small_g)  # fmt: skip
        b.emit(TensorTensor, [d, var], [d], alu="add", src0=d, src1=var, dst=d,
               engine=self.small_g)  # fmt: skip
        scale = 1.0 / k
        if ts:  # S2 + n_V (v_V + (m_V - M)^2), summed over the row's partitions, / N
            s2 = ap(self.gtile("gs2", n, (self.P, g)), slice(0, p), slice(0, u))
            b.emit(ScalarTensorTensor, [d, s2], [d], data=d, op0="multiply",
                   operand0=float(self.d - c), op1="add", operand1=s2, dst=d,
                   engine=self.small_g)  # fmt: skip
            if self.pad:  # (`norm_pad`: the pad zeros' pad M^2 off)
                pad_correct(b, d, rm, self.pad, k, self.small_g)
            scale = 1.0 / (self.d * k - self.pad)
        std = self.stt_std and (32 <= k or self.std_rolled) and 2 * k <= p and (
            not self.pad or all(self.parts_of[m] == p for m in blocks))  # fmt: skip
        if std:  # (`std_scales`: the variance of the row k partitions back beside each; the
            # group's blocks of alike partitions at once, a core's last block apart when it
            # has fewer: its rows k back wrap round its own partitions)
            vr = self.gpsum("vs", n, p, 2 * u)
            for a, z in _alike(self.parts_of, lo, n):
                q = self.parts_of[lo + a]
                dq = ap(d.name, slice(0, q), slice(a, z))
                gr.sums(dq, q, scale=scale, dst=ap(vr.name, slice(0, q), slice(a, z)))
                dst = ap(vr.name, slice(0, q), slice(u + a, u + z))
                if 2 * k > q:  # (a block of one row, its own row back: `std_scales`)
                    gr.sums(dq, q, scale=scale, dst=dst)
                    continue
                back = self.back_sums(q, scale)
                b.emit(Matmul, [back, dq], [dst], stationary=back, moving=dq, dst=dst)
            rs = ap(self.tile("grs2", self.gslot(n), (self.P, 2 * g)), slice(0, p),
                    slice(0, 2 * u))  # fmt: skip
        else:
            vr = gr.sums(d, p, scale=scale, dst=self.gpsum("vr", n, p, u))
            rs = self.gcol("rs", n, p, whole=True)
        mn = self.gcol("mn", n, p, whole=True)
        b.emit(TensorScalar, [vr], [rs], src=vr, dst=rs, op0="add", operand0=self.eps,
               op1="pow", operand1=-0.5)  # fmt: skip
        b.emit(TensorCopy, [rm], [mn], src=rm, dst=mn)
        if std:
            self.std_scales(n, p, rs, u)
            return
        for m in blocks:
            q = self.parts_of[m]
            self.stt_diags(m, q, self.gcol("rs", m, q))

    def std_scales(self, n: int, p: int, rs, u: int) -> None:
        """`stt_std` for the `stat_group` blocks up to n, from rs ([p, 2u]: each block's rstd,
        then that of the row k partitions back's): out = rstd (v + C^T b), v = (x - mean)
        weight (`_third_stt`), b the bias' pieces (partition r k + i holds piece i, every row
        group alike), rstd ScalarE's scale as it copies PSUM out: TensorE's identity times v and
        C times b, two matmuls a bank (not three). C [p, p] (bf16, TensorE's stationary) gives
        output partition m std_hi(m) b[m] + std_lo(m) b[m + k]: C[m, m] = std_hi = bf16(std),
        C[m + k (mod p), m] = std_lo = bf16(std - std_hi), std = 1 / rstd (so rstd (std_hi +
        std_lo) is 1 to about 2^-16, each product exact in fp32 PSUM). Two [p, 2u] steps (std_hi
        of both, std_lo of the row back), then per block dh = I std_hi and C = J std_lo' + dh
        (J the identity shifted k partitions on), as many [p, p] steps as `stt_diags`."""
        b, g = self.b, self.stat_group
        kk, lo = min(self.pieces.k, self.P), n - n % g
        hl = self.tile("ghl", self.gslot(n), (self.P, 3 * g), self.odt)  # (std_hi, std_lo')
        hi = ap(hl, slice(0, p), slice(0, 2 * u))
        es = (V, G) if self.flex else STD_COLS
        ops = [(TensorScalar, [rs], [hi], dict(src=rs, dst=hi, op0="pow", operand0=-1.0,
                                               engine=e)) for e in es]  # fmt: skip
        b.emit(*ops[0][:3], **ops[0][3], **self.others(ops))
        back, hb = (ap(t.name, slice(0, p), slice(u, 2 * u)) for t in (rs, hi))
        sl = ap(hl, slice(0, p), slice(2 * u, 3 * u))  # (bf16: C's rounding, no other)
        ops = [(ScalarTensorTensor, [back, hb], [sl], dict(
                   data=back, op0="pow", operand0=-1.0, op1="subtract", operand1=hb, dst=sl,
                   engine=e)) for e in es]  # fmt: skip
        b.emit(*ops[0][:3], **ops[0][3], **self.others(ops))
        for m in range(lo, n + 1):
            q = self.parts_of[m]  # (a core's last block may have fewer partitions)
            if 2 * kk > q:  # (a block of one row: no row k partitions back; `stt_diags`)
                self.stt_diags(m, q, ap(rs.name, slice(0, q), slice(m - lo, m - lo + 1)))
                continue
            ident = ap(self.pe.ident, slice(0, q), slice(0, q))
            j = self.shifted_ident(q, kk, self.odt)
            self.std_of[m] = ap(rs.name, slice(0, q), slice(m - lo, m - lo + 1))
            h, sm = (ap(hl, slice(0, q), slice(a + m - lo, a + m - lo + 1)) for a in (0, 2 * u))
            dh, c = (ap(self.tile(x, m, (self.P, self.P), self.odt), slice(0, q), slice(0, q))
                     for x in ("dh", "dl"))  # fmt: skip
            ops = [(TensorScalar, [ident, h], [dh], dict(src=ident, dst=dh, op0="multiply",
                                                         operand0=h, engine=e))
                   for e in ((V, G) if self.flex else STD_DIAGS[0])]  # fmt: skip
            b.emit(*ops[0][:3], **ops[0][3], **self.others(ops))
            ops = [(ScalarTensorTensor, [j, sm, dh], [c], dict(
                       data=j, op0="multiply", operand0=sm, op1="add", operand1=dh, dst=c,
                       engine=e)) for e in ((G, V) if self.flex else STD_DIAGS[1])]  # fmt: skip
            b.emit(*ops[0][:3], **ops[0][3], **self.others(ops))

    def gslot(self, n: int) -> int:
        """Block n's group's slot of `std_scales`' tiles: bufs / stat_group of them (a block's
        later stages are at most bufs - 1 behind its load; a core has 256 semaphores)."""
        return n // self.stat_group % max(1, self.bufs // self.stat_group)

    def back_sums(self, p: int, scale: float):
        """[p, p] fp32: 1 / k where partition r's row is the row k partitions back from
        partition m's (mod p; `std_scales`), made once per p: zeros, then a memset of 1 / k per
        row group (k >= 32 partitions: a start GpSimd can address; no TensorE, no PSUM); rows
        of fewer pieces (`std_rolled`): `Groups.sum_matrix` times 1 / k, its columns rolled k
        on (two copies over all the partitions)."""
        kk = min(self.pieces.k, self.P)
        key = f"norm.back{p}.{scale}"
        new = f"{key}:float32:{(self.P, self.P)}" not in self.b.scratch
        a = ap(self.b.scratch_tile(key, "back", (self.P, self.P), self.f32), slice(0, p),
               slice(0, p))  # fmt: skip
        if new and kk < 32:  # (`std_rolled`: `Groups.sum_matrix`'s columns rolled k on)
            src = self.groups.sum_matrix
            for lo, hi, at in ((kk, p, 0), (0, kk, p - kk)):
                s = ap(src, slice(0, p), slice(at, at + hi - lo))
                d = ap(a.name, slice(0, p), slice(lo, hi))
                self.b.emit(TensorScalar, [s], [d], src=s, dst=d, op0="multiply",
                            operand0=scale)  # fmt: skip
        elif new:
            self.b.emit(Memset, [], [a], dst=a, value=0.0, engine=G)
            for r in range(0, p, kk):  # rows [r, r + k) read the row at columns' r + k
                c = (r + kk) % p
                q = ap(a.name, slice(r, r + kk), slice(c, c + kk))
                self.b.emit(Memset, [], [q], dst=q, value=scale, engine=G)
        return a

    def shifted_ident(self, p: int, s: int, dt):
        """[p, p] of dtype dt, 1 where row r = (column m + s) mod p (the identity shifted by s
        partitions), made once per op."""
        key = f"norm.shift{s}.{p}"
        new = f"{key}:{dt.name}:{(self.P, self.P)}" not in self.b.scratch
        a = ap(self.b.scratch_tile(key, "shift", (self.P, self.P), dt), slice(0, p), slice(0, p))
        if new:
            self.b.emit(Memset, [], [a], dst=a, value=0.0, engine=G)
            for start in (-s, p - s):  # r - m - s = 0, r - m - s + p = 0
                self.b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=1.0,
                            cmp="not_equal", start=start, partition_step=1, step=-1,
                            engine=G)  # fmt: skip
        return a

    def gpsum(self, key: str, n: int, p: int, u: int):
        """Block n's group's [p, u] PSUM tile `key` (`psum_col`; `stat_group` columns, or
        twice that for `std_scales`' "vs")."""
        slot = (f"g{key}", self.gindex(n))
        if slot not in self.psum_cols:
            w = self.stat_group * (2 if key == "vs" else 1)
            self.psum_cols[slot] = self.b.psum(f"n{key}", (self.P, w), self.f32)
        return ap(self.psum_cols[slot], slice(0, p), slice(0, u))

    def diagonals(self, n: int, p: int) -> None:
        """Block n's diag(rstd) of each row slot ([p, p], the output's dtype: `diagonal`), the
        identity times the slot's rstd, on VectorE or GpSimd as the list schedule finds
        either free."""
        ident = ap(self.pe.ident, slice(0, p), slice(0, p))
        for j in range(self.per):
            dj, rj = self.diagonal(n, p, j), self.col("rs", n, p, j)
            ops = [(TensorScalar, [ident, rj], [dj], dict(src=ident, dst=dj, op0="multiply",
                                                          operand0=rj, engine=e))
                   for e in (V, G)]  # fmt: skip
            self.b.emit(*ops[0][:3], **ops[0][3], **self.others(ops))

    def diagonal(self, n: int, p: int, j: int):
        """Block n's row slot j's diag(rstd) ([p, p]: TensorE's stationary, `fused`)."""
        t = self.tile("dg", n, (self.P, self.tper, self.P), self.odt)
        return ap(t, slice(0, p), j, slice(0, p))

    def _second_sums(self, n: int, p: int) -> None:
        """`second` from `norm_sums`' statistics: rstd, -mean * rstd, the normalisation."""
        mean, var = sum_stats(self, n, p)
        rs = self.col("rs", n, p)
        self.alu(rs, var, ("add", self.eps), ("pow", -0.5))
        self.alu(self.col("nb", n, p), mean, ("multiply", rs), ("multiply", -1.0))
        if not self.interleave:
            for i in range(len(self.lanes)):
                self.normalized(n, p, i, 0)

    def stt_scales(self, n: int, p: int, mean, rs) -> None:
        """`stt`: the row's mean in SBUF (column mn, for GpSimd too) and diag(rstd) as
        TensorE's stationary operands ([p, p], the output's 16-bit dtype): dh = I rstd (its
        diagonal rstd rounded), dl = I rstd - dh (the rest, rounded; `stt_lo`), so dh v + dl v
        is rstd v to about 16 bits (the products exact in fp32 PSUM)."""
        mn = self.col("mn", n, p)
        self.b.emit(TensorCopy, [mean], [mn], src=mean, dst=mn)
        self.stt_diags(n, p, rs)

    def stt_diags(self, n: int, p: int, rs) -> None:
        """Block n's dh and dl (`stt_scales`) from its rstd `rs` ([p, 1])."""
        b, ident = self.b, ap(self.pe.ident, slice(0, p), slice(0, p))
        dh = ap(self.tile("dh", n, (self.P, self.P), self.odt), slice(0, p), slice(0, p))
        ops = [(TensorScalar, [ident, rs], [dh], dict(src=ident, dst=dh, op0="multiply",
                                                      operand0=rs, engine=e))
               for e in ((V, G) if self.flex else (V,))]  # fmt: skip
        b.emit(*ops[0][:3], **ops[0][3], **self.others(ops))
        if not self.stt_lo:
            return
        dl = ap(self.tile("dl", n, (self.P, self.P), self.odt), slice(0, p), slice(0, p))
        ops = [(ScalarTensorTensor, [ident, rs, dh], [dl], dict(
                   data=ident, op0="multiply", operand0=rs, op1="subtract", operand1=dh, dst=dl,
                   engine=e)) for e in ((G, V) if self.flex else (G,))]  # fmt: skip
        b.emit(*ops[0][:3], **ops[0][3], **self.others(ops))

    def stt_diag(self, n: int, p: int) -> tuple:
        """Block n's diag(rstd) parts (`stt_scales`), TensorE's stationary operands."""
        names = ("dh", "dl") if self.stt_lo else ("dh",)
        return tuple(ap(self.tile(k, n, (self.P, self.P), self.odt), slice(0, p), slice(0, p))
                     for k in names)  # fmt: skip

    def normalized(self, n: int, p: int, i: int, j: int) -> None:
        """Lane i of row slot j: x * rstd + (-mean * rstd) (rms_norm: x * rstd), the same
        operations in the same order on every engine, so the values do not depend on which
        engine the plan picks (nor on how a logical core's rows are shared)."""
        b, e = self.b, self.lanes[i].norm
        xj, oj = self.lane_tile("x", n, i, p, j), self.lane_tile("o", n, i, p, j)
        rj = self.col("rs", n, p, j)
        if self.centred:  # (x - mean) * rstd, in place
            mj = self.agg(n, p, 0, j)
            b.emit(TensorScalar, [xj, mj, rj], [oj], src=xj, dst=oj, op0="subtract",
                   operand0=mj, op1="multiply", operand1=rj, engine=e)  # fmt: skip
            return
        bj = self.col("nb", n, p, j) if self.layer else 0.0
        if self.layer:
            ops = []
            flex = [{"S": S, "V": V, "G": G}[c] for c in self.flex_norm] if self.flex else []
            for x in [e] + [y for y in flex if y != e]:
                if x == S:
                    ops.append((Activation, [xj, rj, bj], [oj], dict(
                        func="copy", src=xj, dst=oj, scale=rj, bias=bj)))  # fmt: skip
                else:
                    ops.append((TensorScalar, [xj, rj, bj], [oj], dict(
                        src=xj, dst=oj, op0="multiply", operand0=rj, op1="add", operand1=bj,
                        engine=x)))  # fmt: skip
            b.emit(*ops[0][:3], **ops[0][3], **self.others(ops))
        elif e == S:
            b.emit(Activation, [xj, rj], [oj], func="copy", src=xj, dst=oj, scale=rj, bias=0.0)
        else:
            b.emit(TensorScalar, [xj, rj], [oj], src=xj, dst=oj, op0="multiply", operand0=rj,
                   engine=e)  # fmt: skip

    def _second_sum_combine(self, n: int, p: int) -> None:
        """`second` of `sum_combine`: each partition's piece has n = c columns, ScalarE's sum S
        and n^2 M2 (M2 its sum of squares about its mean S / n; `scalar_stats`); over the row's
        k partitions, ns = -sum(S) / k = -n mean (TensorE, a matrix of -1 / k: exact, k a
        power of two, read from PSUM), e = S + ns = n (S / n - mean), and the variance, the
        mean of M2 / n + (S / n - mean)^2, is sum(n^2 M2) / (k n^3) + sum(e^2) / (k n^2): two
        matmuls accumulating in PSUM. Then rstd and -mean * rstd = ns * rstd / n: four [p, 1]
        steps on VectorE (e, e^2, rstd, -mean * rstd), the same ones in every block."""
        c, gr, kk = float(self.c), self.groups, min(self.pieces.k, self.P)
        sa = self.tile("sa1.", n, (self.P, self.tper, 2))
        s, m2 = (ap(sa, slice(0, p), slice(0, self.per), u) for u in (0, 1))
        ns = gr.sums(s, p, scale=-1.0 / kk, dst=self.psum_col("rm", n, p))
        e = self.col("dm", n, p)
        self.alu(e, s, ("add", ns))
        self.alu(e, e, ("multiply", e))
        vr = self.psum_col("vr", n, p)
        gr.sums(m2, p, scale=1.0 / (kk * c**3), dst=vr)
        gr.sums(e, p, scale=1.0 / (kk * c * c), dst=vr, accumulate=True)
        rs = self.col("rs", n, p)
        self.alu(rs, vr, ("add", self.eps), ("pow", -0.5))
        self.alu(self.col("nb", n, p), ns, ("multiply", rs), ("multiply", 1.0 / c))
        if not self.interleave:
            for i in range(len(self.lanes)):
                self.normalized(n, p, i, 0)

    def combine(self, n: int, p: int, mean, var):
        """The row's mean ([p, 1], returned) and var (written over each partition's piece's),
        over the row's k partitions (equal counts): the mean of the means, the mean of var +
        (mean - row's)^2; four VectorE steps."""
        k, gr = min(self.pieces.k, self.P), self.groups
        rm, d = self.col("rm", n, p), self.col("dm", n, p)
        if self.psum_combine and not k & (k - 1):  # the sums by a matrix of 1 / k (exact: a
            # power of two), read where TensorE leaves them: two steps fewer, the same values
            rm = gr.sums(mean, p, scale=1.0 / k, dst=self.psum_col("rm", n, p))
            self.alu(d, mean, ("subtract", rm))
            self.alu(d, d, ("multiply", d), ("add", var), engine=self.small_g)
            return rm, gr.sums(d, p, scale=1.0 / k, dst=self.psum_col("vr", n, p))
        self.alu(rm, gr.sums(mean, p), ("multiply", 1.0 / k))
        self.alu(d, mean, ("subtract", rm))
        self.alu(d, d, ("multiply", d), ("add", var))
        self.alu(var, gr.sums(d, p), ("multiply", 1.0 / k))
        return rm, var

    def psum_col(self, key: str, n: int, p: int):
        """Block n's [p, per] PSUM tile `key` (one a buffer, `psum_cols`)."""
        slot = (key, n % self.bufs)
        if slot not in self.psum_cols:
            self.psum_cols[slot] = self.b.psum(f"n{key}", (self.P, self.tper), self.f32)
        return ap(self.psum_cols[slot], slice(0, p), slice(0, self.per))

    # -- stage 3: weight and bias, store -------------------------------------------------------

    def third(self, n: int, index: tuple, rows: int, only=None) -> None:
        """Each lane's (or lane `only`'s) weight and (on VectorE or GpSimd) bias, in place; the
        lanes without TensorE's bias stored."""
        if n in self.segs:
            norm_tail.third(self, n, index, rows)
            return
        self.at(n)
        b, p = self.b, self.parts(rows)
        if self.out_pieces:
            self._third_pieces(n, index, p)
            return
        if self.stt:
            self._third_stt(n, p)
            return
        for i, lane in enumerate(self.lanes):
            if only is not None and i != only or not self.mine(n, i):
                continue
            if self.interleave:  # a segment's passes one after another: its store goes soonest
                self.normalized(n, p, i, 0)
            for v, alu, e in ((self.weight, "multiply", lane.weight),
                              (self.bias, "add", lane.bias)):  # fmt: skip
                if v is None or (alu == "add" and e == S):
                    continue
                for j in range(self.per):  # in place: o * weight, + bias
                    for lo, hi in self.affine_runs(lane):
                        o = self.lane_tile("o", n, i, p, j, (lo, hi))
                        ops = [self.weighted(o, v, alu, e, p, lane.lo + lo, lane.lo + hi)
                               for e in ([e] + [x for x in (V, G) if x != e] if self.flex
                                         else [e])]  # fmt: skip
                        b.emit(*ops[0][:3], **ops[0][3], **self.others(ops, (n, i)))
            if not self.pe_lane(lane):
                self.store(n, index, p, i, self.lane_tile("o", n, i, p))

    def _third_stt(self, n: int, p: int) -> None:
        """`third` of `stt`: each lane's (x - mean) * weight in place, one scalar_tensor_tensor
        (VectorE N cycles an element in bf16, GpSimd 2N; the list schedule's pick with
        `flex`); TensorE then multiplies by rstd and adds the bias (`fourth`)."""
        b = self.b
        for i, lane in enumerate(self.lanes):
            if not self.mine(n, i):
                continue
            for j in range(self.per):
                xj, oj = self.lane_tile("x", n, i, p, j), self.lane_tile("o", n, i, p, j)
                mj = self.gcol("mn", n, p)
                if self.lane_rows:
                    w = ap(self.lane_rows[self.weight][i], slice(0, p), slice(None))
                else:
                    w = ap(self.rows[self.weight], slice(0, p), slice(lane.lo, lane.hi))
                flex = self.flex or n >= self.blocks - self.tail_flex
                es = [lane.weight] + [e for e in (V, G) if flex and e != lane.weight]
                ops = [(ScalarTensorTensor, [xj, mj, w], [oj], dict(
                           data=xj, op0="subtract", operand0=mj, op1="multiply", operand1=w,
                           dst=oj, engine=e)) for e in es]  # fmt: skip
                b.emit(*ops[0][:3], **ops[0][3], **self.others(ops))

    def _third_pieces(self, n: int, index: tuple, p: int) -> None:
        """`third` of a pipelined norm: each output piece weighted out of x's row slot, biased
        (not by TensorE) and stored in turn; each pass on VectorE or GpSimd as the list
        schedule finds either free (`flex`)."""
        b = self.b
        for i, lane in enumerate(self.lanes):
            if not self.mine(n, i):
                continue
            for j, g, lo, hi in self.units(i):
                o = self.piece("p", n, i, j, lo, hi, p, g)
                js = j if self.pslots == 1 else slice(j, j + g)
                src = self.lane_tile("o", n, i, p, js, (lo, hi))  # the first pass's input
                for v, alu, e in ((self.weight, "multiply", lane.weight),
                                  (self.bias, "add", lane.bias)):  # fmt: skip
                    if v is None or (alu == "add" and e == S):
                        continue
                    t = ap(self.rows[v], slice(0, p), slice(lane.lo + lo, lane.lo + hi))
                    if self.pslots > 1:  # (along the piece's row slots)
                        t = t._replace(bcast=((1, g),))
                    es = [e] + [y for y in (V, G) if self.flex and y != e]
                    if self.fused and alu == "multiply":  # (x - mean) * weight, slot by slot
                        self._centred_weight(n, p, i, j, g, lo, hi, o, es)
                        src = o
                        continue
                    ops = [(TensorTensor, [src, t], [o], dict(alu=alu, src0=src, src1=t,
                                                              dst=o, engine=x))
                           for x in es]  # fmt: skip
                    b.emit(*ops[0][:3], **ops[0][3], **self.others(ops))
                    src = o
                if not self.pe_lane(lane):
                    self.store_unit(n, index, p, i, j, g, lo, hi, o)

    def _centred_weight(self, n: int, p: int, i: int, j: int, g: int, lo: int, hi: int, o,
                        es) -> None:  # fmt: skip
        """Output piece o = (x - mean) * weight over row slots [j, j + g), lane i's columns
        [lo, hi): a `scalar_tensor_tensor` a slot (its scalar a column: one slot), on the
        engines `es` (the list schedule's pick)."""
        lane = self.lanes[i]
        w = ap(self.rows[self.weight], slice(0, p), slice(lane.lo + lo, lane.lo + hi))
        for u in range(g):
            xs = self.lane_tile("x", n, i, p, j + u, (lo, hi))
            ou = o if self.pslots == 1 else ap(o.name, slice(0, p), u, slice(0, hi - lo))
            m = self.agg(n, p, 0, j + u)
            ops = [(ScalarTensorTensor, [xs, m, w], [ou], dict(
                data=xs, op0="subtract", operand0=m, op1="multiply", operand1=w, dst=ou,
                engine=x)) for x in es]  # fmt: skip
            self.b.emit(*ops[0][:3], **ops[0][3], **self.others(ops))

    @property
    def fused(self) -> bool:
        """Whether the normalisation is folded into the other passes (`pe_rstd`: a pipelined
        layer_norm of rows that fit with a weight and TensorE's bias in every block): (x - mean)
        * weight by one `scalar_tensor_tensor` (N cycles on VectorE for bf16), then TensorE's
        diag(rstd) times it (the stationary, in place of the identity) and the bias row
        accumulate in PSUM, ScalarE copying out: no normalisation pass."""
        return (self.pe_rstd and bool(self.out_pieces) and self.layer and not self.pieces
                and self.weight is not None
                and all(self.pe_lane(lane) for ls in (self.block_lanes or [self.lanes])
                        for lane in ls))  # fmt: skip

    @property
    def centred(self) -> bool:
        """Whether the normalisation is (x - mean) * rstd, with no -mean * rstd step: a
        pipelined layer_norm of rows that fit, normalised on VectorE or GpSimd only."""
        if not (self.out_pieces and self.layer and not self.pieces):
            return False
        return all(lane.norm != S for ls in (self.block_lanes or [self.lanes]) for lane in ls)

    def opieces(self, i: int) -> list[tuple[int, int]]:
        """Lane i's output pieces' columns (lane-local)."""
        lane = self.lanes[i]
        return runs(lane.hi - lane.lo, min(self.out_pieces, self.most))

    def units(self, i: int) -> list[tuple[int, int, int, int]]:
        """Lane i's output pieces in the current block: (first row slot, row slots, lo, hi),
        `pslots` row slots a piece (at most the block's)."""
        g = min(self.pslots, self.per)
        return [(j, g, lo, hi) for j in range(0, self.per, g) for lo, hi in self.opieces(i)]

    def piece(self, kind: str, n: int, i: int, j: int, lo: int, hi: int, p: int, g: int = 1):
        """Block n's output piece of lane i, row slots [j, j + g), columns [lo, hi): a tile of
        its own ([p, hi - lo], or [p, g, hi - lo] of `pslots` row slots; `kind` p: weighted and
        biased, f: TensorE's bias copied out), so each piece's passes wait only for its own (a
        builder orders accesses tile by tile) and its store goes as soon as it is done."""
        depth = min(F_BUFS, self.bufs) if kind == "f" else OUT_BUFS
        shape = (self.P, hi - lo) if self.pslots == 1 else (self.P, self.pslots, hi - lo)
        t = self.b.scratch_tile(f"norm.{kind}p{i}.{j}.{lo}.{n % depth}", f"{kind}p", shape,
                                self.odt)  # fmt: skip
        if self.pslots == 1:
            return ap(t, slice(0, p), slice(0, hi - lo))
        return ap(t, slice(0, p), slice(0, g), slice(0, hi - lo))

    def store_unit(self, n: int, index: tuple, p: int, i: int, j: int, g: int, lo: int, hi: int,
                   o) -> None:  # fmt: skip
        """A piece of row slots [j, j + g) to out, a store a row slot."""
        if self.pslots == 1:
            self.store_piece(n, index, p, i, j, lo, hi, o)
            return
        for u in range(g):
            one = ap(o.name, slice(0, p), u, slice(0, hi - lo))
            self.store_piece(n, index, p, i, j + u, lo, hi, one)

    def store_piece(self, n: int, index: tuple, p: int, i: int, j: int, lo: int, hi: int,
                    o) -> None:  # fmt: skip
        """A piece to out: row slot j of the block's rows (every per-th), lane i's columns
        [lo, hi)."""
        last, lane = index[-1], self.lanes[i]
        rows = slice(last.start + j, last.stop, self.per) if self.per > 1 else last
        dst = ap(self.out, *index[:-1], rows, slice(lane.lo + lo, lane.lo + hi))
        self.stored += 1
        self.b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=self.stores[self.stored])

    def affine_runs(self, lane: Lane) -> list[tuple[int, int]]:
        """Lane's columns (from its lo) in runs of one instruction: cut where the weight and
        bias in PSUM begin and end (`_spread_psum`)."""
        w, cuts = lane.hi - lane.lo, set()
        if self.psum_rows and self.psum_width < self.d:
            cuts = {c - lane.lo for c in (self.psum_lo, self.psum_lo + self.psum_width)}
        edges = sorted({0, w} | {c for c in cuts if 0 < c < w})
        return [(a + lo, a + hi) for a, z in zip(edges, edges[1:])
                for lo, hi in runs(z - a, self.most)]  # fmt: skip

    def weighted(self, o, v: str, alu: str, e, p: int, lo: int, hi: int) -> tuple:
        """(cls, reads, writes, fields) of o = o alu v[lo:hi] on engine e (VectorE: v out of
        PSUM where it is there, `psum_affine`)."""
        a = self.psum_lo
        if e == V and v in self.psum_rows and a <= lo and hi <= a + self.psum_width:
            t = ap(self.psum_rows[v], slice(0, p), slice(lo - a, hi - a))
        elif v in self.seg_rows:  # (within one segment's tile)
            s, f = lo // self.pieces.f, self.pieces.f
            t = ap(self.seg_rows[v][s], slice(0, p), slice(lo - s * f, hi - s * f))
        elif v in self.lane_rows:  # (within one lane's tile, `piece_lanes`)
            ln = next(ln for ln in self.lanes if ln.lo <= lo and hi <= ln.hi)
            t = ap(self.lane_rows[v][self.lanes.index(ln)], slice(0, p),
                   slice(lo - ln.lo, hi - ln.lo))  # fmt: skip
        else:
            t = ap(self.rows[v], slice(0, p), slice(lo, hi))
        return TensorTensor, [o, t], [o], dict(alu=alu, src0=o, src1=t, dst=o, engine=e)

    def others(self, ops: list[tuple], group=None) -> dict:
        """`emit`'s other choices of engine for the list schedule (`flex`), beside ops[0]; a
        block lane's weight and bias take one engine (`group`: (block, lane)) for rows that
        fit (`fit_psum`)."""
        if len(ops) < 2:
            return {}
        return {"choices": ops[1:]} | ({"group": group} if self.fit_psum and group else {})

    def fourth(self, n: int, index: tuple, rows: int) -> None:
        """The lanes whose bias TensorE adds (into PSUM, ScalarE copying the sums into tile
        f), stored: a block after their weight, so ScalarE does not wait for it."""
        if n in self.segs:
            norm_tail.fourth(self, n, index, rows)
            return
        self.at(n)
        p = self.parts(rows)
        for i, lane in enumerate(self.lanes):
            if not self.mine(n, i):
                continue
            if self.out_pieces and self.pe_lane(lane):
                for j, g, lo, hi in self.units(i):
                    o, f = (self.piece(k, n, i, j, lo, hi, p, g) for k in "pf")
                    ds = [self.diagonal(n, p, j + u) for u in range(g)] if self.fused else None
                    if self.pslots == 1:
                        split = n >= self.blocks - self.tail_copies
                        self.pe.add(o, f, lane.lo + lo, hi - lo, p, self.pe_span,
                                    ds and ds[0], split)  # fmt: skip
                    else:  # a bank a row slot, one copy out
                        os_ = [ap(o.name, slice(0, p), u, slice(0, hi - lo)) for u in range(g)]
                        self.pe.add_group(os_, f, lane.lo + lo, hi - lo, p, self.pe_span, ds)
                    self.store_unit(n, index, p, i, j, g, lo, hi, f)
            elif self.pe_lane(lane) and self.pe.group > 1 and lane.hi - lane.lo == self.d:
                for j in range(0, self.per, self.pe.group):  # `group` row slots at a time
                    js = slice(j, min(self.per, j + self.pe.group))
                    self.pe.add_slots(
                        self.lane_tile("o", n, i, p, js),
                        self.lane_tile("f", n, i, p, js),
                        js.stop - j,
                        p,
                    )
                self.store(n, index, p, i, self.lane_tile("f", n, i, p))
            elif self.pe_lane(lane):
                diag = self.stt_diag(n, p) if self.stt else None
                split = n >= self.blocks - self.tail_copies  # (`PeBias.add`'s `split`)
                std = {}
                if n in self.std_of:  # (`std_scales`: C times the bias, rstd the copy's scale)
                    c = ap(self.tile("dl", n, (self.P, self.P), self.odt), slice(0, p), slice(0, p))
                    std, diag = dict(bias_st=c, scale=self.std_of[n]), None
                for j in range(self.per):
                    self.pe.add(self.lane_tile("o", n, i, p, j), self.lane_tile("f", n, i, p, j),
                                lane.lo, lane.hi - lane.lo, p, self.pe_span, diag, split,
                                **std)  # fmt: skip
                self.store(n, index, p, i, self.lane_tile("f", n, i, p))

    def mine(self, n: int, i: int) -> bool:
        """Whether this core weights, biases and stores lane i of block n (`shared`)."""
        return n not in self.shared or i in self.shared[n]

    def pe_lane(self, lane: Lane) -> bool:
        """Whether TensorE adds lane's bias."""
        return self.bias is not None and lane.bias == S

    def store(self, n: int, index: tuple, p: int, i: int, o) -> None:
        """Lane i's output of block n to out."""
        b, lane = self.b, self.lanes[i]
        if self.padded_lane(i):  # (`norm_pad`: a row at a time, no padding stored)
            each = rows_of(index, b.tensors[self.x].shape[:-1])
            store_rows(b, lambda p0, p1, step, c0, c1: ap(o.name, slice(p0, p1, step),
                                                          slice(0, 1), slice(c0, c1)),
                       lambda r, a, z: ap(self.out, *each[r], slice(a, z)), lane.lo,
                       lane.hi - lane.lo, self.pieces, len(each), self.pad_stores,
                       self.pad_shorts)  # fmt: skip
            return
        full = tuple(index) + (slice(None),) * (len(b.tensors[self.x].shape) - 1 - len(index))
        dst = (
            ap(self.out, *index)
            if len(self.lanes) == 1
            else ap(self.out, *full, slice(*self.xcols(lane)))
        )
        q = len(self.lanes) * n + i
        if (
            LAST_HALVES
            and n == self.blocks - 1
            and self.banked
            and self.per == 1
            and len(full) == 1
            and self.pieces.k * (full[0].stop - full[0].start) == p
        ):
            for src, dst in self.last_halves(index[0], p, lane, o):
                b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.stores[q])
                q += 1
            return
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=self.stores[q])

    def last_halves(self, rows: slice, p: int, lane: Lane, o) -> list[tuple]:
        """A lane's store of the last block (rows in pieces, a row slot) in two by partitions,
        (src, dst) each, on two queues: each transfer's setup staggers over half the DMA
        engines, and the two set up at once (`store`)."""
        kk, (c0, c1), w = min(self.pieces.k, self.P), self.xcols(lane), lane.hi - lane.lo
        r0, r = rows.start, rows.stop - rows.start
        h = r // 2 * kk if r > 1 else kk // 2
        out = []
        for a, z in ((0, h), (h, p)):
            src = Ap(o.name, ((a, z, None),) + o.index[1:])
            if r > 1:
                dst = ap(self.out, slice(r0 + a // kk, r0 + z // kk), slice(c0, c1))
            else:
                dst = ap(self.out, slice(r0, r0 + 1), slice(c0 + a * w, c0 + z * w))
            out.append((src, dst))
        return out

    # -- [p, per] steps ------------------------------------------------------------------------

    def _halves(self, n: int, p: int) -> None:
        """The block's mean and variance from bn_stats' even and odd halves of each row
        (counts ne, no): mean = mo + (me - mo) ne / D, var = (M2e + M2o) / D + (me - mo)^2
        ne no / D^2."""
        d, ne = self.d, (self.d + 1) // 2
        f = [ap(self.stat(n, p).name, slice(0, p), slice(0, self.per), i) for i in range(6)]
        dm, q = self.col("dm", n, p), self.col("q", n, p)
        mean, var = self.agg(n, p, 0), self.agg(n, p, 1)
        # in an order where no step reads what the step before it wrote (VectorE's commit
        # stall, 150 ns a step: trn2 fp32 rows of 64, 11 steps a block, 8 stalled); the same
        # operations on the same values as in the formulas' order
        self.alu(dm, f[1], ("subtract", f[4]))
        self.alu(var, f[2], ("add", f[5]))
        self.alu(q, dm, ("multiply", dm))
        self.alu(dm, dm, ("multiply", ne / d))
        self.alu(var, var, ("multiply", 1.0 / d))
        self.alu(mean, dm, ("add", f[4]))
        self.alu(q, q, ("multiply", ne * (d - ne) / d / d))
        if self.layer:  # -mean (in dm), for the normalisation's bias -mean * rstd (`second`)
            self.alu(dm, mean, ("multiply", -1.0))
        self.alu(var, var, ("add", q))

    @property
    def small_g(self):
        """The engine of the [p, per] steps that read SBUF only (`stt`: GpSimd, which has no
        normalisation or weight to do there unless the plan gives it the weight; else
        VectorE)."""
        return G if self.stt else V

    def alu(self, dst, src, *ops, engine=V) -> None:
        """dst = src op0 x0 op1 x1 ... on VectorE, each x a number or a [p, per] operand: in
        `tensor_scalar`s of up to two ops (an operand as its per-partition column when a
        partition holds one row), else a `tensor_tensor` for each operand."""
        b, pending = self.b, []

        def flush(a):
            fields = {}
            for i, (op, x) in enumerate(pending):
                fields |= {f"op{i}": op, f"operand{i}": x}
            reads = [a] + [x for _, x in pending if not isinstance(x, float)]
            b.emit(TensorScalar, reads, [dst], src=a, dst=dst, engine=engine, **fields)
            pending.clear()
            return dst

        a = src
        for op, x in ops:
            if isinstance(x, float) or self.per == 1:
                pending.append((op, x))
                if len(pending) == 2:
                    a = flush(a)
                continue
            if pending:
                a = flush(a)
            b.emit(TensorTensor, [a, x], [dst], alu=op, src0=a, src1=x, dst=dst, engine=engine)
            a = dst
        if pending:
            flush(a)


def _alike(parts_of: dict, lo: int, n: int) -> list[tuple[int, int]]:
    """The runs [a, z) of blocks lo + a .. lo + z - 1 (of lo..n, a `stat_group`) of as many
    partitions each."""
    runs, a = [], 0
    for i in range(1, n - lo + 2):
        if i == n - lo + 1 or parts_of[lo + i] != parts_of[lo + a]:
            runs.append((a, i))
            a = i
    return runs
