"""`layer_norm` and `rms_norm` over the last dim.

Rows that fit a partition (`norm_rows`; longer rows: `norm_pieces`) go in blocks of [p, per,
D]: `per` rows to each of up to 128 partitions (short rows several to a partition, up to
ROW_BYTES, `layout.row_groups`). A block's columns are cut in one or two **lanes**, each
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
   partition, combines its two halves for the whole block at once instead, `_Norm.halves`);
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
weighted out of x into tiles of their own (`_Norm.piece`), biased, and stored piece by piece,
the weight's (and a VectorE or GpSimd bias') engine chosen by the list schedule (`flex`); the
normalisation is (x - mean) * rstd in place; the first and last blocks are cut smaller
(`_taper`), or ScalarE's share of the statistics is whole row slots (`row_stats`).

`norm_plan.plan` chooses c, the lanes and the shift's engines; over many blocks it may mix two
choices of the lane's engines (a share of the blocks each, `_Norm.at`), so that a pass one
engine would take whole (rms_norm's weight on GpSimd, two cycles an element) is shared. Blocks
rotate through up to BUFS buffers within BUFFER_SHARE of SBUF. rms_norm's rows of
`rms_short.SHORT_ROW` or fewer go to `rms_short` (three stages, whole-block passes).
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
    BnAggr,
    BnStats,
    DmaCopy,
    Matmul,
    Memset,
    TensorCopy,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks, row_groups
from trnsim.kernels.norm_affine import (
    PE_TILES,
    PeBias,
    pe_group,
    psum_cols,
    spread,
    spread_psum,
)
from trnsim.kernels.norm_plan import Lane, plan
from trnsim.kernels.queues import Queues
from trnsim.kernels.rms_short import SHORT_ROW, lower_rms_short
from trnsim.kernels.row_pieces import Groups
from trnsim.kernels.row_pieces import layout as pieces_layout
from trnsim.kernels.row_plan import G, S, Spread, V, runs
from trnsim.kernels.rows import core_share
from trnsim.kernels.schedule import Scheduled

__all__ = ["lower_norm", "norm_rows"]

BUFS = 6
SBUF_SHARE = 0.75  # rows that need more than this for one buffer go to `norm_pieces`
BUFFER_SHARE = 0.45  # what the rotating buffers may take
LONG_ROW, LONG_SHARE = 8192, 0.6  # rows this long: two lanes, and this share of SBUF
ROW_BYTES = 8192  # short rows are grouped up to this many bytes a partition (4096 bf16 or
# 2048 fp32 elements: fp32 blocks of 1 MiB, twice as many as with 4096 elements, which fill and
# drain the chain of passes sooner: rows of 512 and 64, layer_norm 51 -> 56% and 53 -> 57%,
# rms_norm 83 -> 95% and 86 -> 94%)
LAYER_ROW_BYTES = 4096  # layer_norm's (blocks of 512 KiB: its longer chain of passes fills and
# drains sooner; trn2 LNC 2, 16 MiB, rows of 64 bf16 69 -> 71%, fp32 57 -> 58%, of 512 bf16
# 59 -> 63%, fp32 69 -> 70%; rms_norm's ran slower so: fp32 rows of 64 94 -> 90%)
PE_BUFS = 5  # TensorE adds the bias only when this many buffers of x fit beside its own
F_BUFS = 2  # buffers of TensorE's copies out (the bias added on TensorE)
PIECE_BYTES = 4096  # a piece tile's bytes a partition (512 KiB tiles: many, so loads overlap)
MAX_PIECE_BYTES = 32768  # a row of 2^20 fp32 in one tile (its 128 pieces)
BIG_PIECES = 16384  # piece tiles this large a partition (2 MiB and more) load one at a time
PIECE_ROWS = 2048  # rows this long go in pieces when a core has no more rows than partitions
# (one block, which nothing would overlap)
SEG_BYTES = 4096  # a row whose pieces would take BIG_PIECES a partition or more goes in segments
# of 128 pieces of this many bytes, each a tile of its own (`_lower_pieces`)
SEG_STORES = 1  # store queues of a row in segments (its last row's stores, after its
# statistics, are what nothing overlaps)
SEG_LAG = (0, 0, 0)  # a row in segments (without TensorE's bias): its stages emitted together
SEG_SHARE = 0.6  # what a row in segments' buffers (and the weight and bias) may take of SBUF
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
SEGMENTS_ONLY = {"rows_first", "spread_at", "seg_affine"}  # (variants of rows in segments)
LANE_ROW = 2048
FP32_ONLY = ("pe_fp32", "fit_psum")  # (variants of fp32 rows with a bias only)
FLEX = {"spread_first": True, "small_waits": False, "fit_psum": True, "flex": True,
        "flex_norm": "SG", "bufs_most": 12}  # fmt: skip
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
    *(
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
    ),
    FLEX,
    {"pipe": True},
    {"pipe": True, "s_share": 0.25},
    {"pipe": True, "s_share": 0.5},
    LONG_FLEX,
    ROWS_FIRST,
    SPREAD_LATER,
    SEG_AFFINE,
)
TAPER = (4, 2)  # a pipelined layer_norm's first and last blocks cut so (`_taper`)
TAPER_S = (2,)  # ... so when ScalarE takes whole row slots' statistics (`S_GROUP` a block)
S_GROUP = 4  # ... those of the last `srows` of every S_GROUP row slots (`_Norm.s_slot`)
OUT_BUFS = 3  # ... the blocks whose output pieces rotate through tiles of their own
PIPE_ROW_BYTES = 8192  # ... its rows a partition of a block, in bytes
PIPE_PIECE = 1024  # ... and its output pieces' columns (`_Norm.piece`)
PIPE_BANKS = 4  # ... the PSUM banks its weight and bias are spread through
PIPE_SPAN = 2  # ... the PSUM banks of each of TensorE's bias tiles, copied out by ScalarE at once
PSUM_AFFINE_BYTES = 8192  # fp32 weight and bias of rows in pieces kept in PSUM for VectorE's
# tensor_tensors (N cycles an element with one input in PSUM, not 2N) when a partition's pieces
# of them take this much at most (4 of its 8 banks; `row_pieces.Groups` has its small tiles in
# the others)
REPEAT_ROWS = 4  # `psum_affine`: rows a tile up to which the weight and bias load once
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
    _lower(b, *args, _variant(b, *args))


def _variant(b: KernelBuilder, cfg: ChipConfig, op, x, out, weight, bias, eps) -> dict:
    """The VARIANTS entry whose list schedule (`schedule.Scheduled`) ends soonest for a
    layer_norm of TRIAL_BYTES or more: each lowered on a builder of its own for the first
    core's share at the chip's default LNC, whatever the run's (the choice, which may change c
    and so the rounding, is then the same however a logical core's cores share the rows), and
    kept for the next core and the next op of the same shapes."""
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
    spans = []
    for i in _tried(b, cfg, x, out, weight, bias):
        tb = KernelBuilder(b.tensors)
        tb.part = (0, max(1, cfg.lnc))
        spans.append((_lower(tb, cfg, op, x, out, weight, bias, eps, VARIANTS[i]), i))
    if len(_CHOSEN) >= CHOSEN_MOST:
        _CHOSEN.clear()
    _CHOSEN[key] = (cfg, VARIANTS[min(spans)[1]])
    return _CHOSEN[key][1]


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
    segments = not fits and lay is not None and lay.t > 1  # rows in segments
    return [i for i, v in enumerate(VARIANTS)
            if (_psum_affine(cfg, tx, to, d, weight, bias) if "psum_affine" in v  # (pieces)
                else not (("long_row" in v and not LANE_ROW <= d < LONG_ROW)
                          or ("pe_pieces" in v and not pe)
                          or (any(f in v for f in FP32_ONLY) and not fp32)
                          or ("spread_first" in v and not fits)
                          or ("pipe" in v and not pipe)
                          or (SEGMENTS_ONLY & set(v) and not segments)))]  # fmt: skip


def _lower(b: KernelBuilder, cfg: ChipConfig, op, x, out, weight, bias, eps, variant) -> float:
    """`lower_norm` with the plan's `variant` (a VARIANTS entry); the list schedule's estimated
    span (0 without one)."""
    tx, to = b.tensors[x], b.tensors[out]
    d = tx.shape[-1]
    affine = [(v, alu) for v, alu in ((weight, "multiply"), (bias, "add")) if v is not None]
    share = core_share(b, cfg, tx)  # rows that do not fit: split evenly (isolated)
    rows = share[1] - share[0]
    affine_bytes = sum(b.tensors[v].dtype.itemsize for v, _ in affine)
    if not norm_rows(cfg, tx, to, affine_bytes) or (rows <= cfg.core.sbuf.partitions and
                                                     d >= PIECE_ROWS):  # fmt: skip
        lay = _piece_layout(cfg, tx, d)
        if lay is not None:
            return _lower_pieces(b, cfg, op, x, out, weight, bias, float(eps), lay, share,
                                 variant)  # fmt: skip
        if not norm_rows(cfg, tx, to, affine_bytes):
            raise TraceError(
                f"{op}: rows of {d} elements do not fit a partition's SBUF, and are not a "
                f"multiple of {cfg.core.sbuf.partitions} up to {cfg.core.sbuf.partitions} "
                f"pieces of {PIECE_BYTES // tx.dtype.itemsize} (to cut over the partitions); "
                "not lowered yet"
            )
    if op == "rms_norm" and d <= SHORT_ROW:
        lower_rms_short(b, cfg, x, out, weight, float(eps), share)
        return
    k = _Norm(b, cfg, op, x, out, d, float(eps))
    k.weight, k.bias = weight, bias
    k.__dict__.update(variant)
    # other ops keep their tiles; rows of LONG_ROW or more take more (a kernel has room for few
    # such ops), and only they go in two lanes (whose tiles no other norm shares)
    share_ = LONG_SHARE if d >= LONG_ROW else BUFFER_SHARE
    room = int(cfg.core.sbuf.partition_bytes * share_)
    # a block's x (and its output when the dtypes differ) rotate through `bufs` buffers;
    # TensorE's copies out (the bias on TensorE) through F_BUFS, only if PE_BUFS of the
    # others still fit (x lives until TensorE reads it, two stages after its load)
    base = d * (tx.dtype.itemsize + (to.dtype.itemsize if to.dtype != tx.dtype else 0))
    f = F_BUFS * d * to.dtype.itemsize
    k.pe_ok = bias is not None and to.dtype == tx.dtype and (
        to.dtype.itemsize == 2 or k.pe_fp32) and (room - f) // base >= PE_BUFS  # fmt: skip
    room -= f if k.pe_ok else 0
    k.pipe = k.pipe and k.layer and not k.shift and weight is not None and d < LONG_ROW
    row_bytes = PIPE_ROW_BYTES if k.pipe else LAYER_ROW_BYTES if k.layer else ROW_BYTES
    group = max(1, row_bytes // tx.dtype.itemsize // d)
    k.per, blocks = row_groups(tx.shape, k.P, share, group,
                               max(1, room // (BUFS * base)))  # fmt: skip
    k.tper = k.per
    if k.pipe and _pieces_fit(tx, blocks):  # (module doc, "pipelined")
        k.out_pieces, k.flex, k.flex_norm = PIPE_PIECE, True, ""
        k.pe_span = PIPE_SPAN if min(PIPE_PIECE, d) > PIPE_PIECE // PIPE_SPAN else 1
        if d * PIPE_SPAN <= PIPE_PIECE and not k.pe_step % d:  # (rows of 512 or fewer)
            k.pslots = k.pe_span = PIPE_SPAN
        srows = round(k.s_share * S_GROUP)
        if srows and _aligned(b, cfg, tx, group, max(1, room // (BUFS * base))):
            k.srows = srows
        blocks, k.block_per = _taper(blocks, k.per, TAPER_S if k.srows else TAPER)
        room -= OUT_BUFS * k.per * d * to.dtype.itemsize  # (the pieces' tiles)
    k.bufs, k.blocks = max(1, min(k.bufs_most, room // (k.per * base))), len(blocks)
    q, qs = dma_queues(cfg, k.per * d * tx.dtype.itemsize), Queues(cfg)  # load (and store) queues
    k.loads, k.stores = qs.loads().take(q), qs.stores().take(q)
    if k.out_pieces:  # (a store a piece: small, so on as many queues as they need)
        k.stores = qs.stores().take(dma_queues(cfg, min(PIPE_PIECE, d) * to.dtype.itemsize))
    # planned for the whole tensor's layout, as one core would lower it: the choices that
    # change the values' rounding (ScalarE's statistics, the halves) are then the same
    # however an LNC 2 logical core's cores share the rows
    per, k.per = k.per, row_groups(tx.shape, k.P, None, group,
                                   max(1, room // (BUFS * base)))[0]  # fmt: skip
    k.plan_per = k.per
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
            # start once its first half is in
            k.block_lanes[0] = [Lane(0, h, *_engines(ln)), Lane(h, d, *_engines(ln))]
            k.lanes = k.block_lanes[0]
    # the weight, and the bias unless TensorE adds it in every block
    on_pe = all(lane.bias == S for ls in k.block_lanes for lane in ls)
    spreads = [v for v in (weight, bias) if v is not None and not (v == bias and on_pe)]
    k.spread = lambda: k.rows.update(zip(spreads, spread(b, cfg, spreads, d, k.loads)))
    if k.out_pieces:  # (on a queue of its own, at once, through PIPE_BANKS: its TensorE
        # matmuls do not wait, bank by bank, for VectorE and ScalarE, busy with the first blocks)
        k.spread = lambda: k.rows.update(zip(spreads, spread(b, cfg, spreads, d, None,
                                                             PIPE_BANKS)))  # fmt: skip
    if kept:
        k.spread = lambda: _spread_psum(k, spreads, kept, d)
    with _scheduled(k) as s:
        if k.pe_bias:
            k.pe = PeBias(b, cfg, bias, d, to.dtype, group=pe_group(cfg, d, k.per))
        _emit(k, blocks)
    if k.pe_bias:
        k.pe.done()
    b.release(*k.psum_rows.values())
    return getattr(s, "makespan", 0.0)


def _taper(blocks, per: int, parts):
    """(blocks, each one's rows a partition): the first and last of `blocks` ([p, per, D], a
    range of rows each, `_pieces_fit`) cut into blocks of per / part rows a partition for each
    part of `parts` (and the rest), so the first loads sooner and the last one's chain is
    short (as `rms_short._taper`)."""
    pers = [per] * len(blocks)
    if len(blocks) < 3 or any(per % part for part in parts):
        return blocks, pers

    def cut(block, order):
        index, rows = block
        last, out, lo = index[-1], [], index[-1].start
        for part in order:
            n = rows // part
            out.append(((*index[:-1], slice(lo, lo + n)), n, per // part))
            lo += n
        if lo < last.stop:
            out.append(((*index[:-1], slice(lo, last.stop)), last.stop - lo,
                        per * (last.stop - lo) // rows))  # fmt: skip
        return out

    cuts = cut(blocks[0], parts) + [(i, r, per) for i, r in blocks[1:-1]]
    cuts += cut(blocks[-1], parts[::-1])
    return [(i, r) for i, r, _ in cuts], [q for _, _, q in cuts]


def _pieces_fit(tx, blocks) -> bool:
    """Whether the blocks' output may go in pieces (`_Norm.piece`): each block a range of x's
    rows of its last batch dimension (a piece's rows are every per-th)."""
    nd = len(tx.shape)
    return nd >= 2 and all(len(index) == nd - 1 and isinstance(index[-1], slice)
                           for index, _ in blocks)  # fmt: skip


def _aligned(b: KernelBuilder, cfg: ChipConfig, tx, *most: int) -> bool:
    """Whether every core's blocks, at LNC 1 and the chip's and the run's, have rows a partition
    and first rows multiples of S_GROUP (and so those `_taper` cuts): then row slot j holds the
    rows r = j (mod S_GROUP) however the cores share them, so ScalarE's statistics of the slots
    `_Norm.s_slot` gives (which round apart from VectorE's) take the same rows at any LNC."""
    P = cfg.core.sbuf.partitions
    for n in sorted({1, max(1, cfg.lnc), b.part[1]}):
        for c in range(n):
            tb = KernelBuilder(b.tensors)
            tb.part = (c, n)
            got, blocks = row_groups(tx.shape, P, core_share(tb, cfg, tx), *most)
            if got % S_GROUP or not _pieces_fit(tx, blocks):
                return False
            if any(index[-1].start % S_GROUP for index, _ in blocks):
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
    kept in PSUM for VectorE (`_Norm.weighted`)."""
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
    k = _Norm(b, cfg, op, x, out, width, eps)
    k.weight, k.bias, k.pieces = weight, bias, lay
    k.__dict__.update(variant)
    k.groups = Groups(b, cfg, lay.k)
    k.psum_affine = k.psum_affine and _psum_affine(cfg, tx, to, lay.d, weight, bias)
    room = int(cfg.core.sbuf.partition_bytes * (SEG_SHARE if seg else BUFFER_SHARE)) - width * sum(
        b.tensors[v].dtype.itemsize for v in (weight, bias) if v is not None)  # fmt: skip
    base = width * (tx.dtype.itemsize + (to.dtype.itemsize if to.dtype != tx.dtype else 0))
    # a row in segments may have its bias added by TensorE (16-bit: the identity times the
    # bias' pieces and times the values into PSUM, ScalarE copying out), as rows that fit do
    k.pe_ok = (seg or k.pe_pieces) and bias is not None and to.dtype == tx.dtype and (
        to.dtype.itemsize == 2 or k.pe_fp32) and not k.rows_first  # fmt: skip
    room -= F_BUFS * width * to.dtype.itemsize if k.pe_ok else 0
    blocks = list(row_blocks(tx.shape, lay.g, rows))
    k.bufs, k.blocks = max(1, min(k.piece_bufs, room // base)), len(blocks)
    # (a block's later stages at most bufs - 1 behind its load: `_emit`'s lags)
    k.spread_at = min(k.spread_at, k.bufs - 1)
    q, qs = dma_queues(cfg, lay.f * tx.dtype.itemsize), Queues(cfg)
    # large tiles (rows of 2^20: a few a core): loaded one after another
    # on one queue, the weight and bias behind the first, so the first tile arrives first
    # instead of sharing the engines with the others (and its engines start sooner)
    big = width * tx.dtype.itemsize >= BIG_PIECES or k.piece_big
    n = 1 if big else max(2, q)
    k.loads, k.stores = qs.loads().take(n), qs.stores().take(SEG_STORES if seg else max(2, q))
    if seg:  # the plan's choices of engines mixed over the segments (one lane each)
        k.blocks *= lay.t
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
        k.lanes = k.block_lanes[0]
    affine = [v for v in (weight, bias) if v is not None]
    queues = k.loads if big else Queues(cfg).loads(1 / 2, 1)

    def spread():
        # loaded on a row's partitions and repeated over the others by TensorE (the repeat
        # matrix one affine_select a row of the tile: up to REPEAT_ROWS)
        once = k.psum_affine and 1 < lay.g <= REPEAT_ROWS
        if (k.rows_first or k.seg_affine) and seg:  # a tile a segment, in turn
            k.seg_rows = _segment_rows(b, cfg, affine, lay, queues)
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
        elif k.pe_bias:
            k.pe.pieces_row = k.rows[bias]

    k.spread, k.spread_first = spread, big
    if k.interleave:  # each row's stages at once (`_emit`): its segments follow its loads
        k.lag = SEG_LAG if not k.spread_at else (0, k.spread_at, k.spread_at)
    with _scheduled(k) as s:
        if k.pe_bias:
            k.pe = PeBias(b, cfg, bias, width, to.dtype, pieces=True)
        _emit(k, blocks)
    k.groups.done()
    b.release(*k.psum_rows.values(), *k.psum_cols.values())
    if k.pe_bias:
        k.pe.done()
    return getattr(s, "makespan", 0.0)


def _psum_affine(cfg: ChipConfig, tx, to, d: int, weight, bias) -> bool:
    """Whether fp32 rows of d in pieces (not in segments) may keep their weight and bias in
    PSUM (`PSUM_AFFINE_BYTES`)."""
    lay = _piece_layout(cfg, tx, d)
    names = [v for v in (weight, bias) if v is not None]
    return (lay is not None and lay.t == 1 and bool(names) and tx.dtype.itemsize == 4
            and to.dtype == tx.dtype
            and len(names) * lay.f * 4 <= PSUM_AFFINE_BYTES)  # fmt: skip


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
    for lo, hi in runs(w, step):
        mv, dst = ap(rows, slice(0, k), slice(lo, hi)), ap(ps, slice(None), slice(lo, hi))
        b.emit(Matmul, [a, mv], [dst], stationary=a, moving=mv, dst=dst)
    if k < P:
        src, dst = ap(ps), ap(rows)
        b.emit(Activation, [src], [dst], func="copy", src=src, dst=dst)
    return ps


def _split(lanes: list[Lane], most: int) -> list[Lane]:
    """`lanes` cut in sub-lanes of at most `most` columns (as even as whole columns allow),
    each with its lane's engines."""
    out = []
    for lane in lanes:
        w = lane.hi - lane.lo
        m = -(-w // most)
        cuts = [lane.lo + round(w * i / m) for i in range(m + 1)]
        out += [Lane(a, z, *_engines(lane)) for a, z in zip(cuts, cuts[1:])]
    return out


def _engines(lane: Lane) -> tuple:
    return lane.norm, lane.weight, lane.bias


def _piece_layout(cfg: ChipConfig, tx, d: int):
    """Rows of d in pieces (`row_pieces.layout`) of PIECE_BYTES a partition, or of one 128th
    of the row when that is longer (a row in one tile), up to MAX_PIECE_BYTES; a row whose
    pieces would take BIG_PIECES or more in segments of 128 pieces of SEG_BYTES."""
    P, isz = cfg.core.sbuf.partitions, tx.dtype.itemsize
    most = max(PIECE_BYTES // isz, -(-d // P))
    if most * isz >= BIG_PIECES:
        most = SEG_BYTES // isz
    return pieces_layout(d, most, P) if most * isz <= MAX_PIECE_BYTES else None


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
    lag = (min(1, k.bufs - 1), min(2, k.bufs - 1), max(min(2, k.bufs - 1), min(3, k.bufs - 2)))
    if k.lag is not None:
        lag = k.lag
    stages = (k.second, k.third, k.fourth)
    if not k.spread_first:
        k.spread()  # the engines have nothing else to do until the first block is loaded
    for n in range(len(blocks) + max(lag)):
        if n < len(blocks):
            k.first(n, *blocks[n])
        if n == k.spread_at and k.spread_first:  # its loads behind the first block's
            # (`_lower_pieces`; or block `spread_at`'s)
            k.spread()
        if n == 0:  # block 0's stage 2 at once: nothing else waits on the engines yet
            k.second(0, *blocks[0])
        for stage, late in zip(stages, lag):
            m = n - late
            if 0 <= m < len(blocks) and not (stage == k.second and m == 0):
                stage(m, *blocks[m])


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
    return Scheduled(k.b, k.cfg, shared_dma=True, dma_parts=k.dma_parts)


def norm_rows(cfg: ChipConfig, tx, to, affine_bytes: int) -> bool:
    """Whether rows of x fit the row kernel: one row a partition, its output, the spread weight
    and bias and ScalarE's scratch within SBUF_SHARE of a partition."""
    d = tx.shape[-1] if tx.shape else 1
    need = d * (2 * tx.dtype.itemsize + to.dtype.itemsize + affine_bytes)
    return need <= cfg.core.sbuf.partition_bytes * SBUF_SHARE


class _Norm:
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
        self.long_row = LONG_ROW
        self.small_waits = True  # the plan costs its [p, per] steps as waiting on a semaphore
        self.small_after = True  # ... and as reading what the step before wrote (VectorE's
        # commit latency; the list schedule may put another block's work between them)
        self.pe_pieces = False  # TensorE may add the bias of rows in pieces (not in segments)
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
        self.psum_combine = False  # ... the row's mean and variance read from PSUM (`combine`)
        self.psum_cols: dict = {}  # (key, buffer) -> its PSUM tile (`psum_col`)
        self.piece_bufs = BUFS  # buffers of rows in pieces
        self.piece_big = False  # ... loaded as BIG_PIECES are
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
        self.seg_affine = False  # rows in segments: their weight and bias so, behind the first
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
        """Lane's columns of x's rows: its own, or, a segment of a row in pieces (columns [s f,
        (s + 1) f) of each partition), the row's [s 128 f, (s + 1) 128 f)."""
        if self.pieces and self.pieces.t > 1:
            return lane.lo * self.P, lane.hi * self.P
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
        t = self.tile(f"st{self.c}.{self.width}.", n, (self.P, self.tper, max(1, self.width)))
        return ap(t, slice(0, p), slice(0, self.per) if j is None else j, slice(*cols))

    def agg(self, n: int, p: int, k: int, j=None):
        """Block n's mean (k = 0) or variance (k = 1): [p, per], or slot j's [p, 1]."""
        t = self.tile("ag", n, (self.P, self.tper, 2))
        if j is None:
            return ap(t, slice(0, p), slice(0, self.per), k)
        return ap(t, slice(0, p), j, slice(k, k + 1))

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
        self.at(n)
        b, p = self.b, self.parts(rows)
        full = tuple(index) + (slice(None),) * (len(b.tensors[self.x].shape) - 1 - len(index))
        for i, lane in enumerate(self.lanes):
            xa = self.lane_tile("x", n, i, p)
            src = (
                ap(self.x, *index)
                if len(self.lanes) == 1
                else ap(self.x, *full, slice(*self.xcols(lane)))
            )
            b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=self.loads[len(self.lanes) * n + i])
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
        if self.c:
            self.scalar_stats(n, p)

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
        sa = self.tile(f"sa{len(pieces)}.", n, (self.P, self.tper, 2 * len(pieces)))
        for q, (i, lo, hi) in enumerate(pieces):
            jk = ap(junk.name, slice(0, p), slice(0, hi - lo))
            for j in range(self.per):
                xs = self.lane_tile("x", n, i, p, j, (lo, hi))
                if not self.layer:
                    ss = self.col(f"ss{q}.", n, p, j)
                    b.emit(Activation, [xs], [jk, ss], func="square", src=xs, dst=jk,
                           scale=1 / math.sqrt(self.d), reduce="add", reduce_dst=ss)  # fmt: skip
                    continue
                m = ap(sa, slice(0, p), j, slice(2 * q, 2 * q + 1))
                if self.folded:  # x - x0 in place, and its sum S
                    nx = self.col("nx", n, p, j)
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
                m = ap(sa, slice(0, p), j, slice(2 * q, 2 * q + 1))
                m2 = ap(sa, slice(0, p), j, slice(2 * q + 1, 2 * q + 2))
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
        first = ap(self.lane_tile("x", n, 0, p).name, slice(0, p), slice(None), 0)
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
        self.at(n)
        b, p, c = self.b, self.parts(rows), self.c
        if self.one_triple:  # mean = S / n, var = n^2 M2 / n^3 (no triple, no bn_aggr)
            sa = self.tile("sa1.", n, (self.P, self.per, 2))
            for u, f in ((0, 1.0 / c), (1, 1.0 / c**3)):
                src = ap(sa, slice(0, p), slice(None), u)
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
                b.emit(TensorCopy, [src], [st], src=src, dst=st)
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
            self.alu(d, d, ("multiply", d), ("add", var))
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
            self.psum_cols[slot] = self.b.psum(f"n{key}", (self.P, self.per), self.f32)
        return ap(self.psum_cols[slot], slice(0, p), slice(None))

    # -- stage 3: weight and bias, store -------------------------------------------------------

    def third(self, n: int, index: tuple, rows: int, only=None) -> None:
        """Each lane's (or lane `only`'s) weight and (on VectorE or GpSimd) bias, in place; the
        lanes without TensorE's bias stored."""
        self.at(n)
        b, p = self.b, self.parts(rows)
        if self.out_pieces:
            self._third_pieces(n, index, p)
            return
        for i, lane in enumerate(self.lanes):
            if only is not None and i != only:
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

    def _third_pieces(self, n: int, index: tuple, p: int) -> None:
        """`third` of a pipelined norm: each output piece weighted out of x's row slot, biased
        (not by TensorE) and stored in turn; each pass on VectorE or GpSimd as the list
        schedule finds either free (`flex`)."""
        b = self.b
        for i, lane in enumerate(self.lanes):
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
                    ops = [(TensorTensor, [src, t], [o], dict(alu=alu, src0=src, src1=t,
                                                              dst=o, engine=x))
                           for x in es]  # fmt: skip
                    b.emit(*ops[0][:3], **ops[0][3], **self.others(ops))
                    src = o
                if not self.pe_lane(lane):
                    self.store_unit(n, index, p, i, j, g, lo, hi, o)

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
        self.at(n)
        p = self.parts(rows)
        for i, lane in enumerate(self.lanes):
            if self.out_pieces and self.pe_lane(lane):
                for j, g, lo, hi in self.units(i):
                    o, f = (self.piece(k, n, i, j, lo, hi, p, g) for k in "pf")
                    if self.pslots == 1:
                        self.pe.add(o, f, lane.lo + lo, hi - lo, p, self.pe_span)
                    else:  # a bank a row slot, one copy out
                        os_ = [ap(o.name, slice(0, p), u, slice(0, hi - lo)) for u in range(g)]
                        self.pe.add_group(os_, f, lane.lo + lo, hi - lo, p, self.pe_span)
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
                for j in range(self.per):
                    self.pe.add(self.lane_tile("o", n, i, p, j), self.lane_tile("f", n, i, p, j),
                                lane.lo, lane.hi - lane.lo, p, self.pe_span)  # fmt: skip
                self.store(n, index, p, i, self.lane_tile("f", n, i, p))

    def pe_lane(self, lane: Lane) -> bool:
        """Whether TensorE adds lane's bias."""
        return self.bias is not None and lane.bias == S

    def store(self, n: int, index: tuple, p: int, i: int, o) -> None:
        """Lane i's output of block n to out."""
        b, lane = self.b, self.lanes[i]
        full = tuple(index) + (slice(None),) * (len(b.tensors[self.x].shape) - 1 - len(index))
        dst = (
            ap(self.out, *index)
            if len(self.lanes) == 1
            else ap(self.out, *full, slice(*self.xcols(lane)))
        )
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=self.stores[len(self.lanes) * n + i])

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

    def alu(self, dst, src, *ops) -> None:
        """dst = src op0 x0 op1 x1 ... on VectorE, each x a number or a [p, per] operand: in
        `tensor_scalar`s of up to two ops (an operand as its per-partition column when a
        partition holds one row), else a `tensor_tensor` for each operand."""
        b, pending = self.b, []

        def flush(a):
            fields = {}
            for i, (op, x) in enumerate(pending):
                fields |= {f"op{i}": op, f"operand{i}": x}
            reads = [a] + [x for _, x in pending if not isinstance(x, float)]
            b.emit(TensorScalar, reads, [dst], src=a, dst=dst, **fields)
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
            b.emit(TensorTensor, [a, x], [dst], alu=op, src0=a, src1=x, dst=dst)
            a = dst
        if pending:
            flush(a)
