"""bf16 `layer_norm` over even rows of 2^18 to 2^20 (`MIN_D`, `MAX_D`): a row over all 128
partitions, in parts (`_Long.np`; rows of 2^18 and 2^19: 2, of 10^6: 4) that are loaded, computed
and stored on their own.

A row's part j is its contiguous columns [j 128 C, (j + 1) 128 C), laid as [128, C] (partition
p: C consecutive columns; C even), the weight and bias alike (loaded once a core and resident:
all its rows use them). Rows of 10^6 are padded (`npad`: 448 columns of 4 x 128 x 1954): the
last part's first rem columns on partition 0, the rest whole on partitions 1..127 (an engine's
access starts at partition 0, 32, 64 or 96: the pad is partition 0's end), the pad zeroed once a
buffer (y's and the output's pad columns 0, not stored), partition 0's bn_stats chunks beyond
rem emptied (count 0), its npad elements fewer weighed in the partitions' combination (`second`:
zeros counted and npad mean^2 taken off cancelled at a mean of 10^4). Each part is a tile of
its own, so a part's passes wait for its load alone and its store for its passes alone. Three
passes over the elements (`norm_fused`'s folding, out = rstd (y + std b), y = (x - mean) w),
the row statistics on TensorE and ScalarE:

1. load; VectorE's `bn_stats` over chunks of up to 512 columns (or ScalarE's mean and M2 of a
   part, `SCALAR_FIRST`, `SCALAR_PADDED`); `bn_aggr`: each partition's mean and variance;
   TensorE: the row mean as a [128, 128] fp32 stationary of parts C / D times the partition
   means (on every partition; padded, a second of -npad / D in row 0), then the variance as the
   same times the partitions' variances plus the squares of their means less the row's (Chan's
   formula: no E[x^2] - E[x]^2, so no cancellation at any mean); ScalarE the [p, 1] steps
   (rstd, std in two bf16 parts hi + lo), std's parts' diagonals on GpSimd or ScalarE;
2. y = (x - mean) w: one `scalar_tensor_tensor` a part (VectorE one cycle an element for bf16,
   a share VECTOR_Y of the parts; GpSimd two, the rest), or a PSUM bank's columns at a time (the
   core's first and last rows, `Y_SPLIT`);
3. per PSUM bank: the identity times y, diag(hi) times b and diag(lo) times b accumulated (y +
   std b, std b exact in fp32), copied out times rstd by ScalarE or VectorE into the part's
   output tile; store. Parts of 1792 columns or more: a share `DIRECT` of them have their y
   written in fp32 by VectorE straight into the bank (no identity matmul), and a third of the
   last row's parts (of each half of x) go without TensorE (`alone`: VectorE or GpSimd, y in
   fp32 then y rstd + b).

The stages go in a software pipeline (`LAGS`) and then in the list schedule's order
(`schedule.Scheduled`). trn2 LNC 2, 16 MiB, bf16 rows of 2^18: 67.8 -> 62.5 -> 61.1 us (70.4%
-> 76.4% -> 78.1% of the DMA bound), of 2^19: 66.6 -> 63.3 -> 59.4 us (73.9% -> 77.7% ->
82.8%; the norms' plans in pieces before), of 10^6: 72.1 -> 68.7 -> 64.1 -> 63.7 us (68.9% ->
72.2% -> 77.5% -> 77.9%; 125 pieces of 8000 before); 300000 72.0 -> 69.9, 400000 67.3 -> 66.0,
700000 69.8 -> 66.8 -> 66.2. A core's engines are all busy 45-51 us at these widths (rows of
2^18: VectorE 50, bn_stats 38 of them; GpSimd 51; TensorE 49; ScalarE 48), the DMA bound
48-50 us; what is left is fill (GpSimd waits 6 us for the first row's mean) and drain (the last
row's passes after its statistics). A row's values depend on its own elements only, in the
same instructions whichever core takes it (ScalarE's statistics, the direct and alone parts by
the row's index in x): the same at LNC 1 and 2.
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
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
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues
from trnsim.kernels.row_plan import G, S, V
from trnsim.kernels.rows import even_share
from trnsim.kernels.schedule import Scheduled

__all__ = ["long_rows", "lower_norm_long"]

PART_COLS = 2048  # a part's columns a partition at most, and parts at least MIN_PARTS (`_Long.np`:
# trn2 LNC 2, 16 MiB, bf16 rows of 2^19 in 4 parts of 1024: 64.3 us, in 2: 63.3; rows of 10^6 in
# 2 parts: 75.2, 3: 70.5, 4 (1954 columns): 68.1, 5: 71.4; rows of 700000 in 3: 69.8, 4: 67.2)
MIN_PARTS = 2
MIN_D = 1 << 18  # the row lengths that go here: from MIN_D (trn2 LNC 2, 16 MiB, bf16, this plan
# against the others': 2^18 61.1 us against 67.8, 300000 69.9 against 71.8, 400000 66.0 against
# 73.8, 2^19 59.4 against 66.6, 700000 66.2 against 72.6, 10^6 63.7 against 72.1) ...
MAX_D = 1 << 20  # ... to below MAX_D (2^20 in 2 parts of 4096: 77.1 us, its segments 59.8)
X_BUFS = 8  # parts of x in flight (and padded ones in PAD_BUFS more)
PAD_BUFS = 2
Y_BUFS = 4  # ... of y
O_BUFS = 6  # ... of the output
OUT_BANKS = 6  # PSUM banks of the output's accumulations, in turn (each copied out on its own:
# two banks a copy, 3 tiles, bf16 rows of 2^18 66.4 -> 69.6 us, before the pipeline's `LAGS`)
STAT_BUFS = 4  # rows' statistics tiles in turn
LOAD_QUEUES = 1  # x's, the weight's and the bias' loads on this many queues, in turn (each in
# order: the first row's parts and the weight's come first, not shared with later ones)
STORE_QUEUES = 2  # ... the stores
SCALAR_FIRST = 1  # ScalarE takes the statistics of this many (the last) parts of the first row
# of each core's half of x, where it has no other work (trn2 LNC 2, 16 MiB, bf16 rows of 2^18
# 62.55 -> 62.26 us, 2^19 63.32 -> 63.29)
SCALAR_PADDED = (0,)  # ... and in padded rows of more than MIN_PARTS parts, these parts (not
# the last: the pad's) of the first row (trn2 LNC 2, 16 MiB, bf16 rows of 10^6 with Y_BANKS_MANY 4:
# 64.06 -> 63.73 us, 700000 66.69 -> 66.16; (1,) 64.24, 67.33 and (2,) 65.02, 67.42 at Y_BANKS 3;
# rows of 2 parts (300000, 400000) 69.92 -> 71.05, 66.04 -> 66.56 with (0,): none there)
Y_SPLIT = (1, 1)  # the core's first and last this many rows' y in a tile a PSUM bank (`split`:
# TensorE starts on a part's first bank sooner; trn2 LNC 2, 16 MiB, bf16 rows of 300000 71.96 ->
# 71.09 us, 400000 67.25 -> 66.31, 2^18 61.80 -> 61.85, 2^19 60.62 -> 60.73; (2, 2): 71.39,
# 66.43, 61.72, 60.93)
DIRECT = 0.25  # a share of the parts (`direct`) whose y VectorE writes in fp32 straight into
# PSUM, where TensorE adds std b: no identity matmul (a third of TensorE's work on them), y not
# rounded to bf16; parts of DIRECT_MIN_C columns or more (trn2 LNC 2, 16 MiB, bf16 rows of 2^19:
# 63.29 -> 60.62 us, 10^6 68.73 -> 65.59, 700000 69.8 -> 67.35; a share of 0.2: 61.79, 67.54;
# 0.34: 65.80, 68.40; rows of 2^18 at 0.25: 64.7, VectorE their bound)
DIRECT_MIN_C = 1792
ALONE_SHARE = 0.34  # a share of the last row's parts (of each half of x) normalised without
# TensorE (`alone`: VectorE or GpSimd, y in fp32 then y rstd + b), where TensorE and ScalarE's
# copies would be the drain (trn2 LNC 2, 16 MiB, bf16 rows of 10^6 65.01 -> 64.05 us, 700000
# 67.46 -> 66.78; rows of 2 parts: none; 0.5: 65.92, 67.74, 2^18 61.12 -> 62.82)
ALONE_ON = (V, G)
Y_BANKS = 2  # PSUM banks of the direct parts' y in turn (OUT_BANKS counts them, less one) ...
Y_BANKS_MANY = 4  # ... in rows of more than MIN_PARTS parts (trn2 LNC 2, 16 MiB, bf16 rows of
# 10^6 with SCALAR_PADDED (0,): 2: 63.94 us, 3: 63.97, 4: 63.73; 700000: 66.39, 67.15, 66.16;
# rows of 2^19 at 3 (all rows): 59.39 -> 60.54)
VECTOR_Y = 0.2  # the parts' y on VectorE (`stt_on`; trn2 LNC 2, 16 MiB, bf16 rows of 2^18: the
# list schedule's choice 66.9 us, 0.1 67.0, 0.2 66.4, 0.3 67.5, before the pipeline's `LAGS`)
COPY_ON = (V,)  # the copies out of PSUM besides ScalarE (the list schedule's choice) for parts
COPY_V_C = (1025, DIRECT_MIN_C)  # ... of these columns (else ScalarE's: trn2 LNC 2, 16 MiB, bf16
# rows of 2^18 (1024) 62.48 -> 61.80 us, 2^19 61.23 -> 60.62; 300000 (1172) 71.96 -> 72.67)
AFFINE_AFTER = (1, 2)  # the weight's parts loaded behind the core's row this many rows in's
# parts, the bias' behind this many (each at the latest before its first use) ...
AFFINE_EARLY = (0, 1)  # ... rows of more than MIN_PARTS parts (their weight 1.4 MB a core or
# more: rows of 10^6 (1, 2) 73.4 us, (0, 1) 68.8; 700000 72.5, 69.8; rows of 2^18 in 2 parts
# (1, 2) 62.5, (0, 1) 63.2)
LAGS = (0, 0, 2)  # the pipeline's lags in parts (`run`; trn2 LNC 2, 16 MiB, bf16 rows of 2^18,
# 2^19: (1, 0, 1) 62.8, 65.8 us; (0, 0, 1) 64.3, 63.7; (0, 1, 1) 63.1, 64.1; (0, 0, 2) 62.5,
# 63.3; emitted a row at a time, no lags: 66.9, 68.7)
SEARCH = 300  # the list schedule's descent (`schedule.Scheduled`; 1000: as 300)
LO = True  # std's low bf16 part too, std b exact (without: a third fewer matmuls, bf16 rows of
# 2^18 61.2 us, 2^19 60.2, but the output's mean error 1.33 -> 1.59 ulps)
DIAG_ON = (G, S)  # the engines of std's parts' diagonals (the list schedule's choice; trn2 LNC 2,
# 16 MiB, bf16 rows of 2^18, 2^19, 10^6: (V, G) 61.90, 61.12, 64.84 us; (G, S) 61.12, 59.39, 65.01;
# (V, G, S) 62.75, 59.52, 65.01) ...
LO_ON = (V, G)  # ... and of its low part


def long_rows(cfg: ChipConfig, op: str, tx, to, weight, bias) -> bool:
    """Whether a norm goes here: a layer_norm of bf16 x, out, weight and bias, even rows of MIN_D
    to below MAX_D (an odd row's pad is odd: rows of 300001 at a mean of 10^4 were 1.5 off; the
    other plans take them). By the shapes alone: LNC 1 and 2 agree."""
    if op != "layer_norm" or weight is None or bias is None or not tx.shape:
        return False
    if {t.dtype.name for t in (tx, to, weight, bias)} != {"bfloat16"}:
        return False
    return MIN_D <= tx.shape[-1] < MAX_D and tx.shape[-1] % 2 == 0


def lower_norm_long(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, weight: str, bias: str,
                    eps: float) -> float:  # fmt: skip
    """out = layer_norm(x, weight, bias) over this core's rows (module doc); the estimate."""
    k = _Long(b, cfg, x, out, weight, bias, eps)
    with Scheduled(b, cfg, shared_dma=True, fluid=True, dma_parts=True, search=SEARCH) as s:
        k.run()
    return s.makespan


class _Long:
    """One layer_norm over long rows: its tiles and stages (module doc)."""

    def __init__(self, b, cfg, x, out, weight, bias, eps):
        self.b, self.cfg, self.x, self.out, self.eps = b, cfg, x, out, eps
        self.weight, self.bias = weight, bias
        tx = b.tensors[x]
        self.shape = tuple(tx.shape)
        self.P = cfg.core.sbuf.partitions
        self.d = self.shape[-1]
        self.np = max(MIN_PARTS, -(-self.d // (self.P * PART_COLS)))
        self.C = 2 * -(-self.d // (2 * self.P * self.np))  # (even: y one cycle an element)
        self.npad = self.P * self.np * self.C - self.d  # (the last part's last partition's)
        self.share = DIRECT if self.C >= DIRECT_MIN_C else 0.0  # (`direct`)
        self.copy_on = COPY_ON if COPY_V_C[0] <= self.C < COPY_V_C[1] else ()
        self.loaded: set = set()  # (tile, part) of the weight and bias loaded
        self.padded: set = set()  # tiles whose pad columns are zeroed (once: nothing else
        # writes them)
        self.bf, self.f32 = tx.dtype, dtype("float32")
        self.lo, self.hi = even_share(b, tx)
        self.rows = math.prod(self.shape[:-1])
        qs = Queues(cfg)
        self.loads = qs.loads().take(LOAD_QUEUES)
        self.stores = qs.stores().take(STORE_QUEUES)
        self.small = qs.loads(1 / 2, 1)  # (`move`: a padded part's partition 0)
        self.bank = min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)
        self.nparts = 0  # parts emitted (their buffers in turn) ...
        # ... at least as many as the pipeline holds: part n's buffer is reloaded by the row
        # of part n + xbufs, whose loads `run` emits after part n's y
        self.xbufs = max(X_BUFS, 2 * self.np + LAGS[0] + LAGS[1])
        self.nbank = 0
        self.counted: set = set()  # (st tile, triple) whose count ScalarE's stats have written

    def tile(self, key: str, shape, dt) -> str:
        return self.b.scratch_tile(f"nlong.{key}", key.rstrip("0123456789"), shape, dt)

    def index(self, r: int) -> list[int]:
        out = []
        for n in reversed(self.shape[:-1]):
            out.append(r % n)
            r //= n
        return out[::-1]

    def segments(self, j: int) -> list[tuple]:
        """Part j's (partitions, columns of the tile, columns of the row): all P C columns, or
        (the last part of a padded row, `npad`) its first rem columns on partition 0 and the
        rest whole on the next ones (the pad on partition 0: engines' accesses start at
        partition 0, 32, 64 or 96)."""
        P, C = self.P, self.C
        s0 = j * P * C
        n = min(P * C, self.d - s0)
        pf, rem = divmod(n, C)
        if not rem:
            return [(slice(0, pf), slice(0, C), slice(s0, s0 + pf * C))]
        out = [(slice(0, 1), slice(0, rem), slice(s0, s0 + rem))]
        return out + ([(slice(1, 1 + pf), slice(0, C), slice(s0 + rem, s0 + n))] if pf else [])

    def pads(self, j: int) -> list[tuple]:
        """Part j's (partitions, columns) no load writes (zeroed: counted in the statistics as
        zeros, `second`'s correction)."""
        P, C = self.P, self.C
        n = min(P * C, self.d - j * P * C)
        pf, rem = divmod(n, C)
        out = [(slice(0, 1), slice(rem, C))] if rem else []
        lo = pf + (1 if rem else 0)
        return out + ([(slice(lo, P), slice(0, C))] if lo < P else [])

    def chunks(self, j: int) -> list[tuple]:
        """Part j's bn_stats chunks (start, stop, beyond): up to a bank's columns, cut at a
        padded part's rem, `beyond` where partition 0 holds only pad (its triples emptied)."""
        C, bank = self.C, self.bank
        n = min(self.P * C, self.d - j * self.P * C)
        rem = n % C
        cuts = sorted(set(range(0, C, bank)) | ({rem} if rem else set()) | {C})
        return [(a, z, bool(rem) and a >= rem) for a, z in zip(cuts, cuts[1:])]

    def zero(self, t: str, j: int, idx=()) -> None:
        """Part j's pads of tile t (`pads`), once a tile (a buffer: the same pads each time)."""
        pads = self.pads(j)
        key = (t, idx, tuple((p.start, p.stop, c.start, c.stop) for p, c in pads))
        if key in self.padded:
            return
        self.padded.add(key)
        for ps, cs in pads:
            a = ap(t, ps, *idx, cs)
            self.b.emit(Memset, [], [a], dst=a, value=0.0, engine=G)

    def move(self, name: str, r: int | None, j: int, t: str, stream, store=False, idx=()):
        """Part j of row r of `name` (r None: the weight or bias) to or from tile t (`idx`:
        its index between the partitions and the columns), a transfer a segment."""
        for ps, cs, hc in self.segments(j):
            h = ap(name, *([] if r is None else self.index(r)), hc)
            a = ap(t, ps, *idx, cs)
            src, dst = (a, h) if store else (h, a)
            q = stream.next() if ps.stop - ps.start > 1 else self.small.next()  # (a queue of
            # its own: not behind the large ones)
            self.b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=q)

    def put(self, options: list) -> None:
        """options[0] emitted, the others the list schedule's choices (the same values)."""
        cls, reads, writes, fields = options[0]
        self.b.emit(cls, reads, writes, choices=options[1:], **fields)

    # -- constants -----------------------------------------------------------------------------

    def prepare(self) -> None:
        """The identity (bf16: y's stationary), J ([P, P] fp32 of 1/P: the row statistics), the
        weight and bias tiles ([P, parts, C], loaded part by part in `run`), the PSUM tiles."""
        b, P = self.b, self.P
        self.ident = b.tile("nlong_id", "sbuf", (P, P), self.bf)
        a = ap(self.ident)
        b.emit(Memset, [], [a], dst=a, value=0.0, engine=G)
        b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=1.0, cmp="not_equal", start=0,
               partition_step=1, step=-1, engine=G)  # fmt: skip
        self.jp = b.tile("nlong_jp", "sbuf", (P, P), self.f32)  # (a partition's parts C / d:
        # 1 / P unpadded)
        v = self.np * self.C / self.d
        b.emit(Memset, [], [ap(self.jp)], dst=ap(self.jp), value=v, engine=G)
        if self.npad:  # (`second`: partition 0's npad elements fewer, row 0 of E -npad / d)
            self.jn = b.tile("nlong_jn", "sbuf", (P, P), self.f32)
            e = ap(self.jn)
            b.emit(Memset, [], [e], dst=e, value=0.0, engine=G)
            b.emit(AffineSelect, [e], [e], on_true=e, dst=e, on_false=-self.npad / self.d,
                   cmp="not_equal", start=0, partition_step=1, step=0, engine=G)  # fmt: skip
        self.w = [b.tile("nlong_w", "sbuf", (P, self.C), self.bf) for _ in range(self.np)]
        self.bb = [b.tile("nlong_b", "sbuf", (P, self.C), self.bf) for _ in range(self.np)]
        yb = Y_BANKS_MANY if self.np > MIN_PARTS else Y_BANKS
        nout = OUT_BANKS - (yb - 1 if self.share else 0)
        self.out_ps = [b.psum("nlong_ps", (P, self.bank), self.f32) for _ in range(nout)]
        self.y_ps = [b.psum("nlong_yps", (P, self.bank), self.f32)
                     for _ in range(yb if self.share else 0)]  # fmt: skip
        self.ybank = 0
        self.st_ps = [b.psum("nlong_st", (P, 2), self.f32) for _ in range(STAT_BUFS)]

    def load_affine(self, name: str, tiles: list[str], j: int) -> None:
        """Part j of the weight or bias (`name`) into its tile (tiles[j], its pads zeroed),
        once (a tile a part: a part's y or output waits for its part alone)."""
        t = tiles[j]
        if t in self.loaded:
            return
        self.loaded.add(t)
        self.zero(t, j)
        self.move(name, None, j, t, self.loads)

    # -- stages --------------------------------------------------------------------------------

    def run(self) -> None:
        """The stages emitted in a software pipeline (`lags`): a row's loads and bn_stats (A),
        its statistics (B) LAGS[0] parts after its last part's A, a part's y (C) LAGS[1] parts
        after that, its output (D) LAGS[2] parts after its y; the weight after the first row's
        loads, the bias before the first output."""
        self.prepare()
        rows, n_p = list(range(self.lo, self.hi)), self.np
        lb, lc, ld = LAGS
        events: dict[int, list] = {}
        for i, r in enumerate(rows):
            events.setdefault(i * n_p, []).append((0, i, r, None))
            t = i * n_p + n_p - 1 + lb
            events.setdefault(t, []).append((1, i, r, None))
            for j in range(n_p):
                tc = i * n_p + j + n_p + lb + lc
                events.setdefault(tc, []).append((2, i, r, j))
                events.setdefault(tc + ld, []).append((3, i, r, j))
        parts: dict[int, list] = {}
        self.after = AFFINE_EARLY if self.np > MIN_PARTS else AFFINE_AFTER
        w_at, b_at = (min(k, len(rows) - 1) for k in self.after)
        for t in sorted(events):
            for kind, i, r, j in sorted(events[t], key=lambda e: (e[0], e[1], e[3] or 0)):
                if kind == 0:
                    parts[i] = self.first(i, r, i in (w_at, b_at))
                elif kind == 1:
                    self.second(i, r)
                elif kind == 2:
                    self.ypart(i, j, parts[i][j])
                else:
                    self.outpart(i, r, j)

    def on_scalar(self, r: int, j: int) -> bool:
        """Whether ScalarE takes part j's statistics of row r (`SCALAR_FIRST`, `SCALAR_PADDED`;
        by the row's index in x: the same at LNC 1 and 2)."""
        first = r % max(1, self.rows // 2) == 0
        if self.npad and self.np > MIN_PARTS:
            return first and j in SCALAR_PADDED  # (no pad in these parts)
        return first and j >= self.np - SCALAR_FIRST and not self.npad  # (padded rows of 10^6
        # ran 68.8 -> 68.1 us without; and its triple over the pad's zeros gave NaN at a mean of
        # 10^4)

    def triples(self, r: int) -> int:
        """Row r's (count, mean, M2) triples: two a bn_stats chunk, one a ScalarE part."""
        return sum(1 if self.on_scalar(r, j) else 2 * len(self.chunks(j)) for j in range(self.np))

    def st(self, i: int, r: int):
        t = self.triples(r)
        return ap(self.tile(f"st{i % STAT_BUFS}t{t}", (self.P, t, 3), self.f32))

    def first(self, i: int, r: int, affine: bool = False) -> list[str]:
        """Row r (the core's i-th): its parts loaded, bn_stats a chunk of each (or ScalarE's
        mean and M2 about it, `on_scalar`)."""
        b, P, C = self.b, self.P, self.C
        st = self.st(i, r)
        parts, t = [], 0
        for j in range(self.np):
            # (a padded part in buffers of its own: its pads zeroed once stay zero)
            key = f"xp{i % PAD_BUFS}" if self.pads(j) else f"x{self.nparts % self.xbufs}"
            x = self.tile(key, (P, C), self.bf)
            self.nparts += 1
            parts.append(x)
            self.zero(x, j)
            self.move(self.x, r, j, x, self.loads)
            for k, (name, at) in enumerate(((self.weight, self.w), (self.bias, self.bb))):
                if affine and i == min(self.after[k], self.hi - self.lo - 1):
                    self.load_affine(name, at, j)  # (part j's, behind x's)
            if self.on_scalar(r, j):
                self.scalar_stats(ap(x), st.name, t)
                t += 1
                continue
            for c0, c1, beyond in self.chunks(j):
                src = ap(x, slice(None), slice(c0, c1))
                dst = ap(st.name, slice(None), slice(t, t + 2), slice(None))
                b.emit(BnStats, [src], [dst], src=src, dst=dst)
                if beyond:  # (partition 0's pad: count 0, no weight in bn_aggr's combination)
                    e = ap(st.name, slice(0, 1), slice(t, t + 2), slice(None))
                    b.emit(Memset, [], [e], dst=e, value=0.0, engine=V)
                t += 2
        return parts

    def scalar_stats(self, xa, st: str, t: int) -> None:
        """Triple t of st from a part on ScalarE: the count (a memset, once a tile), the mean
        (a copy times 1 / C with its add reduction), M2 (the square of mean - x, reduced)."""
        b, C = self.b, self.C
        cnt, mean, m2 = (ap(st, slice(None), slice(t, t + 1), k) for k in range(3))
        if (st, t) not in self.counted:
            self.counted.add((st, t))
            b.emit(Memset, [], [cnt], dst=cnt, value=float(C), engine=G)
        junk = ap(self.b.scratch_tile("nlong.junk", "nlong_junk", (self.P, C), self.bf))
        sm = ap(self.tile(f"sm{t}", (self.P, 1), self.f32))  # (the mean in a tile of its own,
        # then copied: M2's pass reads it, not st, which later bn_stats then need not wait for;
        # trn2 LNC 2, 16 MiB, bf16 rows of 2^18 61.91 -> 61.12 us, 2^19 59.95 -> 59.39)
        b.emit(Activation, [xa], [junk, sm], func="copy", src=xa, dst=junk, scale=1.0 / C,
               reduce="add", reduce_dst=sm)  # fmt: skip
        b.emit(Activation, [xa, sm], [junk, m2], func="square", src=xa, dst=junk, scale=-1.0,
               bias=sm, reduce="add", reduce_dst=m2)  # fmt: skip
        self.put([(Activation, [sm], [mean], dict(func="copy", src=sm, dst=mean)),
                  (TensorCopy, [sm], [mean], dict(src=sm, dst=mean, engine=G))])  # fmt: skip

    def col(self, i: int, name: str, dt=None):
        t = self.tile(f"c{name}{i % STAT_BUFS}", (self.P, 1), dt or self.f32)
        return ap(t)

    def second(self, i: int, r: int) -> None:
        """Row i's mean, rstd, std's parts and their diagonals (module doc, 1)."""
        b, P = self.b, self.P
        st = self.st(i, r)
        mv = ap(self.tile(f"mv{i % STAT_BUFS}", (P, 2), self.f32))
        b.emit(BnAggr, [st], [mv], src=st, dst=mv)
        ps = self.st_ps[i % STAT_BUFS]
        m0, m1 = (ap(mv.name, slice(None), slice(k, k + 1)) for k in (0, 1))
        mean_ps, var_ps = (ap(ps, slice(None), slice(k, k + 1)) for k in (0, 1))
        jp = ap(self.jp)
        pairs = [jp] + ([ap(self.jn)] if self.npad else [])  # (counts: module doc)
        for k, st_ in enumerate(pairs):
            b.emit(Matmul, [st_, m0], [mean_ps], stationary=st_, moving=m0, dst=mean_ps,
                   accumulate=k > 0)  # fmt: skip
        mean, d2 = self.col(i, "mean"), self.col(i, "d2")
        copy = dict(src=mean_ps, dst=mean)
        self.put([(Activation, [mean_ps], [mean], dict(func="copy", **copy)),
                  (TensorCopy, [mean_ps], [mean], dict(engine=V, **copy))])  # fmt: skip
        b.emit(Activation, [m0, mean], [d2], func="square", src=m0, dst=d2, scale=-1.0, bias=mean)
        for k, (st_, mv) in enumerate((a, c) for a in pairs for c in (m1, d2)):
            b.emit(Matmul, [st_, mv], [var_ps], stationary=st_, moving=mv, dst=var_ps,
                   accumulate=k > 0)  # fmt: skip
        rs, sd = self.col(i, "rs"), self.col(i, "sd")
        for func, dst in (("rsqrt", rs), ("sqrt", sd)):
            b.emit(Activation, [var_ps], [dst], func=func, src=var_ps, dst=dst, bias=self.eps)
        hi, lo = self.col(i, "hi", self.bf), self.col(i, "lo", self.bf)
        self.put([(Activation, [sd], [hi], dict(func="copy", src=sd, dst=hi)),
                  (TensorCopy, [sd], [hi], dict(src=sd, dst=hi, engine=V))])  # fmt: skip
        if LO:  # (sd - hi exact in fp32 on either engine)
            act = (Activation, [hi, sd], [lo], dict(func="copy", src=hi, dst=lo, scale=-1.0,
                                                    bias=sd))  # fmt: skip
            self.put([act] * (S in LO_ON) + [(TensorTensor, [sd, hi], [lo], dict(
                alu="subtract", src0=sd, src1=hi, dst=lo, engine=e))
                for e in LO_ON if e != S])  # fmt: skip
        idt = ap(self.ident)
        for name, s in (("dhi", hi), ("dlo", lo))[: 1 + LO]:
            dg = ap(self.tile(f"{name}{i % STAT_BUFS}", (P, P), self.bf))
            act = (Activation, [idt, s], [dg], dict(func="copy", src=idt, dst=dg, scale=s))
            self.put([act] * (S in DIAG_ON) + [(TensorScalar, [idt, s], [dg], dict(
                src=idt, dst=dg, op0="multiply", operand0=s, engine=e))
                for e in DIAG_ON if e != S])  # fmt: skip

    def direct(self, i: int, j: int) -> bool:
        """Whether row i's part j's y goes on VectorE straight into PSUM (`DIRECT`: a share
        of the parts by their index in x, spread evenly: the same at LNC 1 and 2)."""
        g, share = (self.lo + i) * self.np + j, self.share
        return bool(share) and math.floor((g + 1) * share) > math.floor(g * share)

    def alone(self, i: int, j: int) -> bool:
        """Whether row i's part j is normalised without TensorE (`vector_out`): a share
        ALONE_SHARE of the parts of the last row of each half of x (by their index in x: the
        same at LNC 1 and 2), whose outputs are the op's last."""
        r = self.lo + i
        half = max(1, self.rows // 2)
        if not ALONE_SHARE or r % half != half - 1:
            return False
        return math.floor((j + 1) * ALONE_SHARE) > math.floor(j * ALONE_SHARE)

    def vector_out(self, i: int, j: int, xt: str) -> None:
        """Row i's part j's output by VectorE or GpSimd alone: y = (x - mean) w in fp32, then
        y rstd + b; stored."""
        P, C = self.P, self.C
        n = i * self.np + j
        self.load_affine(self.bias, self.bb, j)
        mean, rs = self.col(i, "mean"), self.col(i, "rs")
        xa, w, bb = ap(xt), ap(self.w[j]), ap(self.bb[j])
        y = ap(self.tile(f"ya{n % 2}", (P, C), self.f32))
        o = ap(self.tile(f"o{n % O_BUFS}", (P, C), self.bf))
        self.put([(ScalarTensorTensor, [xa, mean, w], [y], dict(
            data=xa, op0="subtract", operand0=mean, op1="multiply", operand1=w, dst=y,
            engine=e)) for e in ALONE_ON])  # fmt: skip
        self.put([(ScalarTensorTensor, [y, rs, bb], [o], dict(
            data=y, op0="multiply", operand0=rs, op1="add", operand1=bb, dst=o,
            engine=e)) for e in ALONE_ON])  # fmt: skip
        self.move(self.out, self.lo + i, j, o.name, self.stores, store=True)

    def stt_on(self, n: int) -> tuple:
        """The engines of the core's n-th part's y: VectorE for a share VECTOR_Y of the parts,
        spread evenly, GpSimd the rest (None: either, as the list schedule finds them free);
        GpSimd all where VectorE takes the `direct` parts."""
        vy = 0.0 if self.share else VECTOR_Y
        if vy is None:
            return (V, G)
        return (V,) if math.floor((n + 1) * vy) > math.floor(n * vy) else (G,)

    def ypart(self, i: int, j: int, xt: str) -> None:
        """Row i's part j's y = (x - mean) w (`stt_on`'s engine; a tile a PSUM bank, `split`),
        or (`direct`) its y and output at once (`outpart`)."""
        n = i * self.np + j
        mean = self.col(i, "mean")
        self.load_affine(self.weight, self.w, j)  # (if not yet: `AFFINE_AFTER`)
        if self.alone(i, j):
            self.vector_out(i, j, xt)
            return
        if self.direct(i, j):  # (VectorE's y in fp32 into PSUM, its output at once)
            self.outpart(i, self.lo + i, j, xt)
            return
        for (c0, c1), y in zip(self.ycols(i), self.ytiles(i, n)):
            cs = slice(c0, c1)
            xa, w = ap(xt, slice(None), cs), ap(self.w[j], slice(None), cs)
            self.put([(ScalarTensorTensor, [xa, mean, w], [y], dict(
                data=xa, op0="subtract", operand0=mean, op1="multiply", operand1=w, dst=y,
                engine=e)) for e in self.stt_on(n)])  # fmt: skip

    def split(self, i: int) -> bool:
        """Whether the core's i-th row's y goes in a tile a PSUM bank (`Y_SPLIT`)."""
        n = self.hi - self.lo
        return (i < Y_SPLIT[0]) or (i >= n - Y_SPLIT[1])

    def ycols(self, i: int) -> list[tuple[int, int]]:
        """The core's i-th row's y tiles' columns of a part (`split`)."""
        C, bank = self.C, self.bank
        if not self.split(i):
            return [(0, C)]
        return [(c0, min(C, c0 + bank)) for c0 in range(0, C, bank)]

    def ytiles(self, i: int, n: int) -> list:
        """The y tiles of the core's n-th part (of its i-th row), as `ycols` cuts it."""
        cols = self.ycols(i)
        if len(cols) == 1:
            return [ap(self.tile(f"y{n % Y_BUFS}", (self.P, self.C), self.bf))]
        return [
            ap(self.tile(f"y{n % Y_BUFS}k{k}", (self.P, c1 - c0), self.bf))
            for k, (c0, c1) in enumerate(cols)
        ]

    def outpart(self, i: int, r: int, j: int, xt: str | None = None) -> None:
        """Row i's part j: TensorE's y + std b a bank each, copied out times rstd; stored. With
        xt (a `direct` part's x), each bank's y = (x - mean) w in fp32 first, by VectorE into
        the bank, TensorE's std b added onto it (no identity matmul)."""
        if xt is None and (self.direct(i, j) or self.alone(i, j)):
            return  # (emitted with its y)
        b, P, C, bank = self.b, self.P, self.C, self.bank
        n = i * self.np + j
        self.load_affine(self.bias, self.bb, j)  # (if not yet: `AFFINE_AFTER`)
        rs, idt = self.col(i, "rs"), ap(self.ident)
        dhi, dlo = (ap(self.tile(f"{k}{i % STAT_BUFS}", (P, P), self.bf)) for k in ("dhi", "dlo"))
        ys_ = {} if xt else dict(zip((c0 for c0, _ in self.ycols(i)), self.ytiles(i, n)))
        o = ap(self.tile(f"o{n % O_BUFS}", (P, C), self.bf))
        for c0 in range(0, C, bank):
            cols = slice(c0, min(C, c0 + bank))
            if xt is not None:
                acc = self.y_ps[self.ybank % len(self.y_ps)]
                self.ybank += 1
                dst = ap(acc, slice(None), slice(0, cols.stop - c0))
                xa, w = ap(xt, slice(None), cols), ap(self.w[j], slice(None), cols)
                b.emit(ScalarTensorTensor, [xa, self.col(i, "mean"), w], [dst], data=xa,
                       op0="subtract", operand0=self.col(i, "mean"), op1="multiply", operand1=w,
                       dst=dst, engine=V)  # fmt: skip
                bs = ap(self.bb[j], slice(None), cols)
                for dg in (dhi, dlo)[: 1 + LO]:  # (dst read too: accumulated onto VectorE's y)
                    b.emit(Matmul, [dg, bs, dst], [dst], stationary=dg, moving=bs, dst=dst,
                           accumulate=True)  # fmt: skip
                oc = ap(o.name, slice(None), cols)
                self.put([(Activation, [dst, rs], [oc], dict(func="copy", src=dst, dst=oc,
                                                             scale=rs))]
                         + [(TensorScalar, [dst, rs], [oc], dict(src=dst, dst=oc, op0="multiply",
                                                                 operand0=rs, engine=e))
                            for e in self.copy_on])  # fmt: skip
                continue
            acc = self.out_ps[self.nbank % len(self.out_ps)]
            self.nbank += 1
            dst = ap(acc, slice(None), slice(0, cols.stop - c0))
            if c0 in ys_:
                yt = ys_[c0]
                ys = ap(yt.name, slice(None), slice(0, cols.stop - c0))
            else:
                ys = ap(ys_[0].name, slice(None), cols)
            bs = ap(self.bb[j], slice(None), cols)
            b.emit(Matmul, [idt, ys], [dst], stationary=idt, moving=ys, dst=dst)
            for dg in (dhi, dlo)[: 1 + LO]:
                b.emit(Matmul, [dg, bs], [dst], stationary=dg, moving=bs, dst=dst,
                       accumulate=True)  # fmt: skip
            oc = ap(o.name, slice(None), cols)
            self.put([(Activation, [dst, rs], [oc], dict(func="copy", src=dst, dst=oc, scale=rs))]
                     + [(TensorScalar, [dst, rs], [oc], dict(src=dst, dst=oc, op0="multiply",
                                                             operand0=rs, engine=e))
                        for e in self.copy_on])  # fmt: skip
        self.move(self.out, r, j, o.name, self.stores, store=True)
