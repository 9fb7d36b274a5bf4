"""`layer_norm` over short bf16 rows with a weight and a bias (`norm_short`'s blocks, MIN_ROW to
SHORT_ROW elements), the normalisation folded into the weight and TensorE's bias: three passes
over the elements, not four. out = rstd (x - mean) w + b is

    out = rstd (y + std b),  y = (x - mean) w,

1. load; VectorE's `bn_stats` a row slot each (`norm_short`);
2. the block's mean, rstd and std (`norm_short._halves`' formulas by TensorE and ScalarE,
   `stats`), std in two bf16 parts (hi + lo); y a row slot each: one `scalar_tensor_tensor`
   (x - mean) * w (on VectorE one cycle an element for bf16, as its tensor_tensor: the
   weight's pass with the mean's subtraction for nothing; or GpSimd); std's parts transposed
   by TensorE (row slot j's on partitions 2j and 2j + 1);
3. per PSUM bank (a bank's row slots): the identity times y and the transposed std times the
   mask M (`prepare`: M[k, j] = b where k // 2 = j, else 0), accumulated: y + std b for the
   bank's slots in two matmuls; each slot copied out times its rstd (ScalarE's `activation`
   with rstd its scale, or VectorE's `tensor_scalar`) into x's tile; store.

VectorE's bn_stats is its pass whatever the plan; with the normalisation a pass of its own (a
row slot each on ScalarE, VectorE or GpSimd, as `norm_short`'s, with TensorE's bias) the
engines had four passes to share and VectorE ran them too (bf16 rows of 96: 69.9 us at best).
trn2 LNC 2, 16 MiB, bf16 rows of 96 71.2 -> 58.7 us (`norms.FLEX_BUFS` before), of 100 70.3 ->
58.9, of 200 68.6 -> 58.2 -> 57.4 and of 384 65.3 -> 58.6 -> 57.5 (pipelined with TensorE's
rstd before; then blocks of 10 KiB and a longer descent, `BLOCK_BYTES`, `SEARCH`). y's
bf16 rounding is that of the weighted normalised values (relative, as the other plans' y), std
b is exact in fp32 (the parts' products), rstd std = 1 to fp32's rounding. A row's values
depend only on its own statistics: the same at LNC 1 and 2.
"""

from __future__ import annotations

from trnsim.isa import (
    Activation,
    AffineSelect,
    DmaCopy,
    Matmul,
    Memset,
    ScalarTensorTensor,
    TensorCopy,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.builder import ap
from trnsim.kernels.norm_affine import pe_group
from trnsim.kernels.norm_short import _Ln
from trnsim.kernels.row_plan import G, S, V

__all__ = ["MIN_ROW", "SHORT_ROW", "Fused", "fused"]

SHORT_ROW = 384  # rows this short (at most a PSUM bank's fp32 columns, 512: a slot's copy
# reads one bank; trn2 LNC 2, 16 MiB, bf16 rows of 448 and 512 ran 61.1 and 60.1 us so, 60.9
# and 56.7 pipelined, `norms`)
MIN_ROW = 64  # ... and this long (shorter: more row slots, each a few instructions; and a
# block's 2 per partitions of std's parts fit TensorE's 128, `norm_short.BLOCK_BYTES`' 64 rows)
UNIT = 2  # rows a partition a multiple of this, and the first and last blocks cut in halves
TAPER = (2,)  # (`rms_short._taper`; trn2 LNC 2, 16 MiB, bf16 rows of 96, 100, 200, 384: in
# quarters, 4: 62.9, 64.0, 62.6, 64.4 us; halves, 2: 63.3, 63.6, 61.7, 62.2; neither, 1: 64.2,
# 64.0, 62.9, 62.5)
BLOCK_BYTES = 10240  # x's bytes a partition of a block, rows longer than LONG_ROW (trn2 LNC 2,
# 16 MiB, bf16 rows of 128, 200, 256, 384 with SEARCH: 8192 58.4, 58.0, 57.7, 58.6 us; 10240 57.8,
# 57.4, 57.5, 57.5; 6144 made 384 58.1 but 200 58.8; 12288 200 58.5, 384 58.1) ...
LONG_ROW = 100  # ... and `norm_short.BLOCK_BYTES` up to this (bf16 rows of 96, 100: 8192 57.9,
# 58.9 us; 10240 58.6, 59.0)
SEARCH = 300  # the list schedule's descent, schedules at most (`norm_short.SEARCH`'s 150: bf16
# rows of 96, 128, 200 58.7, 58.6, 57.9 us; 300 57.9, 57.8, 57.4; 400 as 300)
UNIT_BANKS = 2  # PSUM banks of a unit (its row slots' y in a tile of their own, `yslot`)
PSUM_TILES = 3  # ... the units' PSUM tiles, in turn
COLS = ("q", "mean", "rs", "sd")  # the [p, per] steps' columns in SBUF, one tile


def fused(tensors: dict, x: str, out: str, weight, bias) -> bool:
    """Whether a layer_norm of rows that fit may go here: bf16 x, output, weight and bias (the
    mask holds the bias in x's dtype; VectorE's (x - mean) w one cycle an element for bf16)."""
    if weight is None or bias is None:
        return False
    return {tensors[n].dtype.name for n in (x, out, weight, bias)} == {"bfloat16"}


class Fused(_Ln):
    """`norm_short`'s plan with the normalisation folded (module doc)."""

    UNIT, TAPER, SEARCH = UNIT, TAPER, SEARCH

    def __init__(self, *a):
        super().__init__(*a)
        self.g = self.unit = 1  # row slots of a PSUM bank, of a unit
        self.units = 1  # units of a block
        self.ring = 1  # y's tiles (`ring_bytes`)
        self.ident = self.mask = ""
        self.pe_ps: list[str] = []
        self.st_ps: list[str] = []
        self.ids: dict[str, str] = {}
        self.turn = 0

    def block_bytes(self) -> int:
        """Longer rows' blocks larger (`BLOCK_BYTES`): fewer row slots' fixed costs a row."""
        return BLOCK_BYTES if self.d > LONG_ROW else super().block_bytes()

    def ring_bytes(self, most: int) -> int:
        """The y tiles: two blocks' units (of `most` rows a partition), in turn (a block's y
        is written a stage before the one that reads the block before's: `_emit`'s lags)."""
        unit = min(most, pe_group(self.cfg, self.d, most) * UNIT_BANKS)
        self.ring = 2 * -(-most // unit)
        return self.ring * unit * self.d * self.odt.itemsize

    def prepare(self) -> None:
        """The units' sizes; the identity ([P, P]: TensorE's stationary of y, and its moving
        of the transposes) and the mask M ([2 per, per, D], module doc), a row slot's columns
        at a time by ScalarE, VectorE or GpSimd, as the list schedule finds them free (by
        VectorE or GpSimd a unit's at a time, a `tensor_tensor` with e2 broadcast, GpSimd took
        6.4 us of the first blocks' time at rows of 384: trn2 LNC 2, 16 MiB, bf16 rows of 96,
        200, 384 60.2, 60.3, 59.9 -> 59.8, 59.5, 59.3 us)."""
        b, P, d, per = self.b, self.P, self.d, self.per
        self.g = pe_group(self.cfg, d, per)
        self.unit = min(per, self.g * UNIT_BANKS)
        self.units = -(-per // self.unit)
        self.ident = b.tile("ident", "sbuf", (P, P), self.odt)
        a = ap(self.ident)
        b.emit(Memset, [], [a], dst=a, value=0.0, engine=G)
        b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=1.0, cmp="not_equal", start=0,
               partition_step=1, step=-1, engine=G)  # fmt: skip
        # (`stats`' stationaries: the identity in fp32, times ne / D, no / D, -1; -1 in bf16)
        f32 = self.f32
        self.ids = {k: b.tile(f"lnf_i{k}", "sbuf", (P, P), dt) for k, dt in
                    (("I", f32), ("A", f32), ("B", f32), ("N", f32), ("Nb", self.odt))}  # fmt: skip
        i0 = ap(self.ids["I"])
        b.emit(Memset, [], [i0], dst=i0, value=0.0, engine=G)
        b.emit(AffineSelect, [i0], [i0], on_true=i0, dst=i0, on_false=1.0, cmp="not_equal",
               start=0, partition_step=1, step=-1, engine=G)  # fmt: skip
        ne = (d + 1) // 2
        for k, c in (("A", ne / d), ("B", (d - ne) / d), ("N", -1.0), ("Nb", -1.0)):
            o = ap(self.ids[k])
            self.put([(TensorScalar, [i0], [o], dict(
                src=i0, dst=o, op0="multiply", operand0=c, engine=x)) for x in (V, G)])  # fmt: skip
        e2 = ap(b.tile("lnf_e2", "sbuf", (2 * per, per), self.odt))
        ev, od = (ap(self.ident, slice(0, 2 * per), slice(h, 2 * per, 2)) for h in (0, 1))
        b.emit(TensorTensor, [ev, od], [e2], alu="add", src0=ev, src1=od, dst=e2, engine=G)
        self.mask = b.tile("lnf_mask", "sbuf", (2 * per, per, d), self.odt)
        bias = self.rows[self.bias]
        bv = ap(bias, slice(0, 2 * per), slice(None))
        for j in range(per):  # (slot j's columns: the bias times e2's column j)
            m = ap(self.mask, slice(None), j, slice(None))
            e = ap(e2.name, slice(None), slice(j, j + 1))
            copy = dict(func="copy", src=bv, dst=m, scale=e, engine=S)
            self.put([(Activation, [bv, e], [m], copy)] + [(TensorScalar, [bv, e], [m], dict(
                src=bv, dst=m, op0="multiply", operand0=e, engine=x)) for x in (V, G)])  # fmt: skip
        step = min(self.cfg.core.tensor.moving_free_max, self.cfg.core.psum.bank_bytes // 4)
        self.pe_ps = [b.tile("lnf_bias", "psum", (P, -(-self.unit // self.g), step), self.f32)
                      for _ in range(PSUM_TILES)]  # fmt: skip
        self.st_ps = [b.psum("lnf_sT", (P, P + 4 * 64), self.f32) for _ in range(2)]
        self.psum |= {t: t for t in self.pe_ps + self.st_ps}  # (released by `norm_short`)

    def fcol(self, n: int, p: int, per: int, name: str, j=None):
        """Block n's [p, per] column `name` of COLS (one tile: fewer semaphores), or its slot
        j's ([p, 1])."""
        t = self.tile("fc", n, (self.P, len(COLS), self.per), self.f32)
        return ap(t, slice(0, p), COLS.index(name), slice(0, per) if j is None else slice(j, j + 1))

    def yslot(self, n: int, p: int, j: int):
        """Row slot j of block n's y: in its unit's tile (`ring` of them in turn)."""
        u = j // self.unit
        t = self.b.scratch_tile(f"lnf.y{(n * self.units + u) % self.ring}", "y",
                                (self.P, self.unit, self.d), self.odt)  # fmt: skip
        return ap(t, slice(0, p), j - u * self.unit)

    def second(self, n: int, index: tuple, rows: int, per: int) -> None:
        """Stage 2: mean, rstd and std's parts; their transpose; y a row slot each (module
        doc)."""
        b, p = self.b, rows // per
        f = [self.stat(n, p, per, i) for i in range(6)]
        sh = self.tile("sh", n, (self.P, self.per, 2), self.odt)
        hi, lo = (ap(sh, slice(0, p), slice(0, per), h) for h in (0, 1))
        self.stats(n, p, per, f, hi, lo)
        tp = self.st_ps[n % len(self.st_ps)]
        ident = ap(self.ident, slice(0, p), slice(0, p))
        both = ap(sh, slice(0, p), slice(0, per), slice(None))
        acc = ap(tp, slice(0, 2 * per), slice(0, p))
        b.emit(Matmul, [both, ident], [acc], stationary=both, moving=ident, dst=acc)
        st = self.std_t(n, p, per)
        self.put([(Activation, [acc], [st], dict(func="copy", src=acc, dst=st, engine=S)),
                  (TensorCopy, [acc], [st], dict(src=acc, dst=st, engine=V))])  # fmt: skip
        w = ap(self.rows[self.weight], slice(0, p), slice(None))
        for j in range(per):
            xj, yj, mj = self.rows_of("x", n, p, per, j), self.yslot(n, p, j), self.fcol(
                n, p, per, "mean", j)  # fmt: skip
            self.put([(ScalarTensorTensor, [xj, mj, w], [yj], dict(
                data=xj, op0="subtract", operand0=mj, op1="multiply", operand1=w, dst=yj,
                engine=e)) for e in (V, G)])  # fmt: skip

    def stats(self, n: int, p: int, per: int, f: list, hi, lo) -> None:
        """Block n's mean (into its column, y's operand), rstd and std's parts (hi, lo) from
        bn_stats' fields f (`norm_short._halves`' formulas: mean = (ne me + no mo) / D, var D =
        M2e + M2o + (me - mo)^2 ne no / D) by TensorE and ScalarE: the sums as identities (times
        ne / D, no / D, -1) times the fields accumulated in PSUM, the square and the roots on
        ScalarE, which reads PSUM; VectorE and GpSimd, busy with the passes, take none of these
        [p, per] steps (trn2 LNC 2, 16 MiB, bf16 rows of 96, 200, 384: with eight of them on
        VectorE or GpSimd 59.8, 59.5, 59.3 us; so 58.7, 58.2, 58.6)."""
        b, d, ne = self.b, self.d, (self.d + 1) // 2
        no = d - ne
        q, mean, rs, sd = (self.fcol(n, p, per, c) for c in COLS)
        t, c = self.st_ps[n % len(self.st_ps)], self.P  # (beside the transposes' columns)
        reg = {k: ap(t, slice(0, p), slice(c + i * 64, c + i * 64 + per)) for i, k in
               enumerate(("dm", "v", "mean", "lo"))}  # fmt: skip
        one, ca, cb, neg, negb = (ap(self.ids[k], slice(0, p), slice(0, p))
                                  for k in ("I", "A", "B", "N", "Nb"))  # fmt: skip

        def mm(dst, pairs):
            for i, (st, mv) in enumerate(pairs):
                b.emit(Matmul, [st, mv], [dst], stationary=st, moving=mv, dst=dst,
                       accumulate=i > 0)  # fmt: skip

        mm(reg["dm"], [(one, f[1]), (neg, f[4])])
        mm(reg["mean"], [(ca, f[1]), (cb, f[4])])
        b.emit(Activation, [reg["dm"]], [q], func="square", src=reg["dm"], dst=q,
               scale=(ne * no / d) ** 0.5)  # fmt: skip
        self.put([(Activation, [reg["mean"]], [mean], dict(func="copy", src=reg["mean"],
                                                            dst=mean, engine=S)),
                  (TensorCopy, [reg["mean"]], [mean], dict(src=reg["mean"], dst=mean,
                                                           engine=V))])  # fmt: skip
        mm(reg["v"], [(one, f[2]), (one, f[5]), (one, q)])
        for func, dst in (("rsqrt", rs), ("sqrt", sd)):
            b.emit(Activation, [reg["v"]], [dst], func=func, src=reg["v"], dst=dst,
                   scale=1.0 / d, bias=self.eps)  # fmt: skip
        b.emit(Activation, [sd], [hi], func="copy", src=sd, dst=hi)
        mm(reg["lo"], [(one, sd), (negb, hi)])
        b.emit(Activation, [reg["lo"]], [lo], func="copy", src=reg["lo"], dst=lo)

    def std_t(self, n: int, p: int, per: int):
        """Block n's transposed std parts ([2 per, p]: slot j's hi, lo on partitions 2j, 2j +
        1)."""
        t = self.tile("sT", n, (2 * self.per, self.P), self.odt)
        return ap(t, slice(0, 2 * per), slice(0, p))

    def third(self, n: int, index: tuple, rows: int, per: int) -> None:
        """Stage 3: each unit's matmuls and copies out (`unit_out`); store."""
        p = rows // per
        for j in range(0, per, self.unit):
            self.unit_out(n, p, per, j, min(per, j + self.unit) - j)
        o, dst = self.rows_of("x", n, p, per), ap(self.out, *index)
        self.b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=self.stores[n])

    def unit_out(self, n: int, p: int, per: int, j: int, r: int) -> None:
        """Row slots [j, j + r) (a unit): per PSUM bank the identity times y, then the
        transposed std times the mask's columns of the bank's slots, accumulated; each slot
        copied out times its rstd into x's tile by ScalarE or VectorE, as the list schedule
        finds either free."""
        b, d, g = self.b, self.d, self.g
        tile = self.pe_ps[self.turn % len(self.pe_ps)]
        self.turn += 1
        ident, y0 = ap(self.ident, slice(0, p), slice(0, p)), self.yslot(n, p, j)
        st = self.std_t(n, p, per)
        for k in range(-(-r // g)):
            a, z = k * g, min(r, k * g + g)
            acc = ap(tile, slice(0, p), k, slice(0, (z - a) * d))
            ys = ap(y0.name, slice(0, p), slice(a, z))
            b.emit(Matmul, [ident, ys], [acc], stationary=ident, moving=ys, dst=acc)
            mv = ap(self.mask, slice(0, 2 * per), slice(j + a, j + z), slice(None))
            b.emit(Matmul, [st, mv], [acc], stationary=st, moving=mv, dst=acc, accumulate=True)
        for u in range(r):
            k, c = divmod(u, g)
            acc = ap(tile, slice(0, p), k, slice(c * d, c * d + d))
            f, rj = self.rows_of("x", n, p, per, j + u), self.fcol(n, p, per, "rs", j + u)
            self.put([(Activation, [acc, rj], [f], dict(func="copy", src=acc, dst=f, scale=rj,
                                                        engine=S)),
                      (TensorScalar, [acc, rj], [f], dict(src=acc, dst=f, op0="multiply",
                                                          operand0=rj, engine=V))])  # fmt: skip
