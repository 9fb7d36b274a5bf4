"""`scaled_dot_product_attention`: out = softmax(q k^T * scale + mask) v, fused flash-style.

q [..., H, S, D], k and v [..., Hkv, Skv, D] (grouped-query heads: H a multiple of Hkv, head h
reads kv head h // (H / Hkv)), D <= 128; `is_causal` masks key j > query i (PyTorch's
top-left alignment); `scale` defaults to 1 / sqrt(D). The scores never leave the chip.

The work is cut in units: one block of 128 query rows against one key block of KB = 1,024
keys (two PSUM banks of fp32 scores; a block stops at the diagonal when causal). Per unit:

- k^T [D, KB] (one DMA transpose) and v (one DMA: partition p holds keys 8p .. 8p + 7, each
  chunk of 128 keys with a column of ones) are loaded once for the GROUP = 2 query blocks of
  a head that read them; q^T once per query block;
- S = q k^T on TensorE (two matmuls); on the diagonal the mask is added in PSUM by one more
  matmul, a constant identity times a constant bias tile (0 or -2^126);
- the row max on ScalarE for two units of three (`MAX_ON`: an activation copying scale * S
  to SBUF, the max in the same instruction), on VectorE from PSUM for the third; GpSimd
  updates the negated running max -m' = min(-max, -m); ScalarE computes P = exp(scale S -
  m') (bf16), but where it took the max GpSimd computes the first GP_SHARE (3/8) of P's
  columns from the SBUF copy as e ** (scale S - m') (a pow, 4 cycles an element);
  c = e ** (m - m') on GpSimd (one element a row);
- TensorE transposes P in eight 128-key chunks into a PSUM tile, VectorE copies it to SBUF,
  VectorE rescales acc (PSUM) by c, and TensorE accumulates P^T-chunk x [v-chunk, 1] into acc:
  its last column is the row sum l;
- after the last unit of a query block, out = acc / l on VectorE, cast and stored.

NC-v2's ScalarE reduces by add only: there VectorE takes every row max. The units of a group
alternate between its query blocks (so consecutive units are independent) and are emitted
software-pipelined (`_pipeline`): each step issues one unit's exp, the next unit's max, the
scores two units ahead, and the transposes, copy and P v of units already past their exp, so
every engine works on several units at once. TensorE does three passes per unit (scores,
transposes, P v) of which two count as FLOPs: it can reach 2/3 of peak; ScalarE (the exp and
most maxes) and VectorE bind first (docs/kernels.md).
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import (
    Activation,
    AffineSelect,
    DmaCopy,
    Engine,
    Matmul,
    Memset,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    Transpose,
)
from trnsim.kernels.builder import KernelBuilder, ap

__all__ = ["lower_attention"]

SCORE_BANKS = 2  # PSUM banks of fp32 scores per key block: KB = 1,024 keys with 2 KiB banks
GROUP = 2  # query blocks of one head that share each key block loaded (`_Shared`)
# the stages of `_pipeline`, in the order a step emits them, with the unit each works on
# (step i: unit i + offset)
ORDER = (
    ("prepare", 4), ("max", 1), ("transpose", -2), ("pv", -3), ("exp", 0), ("scores", 2),
    ("copy", -2), ("rescale", -1), ("finish", -3),
)  # fmt: skip
QUEUES = {"q": (0, 2), "k": (2, 3), "v": (5, 3), "out": (8, 4)}  # kind -> (first, count)
DEPTH = {  # tiles of a kind before any is reused: enough for the units in flight
    "qT": 4,
    "kT": 6,
    "v": 6,
    "s": 2,  # PSUM (16 KiB): 2 x 4 KiB of scores, 2 x 2 KiB of P^T, 3 x 516 B of acc
    "s_sb": 3,
    "p": 3,
    "pT": 2,
    "pT_sb": 2,
    "acc": 3,
    "o": 2,
    "col": 32,
}
# units (in emission order, in turn) whose row max ScalarE takes ("S", with a copy of scale * S
# to SBUF) or VectorE ("V"): ScalarE also runs every exp, so it takes two of three
MAX_ON = "SVS"
GP_SHARE = 0.375  # of P's columns GpSimd exponentiates where ScalarE took the max (`_exp`)
MASK = -(2.0**126)  # the causal mask's bias: exact in bf16, and exp(scale * (s + MASK)) = 0


def lower_attention(
    b: KernelBuilder, cfg: ChipConfig, q: str, k: str, v: str, out: str, is_causal=False, scale=None
) -> None:
    """Emit out = scaled_dot_product_attention(q, k, v) (module doc)."""
    tq, tk, tv, to = (b.tensors[n] for n in (q, k, v, out))
    lead, (H, S, D) = tuple(tq.shape[:-3]), tq.shape[-3:]
    if len(tq.shape) < 3 or tk.shape != tv.shape or tuple(to.shape) != tuple(tq.shape):
        raise TraceError(_shapes(tq, tk, tv, to))
    Hkv, Skv, Dk = tk.shape[-3:]
    if tuple(tk.shape[:-3]) != lead or Dk != D or H % Hkv or D > cfg.core.tensor.rows:
        raise TraceError(_shapes(tq, tk, tv, to))
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    t = _Tiles(b, cfg, D, tq.dtype, to.dtype)
    t.reserve()
    share = b.share(to.shape)
    if share is not None and S % t.P and t.P % S:  # cuts fall at multiples of P rows
        raise TraceError(
            f"scaled_dot_product_attention: a sequence of {S} split over {b.part[1]} cores: "
            f"query blocks of {t.P} would straddle the cores' shares; expected a multiple of "
            f"{t.P} (or lnc: 1)"
        )
    lo, hi = share or (0, math.prod(tq.shape[:-1]))
    mask = _mask(b, t) if is_causal else None
    units = []
    for i, batch in enumerate(_indices(lead)):
        for h in range(H):
            q0s = [q0 for q0 in range(0, S, t.P) if lo <= (i * H + h) * S + q0 < hi]  # ours
            heads = ((*batch, h), (*batch, h // (H // Hkv)))
            for g in range(0, len(q0s), GROUP):
                blocks = q0s[g : g + GROUP]
                units += _group_units(t, (q, k, v, out), heads, blocks, (S, Skv), is_causal)
    _pipeline(b, t, units, scale, mask)
    b.release(*t.psum)


def _shapes(tq, tk, tv, to) -> str:
    return (
        f"scaled_dot_product_attention: q {list(tq.shape)}, k {list(tk.shape)}, "
        f"v {list(tv.shape)}, out {list(to.shape)}: expected q and out [..., H, S, D], k and v "
        "[..., Hkv, Skv, D] with H a multiple of Hkv and D <= 128"
    )


def _indices(lead: tuple[int, ...]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for n in lead:
        out = [(*x, i) for x in out for i in range(n)]
    return out


class _Tiles:
    """The kernel's buffers, by kind: a stage takes one and gives it back after the last
    instruction that uses it; a kind has DEPTH tiles (more only if more are live at once),
    reused in turn; the builder orders a taken tile's next writes after its earlier reads."""

    def __init__(self, b: KernelBuilder, cfg: ChipConfig, D: int, in_dt, out_dt):
        self.b = b
        self.P, self.D, self.in_dt, self.out_dt = cfg.core.tensor.rows, D, in_dt, out_dt
        self.KB = SCORE_BANKS * cfg.core.psum.bank_bytes // 4  # fp32 scores
        self.N = min(self.KB, cfg.core.tensor.moving_free_max)  # columns per scores matmul
        self.dma_transpose = in_dt.itemsize in (2, 4) and cfg.core.dma.transpose_hbm_rate > 0
        f32, bf16, P, KB = dtype("float32"), dtype("bfloat16"), self.P, self.KB
        self.kinds = {  # kind -> (memory, shape, dtype)
            "qT": ("sbuf", (P, P), in_dt),
            "kT": ("sbuf", (P, KB), in_dt),
            "v": ("sbuf", (P, KB // P, D + 1), in_dt),  # chunks of v, each with a ones column
            "s": ("psum", (P, KB), f32),
            "s_sb": ("sbuf", (P, KB), f32),  # S copied for GpSimd's exp
            "p": ("sbuf", (P, KB), bf16),
            "pT": ("psum", (P, KB), bf16),  # P^T's chunks side by side
            "pT_sb": ("sbuf", (P, KB), bf16),
            "acc": ("psum", (P, D + 1), f32),  # sum of c-rescaled P v; last column: l
            "o": ("sbuf", (P, D), out_dt),
            "col": ("sbuf", (P, 1), f32),  # the [rows, 1] statistics
            "raw": ("sbuf", (P, P), in_dt),  # NC-v2: loads turned on TensorE
            "tp": ("psum", (P, P), in_dt),
        }
        self.free: dict[str, list[str]] = {k: [] for k in self.kinds}
        self.made: dict[str, int] = {}
        self.psum: list[str] = []  # every PSUM tile taken, released when the op ends
        self.scalar_max = cfg.core.scalar.reduce_max  # NC-v2's ScalarE reduces by add only
        self.queues: dict[str, int] = {}

    def take(self, kind: str) -> str:
        """A tile of `kind`: a new one until the kind has DEPTH of them, then the one given
        back longest ago (so the next use of a tile is as far from its last as can be)."""
        made = self.made.setdefault(kind, 0)
        if self.free[kind] and made >= DEPTH.get(kind, 1):
            return self.free[kind].pop(0)
        self.made[kind] = made + 1
        memory, shape, dt = self.kinds[kind]
        if memory == "psum":  # perhaps a larger one an earlier op released: used by slices
            name = self.b.psum(kind, shape, dt)
            self.psum.append(name)
            return name
        name = self.b.tile(kind, memory, shape, dt)
        if kind == "v":  # the ones column, once: loads write the others
            ones = ap(name, slice(0, self.P), slice(None), slice(self.D, self.D + 1))
            self.b.emit(Memset, [], [ones], dst=ones, value=1.0, engine=Engine.GPSIMD)
        return name

    def reserve(self) -> None:
        """Place the PSUM tiles first, the bank-sized before the small, so that none
        straddles a bank and wastes the rest of one."""
        for kind in ("s", "pT", "acc"):
            self.give(kind, *[self.take(kind) for _ in range(DEPTH[kind])])

    def give(self, kind: str, *names: str) -> None:
        self.free[kind].extend(names)

    def q(self, kind: str) -> int:
        """The next DMA queue for a transfer of `kind`: each kind has queues of its own, so a
        transfer waiting for its buffer (a q^T load waits for the scores of the block that
        used it before) never holds up another kind's behind it (queues are FIFO)."""
        first, n = QUEUES[kind]
        i = self.queues.get(kind, 0)
        self.queues[kind] = i + 1
        return first + i % n


def _mask(b: KernelBuilder, t: _Tiles) -> tuple[str, str]:
    """The causal mask's two constant bf16 tiles, made once on GpSimd: the identity I and
    the bias B (0 where key i <= query p, MASK above the diagonal). A matmul of I by B
    accumulated into the scores adds B to them on TensorE, in PSUM."""
    bf16, P = dtype("bfloat16"), t.P
    tiles = []
    for name, on_false, cmp in (("ident", 1.0, "not_equal"), ("mask", MASK, "greater_equal")):
        x = b.tile(name, "sbuf", (P, P), bf16)
        a = ap(x, slice(0, P), slice(0, P))
        b.emit(Memset, [], [a], dst=a, value=0.0, engine=Engine.GPSIMD)
        b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=on_false, cmp=cmp, start=0,
               partition_step=1, step=-1)  # fmt: skip
        tiles.append(x)
    return tiles[0], tiles[1]


def _load_t(
    b: KernelBuilder, t: _Tiles, kind: str, tensor: str, index, r0: int, rows: int, dst: str
):
    """dst[0:D, 0:rows] = tensor[*index, r0:r0 + rows, :] transposed: a DMA transpose, or
    128-row loads each turned on TensorE where the chip's DMA has none."""
    D = t.D
    if t.dma_transpose:
        src = ap(tensor, *index, slice(r0, r0 + rows), slice(None))
        d = ap(dst, slice(0, D), slice(0, rows))
        b.emit(DmaCopy, [src], [d], src=src, dst=d, queue=t.q(kind), transpose=True)
        return
    raw, tp = t.take("raw"), t.take("tp")
    for c in range(0, rows, t.P):
        w = min(t.P, rows - c)
        src = ap(tensor, *index, slice(r0 + c, r0 + c + w), slice(None))
        r = ap(raw, slice(0, w), slice(0, D))
        b.emit(DmaCopy, [src], [r], src=src, dst=r, queue=t.q(kind))
        p = ap(tp, slice(0, D), slice(0, w))
        b.emit(Transpose, [r], [p], src=r, dst=p)
        d = ap(dst, slice(0, D), slice(c, c + w))
        b.emit(TensorCopy, [p], [d], src=p, dst=d)
    t.give("raw", raw)
    t.give("tp", tp)


class _Block:
    """One block of qw query rows from q0 against keys [0, end): its tensors and its state
    (`_start`): -m (the negated running max) and c (three tiles each, used in turn by the
    key blocks), the block max (two tiles, in turn), and acc (PSUM) whose last column is l."""

    def __init__(self, names, qi, q0: int, qw: int, end: int):
        self.names, self.qi, self.q0, self.qw, self.end = names, qi, q0, qw, end
        self.units: list[_Unit] = []


class _Unit:
    """One key block of one query block: what its stages hand to each other."""

    def __init__(self, blk: _Block, shared, n: int, t0: int, kw: int):
        self.blk, self.shared, self.n, self.t0, self.kw = blk, shared, n, t0, kw
        self.last = False


def _group_units(t: _Tiles, names, heads, q0s, seqs, causal) -> list:
    """The units of query blocks q0s of one head: key block by key block, the blocks in
    turn, so consecutive units are independent; each key block is loaded once for all the
    blocks that read it (`_Shared`)."""
    (qi, ki), (S, skv) = heads, seqs
    blocks = []
    for q0 in q0s:
        qw = min(t.P, S - q0)
        blocks.append(_Block(names, qi, q0, qw, min(skv, q0 + qw) if causal else skv))
    shared = _Shared(t, (names[1], names[2], ki), [blk.end for blk in blocks])
    units = []
    for t0 in range(0, max(blk.end for blk in blocks), t.KB):
        for blk in blocks:
            if t0 < blk.end:
                blk.units.append(_Unit(blk, shared, len(blk.units), t0, min(t.KB, blk.end - t0)))
                units.append(blk.units[-1])
    for blk in blocks:
        blk.units[-1].last = True
    return units


class _Shared:
    """The key blocks of a group of query blocks: each loaded once, as wide as the widest
    block that reads it, and given back when the last one is done with it."""

    def __init__(self, t: _Tiles, kv, ends: list[int]):
        self.kv = kv
        self.widths: dict[int, list[int]] = {}
        for end in ends:
            for t0 in range(0, end, t.KB):
                self.widths.setdefault(t0, []).append(min(t.KB, end - t0))
        self.loaded: dict[int, tuple] = {}
        self.left: dict[tuple[str, int], int] = {}

    def get(self, b, t: _Tiles, t0: int, kw: int) -> tuple:
        """(k^T tile, v tile, v's chunks for kw keys) of key block t0, loaded on first use."""
        if t0 not in self.loaded:
            self.loaded[t0] = _load_kv(b, t, self.kv, t0, self.widths[t0])
            self.left["kT", t0] = self.left["v", t0] = len(self.widths[t0])
        kt, vt, layout = self.loaded[t0]
        return kt, vt, _chunks(t, layout, kw)

    def done(self, t: _Tiles, kind: str, t0: int) -> None:
        """One block is done with key block t0's k^T (or v)."""
        self.left[kind, t0] -= 1
        if not self.left[kind, t0]:
            kt, vt, _ = self.loaded[t0]
            t.give(kind, kt if kind == "kT" else vt)


def _pipeline(b, t: _Tiles, units: list, scale: float, mask) -> None:
    """Emit the units software-pipelined (ORDER): step i loads key block i + 4, computes
    unit i + 2's scores and i + 1's row max, i's exp, i - 1's rescale, i - 2's transposes
    and copy, and i - 3's P v (and output), so each engine's next instruction reads what an
    earlier step made, and one unit's chain hides behind its neighbours' work."""
    stages = {
        "prepare": _prepare, "max": _max, "transpose": _transpose, "pv": _pv, "exp": _exp,
        "scores": _scores, "copy": _copy, "rescale": _rescale, "finish": _finish,
    }  # fmt: skip
    steps = [(offset, stages[name]) for name, offset in ORDER]
    first, last = max(o for o, _ in steps), -min(o for o, _ in steps)
    for i, u in enumerate(units):
        u.i = i
    for i in range(-first, len(units) + last):
        for offset, stage in steps:
            if 0 <= i + offset < len(units):
                stage(b, t, units[i + offset], scale, mask)


def _prepare(b, t: _Tiles, u: _Unit, *_) -> None:
    """The unit's key block, loaded if no block of its group did yet; the query block's q^T
    and state first if this is its first unit."""
    blk = u.blk
    if u.n == 0:
        _start(b, t, blk)
    u.loaded = u.shared.get(b, t, u.t0, u.kw)


def _start(b, t: _Tiles, blk: _Block) -> None:
    """q^T loaded; the state's tiles taken (the first key block sets them, `_max`, `_pv`)."""
    q = blk.names[0]
    r = slice(0, blk.qw)
    blk.qt = t.take("qT")
    _load_t(b, t, "q", q, blk.qi, blk.q0, blk.qw, blk.qt)
    blk.qT = ap(blk.qt, slice(0, t.D), r)
    blk.cols = [t.take("col") for _ in range(8)]
    c = [ap(x, r) for x in blk.cols]
    blk.nm, blk.c, blk.mxs = c[0:3], c[3:6], c[6:8]
    blk.pvs = 0  # P v emitted


def _load_kv(b, t: _Tiles, kv, t0: int, widths: list[int]) -> tuple:
    """Load key block t0 as wide as the widest of `widths`: k^T [D, kw] and v. (k^T tile,
    v tile, layout). With every width a multiple of nc = ceil(kw / 128), v comes in ONE DMA,
    in flat order: partition p holds keys nc p .. nc p + nc - 1, so chunk j is the keys
    nc p + j (P's columns j::nc); otherwise one DMA per 128 consecutive keys."""
    k, v, ki = kv
    P, D, kw = t.P, t.D, max(widths)
    kt = t.take("kT")
    _load_t(b, t, "k", k, ki, t0, kw, kt)
    vt = t.take("v")
    nc = -(-kw // P)
    if all(w % nc == 0 for w in widths):
        src = ap(v, *ki, slice(t0, t0 + kw), slice(None))
        dst = ap(vt, slice(0, kw // nc), slice(0, nc), slice(0, D))
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=t.q("v"))
        return kt, vt, nc
    for j in range(nc):
        cw = min(P, kw - j * P)
        src = ap(v, *ki, slice(t0 + j * P, t0 + j * P + cw), slice(None))
        dst = ap(vt, slice(0, cw), j, slice(0, D))
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=t.q("v"))
    return kt, vt, 0


def _chunks(t: _Tiles, nc: int, kw: int) -> list[tuple]:
    """v's chunks for the first kw keys: (P's columns as a slice, its keys, v's chunk) per
    128-or-fewer keys; nc > 0: interleaved in nc chunks (`_load_kv`), 0: consecutive."""
    P = t.P
    if nc:
        return [(slice(j, kw, nc), kw // nc, j) for j in range(nc)]
    return [(slice(c, min(c + P, kw)), min(P, kw - c), j) for j, c in enumerate(range(0, kw, P))]


def _scores(b, t: _Tiles, u: _Unit, _scale, mask) -> None:
    """S = q k^T of the unit's key block into PSUM, N columns a matmul; on the diagonal the
    mask's bias added by one more matmul, I x B accumulated over the last keys (`_mask`)."""
    kt, _, _ = u.loaded
    blk = u.blk
    q0, qw, t0, kw = blk.q0, blk.qw, u.t0, u.kw
    r = slice(0, qw)
    u.s_t = t.take("s")
    for c0 in range(0, kw, t.N):
        w = min(t.N, kw - c0)
        kT, s = ap(kt, slice(0, t.D), slice(c0, c0 + w)), ap(u.s_t, r, slice(c0, c0 + w))
        b.emit(Matmul, [blk.qT, kT], [s], stationary=blk.qT, moving=kT, dst=s)
    if mask is not None and t0 + kw - 1 > q0:  # the diagonal: keys after the query
        c0, w = q0 - t0, kw - (q0 - t0)
        ident, bias = ap(mask[0], r, r), ap(mask[1], r, slice(0, w))
        s = ap(u.s_t, r, slice(c0, c0 + w))
        b.emit(Matmul, [ident, bias], [s], stationary=ident, moving=bias, dst=s, accumulate=True)
    u.s = ap(u.s_t, r, slice(0, kw))
    u.shared.done(t, "kT", t0)


def _max(b, t: _Tiles, u: _Unit, scale: float, _mask) -> None:
    """The row max: on ScalarE for the units `MAX_ON` gives it, with scale * S copied to SBUF
    in the same instruction (for GpSimd's share of the exp, `_exp`), else on VectorE from
    PSUM (always where ScalarE has no max)."""
    blk = u.blk
    r, kr = slice(0, blk.qw), slice(0, u.kw)
    mx = blk.mxs[u.n % 2]  # in turn: a lone block's next unit takes its max before this exp
    u.p = ap(t.take("p"), r, kr)
    u.smax = t.scalar_max and MAX_ON[u.i % len(MAX_ON)] == "S"
    if u.smax:
        u.ssb = t.take("s_sb")
        ss = ap(u.ssb, r, kr)
        b.emit(Activation, [u.s], [ss, mx], func="copy", src=u.s, dst=ss, scale=scale,
               reduce="max", reduce_dst=mx)  # fmt: skip
        t.give("s", u.s_t)
        u.s = ss
    else:
        b.emit(TensorReduce, [u.s], [mx], alu="max", src=u.s, dst=mx)


def _exp(b, t: _Tiles, u: _Unit, scale: float, _mask) -> None:
    """-m' = min(-scale * max, -m) on GpSimd (-scale * max for the first key block; here,
    not in `_max`, so that GpSimd's queue never holds this unit's exp behind the next unit's
    max); P = exp(scale S - m') in bf16 on ScalarE, but where ScalarE took the max, GpSimd
    computes the first GP_SHARE of P's columns from the SBUF copy of scale * S as e ** (scale
    S + (-m')) (a pow, 4 cycles an element); the correction c = e ** (-m' - (-m)) on GpSimd
    after the first key block (one element a row)."""
    blk = u.blk
    r = slice(0, blk.qw)
    nm_old, nm, c = blk.nm[u.n % 3], blk.nm[(u.n + 1) % 3], blk.c[u.n % 3]
    k = -1.0 if u.smax else -scale  # the max of scale * S, or of S
    mx = blk.mxs[u.n % 2]
    if u.n == 0:
        b.emit(TensorScalar, [mx], [nm], src=mx, dst=nm, op0="multiply", operand0=k,
               engine=Engine.GPSIMD)  # fmt: skip
    else:
        b.emit(TensorScalar, [mx, nm_old], [nm], src=mx, dst=nm, op0="multiply",
               operand0=k, op1="min", operand1=nm_old, engine=Engine.GPSIMD)  # fmt: skip
    g = int(u.kw * GP_SHARE) if u.smax else 0
    if g:
        src, dst = ap(u.ssb, r, slice(0, g)), ap(u.p.name, r, slice(0, g))
        b.emit(TensorScalar, [src, nm], [dst], src=src, dst=dst, op0="add", operand0=nm,
               op1="pow", operand1=math.e, reverse1=True, engine=Engine.GPSIMD)  # fmt: skip
    src, dst = ap(u.s.name, r, slice(g, u.kw)), ap(u.p.name, r, slice(g, u.kw))
    k = 1.0 if u.smax else scale
    b.emit(Activation, [src, nm], [dst], func="exp", src=src, dst=dst, scale=k, bias=nm)
    if u.smax:
        t.give("s_sb", u.ssb)
    else:
        t.give("s", u.s_t)
    if u.n:
        b.emit(TensorScalar, [nm, nm_old], [c], src=nm, dst=c, op0="subtract", operand0=nm_old,
               op1="pow", operand1=math.e, reverse1=True, engine=Engine.GPSIMD)  # fmt: skip


def _transpose(b, t: _Tiles, u: _Unit, *_) -> None:
    """P^T's chunks on TensorE into one PSUM tile."""
    P, qw = t.P, u.blk.qw
    _, _, chunks = u.loaded
    u.pT = t.take("pT")
    for j, (cols, keys, _) in enumerate(chunks):
        src = ap(u.p.name, slice(0, qw), cols)
        tp = ap(u.pT, slice(0, keys), slice(j * P, j * P + qw))
        b.emit(Transpose, [src], [tp], src=src, dst=tp)


def _copy(b, t: _Tiles, u: _Unit, *_) -> None:
    """P^T out of PSUM on VectorE: one copy of the whole tile, or one per chunk where
    qw < 128 leaves gaps."""
    P, qw = t.P, u.blk.qw
    _, _, chunks = u.loaded
    u.pT_sb = t.take("pT_sb")
    rows = max(keys for _, keys, _ in chunks)
    spans = (
        [(slice(0, rows), slice(0, len(chunks) * P))]
        if qw == P
        else [(slice(0, keys), slice(j * P, j * P + qw)) for j, (_, keys, _) in enumerate(chunks)]
    )
    for rs, cs in spans:
        a, z = ap(u.pT, rs, cs), ap(u.pT_sb, rs, cs)
        b.emit(TensorCopy, [a], [z], src=a, dst=z)
    t.give("pT", u.pT)
    t.give("p", u.p.name)


def _rescale(b, t: _Tiles, u: _Unit, *_) -> None:
    """acc = acc * c in PSUM on VectorE, after the previous key block's P v and before this
    one's."""
    blk = u.blk
    if u.n == 0:
        return
    if blk.pvs < u.n:  # the previous key block's P v is not out yet: just before this one's
        u.late = True
        return
    acc, c = blk.acc, blk.c[u.n % 3]
    b.emit(TensorScalar, [acc, c], [acc], src=acc, dst=acc, op0="multiply", operand0=c)


def _pv(b, t: _Tiles, u: _Unit, *_) -> None:
    """[P v, rowsum(P)] accumulated on TensorE over the chunks into acc (PSUM), which the
    first key block starts."""
    P, blk = t.P, u.blk
    qw = blk.qw
    _, vt, chunks = u.loaded
    if u.n == 0:
        blk.acc_t = t.take("acc")
        blk.acc = ap(blk.acc_t, slice(0, qw), slice(0, t.D + 1))
    if getattr(u, "late", False):
        u.late = False
        _rescale(b, t, u)
    blk.pvs += 1
    acc = blk.acc
    for j, (_, keys, vj) in enumerate(chunks):
        st = ap(u.pT_sb, slice(0, keys), slice(j * P, j * P + qw))
        mv = ap(vt, slice(0, keys), vj, slice(0, t.D + 1))
        more = u.n > 0 or j > 0
        b.emit(Matmul, [st, mv, acc] if more else [st, mv], [acc], stationary=st, moving=mv,
               dst=acc, accumulate=more)  # fmt: skip
    t.give("pT_sb", u.pT_sb)
    u.shared.done(t, "v", u.t0)


def _finish(b, t: _Tiles, u: _Unit, *_) -> None:
    """After the block's last key block: out = acc / l (acc's last column) on VectorE,
    cast and stored."""
    if not u.last:
        return
    blk = u.blk
    r = slice(0, blk.qw)
    ot = t.take("o")
    o, num, l_ = ap(ot, r), ap(blk.acc_t, r, slice(0, t.D)), ap(blk.acc_t, r, slice(t.D, t.D + 1))
    b.emit(TensorScalar, [num, l_], [o], src=num, dst=o, op0="divide", operand0=l_)
    out, oi, q0 = blk.names[3], blk.qi, blk.q0
    dst = ap(out, *oi, slice(q0, q0 + blk.qw), slice(None))
    b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=t.q("out"))
    t.give("o", ot)
    t.give("col", *blk.cols)
    t.give("acc", blk.acc_t)
    t.give("qT", blk.qt)
