"""bf16 `layer_norm` rows of WIDE_LEAST or more with a weight and a bias, in k pieces of L =
D / k columns (L even), the normalisation folded into three passes over the elements (as
`norm_fused`'s short rows):

    out = rstd (y + std b),   y = (x - mean) w.

A tile is g = P / k rows, row r's piece s on partition r k + s (x's g rows are contiguous:
one transfer a tile, in flat order). Per tile, in three stages (`LAGS` tiles apart; the list
schedule, `schedule.Scheduled`, interleaves them):

1. load (the first tile in parts of its rows, one a queue: `FIRST_PARTS`; stores in two:
   `STORE_PARTS`); VectorE's `bn_stats` over the piece's chunks (of one even width:
   `_chunks`), the first of some tiles also waiting for the next tiles' loads (one wait's
   fixed overhead for a few loads: `_wait_groups`);
2. the row's mean M and variance from the chunks' (count, mean, M2) halves, without
   `bn_aggr` (`stats_fields`, `NO_AGGR`): TensorE sums the halves' means over the row's k
   partitions (a block matrix, 1 where two partitions hold one row; float64 sums rounded
   once, so a row's values are its own: the same at LNC 1 and 2), ScalarE's copy with its
   add reduction makes M; ScalarE's square of (M - mean_i) and copy of M2_i, each summed by
   its reduction, and TensorE's sums over the row's partitions make D var = sum M2_i + n_i
   sum (M - mean_i)^2 (Chan's formula, equal counts: no E[x^2] - E[x]^2, a mean of 1e4 keeps
   its digits); rstd and std (ScalarE); diag(std); y by one `scalar_tensor_tensor` (x - M) w
   in column parts, each on VectorE (one cycle an element for bf16) or GpSimd (two), the
   list schedule's pick. (Chunks of unequal widths: `bn_aggr` per partition, then M and
   the mean of v_p + (m_p - M)^2 over the row's partitions, `second_aggr`.)
3. per PSUM tile of SPAN banks: TensorE's identity times y plus diag(std) times the spread
   bias, copied out times rstd (ScalarE's `activation` with rstd its scale, or VectorE)
   into x's tile; store.

The weight and bias are loaded once each as [W_ROWS, D / W_ROWS] (one transfer of 2 D bytes
over 4 DMA engines, not a copy a partition: 1.2 MiB a core at 10240) and spread to [P, L] by
TensorE (K = W_ROWS selectors, 1 where partition q holds piece p mod k's block, times them;
copied out once): the weight while the first tile loads, the bias after its statistics.
trn2 LNC 2, 16 MiB, bf16 rows of 10240 62.50 -> 55.73 us (74.1% -> 83.1%), 12288 62.45 ->
57.23, 14336 60.58 -> 56.62, 20000 64.01 -> 57.68 (80.3%), 24576 61.52 -> 57.26, 8192 61.30
-> 54.47, 16384 58.88 -> 54.47 (`norms.WIDE`, chosen by estimate).
"""

from __future__ import annotations

from trnsim.dtypes import dtype
from trnsim.isa import (
    Activation,
    AffineSelect,
    BnAggr,
    BnStats,
    DmaCopy,
    Matmul,
    Memset,
    ScalarTensorTensor,
    TensorCopy,
    TensorReduce,
    TensorScalar,
)
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues
from trnsim.kernels.row_plan import G, S, V, runs
from trnsim.kernels.schedule import Scheduled

__all__ = ["pieces", "applies", "lower_wide"]

PIECE_MOST = 3072  # a piece's columns at most, k the fewest pieces that fit (trn2 LNC 2, 16
# MiB, bf16 rows of 14336 in 4 pieces of 3584 69.4 us, 8 of 1792 61.7; 32000 in 8 of 4000
# 68.1, 16 of 2000 62.6; 10240 in 4 of 2560 60.8, 8 of 1280 67.2)
PIECE_LEAST = 1024  # ... and at least
K_MOST = 8  # pieces a row at most (16 rows a tile): the estimate chose WIDE for bf16 rows of
# 32000 in 16 pieces of 2000, trn2 LNC 2, 16 MiB, 58.75 us against STT_PARTS' 58.00; 64 pieces
# of 2374 (151936, 2 rows a tile) ran 62.4 us, STT_GROUP3 60.0 ...
WIDE_LEAST = 8192  # ... rows this long at least (shorter ones fit a partition)
BUFS = 16  # tiles of x rotating (8: 63.1 us at 10240; 12: 62.2 before the small columns
# shared a tile, `sm`, and more took more semaphores than a core has)
Y_BUFS = 14  # ... of y, diag(std) and the mean (4: 63.4 us at 10240; 12 -> 14, trn2 LNC 2, 16
# MiB, bf16 rows of 20000 58.51 -> 58.34 us, 10240 56.69 -> 56.76, 8192 to 24576 the same)
SPAN = 2  # PSUM banks a copy out reads (1: 61.2 us at 10240, 65.8 at 12288)
PS_TILES = 3  # ... those PSUM tiles, in turn
LAGS = (0, 2, 5)  # the stages' lags behind the loads, in tiles (ties in the list schedule go
# in emitted order): trn2 LNC 2, 16 MiB, bf16 rows of 10240, 12288, 14336, 20000, 24576, us:
# (0, 1, 2) 58.57, 59.54, 59.12, 61.91, 59.33; (0, 2, 4) 57.72, 59.58, 59.12, 61.27, 59.79;
# (0, 2, 5) 57.17, 58.86, 59.07, 61.05, 60.07; (0, 3, 5) 58.26, 58.96, 59.16, 61.18, 60.01
STT_PARTS = (8, 16, 8)  # y's scalar_tensor_tensor a tile in this many column parts of even
# widths (VectorE's fast case: odd ones cost it twice), pieces shorter than LONG_PIECE, the
# rest, and those of them not a multiple of a PSUM bank (trn2 LNC 2, 16 MiB, bf16 rows of
# 20000, pieces of 2500, us: 16 parts 59.45, 8 58.51, 12 58.86, 20 59.42; 8 for all: 10240
# 56.70 -> 57.20, 12288 57.57 -> 58.52, 24576 57.96 -> 59.24), each on VectorE or GpSimd as
# the list schedule finds free sooner (1: 64.3 us at 10240, 4: 63.6, 8: 63.1; VectorE's share
# fixed at 0.1 to 0.25 of the columns: 64.8 to 68.3; 16 parts of pieces of 3072: 12288 58.86
# -> 58.43, 24576 60.07 -> 58.92, 20000 61.05 -> 59.69, but 14336's of 1792 58.37 -> 58.47;
# 10 or 20 parts: 12288 59.72)
V_SHARE = None  # (VectorE's fixed share of y's columns, the rest GpSimd's: None, the above)
S_COLS = 0  # ScalarE's statistics of a tile's first columns, two passes (their sum, then the
# squares about their mean) beside VectorE's bn_stats of the rest: 128 columns 68.2 us at
# 10240, 256 67.2 (ScalarE's passes cost more than VectorE's bn_stats saves)
W_AFTER = 1  # x's tiles emitted before the weight and bias
LOAD_QUEUES = 1  # x a tile at a time (the first at the full rate: on two queues with the
# second, in at 4.8 us, not 3.0; trn2 LNC 2, 16 MiB, bf16 rows of 10240 62.9 -> 61.1 us)
SETUP_ON = (S, V)  # the engines of the block matrices' and spreads' copies out of PSUM
W_ROWS = 32  # the weight and bias loaded as [W_ROWS, D / W_ROWS] where k divides it (4 DMA
# engines: as [k, L] one engine, 0.9 us for 20 KiB, GpSimd's first y pass at 19.5 us) ...
W_OWN = False  # ... the weight on a queue of its own (at 10240, 61.05 -> 60.85 us; with
# `_wait_groups`, trn2 LNC 2, 16 MiB, bf16 rows, us, True -> False: 20000 58.92 -> 57.98,
# 24576 57.96 -> 57.61, 10240 56.87 -> 56.08, 12288 57.68 -> 57.58, 16384 55.02 -> 54.82, but
# 14336 55.99 -> 56.90, 8192 54.67 -> 54.99: the first tile in sooner, not sharing the DMA
# engines with the weight, the weight later; without the groups, 20000 58.34 -> 58.28, 24576
# 57.96 -> 57.83, 10240 56.76 -> 56.65, but 14336 56.84 -> 57.41, 8192 55.01 -> 55.43, 16384
# 55.56 -> 55.70)
NO_AGGR = True  # the row's mean and variance from bn_stats' fields by TensorE and ScalarE,
# VectorE's bn_aggr dropped (its chunks of equal even widths)
DG_ON = ((G,), (S, V, G))  # diag(std)'s engines, pieces of at most DG_G columns (GpSimd: a
# busy VectorE's bn_stats not held up), and longer: trn2 LNC 2, 16 MiB, bf16 rows, us, (S, V,
# G) -> (G,): 14336 (pieces of 1792) 58.37 -> 57.44, 8192 55.78 -> 55.01, 16384 56.12 -> 55.56;
# but 10240 57.03 -> 57.66, 12288 58.08 -> 58.87, 20000 59.64 -> 60.34, 24576 58.48 -> 59.52
DG_G = 2048
BIAS_LATER = True  # the bias spread after the first tile's statistics (ScalarE copied it out
# first, and GpSimd's first y pass waited)
LONG_PIECE = 2048  # pieces of this many columns or more: std b into PSUM before y (TensorE
# ahead of y's passes) and y in STT_PARTS[1] parts; trn2 LNC 2, 16 MiB, bf16 rows, us, (bias
# after y, 8 parts) -> (bias first, 16 parts): 8192 56.28 -> 55.78, 10240 57.17 -> 57.03,
# 12288 58.86 -> 58.08, 16384 56.31 -> 56.12, 20000 61.05 -> 59.64, 24576 60.07 -> 58.48; but
# 14336 (pieces of 1792) 58.37 -> 59.44 (bias first alone 59.44, 16 parts alone 58.47)
REDUCE_V = 1  # the sum of M2 (1), and of the means (2), on ScalarE or VectorE as the list
# schedule finds free (trn2 LNC 2, 16 MiB, bf16 rows of 10240, 12288, 14336, 20000, 24576,
# 8192, 16384, us: 0: 57.17, 58.86, 59.07, 61.05, 60.07, 56.28, 56.31; 1: the same but 14336
# 58.37; 2: 14336 59.59, 8192 56.81, 16384 57.30)
STD_DIVIDE = False  # diag(std) as the identity divided by rstd (GpSimd or VectorE), no sqrt
# on ScalarE: trn2 LNC 2, 16 MiB, bf16 rows of 10240 58.57 -> 59.06 us, 20000 61.91 -> 63.26
TAIL_ALU = 3  # a partial last tile's first L / TAIL_ALU columns (in steps of 256) without
# TensorE (`tail_alu`: TensorE, two matmuls a bank, ran behind y at the end): trn2 LNC 2, 16
# MiB, bf16 rows, us, none -> 512 columns: 12288 58.08 -> 57.68, 10240 57.03 -> 56.70, 14336
# 57.44 -> 57.22, 24576 58.48 -> 58.36 (1024: 12288 57.72, 10240 57.49; 256: 12288 57.87;
# 512 more at the tile's end, or the last 2 tiles: worse); with `EVEN_LAST`, 512 -> L / 3:
# 12288 57.82 -> 57.58, 24576 58.08 -> 58.02, 10240 56.62 -> 56.61. A full last tile the
# same way lost (8192 55.01 -> 55.45 at 1024, 16384 55.56 -> 56.14 at 512): it keeps TensorE
# (L / 2: 20000 58.34 -> 58.27, but with `W_OWN` False 24576 57.83 -> 58.33, 12288 57.61 ->
# 58.33)
EVEN_LAST = 0.45  # a partial last tile and the one before share their rows, the last this
# much (evened, the last's y, copies and store shorter): trn2 LNC 2, 16 MiB, bf16 rows, us,
# 0.5: 24576 58.36 -> 58.08, 20000 59.65 -> 59.31, 14336 57.22 -> 57.10, 10240 56.70 ->
# 56.62, 12288 57.68 -> 57.82; 0.45 (with TAIL_ALU 3): 24576 58.02 -> 57.96, 12288 57.58 ->
# 57.57, 20000 59.35 -> 59.33, 14336 57.10 -> 57.08, 10240 56.61 -> 56.70; 0.55: 24576
# 58.07; 0.4, 0.3: 12288 and 24576 unchanged (a tile holds g rows at most)
PS_EVEN = True  # stage 3's PSUM tiles of even widths (`runs`), not full ones and a short
# last: trn2 LNC 2, 16 MiB, bf16 rows of 20000 (pieces of 2500: 1024, 1024, 452 -> 3 of 833)
# 58.69 -> 58.51 us, 14336 57.08 -> 56.84; 10240, 12288, 24576 the same
# (Tried at bf16 rows of 20000, 58.34 us: the last tile's rows moved by TensorE (a permutation
# for its identity and diag(std), rstd moved by a matmul) to partitions 64 on, a piece's rows
# adjacent, copied out a PSUM tile at a time into tiles of their own and each stored at once, a
# transfer a piece on the idle load queues: 58.60 (WIDE forced; 58.50 the last two tiles): the
# last two tiles' stores share DMA engines 8 and 9 (a transfer moves at its slowest engine's
# rate) and the moved tile loses `TAIL_ALU`. A DMA cannot take every k-th partition, so
# without the permutation a piece's columns are no one transfer; nor the first tile's first
# columns, to start VectorE sooner.)
WAIT_FROM = 3  # VectorE's first bn_stats of some tiles waits for the loads of the next ones
WAIT_BETA = 0.25  # too (`_wait_groups`): a wait costs VectorE a fixed overhead (~0.15 us) an
# instruction, so one for a few loads done by then costs less than one a load. trn2 LNC 2, 16
# MiB, bf16 rows, us, none -> these (`W_OWN` False): 20000 58.28 -> 57.98 (14 tiles a core:
# 4 waits for 5, 6 for 7, 8 for 9 and 10, 11 for 12 and 13), 24576 57.83 -> 57.61, 10240
# 56.65 -> 56.08, 12288 57.61 -> 57.58, 14336 57.41 -> 56.90, 8192 55.43 -> 54.99, 16384
# 55.70 -> 54.82. At 20000: WAIT_BETA 0.2 58.50, 0.34 60.41, 0.5 60.23 (a load waited for
# too soon: VectorE idle); WAIT_FROM 2 the same, 5 58.50; by hand, 3 for 4, 5 for 6 and 7, 8
# for 9, 10 for 11, 12 for 13: 57.98; pairs from 3 or 4: 58.35
FIRST_PARTS = 0  # the first tile loaded in this many parts of its rows, each on a load queue
# of its own (0: as many as there are), its DMA engines' share each (one engine of a transfer
# starts engine_stagger after another: 16 engines 0.24 us, 2 engines 0.02); the first tile in
# sooner, VectorE's first bn_stats sooner: trn2 LNC 2, 16 MiB, bf16 rows of 20000 in at 2.92
# -> 2.70 us; us, one part -> 2, 4, 8 (the 8 load queues): 20000 57.98 -> 57.85, 57.79,
# 57.76; 24576 57.61 -> 57.49, 57.42, 57.39; 10240 56.08 -> 55.95, 55.89, 55.86; 12288 57.58
# -> 57.45, 57.39, 57.36; 14336 56.90 -> 56.78, 56.71, 56.68; 8192 54.99 -> 54.70, 54.83,
# 54.59; 16384 54.82 -> 54.69, 54.63, 54.59 (16 parts, two a queue: 20000 59.49)
STORE_PARTS = 2  # ... and every store in this many parts of its rows, the second on the next
# store queue (the same, at the end, for the stores one after another: from 51.4 us on at
# 20000, the last 4 tiles'): with the above, trn2 LNC 2, 16 MiB, bf16 rows of 20000 57.76 ->
# 57.68 us, 24576 57.39 -> 57.26, 10240 55.86 -> 55.73, 12288 57.36 -> 57.23, 14336 56.68 ->
# 56.62, 8192 54.59 -> 54.47, 16384 54.59 -> 54.47 (8 parts: 20000 57.71; 8 the last 2 tiles'
# stores only 57.81, the last 4 57.71)
SEARCH = 150  # the list schedule's descent, schedules at most (0 and 300: the same at 10240)


def pieces(P: int, d: int) -> int:
    """k: the fewest power of two pieces a row (2 to P) of an even width within [PIECE_LEAST,
    PIECE_MOST]; 0 if none."""
    k = 2
    while k <= P:
        f = d // k
        if d % k == 0 and f % 2 == 0 and PIECE_LEAST <= f <= PIECE_MOST:
            return k
        k *= 2
    return 0


def applies(b: KernelBuilder, cfg, x: str, out: str, weight, bias) -> bool:
    """bf16 x, output, weight and bias, 2-D x, rows that cut into `pieces` (K_MOST at most)."""
    if weight is None or bias is None:
        return False
    if {b.tensors[n].dtype.name for n in (x, out, weight, bias)} != {"bfloat16"}:
        return False
    tx = b.tensors[x]
    k = pieces(cfg.core.sbuf.partitions, tx.shape[-1])
    return len(tx.shape) == 2 and tx.shape[-1] >= WIDE_LEAST and 0 < k <= K_MOST


def lower_wide(b: KernelBuilder, cfg, x, out, weight, bias, eps, share) -> float:
    """out = layer_norm(x, [D], weight, bias, eps) over rows [lo, hi) of `share` (module doc);
    the list schedule's estimated span."""
    w = _Wide(b, cfg, x, out, weight, bias, eps, share)
    if not w.tiles:
        return 0.0
    with Scheduled(b, cfg, shared_dma=True, fluid=True, search=SEARCH) as s:
        w.emit()
    b.release(*w.psum)
    return s.makespan


class _Wide:
    def __init__(self, b, cfg, x, out, weight, bias, eps, share, k: int = 0):
        """The plan of x's rows in `share` in k pieces (0: `pieces`' choice)."""
        self.b, self.cfg, self.x, self.out, self.eps = b, cfg, x, out, float(eps)
        self.weight, self.bias = weight, bias
        self.P = P = cfg.core.sbuf.partitions
        self.d = d = b.tensors[x].shape[-1]
        self.k = k = k or pieces(P, d)
        self.L, self.g = d // k, P // k
        self.long = int(self.L >= LONG_PIECE)  # (`LONG_PIECE`)
        self.bf, self.f32 = b.tensors[x].dtype, dtype("float32")
        self.xf, self.of = x, out  # (2-D: `applies`)
        lo, hi = share
        self.tiles = [(r, min(hi, r + self.g) - r) for r in range(lo, hi, self.g)]
        if EVEN_LAST and len(self.tiles) > 1 and self.tiles[-1][1] < self.g:
            (r, a), (_, z) = self.tiles[-2:]  # (`EVEN_LAST`)
            h = min(self.g, a + z - int((a + z) * EVEN_LAST))
            self.tiles[-2:] = [(r, h), (r + h, a + z - h)]
        self.bufs = BUFS
        self.bank = cfg.core.psum.bank_bytes // 4
        self.c = S_COLS if self.L > 2 * S_COLS else 0  # ScalarE's statistics columns
        self.chunks = [
            (self.c + a, self.c + z)
            for a, z in _chunks(self.L - self.c, cfg.core.vector.bn_stats_max_free)
        ]
        widths = {hi - lo for lo, hi in self.chunks}
        self.no_aggr = NO_AGGR and not self.c and len(widths) == 1 and min(widths) % 2 == 0
        qs = Queues(cfg)
        self.first_queues = qs.loads()  # (`FIRST_PARTS`: the first tile's rows, a part a queue)
        self.first_parts = FIRST_PARTS or self.first_queues.count
        self.sq = qs.stores()  # (`STORE_PARTS`: a store's parts after its first)
        q = dma_queues(cfg, self.L * self.bf.itemsize)
        self.loads, self.stores = qs.loads().take(LOAD_QUEUES), qs.stores().take(q)
        self.wq = qs.loads()[LOAD_QUEUES] if W_OWN else self.loads[0]
        self.psum = [b.psum("lnw_ps", (P, SPAN * self.bank), self.f32) for _ in range(PS_TILES)]
        self.psum += [b.psum("lnw_st", (P, 2 * len(self.chunks) + 4), self.f32) for _ in range(2)]
        self.turn = 0
        self.waits = _wait_groups(len(self.tiles), BUFS - 1 - max(LAGS))

    def tile(self, key: str, n: int, shape, dt) -> str:
        return self.b.scratch_tile(f"lnw.{key}{n % self.bufs}", key, shape, dt)

    def put(self, options: list) -> None:
        cls, reads, writes, fields = options[0]
        self.b.emit(cls, reads, writes, choices=options[1:], **fields)

    def copy(self, src, dst, scale=None, on=(S, V)) -> None:
        """dst = src (times the per-partition `scale`) on ScalarE or VectorE (`on`)."""
        ops = []
        if scale is None:
            ops = [
                (Activation, [src], [dst], dict(func="copy", src=src, dst=dst, engine=S)),
                (TensorCopy, [src], [dst], dict(src=src, dst=dst, engine=V)),
            ]
        else:
            reads = [src] + ([] if isinstance(scale, float) else [scale])
            ops = [
                (
                    Activation,
                    reads,
                    [dst],
                    dict(func="copy", src=src, dst=dst, scale=scale, engine=S),
                ),
                (
                    TensorScalar,
                    reads,
                    [dst],
                    dict(src=src, dst=dst, op0="multiply", operand0=scale, engine=V),
                ),
            ]
        self.put([o for o in ops if o[3]["engine"] in on])

    def emit(self) -> None:
        self.loaded = set()
        for n in range(min(W_AFTER, len(self.tiles))):  # (before the weight and bias: `W_AFTER`)
            self.load(n, *self.tiles[n])
        self.setup()
        lag = tuple(min(v, self.bufs - 1) for v in LAGS)
        n_t = len(self.tiles)
        for n in range(n_t + max(lag)):
            for stage, late in zip((self.first, self.second, self.third), lag):
                if 0 <= n - late < n_t:
                    stage(n - late, *self.tiles[n - late])

    def ident(self, name: str, dt) -> str:
        t = self.b.tile(name, "sbuf", (self.P, self.P), dt)
        a = ap(t)
        self.b.emit(Memset, [], [a], dst=a, value=0.0, engine=G)
        self.b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=1.0, cmp="not_equal",
                    start=0, partition_step=1, step=-1, engine=G)  # fmt: skip
        return t

    def setup(self) -> None:
        """The identities, the selector, the block matrices; the weight and bias in as [k, L]
        and spread to [P, L] (module doc)."""
        b, P, k, g, L = self.b, self.P, self.k, self.g, self.L
        self.ib, self.i32 = self.ident("lnw_ib", self.bf), self.ident("lnw_if", self.f32)
        # the weight (bias) as [k nb, L / nb] on nb k partitions (`W_ROWS`: more DMA engines),
        # and per block j of a piece's nb the selector [q, r k + s] = (q == nb s + j)
        nb = W_ROWS // k if W_ROWS % k == 0 and L % (W_ROWS // k) == 0 else 1
        self.nb, lb = nb, L // nb
        rows = {}
        for v, q in ((self.weight, self.wq), (self.bias, self.loads[0])):
            t = b.tile("lnw_wk", "sbuf", (P, lb), self.bf)
            dst = ap(t, slice(0, k * nb))
            b.emit(DmaCopy, [ap(v)], [dst], src=ap(v), dst=dst, queue=q)
            rows[v] = t
        sels = []
        for j in range(nb):
            sel = b.tile("lnw_sel", "sbuf", (P, g, k), self.bf)
            src = ap(self.ib, slice(0, k * nb), slice(j, j + nb * (k - 1) + 1, nb))
            src = src._replace(bcast=((1, g),))
            dst = ap(sel, slice(0, k * nb))
            b.emit(TensorCopy, [src], [dst], src=src, dst=dst, engine=G)
            sels.append(ap(sel, slice(0, k * nb)))
        rsel = b.tile("lnw_rsel", "sbuf", (P, g, k), self.f32)  # [r, r' k + s] = (r == r')
        src = ap(self.i32, slice(0, g), slice(0, g))._replace(bcast=((2, k),))
        dst = ap(rsel, slice(0, g))
        b.emit(TensorCopy, [src], [dst], src=src, dst=dst, engine=G)
        ps = self.psum[0]
        pk = g * k  # (the partitions a whole tile takes)
        blk = ap(ps, slice(0, pk), slice(0, pk))
        r = ap(rsel, slice(0, g))
        b.emit(Matmul, [r, r], [blk], stationary=r, moving=r, dst=blk)
        self.blk = {}
        h = 2 * len(self.chunks)  # (bn_stats' halves a partition)
        consts = (("A", 1.0 / k), ("N", -1.0 / k), ("one", 1.0))
        if self.no_aggr:
            consts = (("mA", 1.0 / (h * k)), ("nh", self.L / h), ("one", 1.0))
        self.jk = b.tile("lnw_jk", "sbuf", (P, h), self.f32)
        for key, c in consts:
            t = b.tile(f"lnw_blk{key}", "sbuf", (P, P), self.f32)
            self.copy(blk, ap(t, slice(0, pk), slice(0, pk)), c, on=SETUP_ON)
            self.blk[key] = t
        self.junk = b.tile("lnw_junk", "sbuf", (P, max(1, self.c)), self.bf)
        for n in range(min(self.bufs, len(self.tiles)) if self.c else 0):
            st = self.sm(n, P, "st", 0)
            a = ap(st.name, slice(None), slice(st.index[1][1] - 3, st.index[1][1] - 2))
            b.emit(Memset, [], [a], dst=a, value=float(self.c), engine=G)
        self.spread, self.rows, self.sels, self.lb = {}, rows, sels, lb
        self.spread_one(self.weight)
        if not BIAS_LATER:
            self.spread_one(self.bias)

    def spread_one(self, v: str) -> None:
        """The weight's (bias') [k nb, L / nb] rows spread to [P, L] by TensorE, a selector a
        block, copied out of PSUM (`setup`)."""
        b, k, L, lb, nb, t = self.b, self.k, self.L, self.lb, self.nb, self.rows[v]
        pk = self.g * k
        sp = b.tile("lnw_sp", "sbuf", (self.P, L), self.bf)
        for lo, hi in _banks(L, SPAN * self.bank):
            ps = self.psum[self.turn % PS_TILES]
            self.turn += 1
            for a, z in _banks(hi - lo, self.bank):
                cuts = sorted(
                    {lo + a, lo + z} | {c for c in range(0, L, lb) if lo + a < c < lo + z}
                )
                for u, w in zip(cuts, cuts[1:]):  # (within one block j)
                    j = u // lb
                    mv = ap(t, slice(0, k * nb), slice(u - j * lb, w - j * lb))
                    acc, st = ap(ps, slice(0, pk), slice(u - lo, w - lo)), self.sels[j]
                    b.emit(Matmul, [st, mv], [acc], stationary=st, moving=mv, dst=acc)
            src, dst = ap(ps, slice(0, pk), slice(0, hi - lo)), ap(sp, slice(0, pk), slice(lo, hi))
            self.copy(src, dst, on=SETUP_ON)
        self.spread[v] = sp

    def xt(self, n: int, p: int, c=None):
        t = self.tile("x", n, (self.P, self.L), self.bf)
        return ap(t, slice(0, p), slice(None) if c is None else slice(*c))

    def yt(self, n: int, p: int, c=None):
        t = self.b.scratch_tile(f"lnw.y{n % Y_BUFS}", "y", (self.P, self.L), self.bf)
        return ap(t, slice(0, p), slice(None) if c is None else slice(*c))

    def sm(self, n: int, p: int, key: str, w: int = 1):
        """Tile n's fp32 [p, w] small columns `key` (all in one tile: fewer semaphores)."""
        nc = len(self.chunks)
        e = 6 * nc + (3 if self.c else 0)  # (ScalarE's triple after bn_stats')
        at = {"st": (0, e), "ag": (e, 2), "mn": (e + 2, 2), "q": (e + 4, 1), "rs": (e + 5, 1),
              "sd": (e + 6, 1), "sum": (e + 7, 1)}[key]  # fmt: skip
        t = self.tile("sm", n, (self.P, e + 8), self.f32)
        return ap(t, slice(0, p), slice(at[0], at[0] + min(w, at[1]) if w else at[0] + at[1]))

    def load(self, n: int, r0: int, rows: int) -> None:
        if n not in self.loaded:
            self.loaded.add(n)
            parts = self.first_parts if n == 0 else 1  # (`FIRST_PARTS`)
            for i, (a, z) in enumerate(runs(rows, -(-rows // parts))):
                src = ap(self.xf, slice(r0 + a, r0 + z))
                dst = ap(self.xt(n, rows * self.k).name, slice(a * self.k, z * self.k))
                q = self.loads[n] if i == 0 else self.first_queues[i]
                self.b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=q)

    def first(self, n: int, r0: int, rows: int) -> None:
        """Stage 1: load; bn_stats over the chunks; bn_aggr."""
        b, p = self.b, rows * self.k
        self.load(n, r0, rows)
        more = self.waits.get(n, [])  # (`_wait_groups`)
        for m in more:
            self.load(m, *self.tiles[m])
        st = self.sm(n, p, "st", 0)
        for q, c in enumerate(self.chunks):
            xs = self.xt(n, p, c)
            sd = ap(st.name, slice(0, p), slice(st.index[1][0] + 6 * q, st.index[1][0] + 6 * q + 6))
            more_xs = [self.xt(m, self.tiles[m][1] * self.k, c) for m in more] if q == 0 else []
            b.emit(BnStats, [xs, *more_xs], [sd], src=xs, dst=sd)
        if self.c:  # ScalarE's (count, mean, M2) of the first c columns: the count set once
            # a buffer (`setup`); their sum, mean, squares about it
            e, c = st.index[1][0] + 6 * len(self.chunks), self.c
            xs, junk = self.xt(n, p, (0, c)), ap(self.junk, slice(0, p))
            tot, m, m2 = self.sm(n, p, "sum"), *(ap(st.name, slice(0, p), slice(e + i, e + i + 1))
                                                  for i in (1, 2))  # fmt: skip
            b.emit(Activation, [xs], [junk, tot], func="copy", src=xs, dst=junk, reduce="add",
                   reduce_dst=tot)  # fmt: skip
            b.emit(Activation, [tot], [m], func="copy", src=tot, dst=m, scale=1.0 / c)
            b.emit(Activation, [xs, m], [junk, m2], func="square", src=xs, dst=junk, scale=-1.0,
                   bias=m, reduce="add", reduce_dst=m2)  # fmt: skip
        if not self.no_aggr:
            s_, a_ = st, self.sm(n, p, "ag", 2)
            b.emit(BnAggr, [s_], [a_], src=s_, dst=a_)

    def stats_fields(self, n: int, p: int) -> tuple:
        """Tile n's row mean (in its own tile) and, in PSUM, D times the row's variance, from
        bn_stats' (count, mean, M2) halves without bn_aggr: TensorE sums the halves' means
        over the row's partitions (times 1 / its halves), ScalarE's copy with its add
        reduction the mean M; ScalarE's square of (M - mean_i) and copy of M2_i, each summed
        by its reduction; TensorE: n_i the first plus the second over the row's partitions
        (equal counts n_i: Chan's formula, every term about the row's own mean)."""
        b, h = self.b, 2 * len(self.chunks)
        st = self.sm(n, p, "st", 0).name
        means, m2 = (ap(st, slice(0, p), slice(i, 3 * h, 3)) for i in (1, 2))
        ps = self.psum[PS_TILES + n % 2]
        pm, var = ap(ps, slice(0, p), slice(0, h)), ap(ps, slice(0, p), slice(h, h + 1))
        ma = ap(self.blk["mA"], slice(0, p), slice(0, p))
        b.emit(Matmul, [ma, means], [pm], stationary=ma, moving=means, dst=pm)
        mn = self.b.scratch_tile(f"lnw.mn{n % Y_BUFS}", "mn", (self.P, 2), self.f32)
        mean, jk = ap(mn, slice(0, p), slice(0, 1)), ap(self.jk, slice(0, p), slice(0, h))
        ops = [
            (
                Activation,
                [pm],
                [jk, mean],
                dict(func="copy", src=pm, dst=jk, reduce="add", reduce_dst=mean, engine=S),
            )
        ]
        if REDUCE_V > 1:
            ops.append((TensorReduce, [pm], [mean], dict(alu="add", src=pm, dst=mean, engine=V)))
        self.put(ops)
        q, s2 = self.sm(n, p, "q"), self.sm(n, p, "ag", 1)
        b.emit(Activation, [means, mean], [jk, q], func="square", src=means, dst=jk, scale=-1.0,
               bias=mean, reduce="add", reduce_dst=q)  # fmt: skip
        ops = [
            (
                Activation,
                [m2],
                [jk, s2],
                dict(func="copy", src=m2, dst=jk, reduce="add", reduce_dst=s2, engine=S),
            )
        ]
        if REDUCE_V:  # (or VectorE's reduction)
            ops.append((TensorReduce, [m2], [s2], dict(alu="add", src=m2, dst=s2, engine=V)))
        self.put(ops)
        nh, one = (ap(self.blk[key], slice(0, p), slice(0, p)) for key in ("nh", "one"))
        b.emit(Matmul, [nh, q], [var], stationary=nh, moving=q, dst=var)
        b.emit(Matmul, [one, s2], [var], stationary=one, moving=s2, dst=var, accumulate=True)
        return mean, var, 1.0 / self.d

    def second(self, n: int, r0: int, rows: int) -> None:
        """Stage 2: the row's mean, rstd, std (module doc); diag(std); y."""
        p = rows * self.k
        if self.no_aggr:
            mean, var, inv = self.stats_fields(n, p)
            self.finish(n, p, mean, var, inv)
        else:
            self.second_aggr(n, p)
        if n == 0 and BIAS_LATER:
            self.spread_one(self.bias)

    def second_aggr(self, n: int, p: int) -> None:
        """`second` after bn_aggr: each partition's mean and variance combined."""
        b, k = self.b, self.k
        a0 = self.sm(n, p, "ag", 2).index[1][0]
        ag = self.sm(n, p, "ag").name
        m_p, v_p = (
            ap(ag, slice(0, p), slice(a0, a0 + 1)),
            ap(ag, slice(0, p), slice(a0 + 1, a0 + 2)),
        )
        ps = self.psum[PS_TILES + n % 2]
        pm = ap(ps, slice(0, p), slice(0, 2))
        for i, key in enumerate(("A", "N")):
            st, dst = (
                ap(self.blk[key], slice(0, p), slice(0, p)),
                ap(ps, slice(0, p), slice(i, i + 1)),
            )
            b.emit(Matmul, [st, m_p], [dst], stationary=st, moving=m_p, dst=dst)
        # (the mean and -mean in a tile of their own: the list schedule orders a read after
        # its tile's last write, so y's pass, reading the mean, waited for rstd and std)
        mn = self.b.scratch_tile(f"lnw.mn{n % Y_BUFS}", "mn", (self.P, 2), self.f32)
        mean, neg = (ap(mn, slice(0, p), slice(i, i + 1)) for i in (0, 1))
        self.copy(pm, ap(mn, slice(0, p)))
        q = self.sm(n, p, "q")
        b.emit(Activation, [m_p, neg], [q], func="square", src=m_p, dst=q, bias=neg)
        one, var = ap(self.blk["one"], slice(0, p), slice(0, p)), ap(ps, slice(0, p), slice(2, 3))
        b.emit(Matmul, [one, q], [var], stationary=one, moving=q, dst=var)
        b.emit(Matmul, [one, v_p], [var], stationary=one, moving=v_p, dst=var, accumulate=True)
        self.finish(n, p, mean, var, 1.0 / k)

    def finish(self, n: int, p: int, mean, var, inv: float) -> None:
        """rstd and std of `var` (in PSUM, times 1 / inv); diag(std); y."""
        b = self.b
        rs, sd = self.sm(n, p, "rs"), self.sm(n, p, "sd")
        for func, dst in (("rsqrt", rs), ("sqrt", sd))[: 1 if STD_DIVIDE else 2]:
            b.emit(Activation, [var], [dst], func=func, src=var, dst=dst, scale=inv,
                   bias=self.eps)  # fmt: skip
        dg = self.dg(n, p)
        ib = ap(self.ib, slice(0, p), slice(0, p))
        if STD_DIVIDE:  # (diag(1 / rstd): no sqrt on ScalarE)
            self.put([(TensorScalar, [ib, rs], [dg], dict(src=ib, dst=dg, op0="divide",
                                                          operand0=rs, engine=e))
                      for e in (G, V)])  # fmt: skip
        else:
            ops = [(Activation, [ib, sd], [dg], dict(func="copy", src=ib, dst=dg, scale=sd,
                                                     engine=S))]  # fmt: skip
            ops += [
                (
                    TensorScalar,
                    [ib, sd],
                    [dg],
                    dict(src=ib, dst=dg, op0="multiply", operand0=sd, engine=e),
                )
                for e in (V, G)
            ]
            self.put([o for o in ops if o[3]["engine"] in DG_ON[self.L > DG_G]])
        cv = round(self.L * (V_SHARE or 0) / 2) * 2  # (VectorE's columns: even, its fast case)
        parts = [((0, cv), (V,))] if cv else []
        np_ = STT_PARTS[self.long + (self.long and self.L % self.bank > 0)]
        parts += [(c, (G,)) for c in _even_parts(self.L - cv, np_)]
        for (lo, hi), engines in parts:
            if V_SHARE is None:
                engines = (V, G)
            c = (lo + (cv if engines == (G,) else 0), hi + (cv if engines == (G,) else 0))
            xs, ys = self.xt(n, p, c), self.yt(n, p, c)
            w = ap(self.spread[self.weight], slice(0, p), slice(*c))
            self.put([(ScalarTensorTensor, [xs, mean, w], [ys], dict(
                data=xs, op0="subtract", operand0=mean, op1="multiply", operand1=w, dst=ys,
                engine=e)) for e in engines])  # fmt: skip

    def third(self, n: int, r0: int, rows: int) -> None:
        """Stage 3: per PSUM tile, identity times y plus diag(std) times the bias, copied out
        times rstd into x's tile; store."""
        b, p = self.b, rows * self.k
        ib = ap(self.ib, slice(0, p), slice(0, p))
        dg = self.dg(n, p)
        rs = self.sm(n, p, "rs")
        c = self.alu_cols(n, rows)
        if c:
            self.tail_alu(n, p, 0, c, rs)
        for lo, hi in (runs if PS_EVEN else _banks)(self.L - c, SPAN * self.bank):
            lo, hi = lo + c, hi + c
            ps = self.psum[self.turn % PS_TILES]
            self.turn += 1
            for a, z in _banks(hi - lo, self.bank):
                acc = ap(ps, slice(0, p), slice(a, z))
                ys = self.yt(n, p, (lo + a, lo + z))
                bs = ap(self.spread[self.bias], slice(0, p), slice(lo + a, lo + z))
                mms = [(ib, ys), (dg, bs)]
                for i, (st, mv) in enumerate(mms[::-1] if self.long else mms):
                    b.emit(Matmul, [st, mv], [acc], stationary=st, moving=mv, dst=acc,
                           accumulate=i > 0)  # fmt: skip
            self.copy(ap(ps, slice(0, p), slice(0, hi - lo)), self.xt(n, p, (lo, hi)), rs)
        self.store(n, r0, rows)

    def dg(self, n: int, p: int):
        """diag(std) of tile n's p partitions (in turn of Y_BUFS: stage 2 writes it, stage 3's
        matmuls read it)."""
        t = self.b.scratch_tile(f"lnw.dg{n % Y_BUFS}", "dg", (self.P, self.P), self.bf)
        return ap(t, slice(0, p), slice(0, p))

    def alu_cols(self, n: int, rows: int) -> int:
        """Tile n's first columns normalised without TensorE (`TAIL_ALU`: a partial last
        tile's; 0 none)."""
        return self.L // TAIL_ALU // 256 * 256 if n == len(self.tiles) - 1 and rows < self.g else 0

    def store(self, n: int, r0: int, rows: int) -> None:
        """Tile n's rows [r0, r0 + rows) to out, in STORE_PARTS transfers."""
        first, p = self.stores.next(), rows * self.k
        for i, (a, z) in enumerate(runs(rows, -(-rows // STORE_PARTS))):  # (`STORE_PARTS`)
            src = ap(self.xt(n, p).name, slice(a * self.k, z * self.k))
            dst = ap(self.of, slice(r0 + a, r0 + z))
            q = first if i == 0 else self.sq[self.stores.count + i - 1]
            self.b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=q)

    def tail_alu(self, n: int, p: int, lo: int, hi: int, rs, on=(G, V)) -> None:
        """Columns [lo, hi) of tile n without TensorE (`alu_cols`): (b times std as bf16, as
        diag(std) holds it) plus y, in fp32 on an engine of `on` (the product exact, the sum
        rounded once: the bits of TensorE's float64 sum rounded once into PSUM), copied out
        times rstd as from PSUM (`alu_copy`). Its scratch tiles are tile n's own (in turn of
        two): the last two tiles may both take this way."""
        b = self.b
        sd = self.sm(n, p, "sd")
        sdb = ap(b.scratch_tile(f"lnw.sdb{n % 2}", "sdb", (self.P, 1), self.bf), slice(0, p))
        b.emit(TensorCopy, [sd], [sdb], src=sd, dst=sdb, engine=G)
        t = b.scratch_tile(f"lnw.tz{n % 2}", "tz", (self.P, hi - lo), self.f32)
        t = ap(t, slice(0, p), slice(0, hi - lo))
        bs, ys = ap(self.spread[self.bias], slice(0, p), slice(lo, hi)), self.yt(n, p, (lo, hi))
        self.put([(ScalarTensorTensor, [bs, sdb, ys], [t], dict(
            data=bs, op0="multiply", operand0=sdb, op1="add", operand1=ys, dst=t, engine=e))
            for e in on])  # fmt: skip
        self.alu_copy(t, self.xt(n, p, (lo, hi)), rs)

    def alu_copy(self, t, dst, rs) -> None:
        """`tail_alu`'s fp32 sum copied out times rstd into x's tile, as from PSUM."""
        self.copy(t, dst, rs)


def _wait_groups(tiles: int, ahead: int) -> dict[int, list[int]]:
    """Tile n -> the later tiles whose loads its first bn_stats waits for with its own
    (`WAIT_BETA`): from tile WAIT_FROM on, each tile not yet waited for waits for those up to
    n + int(n WAIT_BETA) (the loads run ahead of VectorE, more so as it goes), `ahead` at
    most (a tile loaded early is emitted early: its buffer's tile before it must have been
    copied out and stored by then)."""
    out, done = {}, 0
    for n in range(WAIT_FROM, tiles):
        if n <= done:  # (its load waited for already)
            continue
        done = min(tiles - 1, n + int(n * WAIT_BETA), n + ahead)
        if done > n:
            out[n] = list(range(n + 1, done + 1))
    return out


def _chunks(n: int, most: int) -> list[tuple[int, int]]:
    """bn_stats' [lo, hi) chunks of [0, n), at most `most` each: of one even width where one
    divides n in as few, or up to twice as few (so `NO_AGGR` applies), else `runs`'."""
    for c in range(-(-n // most), 2 * -(-n // most) + 1):  # (at most twice as many)
        if n % c == 0 and n // c % 2 == 0 and n // c <= most:
            return [(i * n // c, (i + 1) * n // c) for i in range(c)]
    return runs(n, most)


def _even_parts(n: int, parts: int) -> list[tuple[int, int]]:
    """`parts` [lo, hi) runs of even widths covering [0, n) (n even): VectorE's bf16
    scalar_tensor_tensor costs an odd width twice (2500 in 16 `runs`: 156 and 157)."""
    h = n // 2
    return [(2 * a, 2 * z) for a, z in runs(h, -(-h // parts))]


def _banks(n: int, step: int) -> list[tuple[int, int]]:
    """[lo, hi) runs of `step` covering [0, n)."""
    return [(a, min(n, a + step)) for a in range(0, n, step)]
