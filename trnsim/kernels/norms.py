"""`layer_norm` and `rms_norm` over the last dim.

Rows that fit a partition (`norm_rows`; longer rows: `norm_pieces`) go in blocks of [p, per,
D]: `per` rows to each of up to 128 partitions (short rows several to a partition, up to
ROW_BYTES, `layout.row_tiles`). A block's columns are cut in one or two **lanes**, each
loaded into a tile of its own and normalised, weighted, biased and stored on engines of its
own (`norm_plan.Lane`), so the two lanes' engines never wait for each other (the builder orders
a tile's accesses tile by tile). Per block, in three stages emitted a block apart (so each
engine turns to the next block instead of waiting for another engine's part of this one):

1. load; **shift** (layer_norm into an fp32 output): each row minus its first element, in
   place (exact when they are close), so the mean the normalisation subtracts is that of small
   numbers: a row of mean 10^4 and spread 1 keeps 7 digits instead of 3 (an fp32 mean of 10^4
   is only good to 5e-4); **statistics**: VectorE's `bn_stats` over chunks of up to 512 of
   the columns from c on (count, mean and M2 of the even and the odd columns: no E[x^2] -
   E[x]^2, so no cancellation at any mean); ScalarE the first c columns (layer_norm: their
   mean by an `activation` with its add reduction, then their M2 about that mean by a `square`
   with its reduction, a triple of their own; rms_norm: the sum of their squares);
2. `bn_aggr` of each row's triples (its mean and variance; a row of one chunk, several to a
   partition, combines its two halves for the whole block at once instead, `NormStages.halves`);
   rstd = (var + eps) ^ -0.5 (rms_norm: of mean(x^2) = var + mean^2 and ScalarE's part); each
   lane's **normalisation** (x - mean) * rstd per row: a VectorE or GpSimd `tensor_scalar`, or
   a ScalarE `activation` with rstd as its scale and -mean * rstd as its bias;
3. each lane's **weight and bias**: `tensor_tensor`s per row on VectorE or GpSimd (weight and
   bias spread over the partitions once, `norm_affine.spread`), or the bias added by TensorE
   into PSUM and copied out by ScalarE (`norm_affine.PeBias`); store.

layer_norm's instructions are then re-emitted in a list schedule's order where that ends sooner
(`schedule.Scheduled`): an engine's queue takes another block's work instead of waiting, in
order, on this block's chain.

**Pipelined** (a 16-bit layer_norm with a weight, the `pipe` variants): a builder orders
accesses tile by tile, so passes in place over a block's tile go one engine after another, each
over the whole block. Instead each row slot's columns, in pieces of up to PIPE_PIECE, are
weighted out of x into tiles of their own (`NormStages.piece`), biased, and stored piece by piece,
the weight's (and a VectorE or GpSimd bias') engine chosen by the list schedule (`flex`); the
normalisation is (x - mean) * rstd in place; the first and last blocks are cut smaller
(`_taper`), or ScalarE's share of the statistics is whole row slots (`row_stats`). Or the
normalisation is folded into the others (`pe_rstd`, `NormStages.fused`): (x - mean) * weight by
one `scalar_tensor_tensor`, and TensorE's stationary diag(rstd) in place of the identity.

`norm_plan.plan` chooses c, the lanes and the shift's engines; over many blocks it may mix two
choices of the lane's engines (a share of the blocks each, `NormStages.at`), so that a pass one
engine would take whole (rms_norm's weight on GpSimd, two cycles an element) is shared. Blocks
rotate through up to BUFS buffers within BUFFER_SHARE of SBUF. rms_norm's rows of
`rms_short.SHORT_ROW` or fewer go to `rms_short` (three stages, whole-block passes); its rows of
PIECE_ROWS or more that fit go in pieces where the estimate says so (`rms_plan`).
"""

from __future__ import annotations

import contextlib
import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import (
    Activation,
    AffineSelect,
    DmaCopy,
    Matmul,
    Memset,
)
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks, row_tiles
from trnsim.kernels.norm_affine import (
    PE_TILES,
    PeBias,
    pe_group,
    psum_cols,
    spread,
    spread_psum,
)
from trnsim.kernels.norm_columns import by_columns, lower_norm_columns
from trnsim.kernels.norm_fused import MIN_ROW as FUSED_MIN
from trnsim.kernels.norm_fused import SHORT_ROW as FUSED_SHORT
from trnsim.kernels.norm_fused import Fused, fused
from trnsim.kernels.norm_long import long_rows, lower_norm_long
from trnsim.kernels.norm_many import applies as many_applies
from trnsim.kernels.norm_many import lower_many
from trnsim.kernels.norm_pad import load_copy, pad_of, padded
from trnsim.kernels.norm_pe_rows import pe_rows
from trnsim.kernels.norm_plan import Lane, plan
from trnsim.kernels.norm_ragged import LAYER_BUFS, lower_norm_ragged
from trnsim.kernels.norm_shared import shared_blocks
from trnsim.kernels.norm_short import MIN_ROW as SHORT_MIN
from trnsim.kernels.norm_short import SHORT_ROW as LAYER_SHORT
from trnsim.kernels.norm_short import lower_norm_short
from trnsim.kernels.norm_stages import BUFS, F_BUFS, LONG_ROW, OUT_BUFS, S_GROUP, NormStages
from trnsim.kernels.norm_stt import lower_stt, stt_fits
from trnsim.kernels.norm_tail import tail_blocks
from trnsim.kernels.norm_tsums import applies as tsum_applies
from trnsim.kernels.norm_wide import applies as wide_applies
from trnsim.kernels.norm_wide import lower_wide
from trnsim.kernels.queues import Queues
from trnsim.kernels.rms_plan import IN_PIECES, RMS_RAGGED, rms_variant
from trnsim.kernels.rms_short import SHORT_ROW, lower_rms_short
from trnsim.kernels.row_pieces import Groups, PieceLayout
from trnsim.kernels.row_pieces import layout as pieces_layout
from trnsim.kernels.row_plan import G, S, V, bank_runs
from trnsim.kernels.rows import norm_share
from trnsim.kernels.schedule import Scheduled
from trnsim.kernels.tail_segs import ranges

__all__ = ["lower_norm", "norm_rows"]

SBUF_SHARE = 0.75  # rows that need more than this for one buffer go to `norm_pieces`
BUFFER_SHARE = 0.45  # what the rotating buffers may take
LONG_SHARE = 0.6  # rows of LONG_ROW or more: this share of SBUF
ROW_BYTES = 8192  # short rows are grouped up to this many bytes a partition (4096 bf16 or
# 2048 fp32 elements: fp32 blocks of 1 MiB, twice as many as with 4096 elements, which fill and
# drain the chain of passes sooner: rows of 512 and 64, layer_norm 51 -> 56% and 53 -> 57%,
# rms_norm 83 -> 95% and 86 -> 94%)
LAYER_ROW_BYTES = 4096  # layer_norm's (blocks of 512 KiB: its longer chain of passes fills and
# drains sooner; trn2 LNC 2, 16 MiB, rows of 64 bf16 69 -> 71%, fp32 57 -> 58%, of 512 bf16
# 59 -> 63%, fp32 69 -> 70%; rms_norm's ran slower so: fp32 rows of 64 94 -> 90%)
PE_BUFS = 5  # TensorE adds the bias only when this many buffers of x fit beside its own
PIECE_BYTES = 4096  # a piece tile's bytes a partition (512 KiB tiles: many, so loads overlap)
MAX_PIECE_BYTES = 32768  # a row of 2^20 fp32 in one tile (its 128 pieces)
BIG_PIECES = 16384  # piece tiles this large a partition (2 MiB and more) go in segments, and
# load one at a time (one after another on one queue)
BIG_LOADS = 8192  # layer_norm's piece tiles this large a partition (1 MiB and more: a row of
# 256K fp32 or 512K bf16 a tile, 8 a core) load so too, the first arriving first: trn2 LNC 2,
# 16 MiB, fp32 rows of 256K 74.8 -> 68.8 us, bf16 of 512K 78.7 -> 66.6 us (rms_norm's keep
# BIG_PIECES: fp32 rows of 256K ran 55.4 -> 55.9 us so; bf16 of 512K 58.4 -> 54.6)
PIECE_ROWS = 2048  # rows this long go in pieces when a core has no more rows than partitions
# (one block, which nothing would overlap)
RMS_PIECE_BLOCKS = 2  # rms_norm's: when it has no more than this many blocks of a row a
# partition (two 4 MiB blocks: the second's load overlaps only the first's passes, the first's
# store nothing): trn2 LNC 2, 16 MiB, fp32 rows of 8192 68.5 -> 58.7 us, bf16 of 16384 83.6 ->
# 61.9 us; and with RMS_PIECES 52.1 and 52.3 us (67.6% -> 88.9%, 55.4% -> 88.6%)
RMS_PIECES = {"split_loads": True, "load_parts": 4, "piece_bufs": 10, "small_waits": False}
# (rms_norm's rows in pieces, not segments: each block's load in four parts on queues of their
# own, so the first block arrives sooner; 10 buffers; the plan's [p, per] steps costed without
# a semaphore wait. trn2 LNC 2, 16 MiB, us: fp32 rows of 8192 58.7 -> 52.1, 16384 52.8 -> 51.6,
# 262144 59.4 -> 55.4; bf16 16384 61.9 -> 52.3, 32768 57.0 -> 50.8, 262144 56.5 -> 49.4; parts
# alone 54.3 and 57.8, 8 parts 58.0 and 61.6; in segments, fp32 rows of 2^20, 63.0 -> 65.6)
SEG_BYTES = 4096  # a row whose pieces would take BIG_PIECES a partition or more goes in segments
# of 128 pieces of this many bytes, each a tile of its own (`_lower_pieces`)
SEG_STORES = 1  # store queues of a row in segments (its last row's stores, after its
# statistics, are what nothing overlaps)
SEG_LAG = (0, 0, 0)  # a row in segments (without TensorE's bias): its stages emitted together
SEG_SHARE = 0.6  # what a row in segments' buffers (and the weight and bias) may take of SBUF
RESIDENT_BYTES = 12288  # ... and so rows a tile each whose pieces are this wide or more (bytes a
# partition: bf16 rows of 10^6 in 125 pieces of 8000, 3 buffers of the 4 rows a core, so a row's
# load waited on the engines; trn2 LNC 2, 16 MiB, 75.6 -> 72.1 us)
# layer_norm's plan variants, tried by `_variant`: as planned; its [p, per] steps costed without
# the semaphore wait most of them do not make; two lanes from rows of LANE_ROW on; both. trn2
# LNC 2, 16 MiB: fp32 rows of 64 59.5% -> 67.7%, 512 72.7% -> 76.0%, 4096 62.2% -> 66.4%, bf16
# 4096 63.7% -> 65.8%, 2^20 69.5% -> 70.7%. Rows that fit a partition: TensorE may add an fp32
# bias (`pe_fp32`); the weight and bias loaded behind the first block (`spread_first`, not ahead
# of it on its queue): fp32 rows of 64 67.7% -> 68.8%, of 512 76.0% -> 80.7%. fp32 rows in
# pieces: the weight and bias out of PSUM for VectorE (`psum_affine`), the engine of each
# normalisation (ScalarE or GpSimd), weight and bias (VectorE or GpSimd) picked by the list
# schedule (`flex`), the row's statistics read from PSUM (`psum_combine`), 9 to 11 buffers
# loaded one after another on one queue (`piece_big`, `piece_bufs`), the estimate's transfers
# on their partitions' DMA engines (`dma_parts`), the plan's [p, 1] steps costed as half or all
# of them reading the step before's output (`small_after`): rows of 64K 63.1% -> 81.7% (74.5 ->
# 57.5 us)
# fp32 rows that fit (FLEX): the weight and bias also kept in PSUM for VectorE (`fit_psum`), the
# list schedule picking each weight and bias instruction's engine and each normalisation's
# (`flex`, `flex_norm`), up to 12 buffers: rows of 64 68.8% -> 84.2% (67.3 -> 55.0 us; GpSimd
# took every weight and bias pass before, busy 56 us of 67), of 512 80.7% -> 90.4% (with
# `_halves` in an order without commit stalls)
# rows in segments (a core's rows all resident): every row loaded and its statistics taken
# before the weight and bias, which then load segment by segment, each segment of every row
# finished as its weight and bias arrive, the engines of each pass picked by the list schedule
# (`rows_first`, `_emit_rows_first`): fp32 rows of 2^20 67.9% -> 82.3% (85.2 -> 70.3 us)
ROWS_FIRST = {"rows_first": True, "small_waits": False, "flex": True}
# ... the rows' statistics read from PSUM, a descent of 300 schedules over the engines: trn2
# LNC 2, 16 MiB, fp32 rows of 512K 67.2 -> 63.9 us (77.4% -> 81.5%; without the descent 65.1)
ROWS_FIRST_SEARCH = ROWS_FIRST | {"psum_combine": True, "search": 300}
# rows in segments: the weight and bias loaded behind the second row rather than the first
# (`spread_at`), the engines the list schedule's pick: bf16 rows of 2^20 69.2% -> 74.8% (75.3
# -> 69.6 us; TensorE adds the bias)
SPREAD_LATER = {"spread_at": 1, "flex": True, "small_waits": False, "pe_span": 2}
# (and `psum_combine` with TensorE's bias, rows in pieces: the row's mean and variance read
# from PSUM, two [p, 1] steps a tile fewer: bf16 rows of 64K 59.8% -> 61.8%, 78.0 -> 75.5 us;
# TensorE's bias in PSUM tiles of two banks, one ScalarE copy out each, `pe_span`: 63.1%,
# 73.9 us, and 2^20 74.8% -> 75.4%, 69.6 -> 69.1 us)
# rows in segments, or: the weight and bias a segment at a time behind the first row
# (`seg_affine`: a segment of the first row finished as its weight and bias arrive, not once
# both are whole), the last
# two segments' weight on VectorE (`tail_weights`: the last row's passes, which nothing
# overlaps, over more engines), TensorE's bias copied out two PSUM banks at a time (`pe_span`),
# ScalarE's statistics on 15/32 of the columns (`c_min`, `c_share`; the plan's 10/32 left
# VectorE's bn_stats, the normalisation and some weights behind ScalarE): bf16 rows of 2^20
# 69.2% -> 78.3% (75.3 -> 66.5 us)
SEG_AFFINE = {"seg_affine": True, "tail_weights": 2, "pe_span": 2, "c_min": 15 / 32,
              "c_share": 15 / 32}  # fmt: skip
# 16-bit rows in segments, as SEG_AFFINE but: the statistics as sums, TensorE's of x and
# ScalarE's of (x - c)^2, one ScalarE pass a column (`norm_sums`; its mean and M2 passes and
# VectorE's bn_stats before), and every third segment weighted and biased on VectorE, the others
# weighted on GpSimd and biased by TensorE (`seg_cycle`: VectorE, with no statistics, takes what
# ScalarE's copies out of PSUM and GpSimd would leave last): bf16 rows of 2^20 78.3% -> 84.0%
# (66.5 -> 62.0 us; ScalarE, VectorE, GpSimd busy 53, 49, 43 us -> 50, 43, 39)
SEG_SUMS = {"seg_affine": True, "sums": True, "pe_span": 2, "seg_cycle": ("VGS", "VVV", "VGS")}
# bf16 rows in pieces with TensorE's bias (`stt`): (x - mean) * weight in one
# scalar_tensor_tensor (VectorE N cycles an element, GpSimd 2N; the plan mixes the two over the
# blocks), rstd applied by TensorE with the bias (diag(rstd) in two bf16 parts, `stt_lo`, times
# the values; ScalarE copies out): no normalisation pass, the weight no longer GpSimd's alone;
# each block's load in two halves on two queues (`split_loads`: the blocks arrive one after
# another, the first at 3.9 us instead of 5.5), 10 buffers, the stages 0, 2 and 4 blocks
# behind the loads (`lag`; 1, 2, 3 with 6 buffers: 70.7 us): bf16 rows of 64K 63.1% -> 69.6%
# (73.9 -> 67.0 us), the values' RMS error against float64 15% below the plain plan's (with
# rstd's bf16 rounding alone, one matmul a bank fewer: 64.5 us, but 7% above it); then each
# block's load in four parts (a row each, on a queue and DMA engines of its own), the weight's
# copies loaded behind block 2's parts and the bias' behind block 4's on their partitions'
# queues (`load_parts`, `affine_at`; all 1 MiB of them took the engines beside block 0 before):
# the first block in at 2.4 us instead of 3.9, GpSimd's first fused pass at 6.6 instead of 9.0,
# 67.0 -> 65.1 us (the weight behind block 0, 1: 66.8, 65.6 us; two parts: 69.7)
STT = {"pe_pieces": True, "small_waits": False, "psum_combine": True, "pe_span": 2,
       "stt": True, "piece_bufs": 10, "split_loads": True, "lag": (0, 2, 4), "load_parts": 4,
       "affine_at": (2, 4)}  # fmt: skip
# and (`STT_LANES`): a block's columns in two lanes, each its own tiles, loads (in four parts
# each), weight and bias tiles, passes and stores (`piece_lanes`: a lane's passes, TensorE's
# and the store go once its own are done, so the last block's store starts half a block
# sooner); the [p, 1] steps of two blocks at once (`stat_group`: each step's cost is almost
# all its fixed overhead and its wait on another engine; VectorE's fell 6 us, and the plan
# gives it more of the fused passes), the last three blocks' (x - mean) * weight on the
# engine the list schedule finds free sooner (`tail_flex`), ScalarE's statistics on 10/32 of
# the columns (VectorE, relieved, takes the rest), the weight behind block 1, the bias behind
# block 3: 65.1 -> 63.8 us (TensorE's three matmuls a bank pace the copies out from about 50 us
# on; with one matmul fewer, `stt_lo` off as a probe: 64.5 -> 60.4 us); TensorE's bias in three
# PSUM tiles in turn, not two (`pe_tiles`: its bias matmuls run a lane further ahead of the
# fused passes they wait for): 63.8 -> 63.1 us (60.2 with `stt_lo` off); the last block's
# copies out a bank each, on ScalarE and VectorE in turn (`tail_copies`: the last store goes
# sooner): 63.1 -> 62.9 us (59.8)
STT_LANES = STT | {"piece_lanes": 2, "piece_bufs": 8, "stat_group": 2, "tail_flex": 3,
                   "c_share": 10 / 32, "c_min": 10 / 32, "affine_at": (1, 3),
                   "pe_tiles": 3, "tail_copies": 1}  # fmt: skip
# and STT_LANES with each block's fused pass and rstd's diagonals on VectorE or GpSimd by a
# descent over those choices (`flex`, `search`: 300 list schedules at most; the greedy pick
# gave VectorE too many), estimated with the transfers sharing the DMA engines as the chip's
# do and TensorE's warm-up (`fluid`: the serial model estimated STT_LANES at 67.5 us for a
# 63.1 us run; fluid, 61.9 for a 61.8 us run of its order): 63.1 -> 61.4 us (500: 61.2); the
# weight behind block 2 and the bias behind block 4 (`affine_at`; GpSimd, its first fused pass
# later, takes fewer): 61.4 -> 61.2 us (behind 1 and 2: 61.2; 1 and 4: 61.6; without the
# search: 63.1 -> 63.5); then a descent from each of the list schedule's starts (the choices as
# recorded, the greedy's by index and by rank: where one ends depends on where it starts), 150
# schedules each: 60.7 us with the weight behind block 1 and the bias behind block 3 again
# (behind 2 and 4: 61.2; 300 schedules each: 60.7, 61.2)
STT_LANES_SEARCH = STT_LANES | {"flex": True, "fluid": True, "search": 450}
# ... and (`STT_STD`) rstd as ScalarE's scale as it copies PSUM out, TensorE's identity times
# the values and C times the bias' pieces (std in two bf16 parts, the second on the partition
# of the row k partitions on, which holds the same pieces: `stt_std`, `std_scales`): two
# matmuls a PSUM bank, not three), TensorE's bias in two PSUM tiles (the values' matmuls first,
# `PeBias._std_pairs`; three: 63.3 us), the weight behind block 2: bf16 rows of 64K 63.1 -> 62.4
# us (TensorE busy 45.6 -> 34.2 us; VectorE, 53.3, binds), the RMS error against float64 STT's
STT_STD = STT_LANES | {"stt_std": True, "pe_tiles": 2, "affine_at": (2, 4)}
# ... and (`STT_TSUMS`, with STT_LANES_SEARCH's search) the row's mean on TensorE, COLS columns
# of x a matmul as its stationary operand, ScalarE's statistics one pass about it (`tsums`,
# `norm_tsums`: its squares; ScalarE then takes half the columns, a lane): bf16 rows of 64K
# 60.5 -> 59.3 us (ScalarE, VectorE, GpSimd, TensorE busy 45.8, 51.5, 43.7, 42.2 us; three PSUM
# tiles, two 60.0); the partial sums and means copied out of PSUM by ScalarE, not VectorE
# (`norm_tsums.COPY_ON`), the last block's copies a bank each (`tail_copies`), the weight and
# bias behind blocks 1 and 3: 59.3 -> 57.6 us (ScalarE, VectorE, GpSimd, TensorE busy 49.3,
# 46.0, 45.1, 41.9 us; with the weight behind block 2 58.3); the means' copies on VectorE: 57.0
# us (ScalarE, VectorE busy 47.1, 49.8 us), the RMS error against float64 STT's
STT_TSUMS = STT_STD | {"tsums": True, "c_share": 0.5, "c_min": 0.5, "pe_tiles": 3, "flex": True,
                       "fluid": True, "search": 300, "tail_copies": 1,
                       "affine_at": (1, 3)}  # fmt: skip
# rows a tile each (256K fp32, 256K and 512K bf16: 8 to 16 a core): a tile's columns in two
# lanes (its weight and bias a tile a lane), the engines of each pass picked by the list
# schedule and a descent over them, the row's statistics read from PSUM. trn2 LNC 2, 16 MiB,
# fp32 rows of 256K 68.8 -> 61.4 us (without the lanes 63.8, without the descent 66.2)
ROW_TILES = {"row_tiles": True, "small_waits": False, "flex": True, "flex_norm": "SG",
             "psum_combine": True, "search": 300, "piece_lanes": 2}  # fmt: skip
# fp32 rows in pieces, their weight and bias in PSUM for VectorE (`psum_affine`, VARIANTS' doc)
PSUM_PIECES = tuple(
    {
        "psum_affine": True,
        "flex": True,
        "flex_norm": "SG",
        "piece_big": True,
        "piece_bufs": bufs,
        "small_waits": False,
        "small_after": a,
        "dma_parts": True,
        "psum_combine": True,
    }
    for bufs in (9, 10, 11)
    for a in (0.5, 1)
)
# rows of LONG_ROW or more that fit a partition but are many (more than the chip's LNC's
# partitions: `_lower` would give each a partition, with SBUF nearly full and few buffers)
# lowered in pieces all the same (`in_pieces`), as rows of 64K are: trn2 LNC 2, 16 MiB, bf16 rows
# of 16384 with TensorE's bias 112.7 -> 70.7 us (41% -> 66%; STT_LANES_SEARCH), fp32 rows of
# 8192 with their weight and bias in PSUM (10 buffers; the other PSUM_PIECES, estimated sooner,
# ran 58.4 to 59.8 us) 89.8 -> 57.7 us (52% -> 80%, REPEAT_ROWS)
# ... and (`STT_PARTS`, rows of 8192 to 32768, 8 to 32 a tile; rows shorter than PARTS_BELOW)
# STT_TSUMS with each block's load in eight parts, 10 buffers, the weight behind block 2 and the
# bias behind block 4, `stt_std` for rows of fewer than 32 pieces too (`std_rolled`: two matmuls
# a PSUM bank, not three; TensorE busy 55.7 -> 42.1 us at 16384) and the `stat_group` tiles in
# 5 buffers (`stat_slots`: 245 -> 227 semaphores at LNC 2, 277 -> 227 at LNC 1): trn2 LNC 2,
# 16 MiB, bf16 rows of 8192 76.7 -> 62.3 us, of 16384 70.7 -> 59.5, of 32768 62.8 -> 57.8
# (STT_LANES_SEARCH with eight parts and 10 buffers: 66.3, 62.7, 61.0 us)
STT_PARTS = STT_TSUMS | {"load_parts": 8, "piece_bufs": 11, "std_rolled": True, "stat_slots": 5,
                         "affine_at": (2, 4)}  # fmt: skip
PARTS_BELOW = 262144  # (rows of 64K: STT_TSUMS 57.0 us, STT_PARTS 58.3, when chosen by hand;
# trn2 LNC 2, 16 MiB, bf16, the estimate choosing: 65536 56.91 -> 56.68, 128256 58.35 -> 58.04,
# 151936 60.43 -> 60.32 with 65536 here)
FIT_PIECES = tuple(
    v | {"in_pieces": True} for v in (PSUM_PIECES[2], STT, STT_LANES, STT_PARTS)
)  # (STT_LANES_SEARCH and STT_TSUMS in pieces ran 70.7 and 72.2 us at 16384: no longer tried)
# rows in pieces of up to WIDE_BYTES a partition where that takes fewer pieces than PIECE_BYTES
# (`piece_bytes`; a power of two k pieces a row: rows of 10240 bf16 in 8 pieces of 1280, 4 of
# 2560 so, fp32 in 16 of 640, 8 of 1280): half the blocks, so half the [p, 1] steps a row. trn2
# LNC 2, 16 MiB, fp32 rows of 10240 68.7 -> 59.9 us (PSUM_PIECES, its weight and bias in PSUM,
# WIDE_PSUM_BYTES), bf16 of 10240 70.7 -> 63.1, 12288 66.9 -> 64.4 (STT_PARTS in pieces; the
# rows cut evenly, `rows.EVEN_LAYER_ROW`); wider pieces ran slower (bf16 rows of 14336 in 4
# pieces of 3584: 61.9 -> 69.8 us; fp32 12288 in 8 of 1536: 65.6 -> 73.0)
WIDE_BYTES = 6144
WIDE_PSUM_BYTES = 10240  # ... fp32 weight and bias kept in PSUM up to this much a partition
# (two pieces of 1280 fp32, 5 of its 8 banks; of 1792, 14 KiB, PSUM overflowed)
WIDE_PIECES = (PSUM_PIECES[2] | {"piece_bytes": WIDE_BYTES},
               FIT_PIECES[3] | {"piece_bytes": WIDE_BYTES})  # fmt: skip
# STT_PARTS (and in pieces) with the [p, 1] steps of three blocks at once (`stat_group`; the
# core cut at a multiple of three tiles' rows, `_share`), taken where estimated sooner: trn2 LNC
# 2, 16 MiB, bf16 rows of 12288 66.2 -> 63.0 us (in pieces), 24576 65.5 -> 62.7 (estimated
# 65.3 -> 62.9, 65.3 -> 62.4; where it ran slower it was estimated so: rows of 32000 58.5 ->
# 65.3, estimated 58.9 -> 64.6)
# (11 buffers, STT_GROUP3 10: trn2 LNC 2, 16 MiB, bf16 32000 58.08 -> 58.00 us, 128256 58.04 ->
# 57.86; with 11 in STT_GROUP3 too, 24576's estimate chose it and ran 61.52 -> 62.47)
STT_GROUP3 = tuple(v | {"stat_group": 3, "piece_bufs": 10} for v in (STT_PARTS, FIT_PIECES[3]))
WIDE_STT = STT_PARTS | {"piece_bytes": WIDE_BYTES}  # bf16 rows that do not fit, in WIDE_PIECES'
# fewer pieces: trn2 LNC 2, 16 MiB, rows of 20000 in 8 pieces of 2500 (16 of 1250 before, where
# STT_PARTS took more semaphores than a core has; STT_LANES_SEARCH) 71.1 -> 65.3 us
# bf16 rows in k pieces with the normalisation folded into three passes, the weight and bias
# spread by TensorE (`norm_wide`)
WIDE = {"wide": True}
# bf16 rows of 65536 or more in pieces, `norm_wide`'s passes with the statistics on TensorE and
# ScalarE, no bn_stats (`norm_many`)
MANY = {"many": True}
# rows not a multiple of 128 that go in pieces of a power of two dividing them
# (`DIVISOR_PIECES`) may go with a remainder column all the same (`norm_ragged`), as estimated:
# trn2 LNC 2, 16 MiB, fp32 rows of 20000 66.0 us so, 72.4 in pieces (bf16 91.9, 71.1)
RAGGED = {"ragged": True}
RAGGED_FP32 = (20000, 262144)  # ... as may fp32 rows of these lengths that are a multiple of
# 128 (`norm_ragged`'s units of g rows, no remainder column, shifted in place as x0 - x), as
# estimated: trn2 LNC 2, 16 MiB, us, rows of 24576 64.4 -> 55.8, 32000 62.0 -> 57.7, 65536 56.8
# -> 54.1, 128256 57.5 -> 52.4, 151936 60.4 -> 52.9, 262144 61.4 -> 56.7 (where the estimate
# chose it, shorter rows ran: 10240 59.9 -> 61.1, 12288 65.6 -> 62.5, 16384 56.8 -> 65.7; longer:
# 524288 63.9 -> 64.6)
SEGMENTS_ONLY = {"rows_first", "spread_at", "seg_affine"}  # (variants of rows in segments)
LANE_ROW = 2048
# rms_norm's rows a partition from LANE_ROW on in two lanes, the plan's [p, per] steps costed
# without a semaphore wait (`rms_plan`'s choice): trn2 LNC 2, 16 MiB, us: fp32 rows of 2048
# 51.6 -> 47.8, 4096 55.4 -> 48.2, 4544 59.0 -> 51.7; bf16 4096 51.8 -> 47.8, 5120 55.6 ->
# 50.5, 6144 (in pieces 58.4) 54.0
RMS_LANES = {"long_row": LANE_ROW, "small_waits": False}
FP32_ONLY = ("pe_fp32", "fit_psum")  # (variants of fp32 rows with a bias only)
FLEX = {"spread_first": True, "small_waits": False, "fit_psum": True, "flex": True,
        "flex_norm": "SG", "bufs_most": 12}  # fmt: skip
# ... with up to 16 buffers (as many as fit): trn2 LNC 2, 16 MiB, fp32 rows of 128 58.4 -> 57.2
# us (79.2% -> 80.9%; 14 buffers 57.8)
FLEX_BUFS = FLEX | {"bufs_most": 16}
FLEX_BUFS_BELOW = 512  # ... for rows shorter than this (rows of 512: 51.4 -> 50.9 us, but
# test_rows_families pins FLEX's choice there; rows of 64: too many semaphores)
# 16-bit rows that fit: the engines of each normalisation, weight and bias pass picked by the
# list schedule, up to 16 buffers: bf16 rows of 128 73.6 -> 69.2 us (74.2% -> 78.9%)
FLEX_16 = {"small_waits": False, "flex": True, "flex_norm": "SG", "bufs_most": 16}
# rows of LANE_ROW to LONG_ROW that fit: as FLEX (1536 columns of the weight and bias in PSUM,
# `norm_affine.psum_cols`), a normalisation planned on another engine going to ScalarE where the
# list schedule finds it free sooner (flex_norm S; SG 58.7 us), two lanes cut in sub-lanes of
# 1536 columns or fewer (each its own tiles, loads and stores: a block's first stores go before
# its last columns' passes), ScalarE's statistics on 3/4 of the columns at most (the first
# block's statistics end sooner): fp32 rows of 4096 66.4% -> 79.9% (69.8 -> 58.0 us); then
# sub-lanes of 1024, the estimate's transfers on their partitions' DMA engines (`dma_parts`: the
# weight and bias load onto one partition): 58.0 -> 56.5 us, 82.0%
LONG_FLEX = {"long_row": LANE_ROW, "sub_lanes": 1024, "flex": True, "flex_norm": "S",
             "small_waits": False, "fit_psum": True, "c_share": 0.75,
             "dma_parts": True}  # fmt: skip
# ... folded, with up to 10 buffers (their LONG_SHARE of SBUF holds them; `bufs_most`, 6 before):
# trn2 LNC 2, 16 MiB, bf16 rows of 768 58.3 -> 57.5 us (79.4% -> 80.5%), 2560 58.0 -> 57.8
# (79.8% -> 80.1%), 1536 59.6 -> 59.4 (12 buffers: 57.8, 57.8, 58.8; rows of 200 or fewer
# need more semaphores than a core has so)
PIPE_BUFS = tuple({"pipe": True, "pe_rstd": True, "bufs_most": 10} | v
                  for v in ({}, {"s_share": 0.25}))  # fmt: skip
# fp32 rows of norm_stt.MIN_ROW or more that fit, with a weight and a bias: ScalarE's statistics,
# then two scalar_tensor_tensors a column part (or ScalarE's normalisation and VectorE's weight
# and bias out of PSUM), column parts a tile each (`norm_stt`): trn2 LNC 2, 16 MiB, us, rows
# of 2560 58.3 -> 51.4, 4096 56.5 -> 50.9, 5120 72.6 -> 57.4, 6144 70.5 -> 57.3
STT_FIT = {"stt_fit": True}
# layer_norm fp32 rows of norm_short.MIN_ROW to SHORT_ROW, several to a partition: whole-block
# passes (`norm_short`): trn2 LNC 2, 16 MiB, rows of 96 61.5 -> 54.4 us, of 100 60.4 -> 55.1
SHORT = {"short": True}
VARIANTS = (
    {},
    {"small_waits": False},
    {"long_row": LANE_ROW},
    {"long_row": LANE_ROW, "small_waits": False},
    {"pe_pieces": True},
    {"pe_pieces": True, "small_waits": False},
    {"pe_pieces": True, "small_waits": False, "psum_combine": True, "pe_span": 2},
    {"pe_fp32": True},
    {"pe_fp32": True, "small_waits": False},
    {"spread_first": True},
    {"spread_first": True, "small_waits": False},
    {"pe_fp32": True, "spread_first": True},
    {"pe_fp32": True, "small_waits": False, "spread_first": True},
    *PSUM_PIECES,
    FLEX,
    FLEX_BUFS,
    FLEX_16,
    {"pipe": True},
    {"pipe": True, "s_share": 0.25},
    {"pipe": True, "s_share": 0.5},
    # pipelined, the normalisation folded into the weight and TensorE's bias (`pe_rstd`:
    # (x - mean) * weight by one scalar_tensor_tensor, diag(rstd) TensorE's stationary): trn2
    # LNC 2, 16 MiB, bf16 rows of 512 60.9 -> 56.8 us, of 4096 60.3 -> 56.2 us
    {"pipe": True, "pe_rstd": True},
    {"pipe": True, "pe_rstd": True, "s_share": 0.25},
    *PIPE_BUFS,
    LONG_FLEX,
    ROWS_FIRST,
    ROWS_FIRST_SEARCH,
    SPREAD_LATER,
    SEG_AFFINE,
    SEG_SUMS,
    STT,
    STT_LANES,
    STT_LANES_SEARCH,
    STT_TSUMS,
    ROW_TILES,
    STT_PARTS,
    *FIT_PIECES,
    RAGGED,
    STT_FIT,
    *WIDE_PIECES,
    SHORT,
    *STT_GROUP3,
    WIDE_STT,
    WIDE,
    MANY,
)
TAIL_SEGS = True  # a fused pipelined layer_norm's core's last rows in segments (`norm_tail`)
TAIL_COPIES = 1  # ... its last block's copies out of PSUM a bank each on ScalarE and VectorE in
# turn (`PeBias.add`'s `split`: ScalarE, copying out every block, ends last): trn2 LNC 2, 16
# MiB, bf16 rows of 4544 60.89 -> 60.87 us, 5120 59.61 -> 59.32, 6144 61.92 -> 61.56 (2 blocks:
# 63.3, 63.9, 64.8)
TAIL_LAG = (0, 1, 2)  # ... its stages' lags (`_emit`; (1, 2, 3) before), its estimate's
# transfers sharing the DMA engines as the chip's do (`fluid`, `schedule.Scheduled`): trn2 LNC 2,
# 16 MiB, bf16 rows of 4544 60.87 -> 58.93 us (PIPE_BUFS), 5120 59.32 -> 57.24, 6144 61.56 ->
# 59.68 (fluid alone: 61.24, 57.66, 59.94; lags (1, 2, 2): 60.36, 57.13, 59.94)
TAPER = (4, 2)  # a pipelined layer_norm's first and last blocks cut so (`_taper`)
TAPER_S = (2,)  # ... so when ScalarE takes whole row slots' statistics (`S_GROUP` a block)
PIPE_ROW_BYTES = 8192  # ... its rows a partition of a block, in bytes
PIPE_PIECE = 1024  # ... and its output pieces' columns (`NormStages.piece`)
PIPE_BANKS = 4  # ... the PSUM banks its weight and bias are spread through
PIPE_SCALAR = True  # ... copied out of PSUM by ScalarE alone (`norm_affine.spread`; VectorE
# then takes the first block's statistics sooner, the first weighting starts sooner): trn2 LNC
# 2, 16 MiB, bf16 rows of 4544 58.95 -> 58.07 us, 5120 56.56 -> 55.31, 6144 58.46 -> 57.11, 2560
# 57.77 -> 56.88, 3072 57.11 -> 56.07
PIPE_SPAN = 2  # ... the PSUM banks of each of TensorE's bias tiles, copied out by ScalarE at once
PSUM_AFFINE_BYTES = 12288  # fp32 weight and bias of rows in pieces kept in PSUM for VectorE's
# tensor_tensors (N cycles an element with one input in PSUM, not 2N) when a partition's pieces
# of them take this much at most (6 of its 8 banks; `row_pieces.Groups` has its small tiles in
# the others; 8 KiB before: trn2 LNC 2, 16 MiB, fp32 rows of 151936, 128 pieces of 1187, 67.2
# -> 62.0 us)
PE_ROWS = True  # bf16 rows in pieces in lanes, TensorE's bias: the weight loaded once a lane
# ([k, w]) and spread over a tile's rows by TensorE into its bias' first PSUM tile, copied out by
# ScalarE or VectorE (`norm_pe_rows`), not loaded once per row of a tile (`_pe_rows_of`): trn2
# LNC 2, 16 MiB, bf16 rows of 10240 62.50 -> 59.89 us (74.1% -> 77.4%), 12288 62.45 -> 61.07,
# 14336 60.58 -> 59.58, 20000 64.01 -> 62.19, 8192 61.30 -> 57.84 (75.6% -> 80.1%), 16384
# 58.88 -> 57.60 (78.8% -> 80.5%); DMA bytes a core 17.23 -> 16.62 MiB at 10240.
# The bias spread so too (its copies out as many again: ScalarE busy 49.3 -> 53.5 us at 10240)
# ran 60.92 us at 10240 and lost at 14336 and wider; SBUF -> SBUF DMAs in place of the loads
# (no HBM bytes, the same DMA engine bytes) ran 65.6 to 68.5 us at 10240.
PE_ROWS_MIN = 16  # ... with this many rows a tile or more (k <= 8 pieces: saving (g - 1) D
# bytes of HBM, about 0.79 of the copy's f / 1.2 GHz or more; with 8, rows of 32000, 16 pieces,
# ran 58.00 -> 58.63 us, 80.1% -> 79.2%, and 24576 61.52 -> 61.04, 100000 (4 a tile) 60.03 ->
# 60.63, 151936 (2) 59.98 -> 60.94)
PE_ROWS_AT = 1  # ... behind this block's loads, when its `affine_at` is later (behind block 0:
# 10240 59.64 us, 14336 61.32; at `affine_at`'s 2: 60.68, 60.65)
LANE_TAIL = 2  # ... and the last this many blocks' copies out a bank each (`tail_copies`; the
# bias tiles ordered bank by bank, `PeBias.banked`: the next block's matmuls into a bank wait
# only for its copy out): bf16 151936 58.78 -> 58.71 us (3: 59.77)
LANE_SPAN = True  # rows in pieces in lanes, TensorE's bias, each lane over `pe_span` banks
# but within one more: its bias tiles that one bank wider, one tile fewer (`_lane_span`; trn2 LNC
# 2, 16 MiB, bf16 rows of 151936, lanes of 1187: ScalarE busy 49.9 -> 47.6 us a core, 59.98 ->
# 59.43 us; with 4 banks at 100000, lanes of 1563, PSUM held one tile: 60.03 -> 78.88)
REPEAT_ROWS = 16  # `psum_affine`: rows a tile up to which the weight and bias load once (fp32
# rows of 8192 in pieces, 16 a tile, loaded 16 times with 4 here: trn2 LNC 2, 16 MiB, 99.3 ->
# 57.7 us, FIT_PIECES; of 16384, 8 a tile, 75.3 -> 56.8 us, 62% -> 82%)
DIVISOR_PIECES = True  # layer_norm rows too long for a partition that are not a multiple of
# 128 go in k pieces, k a power of two dividing d (`_divisor_layout`), not only with a remainder
# column (`norm_ragged`, the RAGGED variant: chosen by estimate): trn2 LNC 2, 16 MiB, bf16 rows
# of 20000 104.6 -> 71.1 us (16 pieces of 1250, STT_LANES_SEARCH), of 100000 109.5 -> 67.2
DIVISOR_MOST = 4096  # ... the pieces' bytes a partition sought (k the fewest that fit)
DIVISOR_BYTES = 8192  # ... and at most, where k must be fewer to divide d (fp32 rows of 100000,
# 32 pieces of 12.5 KiB: 98.6 us, with a remainder column 69.5)
DIVISOR_FILL = 7 / 8  # ... or k any divisor of d filling this share of the partitions at
# least, where no power of two fits (`_any_divisor`): trn2 LNC 2, 16 MiB, bf16 rows of 50257
# (29 pieces of 1733, 4 rows a tile on 116 partitions) 96.4 -> 74.1 us; of 10^6 (125 pieces of
# 8000, a row a tile) 101.1 -> 75.6 us (72.1 with `RESIDENT_BYTES`); fp32 of 100000 (125 of 800)
# 69.5 -> 68.9
DIVISOR_LEAST = 3072  # ... its pieces' bytes a partition at least (fp32 rows of 16385 in 29
# pieces of 565, 2260 bytes: 84.8 -> 86.9 us; bf16 in 5 of 3277, 25 rows a tile, 148.4 -> 107.4)
EVEN_PIECES = True  # 16-bit rows of 128 odd pieces (f odd, a multiple of 128) in half as many
# pieces, of an even count (bf16 (x - mean) * w runs one element a cycle only over an even
# count): bf16 rows of 151936, 128 pieces of 1187 -> 64 of 2374, 72.1 -> 63.1 us (fp32, whose
# passes do not care, ran 67.2 -> 79.6 so)
EVEN_LANES = True  # a tile's columns in lanes (`piece_lanes`) of even widths where f is even,
# any f (an odd lane beside an even one): bf16 (x - mean) * w runs one element a cycle only
# over an even count (bf16 rows of 20000, lanes of 625 -> 624 and 626: 76.4 -> 71.1 us; of
# 151936, 1187 -> 594 and 593, no lanes before: 76.8 -> 72.1 us)
SHARED_TAIL = True  # layer_norm rows in pieces: the later core's one tile more, partial,
# taken by both cores of an LNC 2 logical core, each storing half its lanes (`norm_shared`)
PAD_PIECES = True  # 16-bit layer_norm rows whose pieces would leave partitions empty go in
# padded pieces over all of them (`norm_pad`) with the plans that take them: trn2 LNC 2, 16
# MiB, bf16 rows of 50257 (32 pieces of 1571, the last 15 short, not 29 of 1733 on 116
# partitions; STT_GROUP3, not STT_LANES_SEARCH) 74.2 -> 62.0 us, 62.4% -> 74.6% (rows of 50272,
# whole pieces of 1571: 61.4 us)
PAD_PLAN = ("tsums", "split_loads", "affine_at", "stt_std")  # ... those plans: TensorE's row
# mean (`norm_tsums`, whose sums `norm_pad` corrects), lanes loaded a row at a time
TRIAL_BYTES = 2 << 20  # layer_norms of x this large try the VARIANTS
CHOSEN_MOST = 256  # the choices kept (`_variant`), by shapes
_CHOSEN: dict = {}


def lower_norm(
    b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str, weight=None, bias=None, eps=1e-5
) -> None:
    """out = layer_norm(x, [D], weight, bias, eps) or rms_norm(x, [D], weight, eps)."""
    tx, to = b.tensors[x], b.tensors[out]
    if tuple(tx.shape) != tuple(to.shape):
        raise TraceError(f"{op}: x {list(tx.shape)} and out {list(to.shape)} differ")
    d = tx.shape[-1]
    for k, v in (("weight", weight), ("bias", bias)):
        if v is not None and tuple(b.tensors[v].shape) != (d,):
            raise TraceError(
                f"{op}: {k} {v} has shape {list(b.tensors[v].shape)}; expected [{d}] (x's last dim)"
            )
    args = (cfg, op, x, out, weight, bias, eps)
    if by_columns(cfg, op, tx, to, *(b.tensors[v] if v else None for v in (weight, bias))):
        b.plan("norm_columns")
        lower_norm_columns(b, cfg, x, out, weight, bias, float(eps))  # (few rows of 10^6)
        return
    if long_rows(cfg, op, tx, to, *(b.tensors[v] if v else None for v in (weight, bias))):
        b.plan("norm_long")
        lower_norm_long(b, cfg, x, out, weight, bias, float(eps))  # (even bf16 rows 2^18-2^20)
        return
    _lower(b, *args, _rms_variant(b, *args) if op == "rms_norm" else _variant(b, *args))


def _rms_variant(b: KernelBuilder, cfg: ChipConfig, op, x, out, weight, bias, eps) -> dict:
    """rms_norm's rows of PIECE_ROWS or more that fit a partition, TRIAL_BYTES of x or more: a
    row a partition in one lane or two (RMS_LANES), or in pieces, as the estimate says
    (`rms_plan`)."""
    tx, to = b.tensors[x], b.tensors[out]
    affine = b.tensors[weight].dtype.itemsize if weight is not None else 0
    if (tx.shape[-1] < PIECE_ROWS or not norm_rows(cfg, tx, to, affine)
            or math.prod(tx.shape) * tx.dtype.itemsize < TRIAL_BYTES):  # fmt: skip
        return {}
    return rms_variant(b, cfg, x, out, weight,
                       lambda tb, v: _lower(tb, cfg, op, x, out, weight, bias, eps, v),
                       (RMS_LANES, IN_PIECES))  # fmt: skip


def _variant(b: KernelBuilder, cfg: ChipConfig, op, x, out, weight, bias, eps) -> dict:
    """The VARIANTS entry whose list schedule (`schedule.Scheduled`) ends soonest for a
    layer_norm of TRIAL_BYTES or more: each lowered on a builder of its own for the first
    core's share (rows in pieces: the largest, `_busiest`) at the chip's default LNC, whatever
    the run's (the choice, which may change c
    and so the rounding, is then the same however a logical core's cores share the rows), and
    kept for the next core and the next op of the same shapes. A variant whose instructions
    count on more semaphores than the core has (more buffers of pieces: `piece_bufs`) is not
    taken: its program would be refused."""
    tx = b.tensors[x]
    if op != "layer_norm" or math.prod(tx.shape) * tx.dtype.itemsize < TRIAL_BYTES:
        return {}
    names = (x, out) + tuple(v for v in (weight, bias) if v is not None)
    key = (op, eps, weight is None, bias is None) + tuple(
        (tuple(b.tensors[n].shape), b.tensors[n].dtype.name) for n in names
    )
    hit = _CHOSEN.get(key)
    if hit is not None and hit[0] is cfg:
        return hit[1]
    spans, tried = [], _tried(b, cfg, x, out, weight, bias)
    for i in tried if len(tried) > 1 else ():  # (one: no trial, `norm_fused`'s rows)
        tb = KernelBuilder(b.tensors)
        tb.part = (_busiest(b, cfg, op, x, out, weight, bias, VARIANTS[i]), max(1, cfg.lnc))
        tb.searching = False  # (ranked by list schedules without their descents: `Scheduled`)
        span = _lower(tb, cfg, op, x, out, weight, bias, eps, VARIANTS[i])
        spans.append((span if _sems(tb) <= cfg.core.semaphores else math.inf, i))
    spans = sorted(spans) or [(0.0, tried[0])]
    while len(spans) > 1 and not _fits_lnc1(b, cfg, op, x, out, weight, bias, eps, spans[0][1]):
        spans.pop(0)
    if len(_CHOSEN) >= CHOSEN_MOST:
        _CHOSEN.clear()
    _CHOSEN[key] = (cfg, VARIANTS[spans[0][1]])
    return _CHOSEN[key][1]


def _sems(b: KernelBuilder) -> int:
    """The semaphores b's instructions count on (a core has `core.semaphores`)."""
    return len({s for ins in b.instructions for s, _ in ins.wait + ins.signal})


def _fits_lnc1(b: KernelBuilder, cfg: ChipConfig, op, x, out, weight, bias, eps, i) -> bool:
    """Whether VARIANTS[i], chosen at the chip's default LNC, also fits a core's semaphores when
    one core takes all the rows (LNC 1: more blocks, as many buffers of each tile as blocks up
    to the plan's; `_variant`'s choice holds at any LNC). Checked for plans of more buffers than
    BUFS only (the others fit either way), without the search (the same tiles)."""
    v = VARIANTS[i]
    if cfg.lnc <= 1 or 1 not in cfg.lnc_allowed or v.get("piece_bufs", BUFS) <= BUFS:
        return True
    tb = KernelBuilder(b.tensors)
    tb.part, tb.searching = (0, 1), False
    _lower(tb, cfg, op, x, out, weight, bias, eps, v)
    return _sems(tb) <= cfg.core.semaphores


def _tried(b: KernelBuilder, cfg: ChipConfig, x, out, weight, bias) -> list[int]:
    """The indices of the VARIANTS that apply to a layer_norm of these tensors (`_variant`):
    not those that would lower as another does, nor those for other rows (LONG_FLEX's
    sub-lanes: rows of LANE_ROW to LONG_ROW)."""
    tx, to = b.tensors[x], b.tensors[out]
    d = tx.shape[-1]
    pe = bias is not None and to.dtype == tx.dtype and to.dtype.itemsize == 2 and d >= PIECE_ROWS
    affine = sum(b.tensors[v].dtype.itemsize for v in (weight, bias) if v is not None)
    fits = norm_rows(cfg, tx, to, affine)  # rows a partition each (not in pieces)
    fp32 = bias is not None and to.dtype == tx.dtype and tx.dtype.itemsize == 4 and fits
    # (pipelined: rows that fit in one lane, a weight, no shift pass)
    pipe = (fits and d < LONG_ROW and weight is not None
            and min(tx.dtype.itemsize, to.dtype.itemsize) < 4)  # fmt: skip
    lay = _piece_layout(cfg, tx, d)
    if not fits and lay is None:  # (a remainder column, `norm_ragged`: no variants)
        return [0]
    # (rows in pieces of a power of two dividing d, `DIVISOR_PIECES`: or a remainder column)
    # (or fp32 rows of any length, RAGGED_FP32)
    ragged = not fits and (d % cfg.core.sbuf.partitions != 0
                           or RAGGED_FP32[0] <= d <= RAGGED_FP32[1]
                           and tx.dtype.itemsize == 4)  # fmt: skip
    segments = not fits and lay is not None and lay.t > 1  # rows in segments
    row_tiles = not fits and lay is not None and lay.t == 1 and lay.g == 1  # a tile a row
    # (rows that fit but are many, more than the chip's LNC's partitions: also in pieces,
    # `in_pieces`; the same choices at any LNC, as `_variant`'s)
    rows = math.prod(tx.shape[:-1])
    many = fits and d >= LONG_ROW and rows > cfg.core.sbuf.partitions * max(1, cfg.lnc)
    # (`stt`: bf16 x and weight in pieces, not segments; TensorE's bias)
    # (pieces on fewer than all the partitions, `_any_divisor`: not `std_rolled`, whose std
    # by stat group is taken only where the group's blocks are alike, and a core's blocks
    # group otherwise at LNC 1 and 2: bf16 [21, 50257], 295 elements apart)
    part = lay is not None and lay.g * lay.k != cfg.core.sbuf.partitions
    stt = (pe and weight is not None and lay is not None and lay.t == 1
           and tx.dtype.name == b.tensors[weight].dtype.name == "bfloat16")  # fmt: skip
    # (`norm_fused`: bf16 rows of FUSED_MIN to FUSED_SHORT with a weight and a bias, SHORT
    # alone: the estimates without the descents ranked it behind the pipelined plans, which
    # ran slower, trn2 LNC 2, 16 MiB, rows of 384: estimated 63.9 us against 61.0, ran 61.3
    # against 65.3; of 512, which the pipelined plan runs in 56.7 us, it ran 60.1)
    if (fits and FUSED_MIN <= d <= FUSED_SHORT and fused(b.tensors, x, out, weight, bias)
            and SHORT in VARIANTS):  # fmt: skip
        return [VARIANTS.index(SHORT)]
    # (`norm_short`: fp32 rows of SHORT_MIN to LAYER_SHORT)
    short = fits and SHORT_MIN <= d <= LAYER_SHORT and tx.dtype.itemsize == to.dtype.itemsize == 4
    return [i for i, v in enumerate(VARIANTS)
            if (_psum_affine(cfg, tx, to, d, weight, bias, v.get("piece_bytes", PIECE_BYTES))
                if "psum_affine" in v  # (pieces)
                else not (("long_row" in v and not LANE_ROW <= d < LONG_ROW)
                          or ("pe_pieces" in v and not pe)
                          or (any(f in v for f in FP32_ONLY) and not fp32)
                          or ("spread_first" in v and not fits)
                          or ("pipe" in v and not pipe)
                          or ("stt" in v and not stt)
                          or ("row_tiles" in v and not row_tiles)
                          or (v is FLEX_BUFS and d >= FLEX_BUFS_BELOW)
                          or (v.get("std_rolled") and (d >= PARTS_BELOW or part and not
                                                       _pads(cfg, "layer_norm", tx, lay, v)))
                          or ("ragged" in v and not ragged)
                          or (SEGMENTS_ONLY & set(v) and not segments)))
            and not ("in_pieces" in v and not many)
            and not ("stt_fit" in v and not (fits and stt_fits(cfg, tx, to, *(
                b.tensors[t] if t is not None else None for t in (weight, bias)))))
            and not ("piece_bytes" in v and not _wide(cfg, tx, d, v["piece_bytes"]))
            and not ("short" in v and not short)
            and not ("wide" in v and not wide_applies(b, cfg, x, out, weight, bias))
            and not ("many" in v and not many_applies(b, cfg, x, out, weight, bias))]  # fmt: skip


def _share(b: KernelBuilder, cfg: ChipConfig, op, x, out, weight, bias, variant) -> tuple:
    """(this core's rows, whether they go in pieces or with a remainder column, the pieces'
    layout) of `_lower` with `variant`: evenly where `rows.even_norm` or they do not fit (a
    layer_norm in pieces with `stt_std`: no core's last tile of one row but where one core's
    would be, `_std_share`)."""
    tx, to = b.tensors[x], b.tensors[out]
    d = tx.shape[-1]
    share = norm_share(b, cfg, op, tx)
    if variant.get("wide") or variant.get("many"):  # (`norm_wide`, `norm_many`: a row's values
        # its own, any cut; `_busiest`
        return share, True, None  # estimates the core of the most rows)
    affine_bytes = sum(b.tensors[v].dtype.itemsize for v in (weight, bias) if v is not None)
    few = cfg.core.sbuf.partitions * (RMS_PIECE_BLOCKS if op == "rms_norm" else 1)
    if norm_rows(cfg, tx, to, affine_bytes) and not (d >= PIECE_ROWS and (
            share[1] - share[0] <= few or variant.get("in_pieces"))):  # fmt: skip
        return share, False, None
    lay = _piece_layout(cfg, tx, d, op == "layer_norm" and not variant.get("ragged"),
                        variant.get("piece_bytes", PIECE_BYTES))  # fmt: skip
    if variant.get("ragged"):  # (a multiple of 128 too, RAGGED_FP32: no remainder column)
        lay = None
    pads = _pads(cfg, op, tx, lay, variant)
    if pads:  # (`norm_pad`: all the partitions, rows' last piece short)
        isz = tx.dtype.itemsize
        lay = padded(d, max(PIECE_BYTES, DIVISOR_MOST) // isz, cfg.core.sbuf.partitions)
    # (padded pieces keep the cut at whole groups too: cut evenly, bf16 [43, 50257] gave other
    # values at LNC 1 and 2)
    part = lay is not None and lay.g > 1 and (lay.g * lay.k < cfg.core.sbuf.partitions or pads)
    if lay is not None and op == "layer_norm" and variant.get("stt_std") and lay.t == 1:
        grouped = norm_share(b, cfg, op, tx, lay.g * variant.get("stat_group", 1))
        share = (grouped if part or _later_more(b, share, grouped, lay.g)
                 else _std_share(b, share, math.prod(tx.shape[:-1]), lay.g))  # fmt: skip
    elif part:
        # (tiles of several rows on part of the partitions, `_any_divisor`: whole tiles a
        # core, so a row's sums over its partitions, a matmul over the tile's, round alike at
        # any LNC; cut inside a tile, fp32 rows of 16385 in 29 pieces gave other values)
        share = norm_share(b, cfg, op, tx, lay.g)
    return share, True, lay


def _later_more(b: KernelBuilder, even: tuple, grouped: tuple, g: int) -> bool:
    """Whether the cut at whole groups (the same values at any LNC) lies less than g / 2 rows
    before the even cut at each of this core's ends: the later core's surplus then fits one
    partial tile, which both cores share (`norm_shared`), not a partial tile each. trn2 LNC 2,
    16 MiB, bf16 rows of 32000, 131 and 131 rows a core -> 128 and 134: 58.46 -> 58.08 us; of
    24576 63.24 -> 61.52; of 12288 62.17 -> 62.45 (its 341 rows -> 336). Further before, or
    after (bf16 10240: 384 or 416 of 819 rows), the cores' tiles are unequal: 62.7 -> 66.3."""
    c, n = b.part
    lo = c == 0 or 0 <= even[0] - grouped[0] < g / 2
    return lo and (c == n - 1 or 0 <= even[1] - grouped[1] < g / 2)


def _std_share(b: KernelBuilder, share: tuple, total: int, g: int) -> tuple:
    """`share` (the rows cut evenly) with each cut moved (`_std_cut`) so that a core's last
    tile of g rows holds one row only where one core's would (the last, of total % g == 1):
    `stt_std` rounds a tile of one row otherwise (no row k partitions back,
    `NormStages.std_scales`), the other rows alike in any tile (TensorE's sums in float64),
    so the values are the same at any LNC. Cut at multiples of g * stat_group before (each
    group of tiles the same at any LNC): trn2 LNC 2, 16 MiB, bf16 rows of 10240, 384 and 435
    rows a core -> 409 and 410: 67.2 -> 62.7 us. (Tiles on fewer than all the partitions,
    `_any_divisor`, are still cut so: `_share`.)"""
    c, n = b.part
    if n == 1 or share != (total * c // n, total * (c + 1) // n):  # (not cut evenly)
        return share
    cuts = [0]
    for i in range(1, n):
        cuts.append(_std_cut(total, n, g, i, cuts[-1]))
    cuts.append(total)
    return cuts[c], cuts[c + 1]


def _std_cut(total: int, n: int, g: int, i: int, at: int) -> int:
    """`_std_share`'s cut i of n (the last at row `at`): within g rows of the even cut, no tile
    of one row alone but the last core's where LNC 1's last is; of those, the fewest tiles a
    core (the later cores' rows alike), then the nearest."""
    even = total * i // n

    def cost(x):
        rest = -(-(total - x) // (g * (n - i))) if i == n - 1 else 0
        return max(-(-(x - at) // g), rest), abs(x - even)

    ok = [x for x in range(max(at, even - g), min(total, even + g) + 1) if (x - at) % g != 1
          and (i < n - 1 or ((total - x) % g == 1) == (total % g == 1))]  # fmt: skip
    return min(ok, key=cost) if ok else min(total, at + (even - at) // g * g)


def _busiest(b: KernelBuilder, cfg: ChipConfig, op, x, out, weight, bias, variant) -> int:
    """The core of the chip's default LNC whose share of rows in pieces (`_share`) takes the
    most tiles (the first of equals; core 0 where the rows fit a partition): the one
    `_variant` estimates (bf16 rows of 10240 in 4 pieces, 384 and 435 rows a core, 12 and 14
    tiles: estimated 57.7 us on core 0, 68.0 run; a row more or fewer in the same tiles changes
    the estimates as much as a choice between plans: fp32 rows of 12288, 170 and 171 rows,
    65.6 us so, 66.3 estimated on core 1)."""
    n, tiles = max(1, cfg.lnc), []
    for c in range(n):
        tb = KernelBuilder(b.tensors)
        tb.part = (c, n)
        (lo, hi), pieces, lay = _share(tb, cfg, op, x, out, weight, bias, variant)
        if not pieces:
            return 0
        tiles.append(-(-(hi - lo) // lay.g) if lay is not None and lay.t == 1 else hi - lo)
    return tiles.index(max(tiles))


def _lower(b: KernelBuilder, cfg: ChipConfig, op, x, out, weight, bias, eps, variant) -> float:
    """`lower_norm` with the plan's `variant` (a VARIANTS entry); the list schedule's estimated
    span (0 without one)."""
    tx, to = b.tensors[x], b.tensors[out]
    d = tx.shape[-1]
    affine = [(v, alu) for v, alu in ((weight, "multiply"), (bias, "add")) if v is not None]
    affine_bytes = sum(b.tensors[v].dtype.itemsize for v, _ in affine)
    share, pieces, lay = _share(b, cfg, op, x, out, weight, bias, variant)
    b.plan(_plan_name(variant, "rows"))
    if variant.get("wide"):
        b.plan("norm_wide")
        return lower_wide(b, cfg, x, out, weight, bias, float(eps), share)
    if variant.get("many"):
        b.plan("norm_many")
        return lower_many(b, cfg, x, out, weight, bias, float(eps), share)
    if pieces:
        if lay is not None:
            if op == "rms_norm" and lay.t == 1:
                variant = RMS_PIECES | variant
            b.plan(_plan_name(variant, "norm_pad" if pad_of(lay) else "pieces"))
            return _lower_pieces(b, cfg, op, x, out, weight, bias, float(eps), lay, share,
                                 variant)  # fmt: skip
        rms = op == "rms_norm"  # (rms_norm's rows that fit too, as `rms_plan` chose)
        if not norm_rows(cfg, tx, to, affine_bytes) or rms and variant.get("in_pieces"):
            # (not a multiple of 128: `norm_ragged`)
            how = RMS_RAGGED if rms else {"bufs_most": LAYER_BUFS}
            b.plan("norm_ragged")
            return lower_norm_ragged(b, cfg, op, x, out, weight, bias, float(eps), share, **how)
    if variant.get("short") and op == "layer_norm":
        how = Fused if fused(b.tensors, x, out, weight, bias) else None
        b.plan("norm_fused" if how else "norm_short")
        return lower_norm_short(b, cfg, x, out, weight, bias, float(eps), share, how)
    if variant.get("stt_fit"):
        b.plan("norm_stt")
        return lower_stt(b, cfg, x, out, weight, bias, float(eps), share)
    if op == "rms_norm" and d <= SHORT_ROW:
        b.plan("rms_short")
        lower_rms_short(b, cfg, x, out, weight, float(eps), share)
        return
    k = NormStages(b, cfg, op, x, out, d, float(eps))
    k.weight, k.bias = weight, bias
    k.__dict__.update(variant)
    # other ops keep their tiles; rows of LONG_ROW or more take more (a kernel has room for few
    # such ops), and only they go in two lanes (whose tiles no other norm shares); so do
    # pipelined rows (module doc: their output pieces and TensorE's copies out left bf16 rows
    # of 5120 and 6144 four and three buffers of x, the loads stalling for 12 us; trn2 LNC 2,
    # 16 MiB, six buffers: 64.9 -> 62.8 us and 69.3 -> 64.1 us)
    pipe = k.pipe and k.layer and not k.shift and weight is not None and d < LONG_ROW
    share_ = LONG_SHARE if d >= LONG_ROW or pipe else BUFFER_SHARE
    room = int(cfg.core.sbuf.partition_bytes * share_)
    # a block's x (and its output when the dtypes differ) rotate through `bufs` buffers;
    # TensorE's copies out (the bias on TensorE) through F_BUFS, only if PE_BUFS of the
    # others still fit (x lives until TensorE reads it, two stages after its load)
    base = d * (tx.dtype.itemsize + (to.dtype.itemsize if to.dtype != tx.dtype else 0))
    f = F_BUFS * d * to.dtype.itemsize
    k.pe_ok = bias is not None and to.dtype == tx.dtype and (
        to.dtype.itemsize == 2 or k.pe_fp32) and (room - f) // base >= PE_BUFS  # fmt: skip
    room -= f if k.pe_ok else 0
    k.stt, k.stat_group = False, 1  # (rows in pieces only: `_lower_pieces`)
    k.pipe = pipe
    row_bytes = PIPE_ROW_BYTES if k.pipe else LAYER_ROW_BYTES if k.layer else ROW_BYTES
    group = max(1, row_bytes // tx.dtype.itemsize // d)
    # (row slots of S_GROUP rows' residues for ScalarE's whole-row statistics: `_aligned`)
    unit = S_GROUP if k.pipe and round(k.s_share * S_GROUP) else 1
    # (layer_norm's rows a partition not only a power of two, `layout.row_tiles`: trn2 LNC 2,
    # 16 MiB, fp32 rows of 320 59.4 -> 53.3 us, of 80 66.6 -> 65.2, bf16 of 96 74.1 -> 71.1;
    # not pipelined, whose taper and ScalarE's whole-row statistics want per / 2 a multiple of
    # S_GROUP, `_aligned`, and whose bf16 rows of 768 ran slower so, 58.3 -> 59.5; nor
    # rms_norm's, bf16 rows of 384 50.6 -> 51.2)
    k.per, tiles = row_tiles(tx.shape, k.P, share, group, max(1, room // (BUFS * base)),
                             unit=unit, pow2=k.pipe or not k.layer)  # fmt: skip
    # (a fused pipelined layer_norm of rows one a partition: a core's last rows, fewer than
    # 128, in segments, `norm_tail`; its blocks cut where the chip's default LNC cuts the rows)
    tails = (TAIL_SEGS and k.pipe and k.pe_rstd and k.per == 1 and unit == 1
             and len(tx.shape) == 2 and bias is not None)  # fmt: skip
    starts = [0]  # (the blocks that start a range: split in two lanes, `split_first`)
    if tails:
        tiles, starts = [], []
        for r in ranges(b, cfg, tx, share):
            starts.append(len(tiles))
            tiles += row_tiles(tx.shape, k.P, r, group, max(1, room // (BUFS * base)),
                               unit=unit, pow2=True)[1]  # fmt: skip
    if k.pipe and unit == 1 and _pieces_fit(tx, [(i, r) for i, r, _ in tiles]):
        tiles = _left_over(tiles, k.per, k.P)
    blocks = [(index, rows) for index, rows, _ in tiles]
    if any(q != k.per for _, _, q in tiles):  # (the rows left over: `layout.row_tiles`)
        k.block_per = [q for _, _, q in tiles]
    k.tper = k.per
    if k.pipe and _pieces_fit(tx, blocks):  # (module doc, "pipelined")
        k.out_pieces, k.flex, k.flex_norm = PIPE_PIECE, True, ""
        k.pe_span = PIPE_SPAN if min(PIPE_PIECE, d) > PIPE_PIECE // PIPE_SPAN else 1
        if d * PIPE_SPAN <= PIPE_PIECE and not k.pe_step % d:  # (rows of 512 or fewer)
            k.pslots = k.pe_span = PIPE_SPAN
        srows = round(k.s_share * S_GROUP)
        if srows and _aligned(b, cfg, tx, group, max(1, room // (BUFS * base))):
            k.srows = srows
        blocks, k.block_per = _taper(tiles, k.per, TAPER_S if k.srows else TAPER)
        room -= OUT_BUFS * k.per * d * to.dtype.itemsize  # (the pieces' tiles)
    # (a folded normalisation's diag(rstd) stationaries, a row slot's [P, P] each, rotate
    # with the buffers: `NormStages.diagonal`)
    dg = k.per * k.P * to.dtype.itemsize if k.pe_rstd and k.out_pieces else 0
    k.bufs, k.blocks = max(1, min(k.bufs_most, room // (k.per * base + dg))), len(blocks)
    q, qs = dma_queues(cfg, k.per * d * tx.dtype.itemsize), Queues(cfg)  # load (and store) queues
    k.loads, k.stores = qs.loads().take(q), qs.stores().take(q)
    if k.out_pieces:  # (a store a piece: small, so on as many queues as they need)
        k.stores = qs.stores().take(dma_queues(cfg, min(PIPE_PIECE, d) * to.dtype.itemsize))
    # planned for the whole tensor's layout, as one core would lower it: the choices that
    # change the values' rounding (ScalarE's statistics, the halves) are then the same
    # however an LNC 2 logical core's cores share the rows
    per, whole = k.per, row_tiles(tx.shape, k.P, None, group, max(1, room // (BUFS * base)),
                                  unit=unit, pow2=k.pipe or not k.layer)  # fmt: skip
    k.per = k.plan_per = whole[0]
    k.plan_blocks = len(whole[1])  # (whether it may mix two choices of engines, and so of c)
    kept = _fit_psum(cfg, tx, to, len(affine), d, k.pe_ok) if k.fit_psum else 0
    k.psum_affine = kept > 0  # (the plan costs VectorE's weight and bias out of PSUM)
    plan(k)
    k.per = k.tper = per
    if k.srows:  # (ScalarE's share of the statistics whole row slots, not columns)
        k.c = 0
    if k.sub_lanes:
        k.block_lanes = [_split(ls, k.sub_lanes) for ls in (k.block_lanes or [k.lanes])]
        k.lanes = k.block_lanes[0]
    if kept:  # the columns in PSUM: from the first lane VectorE weights or biases on
        on_v = [lane.lo for ls in k.block_lanes or [k.lanes] for lane in ls
                if V in (lane.weight, lane.bias)]  # fmt: skip
        k.psum_lo = min(min(on_v, default=0), d - kept)
    if k.out_pieces and k.block_lanes:  # (one choice of engines: the list schedule evens
        # out VectorE's and GpSimd's shares, `flex`)
        k.block_lanes = [k.block_lanes[0]] * len(k.block_lanes)
        k.lanes = k.block_lanes[0]
        h = d // 2 // PIPE_PIECE * PIPE_PIECE
        if k.split_first and len(k.block_lanes) > 1 and len(k.lanes) == 1 and h:
            ln = k.lanes[0]  # the first block in two lanes: ScalarE's and VectorE's statistics
            # start once its first half is in; so the first of every range (its rows' values
            # then the same at any LNC: the lanes cut the statistics' chunks)
            k.block_lanes += [k.block_lanes[-1]] * (max(starts) + 1 - len(k.block_lanes))
            for m in starts:
                k.block_lanes[m] = [Lane(0, h, *_engines(ln)), Lane(h, d, *_engines(ln))]
            k.lanes = k.block_lanes[0]
    if tails and k.fused:  # (`norm_tail`: the tails on whole-row lanes)
        b.plan(b.plans[b.row] + " + norm_tail")
        k.segs = tail_blocks(cfg, blocks, d)
        k.tail_copies = max(k.tail_copies, TAIL_COPIES)
        k.fluid, k.lag = True, tuple(min(n, k.bufs - 1) for n in TAIL_LAG)
        if k.block_lanes:
            for n in k.segs:
                k.block_lanes += [k.block_lanes[-1]] * (n + 1 - len(k.block_lanes))
                ln = k.block_lanes[n][0]
                k.block_lanes[n] = [Lane(0, d, *_engines(ln))]
    # the weight, and the bias unless TensorE adds it in every block
    on_pe = all(lane.bias == S for ls in k.block_lanes for lane in ls)
    spreads = [v for v in (weight, bias) if v is not None and not (v == bias and on_pe)]
    k.spread = lambda: k.rows.update(zip(spreads, spread(b, cfg, spreads, d, k.loads)))
    if k.out_pieces:  # (on a queue of its own, at once, through PIPE_BANKS: its TensorE
        # matmuls do not wait, bank by bank, for VectorE and ScalarE, busy with the first blocks)
        k.spread = lambda: k.rows.update(zip(spreads, spread(b, cfg, spreads, d, None,
                                                             PIPE_BANKS, PIPE_SCALAR)))  # fmt: skip
    if kept:
        k.spread = lambda: _spread_psum(k, spreads, kept, d)
    with _scheduled(k) as s:
        if k.pe_bias:
            k.pe = PeBias(b, cfg, bias, d, to.dtype, group=pe_group(cfg, d, k.per))
        _emit(k, blocks)
    if k.pe_bias:
        k.pe.done()
    b.release(*k.psum_rows.values(), *([k.tail_pm] if k.tail_pm else []))
    return getattr(s, "makespan", 0.0)


def _plan_name(variant: dict, path: str) -> str:
    """The per-op report's name of a plan (`KernelBuilder.plan`): the path (rows one a
    partition, "rows"; in pieces, "pieces"; ...) and the named VARIANTS entry it is (or
    extends: the one of the most knobs it holds, then the knobs it adds), else the
    knobs it sets ("rows: pipe, s_share=0.25")."""

    def knobs(d: dict) -> str:
        return ", ".join(k if v is True else f"{k}={v}" for k, v in d.items())

    if not variant:
        return path
    entries = [(n, v) for n, v in globals().items() if n.isupper() and isinstance(v, dict)]
    entries += [
        (f"{n}[{i}]", e)
        for n, v in globals().items()
        if n.isupper() and n != "VARIANTS" and isinstance(v, tuple)
        for i, e in enumerate(v)
        if isinstance(e, dict)
    ]
    named = [(len(v), n, v) for n, v in entries
             if v and all(variant.get(k, _NO) == x for k, x in v.items())]  # fmt: skip
    if not named:
        return f"{path}: {knobs(variant)}"
    _, name, v = max(named, key=lambda t: t[0])
    more = {k: x for k, x in variant.items() if k not in v}
    return f"{path}: {name}" + (f" + {knobs(more)}" if more else "")


_NO = object()  # (`_plan_name`: a knob a variant does not set)


def _left_over(tiles: list, per: int, P: int) -> list:
    """`layout.row_tiles`' blocks ((index, rows, rows a partition)) with the rows left over
    after the whole blocks retiled one a partition, in blocks as even as may be, where that
    takes fewer row slots in no more blocks (a slot costs each engine pass its whole free
    size, however few partitions hold it; a block, its [p, per] steps; a pipelined norm
    computes a row alike in any slot, so the values do not change): trn2 LNC 2, 16 MiB, bf16
    rows of 1536, core 1's last 213 rows as 106 two a partition and one alone (three slots) ->
    two blocks of 107 and 106 rows: 59.4 -> 57.4 us."""
    n = next((i for i, (_, rows, q) in enumerate(tiles) if q != per or rows != P * per), None)
    if per == 1 or n is None:
        return tiles
    rest, head = tiles[n:], tiles[n][0][:-1]
    if any(index[:-1] != head for index, _, _ in rest):  # (one run of rows only)
        return tiles
    lo, hi = rest[0][0][-1].start, rest[-1][0][-1].stop
    m = -(-(hi - lo) // P)
    if m >= sum(q for _, _, q in rest) or m > len(rest):
        return tiles
    cuts = [lo + (hi - lo) * i // m for i in range(m + 1)]
    return tiles[:n] + [((*head, slice(a, z)), z - a, 1) for a, z in zip(cuts, cuts[1:])]


def _taper(blocks, per: int, parts):
    """(blocks, each one's rows a partition): the first and last of `blocks` ((index, rows, k):
    [p, k, D], a range of rows each, `_pieces_fit`) cut, where k is per, into blocks of per /
    part rows a partition for each part of `parts` (and the rest), so the first loads sooner
    and the last one's chain is short (as `rms_short._taper`)."""
    if len(blocks) < 3 or any(per % part for part in parts):
        return [(i, r) for i, r, _ in blocks], [q for _, _, q in blocks]

    def cut(block, order):
        index, rows, q = block
        if q != per:  # (rows left over, fewer a partition: `layout.row_tiles`)
            return [block]
        last, out, lo = index[-1], [], index[-1].start
        for part in order:
            n = rows // part
            out.append(((*index[:-1], slice(lo, lo + n)), n, per // part))
            lo += n
        if lo < last.stop:
            out.append(((*index[:-1], slice(lo, last.stop)), last.stop - lo,
                        per * (last.stop - lo) // rows))  # fmt: skip
        return out

    cuts = cut(blocks[0], parts) + list(blocks[1:-1])
    cuts += cut(blocks[-1], parts[::-1])
    return [(i, r) for i, r, _ in cuts], [q for _, _, q in cuts]


def _pieces_fit(tx, blocks) -> bool:
    """Whether the blocks' output may go in pieces (`NormStages.piece`): each block a range of x's
    rows of its last batch dimension (a piece's rows are every per-th)."""
    nd = len(tx.shape)
    return nd >= 2 and all(len(index) == nd - 1 and isinstance(index[-1], slice)
                           for index, _ in blocks)  # fmt: skip


def _aligned(b: KernelBuilder, cfg: ChipConfig, tx, *most: int) -> bool:
    """Whether every core's blocks (`layout.row_tiles` with S_GROUP its unit), at LNC 1 and the
    chip's and the run's, have rows a partition and first rows multiples of S_GROUP (and so
    those `_taper` cuts), but for a 2-D x's last rows under a multiple of it (one a partition,
    the same at any LNC): then row slot j holds the rows r = j (mod S_GROUP) however the cores
    share them, so ScalarE's statistics of the slots `NormStages.s_slot` gives (which round
    apart from VectorE's) take the same rows at any LNC."""
    P, total = cfg.core.sbuf.partitions, math.prod(tx.shape[:-1])
    end = total - total % S_GROUP if len(tx.shape) == 2 else total
    for n in sorted({1, max(1, cfg.lnc), b.part[1]}):
        for c in range(n):
            tb = KernelBuilder(b.tensors)
            tb.part = (c, n)
            share = norm_share(tb, cfg, "layer_norm", tx)
            got, tiles = row_tiles(tx.shape, P, share, *most, unit=S_GROUP)
            if not _pieces_fit(tx, [(index, rows) for index, rows, _ in tiles]):
                return False
            if any((q % S_GROUP or index[-1].start % S_GROUP) and index[-1].start < end
                   for index, _, q in tiles):  # fmt: skip
                return False
    return True


def _fit_psum(cfg: ChipConfig, tx, to, n: int, d: int, pe_ok: bool) -> int:
    """The first columns of fp32 rows' n weight and bias rows kept in PSUM beside TensorE's
    bias' banks where it may add it (`norm_affine.psum_cols`)."""
    if tx.dtype.itemsize != 4 or to.dtype != tx.dtype:  # (16-bit SBUF operands cost N already)
        return 0
    return psum_cols(cfg, n, d, PE_TILES if pe_ok else 0)


def _spread_psum(k, spreads: list[str], kept: int, d: int) -> None:
    """The weight and bias spread (`norm_affine.spread_psum`), their first `kept` columns also
    kept in PSUM for VectorE (`NormStages.weighted`)."""
    tiles, ps = spread_psum(k.b, k.cfg, spreads, d, kept, k.psum_lo, k.loads)
    k.rows.update(zip(spreads, tiles))
    k.psum_rows.update(zip(spreads, ps))
    k.psum_width = kept


def _lower_pieces(b, cfg, op, x, out, weight, bias, eps, lay, rows, variant) -> float:
    """Rows in pieces over the partitions (`row_pieces`): a tile holds g rows of k pieces of f
    elements, one a partition; each partition's statistics as a row's of f elements above
    (one lane, the bias not on TensorE), then combined over the row's k partitions on TensorE
    (`row_pieces.Groups`); the shift's first element spread over the row's partitions the same
    way; weight and bias loaded in the pieces' pattern.

    A row whose pieces would take BIG_PIECES a partition or more (rows of 2^20) is t segments
    of 128 pieces of f (`lay.t` > 1), each a tile of its own and a lane of the row's t f
    columns a partition (`_segments`): a segment's statistics start as soon as it is in, its
    normalisation, weight and bias once the row's statistics are, and its store right after,
    so the engines and the stores work on one segment while the next loads (one tile a row:
    nothing started before the whole row was in). The row stays resident; its partitions'
    statistics over all its segments are combined as above."""
    tx, to = b.tensors[x], b.tensors[out]
    seg = lay.t > 1
    width = lay.f * lay.t  # a row's elements on each partition
    k = NormStages(b, cfg, op, x, out, width, eps)
    k.weight, k.bias, k.pieces = weight, bias, lay
    k.__dict__.update(variant)
    k.groups = Groups(b, cfg, lay.k)
    k.psum_affine = k.psum_affine and _psum_affine(
        cfg, tx, to, lay.d, weight, bias, variant.get("piece_bytes", PIECE_BYTES)
    )
    k.sums = k.sums and seg and k.layer and tx.dtype.itemsize == 2  # (`norm_sums`: 16-bit)
    wide = seg or lay.g == 1 and width * tx.dtype.itemsize >= RESIDENT_BYTES
    room = int(cfg.core.sbuf.partition_bytes * (SEG_SHARE if wide else BUFFER_SHARE)) - width * sum(
        b.tensors[v].dtype.itemsize for v in (weight, bias) if v is not None)  # fmt: skip
    base = width * (tx.dtype.itemsize + (to.dtype.itemsize if to.dtype != tx.dtype else 0))
    # a row in segments may have its bias added by TensorE (16-bit: the identity times the
    # bias' pieces and times the values into PSUM, ScalarE copying out), as rows that fit do
    k.pe_ok = (seg or k.pe_pieces) and bias is not None and to.dtype == tx.dtype and (
        to.dtype.itemsize == 2 or k.pe_fp32) and not k.rows_first  # fmt: skip
    k.stt = (k.stt and k.pe_ok and not seg and weight is not None and k.layer
             and tx.dtype.name == b.tensors[weight].dtype.name == "bfloat16")  # fmt: skip
    room -= F_BUFS * width * to.dtype.itemsize if k.pe_ok else 0
    blocks, shared = (shared_blocks(b, tx, lay, rows, k.piece_lanes, rows[b.part[0] == 0])
                      if SHARED_TAIL and k.layer and not seg else (list(row_blocks(
                          tx.shape, lay.g, rows)), {}))  # fmt: skip
    if not blocks:  # (this core has none of the rows: one row at LNC 2)
        return 0.0
    k.bufs, k.blocks = max(1, min(k.piece_bufs, room // base)), len(blocks)
    # (a block's later stages at most bufs - 1 behind its load: `_emit`'s lags)
    k.spread_at = min(k.spread_at, k.bufs - 1)
    if k.lag is not None:
        k.lag = tuple(min(n, k.bufs - 1) for n in k.lag)
    q, qs = dma_queues(cfg, lay.f * tx.dtype.itemsize), Queues(cfg)
    # large tiles (rows of 2^20: a few a core): loaded one after another
    # on one queue, the weight and bias behind the first, so the first tile arrives first
    # instead of sharing the engines with the others (and its engines start sooner)
    big = width * tx.dtype.itemsize >= (BIG_LOADS if k.layer else BIG_PIECES) or k.piece_big
    n = 1 if big else max(k.load_parts if k.split_loads else 2, q)
    k.loads, k.stores = qs.loads().take(n), qs.stores().take(SEG_STORES if seg else max(2, q))
    if seg:  # the plan's choices of engines mixed over the segments (one lane each)
        k.blocks *= lay.t
    # (whether the plan may mix two choices, and so c, as one core would lower the whole x:
    # the same at any LNC; by this core's blocks, fp32 [8, 55456], a block a core at LNC 2,
    # gave other values at LNC 1 and 2)
    k.plan_blocks = -(-math.prod(tx.shape[:-1]) // lay.g) * lay.t
    plan(k)
    if seg:
        k.blocks //= lay.t
        order = [ls[0] for ls in k.block_lanes] or [k.lanes[0]]
        order += [order[-1]] * (k.blocks * lay.t - len(order))
        k.block_lanes = [[Lane(s * lay.f, (s + 1) * lay.f, *_engines(order[m * lay.t + s]))
                          for s in range(lay.t)] for m in range(k.blocks)]  # fmt: skip
        for m in range(k.tail_weights):  # the last segments' weight on VectorE
            row, s = divmod(k.blocks * lay.t - 1 - m, lay.t)
            lane = k.block_lanes[row][s]
            k.block_lanes[row][s] = Lane(lane.lo, lane.hi, lane.norm, V, lane.bias)
        _seg_cycle(k, lay)
        k.lanes = k.block_lanes[0]
    elif k.piece_lanes > 1 and (EVEN_LANES or lay.f % k.piece_lanes == 0):  # a block's
        # columns in lanes (of even widths where f is: `EVEN_LANES`)
        k.block_lanes = [_split(ls, -(-lay.f // k.piece_lanes), EVEN_LANES)
                         for ls in (k.block_lanes or [k.lanes])]  # fmt: skip
        k.lanes = k.block_lanes[0]
    k.shared = shared if len(k.lanes) > 1 else {}  # (`norm_shared`; one lane: both store it)
    _lane_span(k, cfg)
    # (`stat_group`: `stt`'s blocks of one row slot, ScalarE's statistics one piece; the
    # weight's stage emitted after its group's statistics)
    if not (k.stt and k.per == 1 and len(k.spieces) <= 1 and k.lag is not None):
        k.stat_group = 1
    elif k.bufs <= max(k.lag) + k.stat_group:  # (too few buffers for a group behind the lags:
        # bf16 rows of 10^6, 3 buffers, a block's load was emitted over a tile not yet read)
        k.stat_group = 1
    if k.stat_group > 1:
        a, z, w = k.lag
        k.lag = (a, max(z, a + k.stat_group - 1), max(w, a + k.stat_group))
    affine = [v for v in (weight, bias) if v is not None]
    queues = k.loads if big else Queues(cfg).loads(1 / 2, 1)

    def spread():
        # loaded on a row's partitions and repeated over the others by TensorE (the repeat
        # matrix one affine_select a row of the tile: up to REPEAT_ROWS)
        once = k.psum_affine and 1 < lay.g <= REPEAT_ROWS
        if (k.rows_first or k.seg_affine) and seg:  # a tile a segment, in turn
            k.seg_rows = _segment_rows(b, cfg, affine, lay, queues)
        elif len(k.lanes) > 1 and not seg:  # a tile a lane, in turn
            k.lane_rows = _lane_rows(b, cfg, affine, lay, queues, k.lanes)
        else:
            k.rows.update({v: _piece_rows(b, cfg, v, lay, queues, 1 if once else lay.g)
                           for v in affine})  # fmt: skip
        if k.psum_affine:
            k.psum_rows = {
                v: _psum_copy(b, cfg, k.rows[v], lay.k if once else cfg.core.sbuf.partitions)
                for v in affine
            }
        if k.pe_bias and k.seg_rows:
            k.pe.pieces_segs = (k.seg_rows[bias], lay.f)
        elif k.pe_bias and k.lane_rows:
            k.pe.pieces_segs = (k.lane_rows[bias], [ln.lo for ln in k.lanes])
        elif k.pe_bias:
            k.pe.pieces_row = k.rows[bias]

    k.spread, k.spread_first = spread, big
    if k.affine_at and k.split_loads and not seg and not k.psum_affine:
        _load_behind(k, cfg, lay, {weight: k.affine_at[0], bias: k.affine_at[1]})
    if k.interleave:  # each row's stages at once (`_emit`): its segments follow its loads
        k.lag = SEG_LAG if not k.spread_at else (0, k.spread_at, k.spread_at)
    if k.pad and not tsum_applies(k):  # (`norm_pad`: its sums corrected on TensorE's mean's)
        raise TraceError(f"layer_norm: rows of {lay.d} in padded pieces need `norm_tsums`")
    with _scheduled(k) as s:
        if k.pe_bias:
            k.pe = PeBias(b, cfg, bias, width, to.dtype, pieces=True, tiles=k.pe_tiles,
                          banked=k.banked)  # fmt: skip
        _emit(k, blocks)
    k.groups.done()
    b.release(*k.psum_rows.values(), *k.psum_cols.values())
    if k.pe_bias:
        k.pe.done()
    return getattr(s, "makespan", 0.0)


def _lane_span(k, cfg: ChipConfig) -> None:
    """TensorE's bias tiles a bank wider and one fewer (`LANE_SPAN`) where a lane is a little
    more than `pe_span` banks: each lane's copy out of PSUM one ScalarE instruction, not two (the
    second on a lane's last few columns, its fixed cost nearly all of it)."""
    step = min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)
    w = max(ln.hi - ln.lo for ln in k.lanes)
    if (LANE_SPAN and k.pe_bias and k.stt and len(k.lanes) > 1 and k.pe_tiles > 2
            and k.pe_span * step < w <= (k.pe_span + 1) * step):  # fmt: skip
        k.pe_span, k.pe_tiles = k.pe_span + 1, k.pe_tiles - 1
        if k.tail_copies and LANE_TAIL:  # (the copies out a bank each, `LANE_TAIL`)
            k.tail_copies, k.banked = max(k.tail_copies, LANE_TAIL), True


def _load_behind(k, cfg: ChipConfig, lay, at: dict) -> None:
    """The weight and bias (`at`: tensor -> block) of rows in pieces loaded in parts
    (`affine_at`): each tensor's row copies behind block at[tensor]'s loads, copy r on the
    queue of the block's part that holds its partitions (`load_cuts`), so they take those
    DMA engines after the part (the first blocks arrive sooner: the weight is needed only by
    the first weighting, the bias by the first block's matmuls), each no later than its
    stage's lag (`_lags`: the weight's third, the bias' fourth)."""
    cuts, lag = k.load_cuts(lay.g), _lags(k)
    pe = _pe_rows_of(k, lay)
    queues = [k.loads[next(i for i in range(len(cuts) - 1) if r < cuts[i + 1])]
              for r in range(lay.g)]  # fmt: skip

    def load(v):
        if len(k.lanes) > 1:  # (`piece_lanes`: a tile a lane)
            ps = k.pe.take(k.pe_span)[0] if v in pe else None  # (`pe_rows`)
            k.lane_rows.update(_lane_rows(k.b, cfg, [v], lay, queues, k.lanes, True, ps))
            if v == k.bias and k.pe_bias:
                k.pe.pieces_segs = (k.lane_rows[v], [ln.lo for ln in k.lanes])
            return
        k.rows[v] = _piece_rows(k.b, cfg, v, lay, queues, lay.g)
        if v == k.bias and k.pe_bias:
            k.pe.pieces_row = k.rows[v]

    k.spread, k.spread_first, k.behind = (lambda: None), True, {}
    for v, most in ((k.weight, lag[1]), (k.bias, lag[2])):
        if v is not None:
            at_v = min(PE_ROWS_AT, at[v], most) if v in pe else min(at[v], most)
            k.behind.setdefault(at_v, []).append(lambda v=v: load(v))


def _pe_rows_of(k, lay) -> tuple:
    """The tensors `_load_behind` loads once and spreads by TensorE (`PE_ROWS`): the weight,
    16-bit, of rows in pieces in lanes, PE_ROWS_MIN or more a tile, TensorE adding the bias
    (its PSUM tiles take the spread)."""
    v = k.weight
    on = PE_ROWS and k.pe_bias and len(k.lanes) > 1 and lay.g >= PE_ROWS_MIN and not pad_of(lay)
    return (v,) if on and v is not None and k.b.tensors[v].dtype.itemsize == 2 else ()


def _seg_cycle(k, lay) -> None:
    """Rows in segments: segment m (counted over the rows, row-major) normalised, weighted and
    biased on the engines of `k.seg_cycle[m % len]` (codes of V, S, G; a bias on S: TensorE's,
    ScalarE copying out, or VectorE's where TensorE may not add it), if given."""
    if not k.seg_cycle:
        return
    on = {"V": V, "S": S, "G": G}
    for m in range(k.blocks * lay.t):
        row, s = divmod(m, lay.t)
        norm, weight, bias = (on[c] for c in k.seg_cycle[m % len(k.seg_cycle)])
        lane = k.block_lanes[row][s]
        k.block_lanes[row][s] = Lane(lane.lo, lane.hi, norm, weight,
                                     bias if bias != S or k.pe_ok else V)  # fmt: skip
    k.pe_bias = k.bias is not None and any(
        lane.bias == S for ls in k.block_lanes for lane in ls)  # fmt: skip


def _psum_affine(cfg: ChipConfig, tx, to, d: int, weight, bias,
                 piece_bytes: int = PIECE_BYTES) -> bool:  # fmt: skip
    """Whether fp32 rows of d in pieces (not in segments) of up to `piece_bytes` a partition
    may keep their weight and bias in PSUM (`PSUM_AFFINE_BYTES`, WIDE_PSUM_BYTES for
    WIDE_PIECES)."""
    lay = _piece_layout(cfg, tx, d, piece_bytes=piece_bytes)
    names = [v for v in (weight, bias) if v is not None]
    most = PSUM_AFFINE_BYTES if piece_bytes == PIECE_BYTES else WIDE_PSUM_BYTES
    return (lay is not None and lay.t == 1 and bool(names) and tx.dtype.itemsize == 4
            and to.dtype == tx.dtype and len(names) * lay.f * 4 <= most)  # fmt: skip


def _wide(cfg: ChipConfig, tx, d: int, piece_bytes: int) -> bool:
    """Whether rows of d in pieces of up to `piece_bytes` a partition (`WIDE_PIECES`) go in
    fewer pieces than of PIECE_BYTES (one tile a block, not in segments): else the variant
    would lower as its narrower twin does."""
    wide = _piece_layout(cfg, tx, d, piece_bytes=piece_bytes)
    lay = _piece_layout(cfg, tx, d)
    return wide is not None and lay is not None and wide.t == 1 and wide.k < lay.k


def _psum_copy(b: KernelBuilder, cfg: ChipConfig, rows: str, k: int) -> str:
    """A PSUM copy of fp32 tile `rows` ([P, w]) whose first k partitions repeat over the
    others (partition m holds partition m % k's values): R times its first k partitions on
    TensorE (R [k, P], 1 where m % k = p), a bank's columns at a time (exact: each element
    times 1 plus zeros), copied back into `rows` by ScalarE (the same values on its first k
    partitions: engines start at partition 0)."""
    P, f32, w = cfg.core.sbuf.partitions, dtype("float32"), b.tiles[rows].shape[-1]
    new = f"norm.repeat{k}:{f32.name}:{(k, P)}" not in b.scratch  # (`scratch_tile`'s key)
    rep = b.scratch_tile(f"norm.repeat{k}", "repeat", (k, P), f32)
    a = ap(rep)
    if new:
        b.emit(Memset, [], [a], dst=a, value=0.0, engine=G)
        for r in range(0, P, k):  # 1 where p - m + r = 0
            b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=1.0, cmp="not_equal",
                   start=r, partition_step=1, step=-1, engine=G)  # fmt: skip
    step = min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)
    ps = b.psum("affine", (P, w), f32)
    for lo, hi in bank_runs(w, step):
        mv, dst = ap(rows, slice(0, k), slice(lo, hi)), ap(ps, slice(None), slice(lo, hi))
        b.emit(Matmul, [a, mv], [dst], stationary=a, moving=mv, dst=dst)
    if k < P:
        src, dst = ap(ps), ap(rows)
        b.emit(Activation, [src], [dst], func="copy", src=src, dst=dst)
    return ps


def _split(lanes: list[Lane], most: int, even: bool = False) -> list[Lane]:
    """`lanes` cut in sub-lanes of at most `most` columns (as even as whole columns allow; or,
    `even`, of even widths where the lane's is),
    each with its lane's engines."""
    out = []
    for lane in lanes:
        w = lane.hi - lane.lo
        m = -(-w // most)
        two = 2 if even and w % 2 == 0 else 1
        cuts = [lane.lo + two * round(w / two * i / m) for i in range(m + 1)]
        out += [Lane(a, z, *_engines(lane)) for a, z in zip(cuts, cuts[1:])]
    return out


def _engines(lane: Lane) -> tuple:
    return lane.norm, lane.weight, lane.bias


def _piece_layout(cfg: ChipConfig, tx, d: int, divisor: bool = True,
                  piece_bytes: int = PIECE_BYTES):  # fmt: skip
    """Rows of d in pieces (`row_pieces.layout`) of PIECE_BYTES a partition, or of one 128th
    of the row when that is longer (a row in one tile), up to MAX_PIECE_BYTES; a row whose
    pieces would take BIG_PIECES or more in segments of 128 pieces of SEG_BYTES."""
    P, isz = cfg.core.sbuf.partitions, tx.dtype.itemsize
    most = max(piece_bytes // isz, -(-d // P))
    if most * isz >= BIG_PIECES:
        most = SEG_BYTES // isz
    if d % P and DIVISOR_PIECES and divisor:
        return _divisor_layout(d, max(most, DIVISOR_MOST // isz), isz, P)
    lay = pieces_layout(d, most, P) if most * isz <= MAX_PIECE_BYTES else None
    if (
        divisor
        and isz == 2
        and lay is not None
        and lay.t == 1
        and lay.f % 2
        and lay.k % 2 == 0
        and 2 * lay.f * isz <= DIVISOR_BYTES
        and EVEN_PIECES
    ):
        return PieceLayout(d, 2 * lay.f, lay.k // 2, 2 * lay.g, 1)
    return lay


def _divisor_layout(d: int, most: int, isz: int, P: int):
    """Rows of d (not a multiple of P) in k pieces of f = d / k, g = P / k rows a tile: k the
    fewest powers of two whose pieces are at most `most` elements, or the largest that divides d
    when that is fewer (None: under two pieces, or pieces past DIVISOR_BYTES)."""
    k = 1
    while k < P and d // k > most:
        k *= 2
    while d % k:
        k //= 2
    f = d // k
    if k < 2 or f * isz > DIVISOR_BYTES:
        return _any_divisor(d, isz, P)
    return PieceLayout(d, f, k, P // k, 1)


def _any_divisor(d: int, isz: int, P: int):
    """Rows of d with no power-of-two layout (`_divisor_layout`) in k pieces, k any divisor of
    d up to P (g = P // k rows a tile, g k of the partitions), the most partitions filled, at
    least DIVISOR_FILL of them, then the fewest pieces; a piece of DIVISOR_LEAST to
    DIVISOR_BYTES, or MAX_PIECE_BYTES where a row takes a tile (g = 1). None where no k fits (a
    remainder column, `norm_ragged`). (Tiles of several rows take whole tiles' rows a core,
    `_share`.)"""
    fits = [k for k in range(2, P + 1) if d % k == 0 and (P // k) * k >= DIVISOR_FILL * P
            and DIVISOR_LEAST <= d // k * isz
            <= (DIVISOR_BYTES if P // k > 1 else MAX_PIECE_BYTES)]  # fmt: skip
    if not fits:
        return None
    k = min(fits, key=lambda k: (-(P // k) * k, k))
    return PieceLayout(d, d // k, k, P // k, 1)


def _pads(cfg: ChipConfig, op: str, tx, lay, variant: dict) -> bool:
    """Whether a 16-bit layer_norm's rows go in padded pieces (`norm_pad`): those whose
    layout leaves partitions empty (`_any_divisor`: several rows a tile on fewer than all the
    partitions), with a plan whose statistics `norm_pad` corrects (`PAD_PLAN`: TensorE's row
    mean, `norm_tsums`, in lanes loaded a row at a time)."""
    return (PAD_PIECES and op == "layer_norm" and tx.dtype.itemsize == 2 and lay is not None
            and lay.t == 1 and 1 < lay.g and lay.g * lay.k < cfg.core.sbuf.partitions
            and all(variant.get(f) for f in PAD_PLAN) and variant.get("piece_lanes", 1) > 1
            and variant.get("stat_group", 1) > 1)  # fmt: skip


def _piece_rows(b: KernelBuilder, cfg: ChipConfig, name: str, lay, loads, copies=None) -> str:
    """[128, t f]: tensor `name` ([d]) in the pieces' pattern (partition r k + i holds piece
    i; segment s's pieces in columns [s f, (s + 1) f)), loaded once per row of the tile (g DMAs
    of the whole tensor), or once per segment, on the stream `loads`."""
    P, t = cfg.core.sbuf.partitions, b.tensors[name]
    rows = b.scratch_tile(f"norm.pieces.{name}.{lay.k}", f"{name}_pieces", (P, lay.f * lay.t),
                          t.dtype)  # fmt: skip
    if lay.t > 1:
        n = P * lay.f
        for s in range(lay.t):
            src = ap(name, slice(s * n, (s + 1) * n))
            dst = ap(rows, slice(None), slice(s * lay.f, (s + 1) * lay.f))
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=loads[s])
        return rows
    for r in range(lay.g if copies is None else copies):
        src, dst = ap(name), ap(rows, slice(r * lay.k, (r + 1) * lay.k))
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=loads[r])
    return rows


def _lane_rows(b: KernelBuilder, cfg: ChipConfig, names, lay, loads, lanes,
               by_row: bool = False, psum=None) -> dict:  # fmt: skip
    """Each of `names` ([d]) in the pieces' pattern of a tile in lanes (`NormStages.xcols`), a
    tile a lane ([128, hi - lo]: a lane's passes wait only for its own), loaded a DMA per row
    of the tile and lane, lane 0's of every tensor first, each on the next of `loads` (or,
    `by_row`, row r's on loads[r]); or, given `psum` (a PSUM tile of the op's), loaded once and
    spread by TensorE through it (`norm_pe_rows`)."""
    P, q, small = cfg.core.sbuf.partitions, 0, Queues(cfg).loads(1 / 2, 1)
    rows: dict[str, list[str]] = {v: [] for v in names}
    for lane in lanes:
        for v in names:
            t = b.scratch_tile(f"norm.lanes.{v}.{lay.k}.{lane.lo}", f"{v}_lane",
                               (P, lane.hi - lane.lo), b.tensors[v].dtype)  # fmt: skip
            rows[v].append(t)
            if psum:  # (16-bit, several rows a tile: `norm_pe_rows`)
                src = ap(v, slice(lane.lo * lay.k, lane.hi * lay.k))
                pe_rows(b, cfg, src, t, lay.k, lay.g, loads[0 if by_row else q], psum=psum)
                q += 1
                continue
            for r in range(lay.g):
                queue = loads[r if by_row else q]
                q += 1
                if pad_of(lay) and lane.hi == lay.f:  # (`norm_pad`: the short piece apart)
                    load_copy(b, v, t, lane.lo, lane.hi - lane.lo, lay, r, queue, small)
                    continue
                src = ap(v, slice(lane.lo * lay.k, lane.hi * lay.k))
                dst = ap(t, slice(r * lay.k, (r + 1) * lay.k))
                b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=queue)
    return rows


def _segment_rows(b: KernelBuilder, cfg: ChipConfig, names, lay, loads) -> dict:
    """Each of `names` ([d]) as a row in segments' t tiles ([128, f]: segment s's pieces, a
    tile each, so a segment's passes wait only for its own load), segment 0 of each loaded
    first, then 1, ...: a segment's weight and bias arrive together."""
    P, n, q = cfg.core.sbuf.partitions, cfg.core.sbuf.partitions * lay.f, 0
    rows: dict[str, list[str]] = {v: [] for v in names}
    for s in range(lay.t):
        for v in names:
            t = b.scratch_tile(f"norm.pieces.{v}.{lay.k}.{s}", f"{v}_seg", (P, lay.f),
                               b.tensors[v].dtype)  # fmt: skip
            rows[v].append(t)
            src, dst = ap(v, slice(s * n, (s + 1) * n)), ap(t)
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=loads[q])
            q += 1
    return rows


def _emit(k, blocks) -> None:
    """The blocks' stages: 2 a block behind stage 1, 3 two, 4 (TensorE's bias) three, as the
    buffers allow, so each engine's queue holds work of different blocks, none waiting on
    another engine's part of the same block."""
    if not blocks:
        return
    if k.rows_first and k.segments and k.bufs >= len(blocks):
        _emit_rows_first(k, blocks)
        return
    lag = _lags(k)
    stages = (k.second, k.third, k.fourth)
    if not k.spread_first:
        k.spread()  # the engines have nothing else to do until the first block is loaded
    for n in range(len(blocks) + max(lag)):
        if n < len(blocks):
            k.first(n, *blocks[n])
        for load in k.behind.get(n, ()):  # (`_load_behind`)
            load()
        if n == k.spread_at and k.spread_first:  # its loads behind the first block's
            # (`_lower_pieces`; or block `spread_at`'s)
            k.spread()
        if n == 0:  # block 0's stage 2 at once: nothing else waits on the engines yet
            k.second(0, *blocks[0])
        for stage, late in zip(stages, lag):
            m = n - late
            if 0 <= m < len(blocks) and not (stage == k.second and m == 0):
                stage(m, *blocks[m])


def _lags(k) -> tuple[int, int, int]:
    """Stages 2, 3 and 4's lags behind stage 1, in blocks (`_emit`)."""
    if k.lag is not None:
        return k.lag
    b = k.bufs
    return min(1, b - 1), min(2, b - 1), max(min(2, b - 1), min(3, b - 2))


def _emit_rows_first(k, blocks) -> None:
    """Rows in segments, all of a core's rows resident (`rows_first`): every row loaded and its
    statistics taken first, then the weight and bias segment by segment (`_segment_rows`), and
    each segment of every row normalised, weighted, biased and stored as its weight and bias
    arrive: no row's post-statistics work waits for the weight and bias whole, and the last
    row's is not all that is left once its loads end (the rows' share the engines instead)."""
    for n, block in enumerate(blocks):
        k.first(n, *block)
        k.second(n, *block)
    k.spread()
    for s in range(k.pieces.t):
        for n, block in enumerate(blocks):
            k.third(n, *block, only=s)
    for n, block in enumerate(blocks):
        k.fourth(n, *block)


def _scheduled(k):
    """layer_norm's instructions in the order of a list schedule where it ends sooner than
    `_emit`'s (`schedule.Scheduled`): trn2 LNC 2, 16 MiB (test_rows_families), bf16 rows of 64
    72% -> 83%, fp32 rows of 4096 53% -> 62%, of 64K 50% -> 63%, of 1M 62% -> 67%. Its loads
    and stores share the DMA engines (`shared_dma`: the estimate, which also chooses the
    variant, took each queue at the engines' whole bandwidth: 4 us short at fp32 rows of 512)."""
    if not k.layer:
        return contextlib.nullcontext()
    return Scheduled(k.b, k.cfg, shared_dma=True, dma_parts=k.dma_parts, fluid=k.fluid,
                     search=k.search)  # fmt: skip


def norm_rows(cfg: ChipConfig, tx, to, affine_bytes: int) -> bool:
    """Whether rows of x fit the row kernel: one row a partition, its output, the spread weight
    and bias and ScalarE's scratch within SBUF_SHARE of a partition."""
    d = tx.shape[-1] if tx.shape else 1
    need = d * (2 * tx.dtype.itemsize + to.dtype.itemsize + affine_bytes)
    return need <= cfg.core.sbuf.partition_bytes * SBUF_SHARE
