"""A norm's weight and bias: spread over the partitions for the engines' `tensor_tensor`s
(`spread`), or the bias added by TensorE into PSUM (`PeBias`)."""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import (
    Activation,
    AffineSelect,
    Ap,
    DmaCopy,
    Matmul,
    Memset,
    TensorCopy,
    TensorScalar,
)
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues
from trnsim.kernels.row_plan import G, V, bank_runs, runs

__all__ = ["spread", "spread_psum", "psum_cols", "PeBias", "pe_group", "SPREAD_BANKS", "PE_TILES"]

SPREAD_BANKS = 2  # PSUM banks the weight and bias are spread through, in turn
PE_TILES = 2  # PSUM banks the bias is added in by TensorE, in turn (a kernel's matmul may hold
# the others)


def spread(b: KernelBuilder, cfg: ChipConfig, names: list[str], d: int, loads=None,
           banks: int = SPREAD_BANKS, scalar: bool = False) -> list[str]:  # fmt: skip
    """[128, d] tiles: each tensor of `names` ([d]) on every partition: loaded into one
    partition (on `loads`, a `queues.Stream`: a norm's own, so the load waits behind the previous
    op's loads on it), multiplied by a ones row on TensorE (K = 1) into PSUM, copied out by
    VectorE and ScalarE in turn (emitted before a norm's blocks: the engines have nothing else
    to do until the first block is loaded), or by ScalarE alone (`scalar`), through `banks`
    PSUM banks in turn."""
    return _spread(b, cfg, names, d, loads, 0, 0, banks, scalar)[0]


def _spread(b: KernelBuilder, cfg: ChipConfig, names: list[str], d: int, loads, kept: int,
            at: int, banks: int = SPREAD_BANKS, scalar: bool = False):  # fmt: skip
    """`spread`'s tiles, and (`kept` > 0) [128, kept] fp32 PSUM tiles of each tensor's
    columns [at, at + kept) (`spread_psum`)."""
    P, f32 = cfg.core.sbuf.partitions, dtype("float32")
    new = names  # the tile shared by every norm of the kernel spreading it, filled each time
    tiles = [b.scratch_tile(f"norm.rows.{n}", f"{n}_rows", (P, d), b.tensors[n].dtype)
             for n in names]  # fmt: skip
    step = min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)
    chunks = [(t, n, lo, hi) for t, n in zip(tiles, names) for lo, hi in runs(d, step)
              if n in new]  # fmt: skip
    kept_ps = [b.psum(f"{n}_psum", (P, kept), f32) for n in names] if kept else []
    if kept:  # column by column, the first columns of each first (the first lanes need them)
        chunks.sort(key=lambda c: c[2])
    ps = [b.psum("spread", (P, step), f32) for _ in range(min(banks, len(chunks)))]
    loads, rows = loads or Queues(cfg).loads(1 / 2, 1), {}
    for i, n in enumerate(new):
        row = b.tile("row", "sbuf", (1, d), b.tensors[n].dtype)
        src, dst = ap(n), ap(row)
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=loads[i])
        rows[n] = (row, ones(b, b.tensors[n].dtype, P))
    for i, (t, n, lo, hi) in enumerate(chunks):
        row, one = rows[n]
        acc = ap(ps[i % len(ps)], slice(None), slice(0, hi - lo))
        mv = ap(row, slice(None), slice(lo, hi))
        b.emit(Matmul, [ap(one), mv], [acc], stationary=ap(one), moving=mv, dst=acc)
        o = ap(t, slice(None), slice(lo, hi))
        if i % 2 or scalar:
            b.emit(Activation, [acc], [o], func="copy", src=acc, dst=o)
        else:
            b.emit(TensorCopy, [acc], [o], src=acc, dst=o)
    for n, kp in zip(names, kept_ps):  # those columns again, into PSUM tiles that stay
        row, one = rows[n]
        for lo, hi in bank_runs(kept, step):  # (the tile starts on a bank: `memory.onchip`)
            acc = ap(kp, slice(None), slice(lo, hi))
            mv = ap(row, slice(None), slice(at + lo, at + hi))
            b.emit(Matmul, [ap(one), mv], [acc], stationary=ap(one), moving=mv, dst=acc)
    b.release(*ps)
    return tiles, kept_ps


def psum_cols(cfg: ChipConfig, n: int, d: int, keep_banks: int) -> int:
    """The first columns of each of n fp32 [128, d] spreads that PSUM holds beside `keep_banks`
    banks left to the op's other PSUM tiles and `spread`'s own (`spread_psum`): all d where
    they fit, else whole banks each (0: not one each), at most a VectorE PSUM operand's free
    size."""
    p = cfg.core.psum
    banks = p.banks - keep_banks - SPREAD_BANKS
    if n < 1 or banks < 1:
        return 0
    if n * 4 * d <= p.bank_bytes or -(-4 * d // p.bank_bytes) * n <= banks:
        cols = d
    else:
        cols = banks // n * p.bank_bytes // 4
    return min(cols, d, cfg.core.vector.psum_max_free_elements)


def spread_psum(b: KernelBuilder, cfg: ChipConfig, names: list[str], d: int, kept: int,
                at: int = 0, loads=None) -> tuple[list[str], list[str]]:  # fmt: skip
    """`spread`'s [128, d] SBUF tiles, and columns [at, at + kept) of each also in a [128,
    kept] fp32 PSUM tile of its own (`psum_cols`; TensorE's ones row times them again; the
    caller releases them): a VectorE `tensor_tensor` with one input in PSUM costs N cycles
    instead of 2N for fp32 (trainium.md 3.2), so VectorE's weight and bias read these; GpSimd
    (which does not read PSUM) the SBUF copies, the same values."""
    return _spread(b, cfg, names, d, loads, kept, at)


def ones(b: KernelBuilder, dt, P: int) -> str:
    """A [1, P] row of ones of dtype dt, made once per kernel."""
    key = f"norm.ones.{dt.name}"
    new = key not in b.scratch
    t = b.scratch_tile(key, "ones", (1, P), dt)
    if new:
        b.emit(Memset, [], [ap(t)], dst=ap(t), value=1.0, engine=V)
    return t


def pe_group(cfg: ChipConfig, d: int, per: int) -> int:
    """Row slots of d whose bias TensorE adds at once (`PeBias`): as many as a PSUM bank's
    fp32 columns hold, at most `per`."""
    step = min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)
    return max(1, min(per, step // d))


class PeBias:
    """The bias added by TensorE: per chunk of up to a PSUM bank's columns, a ones row times
    the bias row (K = 1) and the identity times the lane's values accumulate into PSUM, and
    ScalarE copies the sum out (its 1.2 GHz pass instead of a `tensor_tensor` at two cycles an
    element on GpSimd, or a VectorE pass).

    Short rows (`group` > 1: up to a bank's columns of them) go `group` row slots at a time: the
    bias row is loaded `group` times side by side, so one pair of matmuls and one ScalarE copy
    serve them all (rows of 64 bf16: 8 slots an instruction instead of one; ScalarE was busy
    98 us of 124 copying out slot by slot)."""

    def __init__(self, b: KernelBuilder, cfg: ChipConfig, bias: str, d: int, odt,
                 pieces: bool = False, group: int = 1, tiles: int = PE_TILES,
                 banked: bool = False):  # fmt: skip
        P, self.b, self.P = cfg.core.sbuf.partitions, b, cfg.core.sbuf.partitions
        dt = b.tensors[bias].dtype
        self.step = min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)
        self.group, self.d = (group, d) if not pieces else (1, d)
        self.ident = b.tile("ident", "sbuf", (P, P), odt)
        a = ap(self.ident)
        b.emit(Memset, [], [a], dst=a, value=0.0, engine=G)
        b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=1.0, cmp="not_equal", start=0,
               partition_step=1, step=-1, engine=G)  # fmt: skip
        # rows in pieces (`pieces`): the bias differs from partition to partition, its tile in
        # the pieces' pattern (`pieces_row`, set by the norm) added by the identity
        self.pieces, self.pieces_row = pieces, None
        self.pieces_segs = None  # ... or its segments' tiles and their columns (rows in segments)
        if not pieces:
            self.row = b.tile("bias_row", "sbuf", (1, d), dt)
            self.ones = ones(b, dt, P)
            src, dst = ap(bias), ap(self.row)
            queue = Queues(cfg).loads(1 / 2, 1)[1]
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=queue)
            if self.group > 1:  # the row side by side, `group` times
                self.rows = b.tile("bias_rows", "sbuf", (1, self.group, d), dt)
                for r in range(self.group):
                    dst = ap(self.rows, slice(None), r)
                    b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=queue)
        self.ps: list[str] = []  # taken at the first add (after `spread` released its own)
        self.tiles = tiles  # ... this many, in turn
        self.turn = 0
        self.banked = banked  # tiles of several banks ordered bank by bank (`builder.banked`):
        # a copy out a bank (`add`'s `split`) waits only for its bank's matmuls, a matmul into a
        # bank only for its copy out (two semaphores more a bank)

    def take(self, span: int) -> list[str]:
        """The PSUM tiles (`tiles` of `span` banks), taken at the first call."""
        if not self.ps:
            f32 = dtype("float32")
            self.ps = [self.b.psum("bias", (self.P, span * self.step), f32)
                       for _ in range(self.tiles)]  # fmt: skip
            for t in self.ps if span > 1 and self.banked else ():
                self.b.banked(t, self.step)
        return self.ps

    def add(self, o: Ap, f: Ap, lo: int, w: int, p: int, span: int = 1, diag=None,
            split: bool = False, bias_st=None, scale=None, sel=None) -> None:  # fmt: skip
        """f = o + bias[lo:lo + w] (o, f: [p, w] views of SBUF tiles, the last index a range
        starting at 0), per PSUM bank: the matmul pair; then ScalarE's copy out, one for each
        `span` banks (a PSUM tile of `span` banks: fewer copies, each waiting on TensorE once,
        as the attention kernels' scores read two banks at once). `diag`: a [p, p] stationary in
        place of the identity (f = diag o + bias: a normalisation's diag(rstd)), or a tuple of
        them whose sum is that (`NormStages.stt_scales`: rstd in two bf16 parts). `split`: a copy
        out a bank, on ScalarE and VectorE in turn (the same rounding to the output's dtype on
        either), so a tile's copies run side by side. `bias_st`: a [p, p] stationary in place of
        the identity for the bias' pieces, `scale` ([p, 1]) the copy out's
        (`NormStages.std_scales`: f = scale (o + bias_st^T bias), fp32 products on either).
        `sel`: (S, B, K), the bias as S^T B (S [K, p] TensorE's stationary in place of the ones
        row, B a tile whose first K partitions are its moving rows: a tail's segments,
        `norm_tail`)."""
        b = self.b
        self.take(span)
        for a0 in range(0, w, span * self.step):
            a1 = min(w, a0 + span * self.step)
            tile = self.ps[self.turn % self.tiles]
            self.turn += 1
            if bias_st is not None:
                self._std_pairs(o, tile, lo, a0, a1, p, bias_st)
            for c0 in range(a0, a1, self.step) if bias_st is None else ():
                self._pair(o, tile, lo, c0, min(a1, c0 + self.step), p, a0, diag, sel)
            if split and a1 - a0 > self.step:  # a bank each on ScalarE and VectorE
                part = (a1 - a0) % self.step  # a partial last bank
                for c0 in range(a0, a1, self.step):
                    c1 = min(a1, c0 + self.step)
                    acc = ap(tile, slice(0, p), slice(c0 - a0, c1 - a0))
                    out = _cols(f, c0, c1)
                    # a partial last bank on VectorE, the full ones on ScalarE (each bank's copy
                    # waits only for its matmuls, `banked`: ScalarE, the faster, copies the full
                    # banks as TensorE ends them; VectorE the last, its fixed cost most of it:
                    # bf16 151936, lanes of 512 + 512 + 164, 58.92 -> 58.78 us); all full: in turn
                    on_v = c1 - c0 < self.step if part else (c0 - a0) // self.step % 2
                    if on_v and scale is not None:
                        b.emit(TensorScalar, [acc, scale], [out], src=acc, dst=out,
                               op0="multiply", operand0=scale, engine=V)  # fmt: skip
                    elif on_v:
                        b.emit(TensorCopy, [acc], [out], src=acc, dst=out, engine=V)
                    elif scale is not None:
                        b.emit(Activation, [acc, scale], [out], func="copy", src=acc, dst=out,
                               scale=scale)  # fmt: skip
                    else:
                        b.emit(Activation, [acc], [out], func="copy", src=acc, dst=out)
                continue
            acc, out = ap(tile, slice(0, p), slice(0, a1 - a0)), _cols(f, a0, a1)
            if scale is None:
                b.emit(Activation, [acc], [out], func="copy", src=acc, dst=out)
            else:
                b.emit(Activation, [acc, scale], [out], func="copy", src=acc, dst=out,
                       scale=scale)  # fmt: skip

    def add_group(self, os_: list[Ap], f: Ap, lo: int, w: int, p: int, span: int,
                  diags=None) -> None:  # fmt: skip
        """f = o + bias[lo:lo + w] for the [p, w] views `os_` (row slots; w dividing a bank's
        columns, len(os_) w at most `span` banks'), side by side in one PSUM tile (none across
        a bank), one copy out into f ([p, len(os_), w]); `diags`: each view's stationary in
        place of the identity (`add`)."""
        b = self.b
        if not self.ps:
            f32 = dtype("float32")
            self.ps = [b.psum("bias", (self.P, span * self.step), f32) for _ in range(PE_TILES)]
        tile = self.ps[self.turn % PE_TILES]
        self.turn += 1
        for u, o in enumerate(os_):
            self._pair(o, tile, lo, 0, w, p, -u * w, diags and diags[u])
        acc = ap(tile, slice(0, p), slice(0, len(os_) * w))
        b.emit(Activation, [acc], [f], func="copy", src=acc, dst=f)

    def _piece_cols(self, p: int, lo: int, hi: int) -> Ap:
        """The bias' pieces' columns [lo, hi) (within one segment where in segments)."""
        if self.pieces_segs is None:
            return ap(self.pieces_row, slice(0, p), slice(lo, hi))
        segs, f = self.pieces_segs
        if isinstance(f, list):  # (lanes: each one's first column)
            s = max(i for i, a in enumerate(f) if a <= lo)
            return ap(segs[s], slice(0, p), slice(lo - f[s], hi - f[s]))
        s = lo // f
        return ap(segs[s], slice(0, p), slice(lo - s * f, hi - s * f))

    def _pair(self, o: Ap, tile: str, lo: int, c0: int, c1: int, p: int, a0: int,
              diag=None, sel=None) -> None:  # fmt: skip
        """The matmul pair of o's columns [c0, c1) into PSUM tile `tile` from column c0 - a0
        (one bank): the bias row's, then the values' (the identity times them; or each of
        `diag` times them, accumulated: `add`)."""
        b = self.b
        acc = ap(tile, slice(0, p), slice(c0 - a0, c1 - a0))
        if sel is not None:  # (`add`'s `sel`)
            one, rows, kk = sel
            row = ap(rows, slice(0, kk), slice(lo + c0, lo + c1))
        elif self.pieces:  # the identity times the bias' pieces
            one = ap(self.ident, slice(0, p), slice(0, p))
            row = self._piece_cols(p, lo + c0, lo + c1)
        else:
            one, row = (
                ap(self.ones, slice(None), slice(0, p)),
                ap(self.row, slice(None), slice(lo + c0, lo + c1)),
            )
        b.emit(Matmul, [one, row], [acc], stationary=one, moving=row, dst=acc)
        part = _cols(o, c0, c1)
        ident = ap(self.ident, slice(0, p), slice(0, p))
        sts = (diag or ident,) if diag is None or isinstance(diag, Ap) else diag  # (Ap: a tuple)
        for st in sts:
            b.emit(Matmul, [st, part], [acc], stationary=st, moving=part, dst=acc,
                   accumulate=True)  # fmt: skip

    def _std_pairs(self, o: Ap, tile: str, lo: int, a0: int, a1: int, p: int,
                   bias_st: Ap) -> None:  # fmt: skip
        """`add`'s matmul pairs of o's columns [a0, a1) with `bias_st` (`NormStages.std_scales`):
        the identity times the values into each bank, then bias_st times the bias' pieces,
        accumulated (the values' first: they wait on no statistic, TensorE's queue in order)."""
        b, step = self.b, self.step
        ident = ap(self.ident, slice(0, p), slice(0, p))
        for c0 in range(a0, a1, step):
            acc, part = ap(tile, slice(0, p), slice(c0 - a0, min(a1, c0 + step) - a0)), _cols(
                o, c0, min(a1, c0 + step))  # fmt: skip
            b.emit(Matmul, [ident, part], [acc], stationary=ident, moving=part, dst=acc)
        for c0 in range(a0, a1, step):
            acc = ap(tile, slice(0, p), slice(c0 - a0, min(a1, c0 + step) - a0))
            row = self._piece_cols(p, lo + c0, lo + min(a1, c0 + step))
            b.emit(Matmul, [bias_st, row], [acc], stationary=bias_st, moving=row, dst=acc,
                   accumulate=True)  # fmt: skip

    def add_slots(self, o: Ap, f: Ap, r: int, p: int) -> None:
        """f = o + bias for r row slots at once (o, f: [p, r, d] views of whole rows, r at most
        `group`): one matmul pair into a PSUM bank ([p, r d]), one ScalarE copy out."""
        b, d = self.b, self.d
        if not self.ps:
            f32 = dtype("float32")
            self.ps = [b.psum("bias", (self.P, self.step), f32) for _ in range(PE_TILES)]
        acc = ap(self.ps[self.turn % PE_TILES], slice(0, p), slice(0, r * d))
        self.turn += 1
        one, row = (
            ap(self.ones, slice(None), slice(0, p)),
            ap(self.rows, slice(None), slice(0, r), slice(None)),
        )
        b.emit(Matmul, [one, row], [acc], stationary=one, moving=row, dst=acc)
        ident = ap(self.ident, slice(0, p), slice(0, p))
        b.emit(Matmul, [ident, o], [acc], stationary=ident, moving=o, dst=acc, accumulate=True)
        b.emit(Activation, [acc], [f], func="copy", src=acc, dst=f)

    def done(self) -> None:
        self.b.release(*self.ps)


def _cols(a: Ap, lo: int, hi: int) -> Ap:
    """Operand `a` over columns [lo, hi) of its last index (a range from its start)."""
    start = a.index[-1][0] or 0
    return Ap(a.name, a.index[:-1] + ((start + lo, start + hi, None),))
