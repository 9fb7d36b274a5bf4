"""bf16 `layer_norm` rows of MANY_LEAST or more with a weight and a bias, in k pieces of L
columns (`pieces`: k a power of two up to K_MOST dividing D, L = D / k odd or even; else PAD_K
padded pieces of ceil(D / k), the row's last piece `pad` short), `norm_wide`'s tiles (row r's
piece s on partition r k + s, g = P / k rows a tile) and its three passes (out = rstd (y + std
b), y = (x - mean) w), but the statistics without VectorE's bn_stats:

1. load, a transfer a row on queue r of its row slot r (the DMA engines of its partitions;
   padded, the short piece on a queue of its own, the pad columns zeroed from a zero tile at
   a buffer's first load); TensorE sums x: x's columns, COLS at a time, as the stationary
   operand times E^T ([p, g] bf16, 1 where partition q holds row r) accumulate into PSUM
   [COLS, g], entry [c, r] the sum of column position c over row r's partitions and column
   groups (64 cycles a matmul: half a cycle a column);
2. those sums copied out, each row's column repeated over its k partitions' (`bcast`), and
   summed by a second matmul (fp32 ones of 1 / D): each partition its row's mean M (in a tile
   of its own: y waits for it alone); ScalarE's S2 = sum((M - x)^2) over its piece (`square`
   with scale -1 and bias M, its add reduction: one pass, every term about the row's own
   mean, no cancellation at any mean); TensorE sums S2 over the row's partitions (padded: less
   pad M^2 a row, pad / k M^2 a partition by GpSimd summed by -1s, as `norm_pad.correct`);
   rstd (ScalarE), diag(std) as the identity divided by rstd (VectorE); y in two column parts,
   VectorE's first Y_V (even: its bf16 fast case), GpSimd's the rest;
3. `norm_wide`'s: per PSUM tile, the identity times y plus diag(std) times the bias, copied
   out times rstd (ScalarE a COPY_S share, VectorE the rest) into x's tile; stored a transfer a
   row (padded: the pad not stored). The last tile's first ALU_LAST of the columns without
   TensorE (`tail_alu`: y + b std in fp32, times rstd, both on GpSimd, idle once the last y is
   done: the same bits as through PSUM).

The weight and bias are loaded into each of the g row slots (a transfer a slot on the slot's
queue, behind x's first tile: no TensorE spread, whose copy out of PSUM cost ScalarE 2.6 us at
100000). Values: float64 sums rounded once a matmul, a row's values its own: the same at LNC 1
and 2. VectorE's bn_stats cost it a cycle an element (a core's rows of 100000 in `norm_wide`'s
tiles: 37.5 us of its 50); ScalarE's square 1 / 1.2 ns. trn2 LNC 2, 16 MiB, bf16 rows (the
estimate choosing it, its trials with the descent: `ALWAYS_SEARCH`), us: 50257 62.04 -> 57.27
(74.6% -> 80.9%, 32 padded pieces of 1571), 100000 60.03 -> 59.56 (77.2% -> 77.8%; every engine
busy 41-47 us a core, TensorE the last 7 us alone on the last tiles' bias; half the last
tile's columns on GpSimd, `ALU_LAST`: 58.88, 78.7%, the end the last tile's store of 2 rows on
a quarter of the DMA engines each, 2.9 us), 65536 56.88 -> 55.45 -> 55.18 (82.0% -> 84.5%).
"""

from __future__ import annotations

import math

from trnsim.isa import (
    Activation,
    DmaCopy,
    Matmul,
    Memset,
    ScalarTensorTensor,
    TensorCopy,
    TensorScalar,
)
from trnsim.kernels import norm_wide
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.norm_wide import _even_parts, _Wide
from trnsim.kernels.queues import Queues
from trnsim.kernels.row_plan import G, S, V, runs
from trnsim.kernels.schedule import Scheduled

__all__ = ["pieces", "applies", "lower_many"]

MANY_LEAST = 50000  # rows this long at least (shorter ones: `norm_wide`, the pieces plan)
PIECE_MOST = 3200  # a piece's columns at most, k the fewest pieces that fit
K_MOST = 32  # pieces a row at most (4 rows a tile)
PAD_K = 32  # padded pieces a row at least (trn2 LNC 2, 16 MiB, bf16 50257: 16 of 3142, 8 rows
# a tile, 63.1 us, the first tile in later and a row's last piece on its main piece's queue;
# 32 of 1571 59.1)
COLS = 128  # x's columns a stationary operand of the sums (TensorE's rows)
S_BUFS = 4  # PSUM tiles of the sums, in turn (stage 2 lags stage 1 by 2 tiles: `LAGS`; 6:
# 100000 59.6 -> 60.9 us)
Y_V = (0.25, 0.22)  # VectorE's share of y's columns, GpSimd the rest: whole pieces, padded
# (trn2 LNC 2, 16 MiB, bf16 100000, us: 0.2 60.6, 0.25 59.6, 0.3 60.5, 0.35 60.9; 50257 with
# COPY_S 0.3: 0.2 58.3, 0.22 57.3, 0.25 58.2, 0.28 58.6)
V_PARTS, G_PARTS = 1, 2  # ... in this many parts each (4 and 6, an earlier plan: 100000 69.9
# -> 69.7 us, the same)
COPY_S = (0.35, 0.3)  # ScalarE's share of stage 3's copies out of PSUM, VectorE the rest (100000:
# 0.3 60.9, 0.35 59.6, 0.4 60.7; 50257: 0.28 58.6, 0.3 58.2, 0.32 59.0, 0.35 58.4, 0.4 59.1)
COPY_LAST = 1  # ... but the last this many tiles', each where the list schedule finds free
# (100000: 0 60.7 us, 1 59.9, 2 59.9, 3 59.8 before the stores a row; 50257: 0 58.4, 2 59.1)
SMALL_ON = (V, S)  # the engines of stage 2's small copies out of PSUM (100000: VectorE's 60.6
# us, ScalarE's 61.1, either 59.9)
STD_DIVIDE = True  # diag(std) as the identity divided by rstd, no sqrt on ScalarE
DG_ON = (V,)  # diag(std)'s engines (GpSimd or VectorE: GpSimd's y waited behind it)
# (tried: the weight's and bias' loads on the store queues' second half, idle until the stores
# begin, beside x's, not after its first tile: 100000 59.6 -> 61.9 us, 50257 59.3 -> 62.5)
PAD_ON = (G,)  # the engines of pad / k M^2 (padded pieces), () ScalarE's square (50257:
# ScalarE's 59.3 us, GpSimd's 58.4, GpSimd's or VectorE's 59.4)
ALWAYS_SEARCH = True  # the descent also in `norms._variant`'s trials (without it, trn2 LNC 2,
# 16 MiB, bf16 100000: estimated 62.8 us, behind the pieces plan's 61.0; run, 59.6 against 60.0)
ALU_LAST = (0.5,)  # the last tiles' (the last first) shares of columns without TensorE
# (`tail_alu`; trn2 LNC 2, 16 MiB, bf16 100000, us, GpSimd's: 1/3 59.36, 0.41 59.88, 0.45
# 59.56, 0.5 58.88, 0.51 58.90, 0.53 59.56, 0.58 59.91, 0.75 59.36; (0.5, 0.1) 59.62, (0.5, 0.2)
# 59.83, (1/3, 1/3) 60.47; norm_wide's 1/3 of a partial last tile, ScalarE or VectorE copying
# out: 59.56; 65536 55.45 -> 55.18, 50257 57.27 the same)
ALU_ON = (G,)  # ... their y + b std's engines (GpSimd or VectorE: 100000 61.12)
ALU_COPY_ON = (G,)  # ... and their copies out's (VectorE: 59.57, GpSimd or VectorE 59.57,
# ScalarE or VectorE 59.56 at 1/3)
ALU_STEP = 256  # ... in steps of this many columns
# (tried, with ALU_LAST 0.5 at 100000: VectorE's share of the last tile's y other than Y_V, 0.35
# 59.30, 0.45 60.03, 0.55 60.75 us; the last two tiles evened as `norm_wide.EVEN_LAST`, 0.5
# 58.85, 0.7 58.98)
SEARCH = 150  # the list schedule's descent, schedules at most


def pieces(P: int, d: int) -> int:
    """k: the fewest power of two pieces a row (2 to K_MOST) of at most PIECE_MOST columns
    dividing d; else the fewest padded pieces (PAD_K at least) of ceil(d / k) columns
    (`padded`) within PIECE_MOST; 0 if neither."""
    k = 2
    while k <= min(P, K_MOST):
        if d % k == 0 and d // k <= PIECE_MOST:
            return k
        k *= 2
    k = PAD_K
    while k <= min(P, K_MOST):
        if -(-d // k) <= PIECE_MOST:
            return k
        k *= 2
    return 0


def padded(d: int, k: int) -> tuple[int, int]:
    """(L, pad) of a row in k pieces of L = ceil(d / k) columns, the last `pad` short."""
    L = -(-d // k)
    return L, k * L - d


def applies(b: KernelBuilder, cfg, x: str, out: str, weight, bias) -> bool:
    """bf16 x, output, weight and bias, 2-D x, rows of MANY_LEAST or more that cut into
    `pieces`."""
    if weight is None or bias is None:
        return False
    if {b.tensors[n].dtype.name for n in (x, out, weight, bias)} != {"bfloat16"}:
        return False
    tx = b.tensors[x]
    d = tx.shape[-1]
    return len(tx.shape) == 2 and d >= MANY_LEAST and pieces(cfg.core.sbuf.partitions, d) > 0


def lower_many(b: KernelBuilder, cfg, x, out, weight, bias, eps, share) -> float:
    """out = layer_norm(x, [D], weight, bias, eps) over rows [lo, hi) of `share` (module doc);
    the list schedule's estimated span."""
    w = _Many(b, cfg, x, out, weight, bias, eps, share)
    if not w.tiles:
        return 0.0
    searching, b.searching = b.searching, b.searching or ALWAYS_SEARCH  # (`ALWAYS_SEARCH`)
    try:
        with Scheduled(b, cfg, shared_dma=True, fluid=True, search=SEARCH) as s:
            w.emit()
    finally:
        b.searching = searching
    b.release(*w.psum)
    return s.makespan


class _Many(_Wide):
    def __init__(self, b, cfg, x, out, weight, bias, eps, share):
        P = cfg.core.sbuf.partitions
        k = pieces(P, b.tensors[x].shape[-1])
        super().__init__(b, cfg, x, out, weight, bias, eps, share, k)  # (k: this module's)
        self.no_aggr = True  # (the block matrices of `setup`: "one" among them)
        self.pad = 0
        if self.d % k:  # (padded pieces: the last `pad` columns of a row's last piece zeros)
            self.L, self.pad = padded(self.d, k)
            self.long = int(self.L >= norm_wide.LONG_PIECE)
        self.psum_s = [b.psum("lnm_s", (P, self.g + 3), self.f32) for _ in range(S_BUFS)]
        self.psum += self.psum_s
        self.qs = Queues(cfg).loads()
        self.st_qs = Queues(cfg).stores()
        self.turn_n = 0

    def third(self, n: int, r0: int, rows: int) -> None:
        """Stage 3 (`_Wide.third`), the last tiles' first `alu_cols` without TensorE."""
        self.turn_n = n  # (`copy`: the tile's copies out)
        super().third(n, r0, rows)

    def store(self, n: int, r0: int, rows: int) -> None:
        """A transfer a row (`rows_dma`: padded, the pad not stored)."""
        t = self.xt(n, self.P).name
        for j in range(rows):
            self.rows_dma(self.of, r0 + j, t, j, store=True)

    def alu_cols(self, n: int, rows: int) -> int:
        """Tile n's first columns normalised without TensorE (`ALU_LAST`; 0 none)."""
        back = len(self.tiles) - 1 - n
        if back >= len(ALU_LAST):
            return 0
        return min(self.L, int(self.L * ALU_LAST[back]) // ALU_STEP * ALU_STEP)

    def tail_alu(self, n: int, p: int, lo: int, hi: int, rs, on=ALU_ON) -> None:
        """`_Wide.tail_alu`, fp32 y + b std on ALU_ON."""
        super().tail_alu(n, p, lo, hi, rs, on)

    def alu_copy(self, t, dst, rs) -> None:
        """The copy out times rstd on ALU_COPY_ON (ScalarE's `activation` or an ALU's
        `tensor_scalar`)."""
        ops = [(Activation, [t, rs], [dst], dict(func="copy", src=t, dst=dst, scale=rs,
                                                 engine=S))]  # fmt: skip
        ops += [(TensorScalar, [t, rs], [dst], dict(src=t, dst=dst, op0="multiply", operand0=rs,
                                                    engine=e)) for e in (V, G)]  # fmt: skip
        self.put([o for o in ops if o[3]["engine"] in ALU_COPY_ON])

    def tail(self, n: int) -> bool:
        """Whether tile n has `alu_cols` (its std needed: `finish`)."""
        return self.alu_cols(n, self.tiles[n][1]) > 0

    def sm(self, n: int, p: int, key: str, w: int = 1):
        """Tile n's fp32 [p, 1] small columns `key` (all in one tile: fewer semaphores)."""
        at = {"mn": 0, "q": 1, "rs": 2, "sd": 3}[key]
        t = self.tile("sm", n, (self.P, 4), self.f32)
        return ap(t, slice(0, p), slice(at, at + 1))

    def setup(self) -> None:
        """The identities, the block matrix of ones ([q, q'] = 1 where q and q' hold one row)
        and E^T ([q, r] = (q // k == r)), the ones of 1 / D; the weight spread (`spread_one`)."""
        b, P, g, k = self.b, self.P, self.g, self.k
        pk = g * k
        self.ib, self.i32 = self.ident("lnw_ib", self.bf), self.ident("lnw_if", self.f32)
        rsel = b.tile("lnm_rsel", "sbuf", (P, g, k), self.f32)  # [r, r' k + s] = (r == r')
        src = ap(self.i32, slice(0, g), slice(0, g))._replace(bcast=((2, k),))
        dst = ap(rsel, slice(0, g))
        b.emit(TensorCopy, [src], [dst], src=src, dst=dst, engine=G)
        blk = ap(self.psum[0], slice(0, pk), slice(0, pk))
        r = ap(rsel, slice(0, g))
        b.emit(Matmul, [r, r], [blk], stationary=r, moving=r, dst=blk)
        one = b.tile("lnm_one", "sbuf", (P, P), self.f32)
        self.copy(blk, ap(one, slice(0, pk), slice(0, pk)), on=(V,))
        self.blk = {"one": one}
        if self.pad:
            neg = b.tile("lnm_neg", "sbuf", (P, P), self.f32)
            self.copy(blk, ap(neg, slice(0, pk), slice(0, pk)), -1.0, on=(V,))
            self.blk["neg"] = neg
        self.et = b.tile("lnm_et", "sbuf", (P, g), self.bf)
        src, dst = ap(one, slice(0, pk), slice(0, pk, k)), ap(self.et, slice(0, pk))
        b.emit(TensorCopy, [src], [dst], src=src, dst=dst, engine=G)
        self.ones = b.tile("lnm_ones", "sbuf", (P, 1), self.f32)  # 1 / D
        o = ap(self.ones)
        b.emit(Memset, [], [o], dst=o, value=1.0 / self.d, engine=G)
        self.junk = b.tile("lnm_junk", "sbuf", (P, self.L), self.bf)
        self.spread = {}
        self.spread_one(self.weight)

    def spread_one(self, v: str) -> None:
        """The weight's (bias') [k, L] loaded into each of a tile's g row slots, a transfer a
        slot on the DMA engines of its partitions (`_Wide.spread_one`'s TensorE spread and
        copy out of PSUM cost ScalarE or VectorE 2.6 us each at 100000)."""
        b = self.b
        sp = b.tile("lnm_sp", "sbuf", (self.P, self.L), self.bf)
        for r in range(self.g):  # (slot r on load queue r, in turn with x's rows: `load`)
            self.rows_dma(v, None, sp, r, zeros=True)
        self.spread[v] = sp

    def load(self, n: int, r0: int, rows: int) -> None:
        """Tile n's rows, row slot r's on load queue r (the DMA engines of its partitions:
        each queue's transfers in turn, the weight's and bias' among them)."""
        if n in self.loaded:
            return
        self.loaded.add(n)
        t = self.xt(n, self.P).name
        for j in range(rows):  # (a buffer's first use: the pad columns zeros, kept so by the
            # output's, the weight's and bias' being 0)
            self.rows_dma(self.xf, r0 + j, t, j, zeros=n < self.bufs)

    def rows_dma(self, v: str, r, t: str, j: int, store: bool = False, zeros=False) -> None:
        """Row r of v (x's or out's; r None: the weight's or bias' [d]) to (from, `store`) row
        slot j of tile t on queue j (the DMA engines of its partitions); padded, its last piece
        on a queue of its own, and with `zeros` its pad columns from a zero tile before."""
        k, L, pad = self.k, self.L, self.pad

        def row(a, z):
            return ap(v, slice(a, z)) if r is None else ap(v, slice(r, r + 1), slice(a, z))

        qs = self.st_qs if store else self.qs
        parts = [(row(0, self.d), ap(t, slice(j * k, (j + 1) * k)), qs[j])]
        if pad:
            a = (k - 1) * L
            parts = [
                (row(0, a), ap(t, slice(j * k, (j + 1) * k - 1)), qs[j]),
                (row(a, self.d), ap(t, slice((j + 1) * k - 1, (j + 1) * k), slice(0, L - pad)),
                 qs[self.g + j]),
            ]  # fmt: skip
            if zeros:
                if not hasattr(self, "zeros"):  # ([1, pad] zeros, made at their first use)
                    self.zeros = self.b.tile("lnm_zeros", "sbuf", (1, pad), self.bf)
                    self.b.emit(Memset, [], [ap(self.zeros)], dst=ap(self.zeros), value=0.0,
                                engine=G)  # fmt: skip
                z = ap(t, slice((j + 1) * k - 1, (j + 1) * k), slice(L - pad, L))
                qz = Queues(self.cfg).stores(1 / 2, 1)  # (queues of their own: they wait for
                # the zero tile's memset, and the list schedule would put them, and the
                # transfers behind them, after every load ready sooner)
                parts.append((ap(self.zeros), z, qz[j]))
        for a, z, q in parts:
            src, dst = (z, a) if store else (a, z)
            self.b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=q)

    def first(self, n: int, r0: int, rows: int) -> None:
        """Stage 1: load; TensorE's column sums of x over each row's partitions."""
        b, p = self.b, rows * self.k
        self.load(n, r0, rows)
        ps = self.psum_s[n % S_BUFS]
        blk = ap(self.et, slice(0, p), slice(0, rows))
        groups = [(a, min(self.L, a + COLS)) for a in range(0, self.L, COLS)]
        for i, (lo, hi) in enumerate(groups):
            st = self.xt(n, p, (lo, hi))
            dst = ap(ps, slice(0, hi - lo), slice(0, rows))
            b.emit(Matmul, [st, blk], [dst], stationary=st, moving=blk, dst=dst,
                   accumulate=i > 0)  # fmt: skip

    def second(self, n: int, r0: int, rows: int) -> None:
        """Stage 2: the row mean (TensorE), S2 about it (ScalarE), its sum over the row's
        partitions (TensorE); rstd, std, diag(std), y (`finish`)."""
        b, p = self.b, rows * self.k
        ps = self.psum_s[n % S_BUFS]
        c = min(COLS, self.L)
        # the sums copied out with each row's column repeated over its k partitions' columns
        # (`bcast`: [c, r k + s] = the sums' [c, r]), then times 1 / D summed over the c
        # partitions: the row's mean on each of its partitions, in PSUM
        su = self.b.scratch_tile(f"lnm.su{n % S_BUFS}", "su", (self.P, self.g, self.k), self.f32)
        src = ap(ps, slice(0, c), slice(0, rows))._replace(bcast=((2, self.k),))
        sums = ap(su, slice(0, c), slice(0, rows))
        self.copy(src, sums, on=SMALL_ON)
        mp = ap(ps, slice(0, p), slice(self.g, self.g + 1))
        ones = ap(self.ones, slice(0, c))
        b.emit(Matmul, [sums, ones], [mp], stationary=sums, moving=ones, dst=mp)
        # (the mean in a tile of its own: a read waits for its tile's last write, and y reads
        # the mean)
        mn = self.b.scratch_tile(f"lnw.mn{n % norm_wide.Y_BUFS}", "mn", (self.P, 2), self.f32)
        mean = ap(mn, slice(0, p), slice(0, 1))
        self.copy(mp, mean, on=SMALL_ON)
        q = self.sm(n, p, "q")
        xs, jk = self.xt(n, p), ap(self.junk, slice(0, p))
        b.emit(Activation, [xs, mean], [jk, q], func="square", src=xs, dst=jk, scale=-1.0,
               bias=mean, reduce="add", reduce_dst=q)  # fmt: skip
        var = ap(ps, slice(0, p), slice(self.g + 1, self.g + 2))
        one = ap(self.blk["one"], slice(0, p), slice(0, p))
        b.emit(Matmul, [one, q], [var], stationary=one, moving=q, dst=var)
        if self.pad:  # (the pad zeros' squares about M, pad M^2 a row, taken off: pad / k M^2
            # on each of its k partitions, summed by -1s; as `norm_pad.correct`)
            sq = ap(self.b.scratch_tile(f"lnm.sq{n % S_BUFS}", "sq", (self.P, 1), self.f32),
                    slice(0, p))  # fmt: skip
            c = self.pad / self.k
            self.put([(ScalarTensorTensor, [mean, mean], [sq], dict(
                data=mean, op0="multiply", operand0=c, op1="multiply", operand1=mean, dst=sq,
                engine=e)) for e in PAD_ON] if PAD_ON else [(Activation, [mean], [sq], dict(
                    func="square", src=mean, dst=sq, scale=math.sqrt(c)))])  # fmt: skip
            neg = ap(self.blk["neg"], slice(0, p), slice(0, p))
            b.emit(Matmul, [neg, sq], [var], stationary=neg, moving=sq, dst=var, accumulate=True)
        self.finish(n, p, mean, var, 1.0 / self.d)
        if n == 0 and norm_wide.BIAS_LATER:
            self.spread_one(self.bias)

    def y_parts(self, n: int):
        """y's column parts and their engines: VectorE's first Y_V of the columns (even, its
        bf16 fast case) in V_PARTS, GpSimd's the rest in G_PARTS (Y_V None: even parts,
        an odd last on GpSimd, each where the list schedule finds an engine free sooner)."""
        L = self.L
        if Y_V is not None:
            yv = Y_V[self.pad > 0]
            cv = round(L * yv / 2) * 2
            parts = [(c, (V,)) for c in _even_parts(cv, V_PARTS)]
            return parts + [((cv + a, cv + z), (G,)) for a, z in runs(L - cv, -(-(L - cv) //
                                                                         G_PARTS))]  # fmt: skip
        np_ = norm_wide.STT_PARTS[self.long + (self.long and L % self.bank > 0)]
        if L % 2 == 0:
            return [(c, (V, G)) for c in _even_parts(L, np_)]
        parts = [(c, (V, G)) for c in _even_parts(L - 1, np_)]
        (lo, hi), _ = parts[-1]
        return parts[:-1] + [((lo, L), (G,))]

    def copy(self, src, dst, scale=None, on=(S, V)) -> None:
        """`_Wide.copy`; stage 3's copies out (scaled by rstd) on ScalarE a COPY_S share of
        them, in turn, VectorE the rest (COPY_S None: the list schedule's pick)."""
        last = self.turn_n >= len(self.tiles) - COPY_LAST  # (`COPY_LAST`)
        if scale is not None and not isinstance(scale, float) and COPY_S is not None and not last:
            i, c = getattr(self, "n_out", 0) + 1, COPY_S[self.pad > 0]
            self.n_out = i
            on = (S,) if int(i * c) > int((i - 1) * c) else (V,)
        super().copy(src, dst, scale, on)

    def finish(self, n: int, p: int, mean, var, inv: float) -> None:
        """rstd and std of `var` (in PSUM, times 1 / inv); diag(std); y."""
        b = self.b
        rs, sd = self.sm(n, p, "rs"), self.sm(n, p, "sd")
        tail = self.tail(n)  # (`tail_alu` reads std)
        for func, dst in (("rsqrt", rs), ("sqrt", sd))[: 1 if STD_DIVIDE and not tail else 2]:
            b.emit(Activation, [var], [dst], func=func, src=var, dst=dst, scale=inv,
                   bias=self.eps)  # fmt: skip
        dg = self.dg(n, p)
        ib = ap(self.ib, slice(0, p), slice(0, p))
        for c, engines in self.y_parts(n):
            xs, ys = self.xt(n, p, c), self.yt(n, p, c)
            w = ap(self.spread[self.weight], slice(0, p), slice(*c))
            self.put([(ScalarTensorTensor, [xs, mean, w], [ys], dict(
                data=xs, op0="subtract", operand0=mean, op1="multiply", operand1=w, dst=ys,
                engine=e)) for e in engines])  # fmt: skip
        # (diag(std) after y: an engine's instructions go in their order, and y waits for the
        # mean alone, diag(std) for the squares' sums)
        if STD_DIVIDE:  # (diag(1 / rstd): no sqrt on ScalarE)
            ops = [(TensorScalar, [ib, rs], [dg], dict(src=ib, dst=dg, op0="divide", operand0=rs,
                                                       engine=e)) for e in DG_ON]  # fmt: skip
        else:
            ops = [(Activation, [ib, sd], [dg], dict(func="copy", src=ib, dst=dg, scale=sd,
                                                     engine=S))]  # fmt: skip
            ops += [
                (TensorScalar, [ib, sd], [dg], dict(src=ib, dst=dg, op0="multiply", operand0=sd,
                                                    engine=e))
                for e in (V, G)
            ]  # fmt: skip
            ops = [o for o in ops if o[3]["engine"] in DG_ON]
        self.put(ops)
