"""fp32 layer_norm over rows that fit a partition, a row a partition (`norms.STT_FIT`, offered
to `norms._variant` for rows of MIN_ROW or more and taken where its estimate ends sooner):
three passes over most columns instead of `NormStages`' four or five, in column parts that
start and end early.

A block is [p, D] (up to 128 rows); its columns go in parts of about PART_COLS (the last
`kept_cols`, whose weight and bias stay in PSUM, in parts of about PSUM_COLS), each a tile of
its own, loaded and stored on its own (a part's passes and store wait for it alone, so stores
start while the block's last parts are still being computed):

1. load the parts; ScalarE takes the statistics, two passes a part: s = x0 - x in place (an
   `activation`, scale -1 and the row's first element x0, copied aside, as its bias: exact
   where x is near x0, so a row of mean 10^4 and spread 1 keeps 7 digits) with its sum, then
   the sum of (s - a0)^2, a0 the first part's mean of s (`_Stt.shift`);
2. VectorE adds the parts' sums (one `tensor_reduce`); a = sum(s) / D = x0 - mean and
   q = sum((s - a0)^2) / D, var = q - (a - a0)^2, rstd = (var + eps)^-0.5: [p, 1] steps on
   VectorE or GpSimd. a - a0 is the first part's mean of x less the row's: the shifted
   variance cancels only where that difference is many standard deviations, not where x0 is
   (with q about x0, a first element 1000 standard deviations out, as an LLM's massive
   activation channel, gave errors of 0.048);
3. each part: (a - s) * w = (x - mean) * w, then (. * rstd) + b: two `scalar_tensor_tensor`s
   (2N cycles an element on VectorE or GpSimd); or, where the weight and bias are in PSUM,
   (a - s) * rstd on ScalarE or GpSimd, then VectorE's `tensor_tensor`s with the weight and
   the bias out of PSUM (N cycles an element each, not 2N); store.

A 2-D x's last block of a core, t rows fewer than 128 (at the cut of the chip's default LNC,
`tail_segs.ranges`, at any LNC: the same rows so, the same values at LNC 1 and 2), may go in
blocks of g rows in k segments a row (`_tails`: where that costs less by the estimate of their
loads and their weight's spread; `segments`: segment s, columns [s D/k, (s+1) D/k), on partitions
[s g, (s+1) g)): its loads and stores on all the DMA engines, not on t / 8 of them, and 1/k of a
block's passes (25 rows of 5120 cost a whole block's on 4 of 16 engines; in 5 segments, 125
partitions); each row's sums added over its partitions by a TensorE matmul (`pairs`), its
weight and bias segments spread by a K = k selector once the other blocks' statistics are taken
(`spread_tails`); the weight and bias keep SPREAD_BANKS banks fewer in PSUM for those.

Each of those instructions goes on the engine a list schedule finds free sooner, with a
descent of SEARCH schedules over the choices (`schedule.Scheduled`). The weight and bias are
spread over the partitions once (`spread`: TensorE's ones row times them, through the banks
their PSUM columns then take). Blocks rotate through as many buffers as SHARE of SBUF holds
(a core's rows at LNC 2 for the widths this plan is for), in x's order (with the smallest, the
last, first instead: rows of 6144 57.0 -> 57.9 us, 4544 54.9 -> 55.5, 3072 55.4 -> 54.0, 5120
60.6 -> 60.0)."""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import (
    Activation,
    DmaCopy,
    Matmul,
    Memset,
    ScalarTensorTensor,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_tiles
from trnsim.kernels.queues import Queues
from trnsim.kernels.row_plan import G, S, V, bank_runs, runs
from trnsim.kernels.schedule import Scheduled
from trnsim.kernels.tail_segs import pairs, ranges, selector

__all__ = ["lower_stt", "stt_fits"]

PART_COLS = 1024  # a part's columns, about (rows of 5120: three parts and one in PSUM; parts
# of 512 and 768 ran slower, trn2 LNC 2, 16 MiB: 63.6, 60.9 us against 60.0)
PSUM_COLS = 1536  # ... and of the parts whose weight and bias are in PSUM (rows of 5120 and
# 6144: 512, 63.3 and 60.4 us; 768, 60.9 and 59.6; 1536, 60.0 and 57.9)
SHARE = 0.6  # what the blocks' buffers, the spread weight and bias and the scratch may take
SPREAD_BANKS = 2  # PSUM banks the weight and bias are spread through where none are kept
SEARCH = 300  # the descent's schedules (none: rows of 5120 65.0 us, 6144 67.9)
NORM_ON = (S, G)  # the engines of a PSUM part's normalisation (the first as emitted)
FLEX_ON = (V, G)  # ... of the scalar_tensor_tensors and the [p, 1] steps
COPY_ON = (V,)  # ... of the spread's copies out of PSUM (ScalarE too: 63.3 -> 64.7 us)
COPY_BANKS = 2  # ... each of this many PSUM banks (rows of 5120: one 60.6 us, two 59.0, four
# 59.6)
SMALL_TILES = 6  # a block's statistics' tiles (`_Stt.small`: st, x0, c0, m, r, sb)
SMALL_ROOM = 2048  # bytes a partition left to the small tiles (`_Stt.small`, a few words each a
# buffer) and the rest
SEMS_KEPT = 32  # semaphores left to the rest (the spread's tiles, the junk tile, other ops):
# rows of 1024 at LNC 1, 16 MiB, took 29 buffers and 309 semaphores of a core's 256
SPLIT_TAIL = True  # a core's last rows, fewer than 128, in segments (`_Stt.segments`): trn2
# LNC 2, 16 MiB, fp32 rows of 5120 (two partitions a row) 59.0 -> 57.4 us, 4544 55.1 -> 52.8;
# 409 rows a core (`rows.EVEN_LAYER_FP32`), 25 in 5 segments and 26 in 4, 56.9 -> 53.4 (rows of
# 4544 and 6144 cut so, their tails of 77 and 85 rows whole: in segments of 2 and 8, 59.8 us,
# of 2 and 6, 71.7: their weights' spread, TensorE's fp32 matmuls, now in `_tails`' estimate)
SEGS_MOST = 8  # a tail row's segments at most (each on a DMA queue of its own)
SEG_COLS = 512  # ... and a segment's columns at least
TAIL_NS = 1000  # ASSUMED: what a tail block costs beyond its load (`_tails`' estimate)
LAG = 2  # a block's second passes (the squares) trail its first ones by this many parts, at most
# its parts less one, so the shift (`_Stt.shift`) waits for no pass on ScalarE: trn2 LNC 2, 16
# MiB, fp32 rows of 5120 60.0 -> 59.5 us, 6144 58.0 -> 57.6, 4544 54.7 -> 54.5 (3: 59.1, 56.7,
# 54.5; 4: 60.3, 56.5, 55.9; rows of 2560 and 3072, two parts, as before)
MIN_ROW = 2048  # rows this long or longer (from 1024, a row a partition: `norms.LAYER_ROW_BYTES`
# fp32; shorter rows run faster in NormStages since the shift, `_Stt.shift`: trn2 LNC 2, 16 MiB,
# rows of 1024 54.5 us against 52.6, 1600 58.2 against 57.0)


def stt_fits(cfg: ChipConfig, tx, to, weight, bias) -> bool:
    """Whether this plan applies: fp32 x, out, weight and bias, rows of MIN_ROW or more whose
    buffer, the spread weight and bias and a part's scratch fit SHARE of a partition."""
    d = tx.shape[-1] if tx.shape else 1
    fp32 = all(t.dtype.name == "float32" for t in (tx, to, weight, bias) if t is not None)
    room = int(cfg.core.sbuf.partition_bytes * SHARE) - 2 * d * 4 - PART_COLS * 8
    return fp32 and weight is not None and bias is not None and d >= MIN_ROW and room >= 2 * d * 4


def _cuts(d: int, most: int | None = None) -> list[int]:
    """The parts' column bounds over [0, d): parts of about `most` columns, as even as whole
    (even) columns allow."""
    n = max(1, round(d / (most or PART_COLS)))
    return [2 * round(d / 2 * i / n) for i in range(n)] + [d]


def kept_cols(cfg: ChipConfig, d: int, spare: bool = False) -> int:
    """The last columns of the weight and bias kept in PSUM for VectorE: whole banks, half of
    PSUM each (SPREAD_BANKS fewer where tails spread theirs, `spare`), leaving PART_COLS or
    more in SBUF (their scalar_tensor_tensors on GpSimd share the work)."""
    p = cfg.core.psum
    step = p.bank_bytes // 4
    cols = (p.banks - (SPREAD_BANKS if spare else 0)) // 2 * step
    return min(cols, (d - PART_COLS) // step * step, cfg.core.vector.psum_max_free_elements)


def _tails(cfg: ChipConfig, t: int, d: int) -> list[tuple[int, int]]:
    """[(g, k)]: a block of t rows (fewer than 128) as blocks of g rows in k segments of d / k
    columns each (k = 1: whole rows), g * k partitions or fewer, those whose loads take the
    least time by their busiest DMA engine's bytes (its partitions', `dma.descriptors`), a
    transfer's setup and TAIL_NS a block: a block of 25 whole rows loads on 4 of 16 engines
    and costs the engines as much as 128 rows, in 5 segments of 1024 it loads on all 16 and
    costs a fifth."""
    P, dma = cfg.core.sbuf.partitions, cfg.core.dma
    ks = [1] + [k for k in range(2, SEGS_MOST + 1) if SPLIT_TAIL and d % k == 0
                and d // k % 2 == 0 and d // k >= SEG_COLS]  # fmt: skip

    pe, step = cfg.core.tensor, cfg.core.tensor.moving_free_max

    def ns(g: int, k: int) -> float:
        busiest = min(P // dma.engines, g * k) * d // k * 4
        # (in segments: the weight's and bias' spread, `_Stt.spread_tails`, a fp32 matmul a
        # bank of columns)
        spread = 2 * -(-d // k // step) * step / pe.fp32_rate / pe.clock_hz if k > 1 else 0
        return (busiest / dma.engine_bandwidth + dma.transfer_setup + spread) * 1e9 + TAIL_NS

    best: list[tuple[float, list]] = [(0.0, [])]  # best[m]: the blocks of the last m rows
    for m in range(1, t + 1):
        best.append(min((ns(g, k) + best[m - g][0], [(g, k)] + best[m - g][1])
                        for k in ks for g in [min(m, P // k)]))  # fmt: skip
    return best[t][1]


def _blocks(cfg: ChipConfig, tx, rows: tuple[int, int]) -> list[tuple]:
    """[(index, rows, k)]: the blocks of rows [lo, hi) (`layout.row_tiles`), a 2-D x's last
    block of fewer than 128 rows in blocks of rows in k segments each (`_tails`)."""
    P, d = cfg.core.sbuf.partitions, tx.shape[-1]
    out = []
    for index, n, _ in row_tiles(tx.shape, P, rows, 1, 1)[1]:
        if len(tx.shape) != 2 or n == P:
            out.append((index, n, 1))
            continue
        r = index[-1].start
        for g, k in _tails(cfg, n, d):
            out.append(((slice(r, r + g),), g, k))
            r += g
    return out


def lower_stt(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, weight: str, bias: str,
              eps: float, share: tuple[int, int]) -> float:  # fmt: skip
    """out = layer_norm(x, [D], weight, bias, eps) over rows [lo, hi) of `share` (module doc);
    the list schedule's estimated ns."""
    tx = b.tensors[x]
    every = [blk for r in ranges(b, cfg, tx, (0, math.prod(tx.shape[:-1])))
             for blk in _blocks(cfg, tx, r)]  # fmt: skip
    k = _Stt(b, cfg, x, out, weight, bias, eps, any(kk > 1 for _, _, kk in every))
    blocks = [blk for r in ranges(b, cfg, tx, share) for blk in _blocks(cfg, tx, r)]
    if not blocks:
        return 0.0
    k.segs = {n: (rows, kk) for n, (_, rows, kk) in enumerate(blocks) if kk > 1}
    k.place()
    room = int(cfg.core.sbuf.partition_bytes * SHARE) - 2 * k.d * 4 - PART_COLS * 8
    # (each buffer's tiles count on two semaphores each: a part's and SMALL_TILES' of them)
    sems = (cfg.core.semaphores - SEMS_KEPT) // (2 * (len(k.cuts) - 1 + SMALL_TILES))
    fit = (cfg.core.sbuf.partition_bytes - k.fixed_bytes() - SMALL_ROOM) // (k.d * 4)
    k.bufs = max(1, min(len(blocks), room // (k.d * 4), sems, fit))
    with Scheduled(b, cfg, shared_dma=True, fluid=True, dma_parts=True, search=SEARCH) as s:
        for n, block in enumerate(blocks[: k.bufs]):  # (a buffer each, ahead of the rest)
            k.load(n, *block[:2])
            if n == 0:
                k.spread()
        for n, block in enumerate(blocks):
            if n == min(k.segs, default=-1):  # (their weight and bias late: ScalarE, the
                # other blocks' statistics taken, copies them out; with the weight's: fp32
                # rows of 5120 53.4 -> 54.4 us)
                k.spread_tails()
            k.stats(n, *block[:2])
            k.rstd(n, *block[:2])
            k.output(n, *block[:2])
            if n + k.bufs < len(blocks):  # (into this block's buffer, once it is stored)
                k.load(n + k.bufs, *blocks[n + k.bufs][:2])
    k.done()
    return s.makespan


class _Stt:
    """One layer_norm's tiles and its stages per block (module doc)."""

    def __init__(self, b, cfg, x, out, weight, bias, eps, spare):
        self.b, self.cfg, self.x, self.out, self.eps = b, cfg, x, out, eps
        self.weight, self.bias = weight, bias
        self.P, self.f32 = cfg.core.sbuf.partitions, dtype("float32")
        self.d, self.nd = b.tensors[x].shape[-1], len(b.tensors[x].shape)
        self.kept = kept_cols(cfg, self.d, spare)
        lo = self.d - self.kept
        self.segs: dict[int, tuple[int, int]] = {}  # tail block n: (its rows g, segments k)
        self.cuts = _cuts(lo) + ([lo + c for c in _cuts(self.kept, PSUM_COLS)[1:]]
                                 if self.kept else [])  # fmt: skip
        self.most = max(len(self.cuts), len(_cuts(self.d // 2))) - 1  # (a block's parts)
        widest = max(hi - lo for lo, hi in zip(self.cuts, self.cuts[1:]))
        q, qs = dma_queues(cfg, widest * 4), Queues(cfg)
        self.loads, self.stores = qs.loads().take(q), qs.stores().take(q)
        self.seg_loads, self.seg_stores = qs.loads(), qs.stores()  # (a tail's segment each)
        self.bufs, self.w, self.b_, self.ps, self.pm = 1, None, None, [], None
        self.tails: dict[tuple[int, int], tuple] = {}  # (g, k): weight, bias and pair tiles
        self.loaded: set[tuple[int, str]] = set()  # (k, weight or bias) in `wb` (`place`)
        self.junk = b.scratch_tile("lnstt.junk", "junk", (self.P, widest), self.f32)

    def spread(self) -> None:
        """The weight and bias on every partition: each loaded into one partition (of the
        `wb` tile, `place`), times a ones row on TensorE (K = 1) into PSUM a bank at a time,
        the first columns first (the first block's first passes need them); the SBUF columns
        ([P, D - kept] tiles `w`, `b_`) copied out (by VectorE: idle until the first block's
        statistics are taken, ScalarE takes them), the kept columns left in their PSUM tiles
        (`ps`)."""
        b, P, f32, q = self.b, self.P, self.f32, self.q
        step = min(self.cfg.core.tensor.moving_free_max, self.cfg.core.psum.bank_bytes // 4)
        queues = Queues(self.cfg).loads(1 / 2, 1)
        for i, v in enumerate((self.weight, self.bias)):
            src, dst = ap(v), ap(self.wb, slice(i * q, i * q + 1))
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=queues[i])
        lo = self.d - self.kept
        self.w, self.b_ = tiles = [
            b.scratch_tile(f"lnstt.rows.{v}", f"{v}_rows", (P, lo), f32)
            for v in (self.weight, self.bias)
        ]
        one = b.scratch_tile("lnstt.ones", "ones", (q + 1, P), f32)
        b.emit(Memset, [], [ap(one)], dst=ap(one), value=1.0, engine=V)
        ones = [ap(one, slice(i * q, i * q + 1)) for i in range(2)]
        self.ps = [b.psum(f"{v}_kept", (P, self.kept), f32) for v in (self.weight, self.bias)
                   ] if self.kept else []  # fmt: skip
        span = COPY_BANKS if self.kept >= COPY_BANKS * step else 1
        if self.kept:  # (through the kept tiles' banks in turn, `span` at a time, the kept
            # columns last)
            ps = [ap(t, slice(None), slice(a, a + span * step))
                  for a in range(0, self.kept - span * step + 1, span * step)
                  for t in self.ps]  # fmt: skip
            new = []
        else:
            new = [b.psum("spread", (P, step), f32) for _ in range(SPREAD_BANKS)]
            ps = [ap(t, slice(None), slice(0, step)) for t in new]
        turn = 0
        for a, z in runs(lo, span * step):
            for i, t in enumerate(tiles):
                bank = ps[turn % len(ps)]
                turn += 1
                first = bank.index[1][0]
                for c0 in range(a, z, step):  # (a matmul a bank)
                    c1 = min(z, c0 + step)
                    acc = ap(bank.name, slice(None), slice(first + c0 - a, first + c1 - a))
                    mv = ap(self.wb, slice(i * q, i * q + 1), slice(c0, c1))
                    b.emit(Matmul, [ones[i], mv], [acc], stationary=ones[i], moving=mv,
                           dst=acc)  # fmt: skip
                acc = ap(bank.name, slice(None), slice(first, first + z - a))
                o = ap(t, slice(None), slice(a, z))
                act = (Activation, [acc], [o], dict(func="copy", src=acc, dst=o))
                ops = [act if e == S else (TensorCopy, [acc], [o], dict(src=acc, dst=o, engine=e))
                       for e in COPY_ON]  # fmt: skip
                b.emit(*ops[0][:3], choices=ops[1:], **ops[0][3])
        for a, z in bank_runs(self.kept, step):
            for i, t in enumerate(self.ps):
                acc = ap(t, slice(None), slice(a, z))
                mv = ap(self.wb, slice(i * q, i * q + 1), slice(lo + a, lo + z))
                b.emit(Matmul, [ones[i], mv], [acc], stationary=ones[i], moving=mv, dst=acc)
        b.release(*new)

    def place(self) -> None:
        """The `wb` tile ([P, D]): the weight's row on partition 0, the bias' on q (matmul
        operands start at multiples of q, `core.partition_start_steps`), and for each tail's
        k the weight as [k, D / k] on partitions [2q, 2q + k), the bias on [3q, 3q + k), after
        the other k's columns (`at`: k -> (the tile, its first column); in a tile of their
        own past D)."""
        self.q = self.cfg.core.partition_start_steps[0]
        self.wb = self.b.scratch_tile("lnstt.wb", "wb", (self.P, self.d), self.f32)
        self.at, c = {}, 0
        for k in dict.fromkeys(k for _, k in self.segs.values()):
            w = self.d // k
            if c + w <= self.d:
                self.at[k], c = (self.wb, c), c + w
            else:
                self.at[k] = (self.b.scratch_tile(f"lnstt.segs{k}", "segs", (self.P, w),
                                                  self.f32), 0)  # fmt: skip

    def fixed_bytes(self) -> int:
        """The bytes a partition of the tiles besides the blocks' buffers (`lower_stt` fits
        those in the rest): the weight's and bias' spread tiles and `wb`, the junk tile, the
        ones, the tails' weight and bias, selectors and pairs, segments past `wb`."""
        d, P = self.d, self.P
        widest = max(hi - lo for lo, hi in zip(self.cuts, self.cuts[1:]))
        tails = sum(8 * d // k + 8 * P for _, k in set(self.segs.values()))
        own = sum(4 * d // k for k, (t, _) in self.at.items() if t != self.wb)
        return 4 * (2 * (d - self.kept) + d + widest + 2 * P) + tails + own

    def spread_tails(self) -> None:
        """Each tail's (g rows in k segments, `segs`) weight and bias ([P, D / k] tiles):
        columns [s D / k, (s + 1) D / k) on partitions [s g, (s + 1) g) (`segments`): TensorE's
        K = k selector (`selector`) times the weight as [k, D / k] (loaded so, one transfer,
        once for every tail of k segments) into PSUM through SPREAD_BANKS spare banks, copied
        out by VectorE or ScalarE; and its pair matrix (`pairs`). (As k one-hot rows times
        the weight's row, K = 1, accumulated: TensorE's time k times, fp32 rows of 5120 56.9
        -> 62.7 us)"""
        b, P, f32 = self.b, self.P, self.f32
        step = min(self.cfg.core.tensor.moving_free_max, self.cfg.core.psum.bank_bytes // 4)
        queues = Queues(self.cfg).loads(1 / 2, 1)
        ps = [b.psum("tail", (P, step), f32) for _ in range(SPREAD_BANKS)]
        turn = 0
        for g, k in dict.fromkeys(self.segs.values()):
            w, sel0 = self.d // k, self.selector(g, k)
            tiles = []
            t0, c0 = self.at[k]
            for i, v in enumerate((self.weight, self.bias)):
                p0 = (2 + i) * self.q
                row = ap(t0, slice(p0, p0 + k), slice(c0, c0 + w))
                if (k, v) not in self.loaded:  # (loaded once a k)
                    self.loaded.add((k, v))
                    b.emit(DmaCopy, [ap(v)], [row], src=ap(v), dst=row, queue=queues[i])
                t = b.scratch_tile(f"lnstt.tail{g}.{k}.{v}", f"{v}_tail", (P, w), f32)
                tiles.append(t)
                for a, z in runs(w, step):
                    acc = ap(ps[turn % len(ps)], slice(None), slice(0, z - a))
                    turn += 1
                    mv = ap(t0, slice(p0, p0 + k), slice(c0 + a, c0 + z))
                    o = ap(t, slice(None), slice(a, z))
                    sel = ap(sel0, slice(p0, p0 + k))
                    b.emit(Matmul, [sel, mv], [acc], stationary=sel, moving=mv, dst=acc)
                    cp = (TensorCopy, [acc], [o], dict(src=acc, dst=o, engine=V))
                    b.emit(Activation, [acc], [o], choices=[cp], func="copy", src=acc, dst=o)
            self.tails[(g, k)] = (*tiles, self.pairs(g, k))
        b.release(*ps)
        self.pm = b.psum("pairs", (P, 2), f32)  # (the pair sums: in a bank the spread left)

    def selector(self, g: int, k: int) -> str:
        """`tail_segs.selector` on the weight's and bias' segments' partitions (`place`)."""
        return selector(self.b, f"lnstt.sel{g}.{k}", self.P, g, k,
                        (2 * self.q, 3 * self.q), self.f32)  # fmt: skip

    def pairs(self, g: int, k: int) -> str:
        """`tail_segs.pairs` of a tail of g rows in k segments."""
        return pairs(self.b, self.P, g, k)

    def tail(self, n: int) -> tuple:
        """Tail block n's (weight, bias, pairs) tiles (`spread_tails`)."""
        return self.tails[self.segs[n]]

    def width(self, n: int) -> int:
        """Block n's partitions' columns: D, or a tail's segment's D / k."""
        return self.d // self.segs[n][1] if n in self.segs else self.d

    def bounds(self, n: int) -> list[int]:
        """Block n's parts' column bounds (a tail's: over its segment, [0, D / k), in the
        fewest even parts that fit its buffer's part tiles, `part`)."""
        if n not in self.segs:
            return self.cuts
        w, room = self.width(n), [hi - lo for lo, hi in zip(self.cuts, self.cuts[1:])]
        for m in range(1, len(room) + 1):
            cuts = [2 * round(w / 2 * i / m) for i in range(m)] + [w]
            if all(hi - lo <= r for lo, hi, r in zip(cuts, cuts[1:], room)):
                return cuts
        raise AssertionError(f"a tail's segment of {w} columns in parts of {room}")

    def segments(self, n: int, rows: int, lo: int, hi: int) -> list[tuple]:
        """Block n's part [lo, hi) as (partitions [p0, p1), the block's rows [r0, r1), x's
        columns [c0, c1)) runs: a tail's rows (g of them, in k segments) go k partitions
        each, segment s, columns [s w, (s + 1) w) (w = D / k), on partitions [s g, (s + 1) g)."""
        if n not in self.segs:
            return [(0, rows, 0, rows, lo, hi)]
        g, k = self.segs[n]
        w = self.d // k
        return [(s * g, (s + 1) * g, 0, g, s * w + lo, s * w + hi) for s in range(k)]

    def xap(self, name: str, n: int, index: tuple, r0: int, r1: int, c0: int, c1: int):
        """x's (or out's) rows [r0, r1) of block n (`index`) and columns [c0, c1)."""
        if n not in self.segs:
            return ap(name, *self.cols(index, c0, c1))
        first = index[-1].start  # (a tail: 2-D x)
        return ap(name, *index[:-1], slice(first + r0, first + r1), slice(c0, c1))

    def parts(self, n: int) -> int:
        """Block n's parts."""
        return len(self.bounds(n)) - 1

    def partitions(self, n: int, rows: int) -> int:
        """Block n's partitions (a tail's: its rows times its segments)."""
        return rows * self.segs[n][1] if n in self.segs else rows

    def done(self) -> None:
        """The kept PSUM tiles released."""
        self.b.release(*self.ps, *([self.pm] if self.pm else []))

    def part(self, n: int, j: int, p: int) -> object:
        """Block n's part j ([p, its columns]: a tail's, the first columns of its buffer's)."""
        cuts, lo, hi = self.bounds(n), self.cuts[j], self.cuts[j + 1]
        t = self.b.scratch_tile(f"lnstt.x{n % self.bufs}.{j}", "x", (self.P, hi - lo),
                                self.f32)  # fmt: skip
        return ap(t, slice(0, p), slice(0, cuts[j + 1] - cuts[j]))

    def small(self, key: str, n: int, shape: tuple) -> str:
        """Block n's [P, *shape] fp32 tile `key` (the statistics' and their steps')."""
        return self.b.scratch_tile(f"lnstt.{key}{n % self.bufs}", key, (self.P, *shape),
                                   self.f32)  # fmt: skip

    def cols(self, index: tuple, lo: int, hi: int) -> tuple:
        """A block's `index` (x's leading dims, `layout.row_tiles`) and columns [lo, hi)."""
        return (*index, *[slice(None)] * (self.nd - 1 - len(index)), slice(lo, hi))

    def load(self, n: int, index: tuple, rows: int) -> None:
        """Block n's parts, a load a run (`segments`, a tail's segment each on a queue of its
        own: its own DMA engines); a tail's x0 on its other segments' partitions."""
        p, cuts = self.partitions(n, rows), self.bounds(n)
        for j in range(self.parts(n)):
            t = self.part(n, j, p).name
            for i, (p0, p1, r0, r1, c0, c1) in enumerate(
                    self.segments(n, rows, cuts[j], cuts[j + 1])):  # fmt: skip
                src = self.xap(self.x, n, index, r0, r1, c0, c1)
                dst = ap(t, slice(p0, p1), slice(0, c1 - c0))
                queue = self.seg_loads[i] if n in self.segs else self.loads.next()
                self.b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=queue)
                if n in self.segs and j == 0 and i > 0:
                    x0 = ap(self.small("x0", n, (1,)), slice(p0, p1))
                    src = self.xap(self.x, n, index, 0, rows, 0, 1)
                    self.b.emit(DmaCopy, [src], [x0], src=src, dst=x0, queue=queue)

    def stats(self, n: int, index: tuple, rows: int) -> None:
        """Stage 1: x0 copied aside; ScalarE's s = x0 - x in place with its sum, and the sum
        of (s - a0)^2, a part at a time, LAG parts behind (the shift a0 after the first part's
        sum, `shift`)."""
        b, p, cuts = self.b, self.partitions(n, rows), self.bounds(n)
        st = self.small("st", n, (2, self.most))
        x0t = self.small("x0", n, (1,))
        x0, x0a = ap(x0t, slice(0, p)), ap(x0t, slice(0, rows))  # (a tail's other
        # segments' partitions' x0: loaded, `load`)
        first = ap(self.part(n, 0, p).name, slice(0, rows), slice(0, 1))
        self.flex(TensorCopy, [first], [x0a], src=first, dst=x0a)
        c0t = self.small("c0", n, (1,))
        c0 = ap(c0t, slice(0, p))
        m = self.parts(n)
        lag = max(1, min(LAG, m - 1))
        for j in range(m + lag):
            if j < m:
                xj = self.part(n, j, p)
                s1 = ap(st, slice(0, p), 0, slice(j, j + 1))
                b.emit(Activation, [xj, x0], [xj, s1], func="identity", src=xj, dst=xj,
                       scale=-1.0, bias=x0, reduce="add", reduce_dst=s1)  # fmt: skip
            if j == lag - 1:
                s10 = ap(st, slice(0, rows), 0, slice(0, 1))
                self.shift(n, rows, p, s10, cuts[1] - cuts[0], c0t)
            i = j - lag + 1
            if 0 <= i < m:
                xi, w = self.part(n, i, p), cuts[i + 1] - cuts[i]
                s2 = ap(st, slice(0, p), 1, slice(i, i + 1))
                junk = ap(self.junk, slice(0, p), slice(0, w))
                b.emit(Activation, [xi, c0], [junk, s2], func="square", src=xi, dst=junk,
                       bias=c0, reduce="add", reduce_dst=s2)  # fmt: skip

    def shift(self, n: int, rows: int, p: int, s10, w0: int, c0t: str) -> None:
        """c0 = -a0, a0 the row's first part's mean of s (x0 less that part's mean of x), on
        every partition of the row (a tail's other segments' ones by `pairs` from its first):
        the sum of squares is taken about a0, not about x0 (a row whose first element stood
        1000 standard deviations from its mean, as an LLM's massive activation channel, lost
        its variance to q - a^2 in fp32: --check failed, 0.048 off). On ScalarE, between its
        passes (no other queue's wait; on VectorE or GpSimd: trn2 LNC 2, 16 MiB, fp32 rows
        of 5120 59.2 us against 60.0 on ScalarE, 6144 58.8 against 58.0)."""
        b, c0, c0a = self.b, ap(c0t, slice(0, p)), ap(c0t, slice(0, rows))
        fields = dict(src=s10, dst=c0a, scale=-1.0 / w0)
        if n not in self.segs:
            b.emit(Activation, [s10], [c0a], func="copy", **fields)
            return
        # (the other segments' partitions 0 for `pairs`: a memset starts at partition 0, so
        # all of them, then the first ones' after it on the same engine)
        b.emit(Memset, [], [c0], dst=c0, value=0.0, engine=V)
        b.emit(TensorScalar, [s10], [c0a], src=s10, dst=c0a, op0="multiply",
               operand0=-1.0 / w0, engine=V)  # fmt: skip
        pm = ap(self.pm, slice(0, p), slice(0, 1))
        pairs = ap(self.tail(n)[2], slice(0, p), slice(0, p))
        b.emit(Matmul, [pairs, c0], [pm], stationary=pairs, moving=c0, dst=pm)
        b.emit(TensorCopy, [pm], [c0], src=pm, dst=c0, engine=V)

    def rstd(self, n: int, index: tuple, rows: int) -> None:
        """Stage 2: a = x0 - mean and rstd from the parts' sums (and for ScalarE's
        normalisation of the PSUM parts -rstd and a * rstd, its scale and bias)."""
        b, split = self.b, n in self.segs
        p = self.partitions(n, rows)
        st, m = self.small("st", n, (2, self.most)), self.small("m", n, (2,))
        r = self.small("r", n, (1,))
        sa = ap(st, slice(0, p), slice(None), slice(0, self.parts(n)))
        ma, ra = ap(m, slice(0, p)), ap(r, slice(0, p))
        b.emit(TensorReduce, [sa], [ma], alu="add", src=sa, dst=ma, engine=V)
        if split:  # each row's partitions' sums added on TensorE (`pairs`)
            pm = ap(self.pm, slice(0, p), slice(0, 2))
            pairs = ap(self.tail(n)[2], slice(0, p), slice(0, p))
            b.emit(Matmul, [pairs, ma], [pm], stationary=pairs, moving=ma, dst=pm)
            b.emit(TensorScalar, [pm], [ma], src=pm, dst=ma, op0="multiply",
                   operand0=1 / self.d, engine=V)  # fmt: skip
        else:
            self.flex(TensorScalar, [ma], [ma], src=ma, dst=ma, op0="multiply",
                      operand0=1 / self.d)  # fmt: skip
        a, q = ap(m, slice(0, p), slice(0, 1)), ap(m, slice(0, p), slice(1, 2))
        c0 = ap(self.small("c0", n, (1,)), slice(0, p))  # var = q - (a - a0)^2 (`shift`)
        self.flex(TensorScalar, [a, c0], [ra], src=a, dst=ra, op0="add", operand0=c0)
        self.flex(ScalarTensorTensor, [ra, q], [ra], data=ra, op0="multiply", operand0=ra,
                  op1="subtract", operand1=q, reverse1=True, dst=ra)  # fmt: skip
        self.flex(TensorScalar, [ra], [ra], src=ra, dst=ra, op0="add", operand0=self.eps,
                  op1="pow", operand1=-0.5)  # fmt: skip
        if self.kept and not split:  # ((a - s) * rstd = s * -rstd + a * rstd)
            sb = self.small("sb", n, (2,))
            nr, ar = ap(sb, slice(0, p), slice(0, 1)), ap(sb, slice(0, p), slice(1, 2))
            self.flex(TensorScalar, [ra], [nr], src=ra, dst=nr, op0="multiply", operand0=-1.0)
            self.flex(TensorScalar, [a, ra], [ar], src=a, dst=ar, op0="multiply", operand0=ra)

    def output(self, n: int, index: tuple, rows: int) -> None:
        """Stage 3: each part's (a - s) * w, then (. * rstd) + b; or (a - s) * rstd, then the
        weight and the bias out of PSUM; its store."""
        b, split = self.b, n in self.segs
        p, cuts = self.partitions(n, rows), self.bounds(n)
        a = ap(self.small("m", n, (2,)), slice(0, p), slice(0, 1))
        r = ap(self.small("r", n, (1,)), slice(0, p))
        k = self.d - self.kept
        for j in range(self.parts(n)):
            lo, hi = cuts[j], cuts[j + 1]
            xj = self.part(n, j, p)
            if lo >= k and not split:  # (the weight and bias in PSUM)
                sb = self.small("sb", n, (2,))
                nr, ar = ap(sb, slice(0, p), slice(0, 1)), ap(sb, slice(0, p), slice(1, 2))
                ts = (TensorScalar, [xj, nr, ar], [xj], dict(src=xj, dst=xj, op0="multiply",
                                                             operand0=nr, op1="add",
                                                             operand1=ar))  # fmt: skip
                act = (Activation, [xj, nr, ar], [xj], dict(func="identity", src=xj, dst=xj,
                                                            scale=nr, bias=ar))  # fmt: skip
                ops = [act if e == S else (*ts[:3], ts[3] | {"engine": e}) for e in NORM_ON]
                b.emit(*ops[0][:3], choices=ops[1:], **ops[0][3])
                for t, alu in zip(self.ps, ("multiply", "add")):
                    v = ap(t, slice(0, p), slice(lo - k, hi - k))
                    b.emit(TensorTensor, [xj, v], [xj], alu=alu, src0=xj, src1=v, dst=xj,
                           engine=V)  # fmt: skip
            else:
                wt, bt = self.tail(n)[:2] if split else (self.w, self.b_)
                w, bj = (ap(v, slice(0, p), slice(lo, hi)) for v in (wt, bt))
                self.flex(ScalarTensorTensor, [xj, a, w], [xj], data=xj, op0="subtract",
                          operand0=a, reverse0=True, op1="multiply", operand1=w,
                          dst=xj)  # fmt: skip
                self.flex(ScalarTensorTensor, [xj, r, bj], [xj], data=xj, op0="multiply",
                          operand0=r, op1="add", operand1=bj, dst=xj)  # fmt: skip
            for i, (p0, p1, r0, r1, c0, c1) in enumerate(self.segments(n, rows, lo, hi)):
                src = ap(xj.name, slice(p0, p1), slice(0, hi - lo))
                dst = self.xap(self.out, n, index, r0, r1, c0, c1)
                queue = self.seg_stores[i] if split else self.stores.next()
                b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=queue)

    def flex(self, cls, reads: list, writes: list, **fields) -> None:
        """An instruction on any of FLEX_ON, the list schedule's choice."""
        first, *others = FLEX_ON
        ops = [(cls, reads, writes, fields | {"engine": e}) for e in others]
        self.b.emit(cls, reads, writes, choices=ops, engine=first, **fields)
