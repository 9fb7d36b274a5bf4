"""The stages of one unit of the flash attention kernel (one query block against one key
block, `attention.py`'s doc): load, scores, row max, exp, transposes, rescale, P v, finish,
and the state they hand each other (`Block`, `Unit`, `Shared` key blocks). `STAGES` names
them for `attention._pipeline`, which emits them software-pipelined."""

from __future__ import annotations

import math

from trnsim.isa import (
    Activation,
    DmaCopy,
    Engine,
    Matmul,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    Transpose,
)
from trnsim.kernels.attention_tiles import Tiles, load_transposed
from trnsim.kernels.builder import ap

# units (in emission order, in turn) whose row max ScalarE takes ("S", with a copy of scale * S
# to SBUF) or VectorE ("V"): ScalarE also runs every exp, so it takes two of three
MAX_ON = "SVS"
GP_SHARE = 0.375  # of P's columns GpSimd exponentiates where ScalarE took the max (`_exp`)


class Block:
    """One block of qw query rows from q0 against keys [0, end): its tensors and its state
    (`_start`): -m (the negated running max) and c (three tiles each, used in turn by the
    key blocks), the block max (two tiles, in turn), and acc (PSUM) whose last column is l."""

    def __init__(self, names, qi, q0: int, qw: int, end: int):
        self.names, self.qi, self.q0, self.qw, self.end = names, qi, q0, qw, end
        self.units: list[Unit] = []


class Unit:
    """One key block of one query block: what its stages hand to each other."""

    def __init__(self, blk: Block, shared, n: int, t0: int, kw: int):
        self.blk, self.shared, self.n, self.t0, self.kw = blk, shared, n, t0, kw
        self.last = False


class Shared:
    """The key blocks of a group of query blocks: each loaded once, as wide as the widest
    block that reads it, and given back when the last one is done with it."""

    def __init__(self, t: Tiles, kv, ends: list[int]):
        self.kv = kv
        self.widths: dict[int, list[int]] = {}
        for end in ends:
            for t0 in range(0, end, t.KB):
                self.widths.setdefault(t0, []).append(min(t.KB, end - t0))
        self.loaded: dict[int, tuple] = {}
        self.left: dict[tuple[str, int], int] = {}

    def get(self, b, t: Tiles, t0: int, kw: int) -> tuple:
        """(k^T tile, v tile, v's chunks for kw keys) of key block t0, loaded on first use."""
        if t0 not in self.loaded:
            self.loaded[t0] = _load_kv(b, t, self.kv, t0, self.widths[t0])
            self.left["kT", t0] = self.left["v", t0] = len(self.widths[t0])
        kt, vt, layout = self.loaded[t0]
        return kt, vt, _chunks(t, layout, kw)

    def done(self, t: Tiles, kind: str, t0: int) -> None:
        """One block is done with key block t0's k^T (or v)."""
        self.left[kind, t0] -= 1
        if not self.left[kind, t0]:
            kt, vt, _ = self.loaded[t0]
            t.give(kind, kt if kind == "kT" else vt)


def _prepare(b, t: Tiles, u: Unit, *_) -> None:
    """The unit's key block, loaded if no block of its group did yet; the query block's q^T
    and state first if this is its first unit."""
    blk = u.blk
    if u.n == 0:
        _start(b, t, blk)
    u.loaded = u.shared.get(b, t, u.t0, u.kw)


def _start(b, t: Tiles, blk: Block) -> None:
    """q^T loaded; the state's tiles taken (the first key block sets them, `_max`, `_pv`)."""
    q = blk.names[0]
    r = slice(0, blk.qw)
    blk.qt = t.take("qT")
    load_transposed(b, t, "q", q, blk.qi, blk.q0, blk.qw, blk.qt)
    blk.qT = ap(blk.qt, slice(0, t.D), r)
    blk.cols = [t.take("col") for _ in range(8)]
    c = [ap(x, r) for x in blk.cols]
    blk.nm, blk.c, blk.mxs = c[0:3], c[3:6], c[6:8]
    blk.pvs = 0  # P v emitted


def _load_kv(b, t: Tiles, kv, t0: int, widths: list[int]) -> tuple:
    """Load key block t0 as wide as the widest of `widths`: k^T [D, kw] and v. (k^T tile,
    v tile, layout). With every width a multiple of nc = ceil(kw / 128), v comes in ONE DMA,
    in flat order: partition p holds keys nc p .. nc p + nc - 1, so chunk j is the keys
    nc p + j (P's columns j::nc); otherwise one DMA per 128 consecutive keys."""
    k, v, ki = kv
    P, D, kw = t.P, t.D, max(widths)
    kt = t.take("kT")
    load_transposed(b, t, "k", k, ki, t0, kw, kt)
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


def _chunks(t: Tiles, nc: int, kw: int) -> list[tuple]:
    """v's chunks for the first kw keys: (P's columns as a slice, its keys, v's chunk) per
    128-or-fewer keys; nc > 0: interleaved in nc chunks (`_load_kv`), 0: consecutive."""
    P = t.P
    if nc:
        return [(slice(j, kw, nc), kw // nc, j) for j in range(nc)]
    return [(slice(c, min(c + P, kw)), min(P, kw - c), j) for j, c in enumerate(range(0, kw, P))]


def _scores(b, t: Tiles, u: Unit, _scale, mask) -> None:
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


def _max(b, t: Tiles, u: Unit, scale: float, _mask) -> None:
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


def _exp(b, t: Tiles, u: Unit, scale: float, _mask) -> None:
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


def _transpose(b, t: Tiles, u: Unit, *_) -> None:
    """P^T's chunks on TensorE into one PSUM tile."""
    P, qw = t.P, u.blk.qw
    _, _, chunks = u.loaded
    u.pT = t.take("pT")
    for j, (cols, keys, _) in enumerate(chunks):
        src = ap(u.p.name, slice(0, qw), cols)
        tp = ap(u.pT, slice(0, keys), slice(j * P, j * P + qw))
        b.emit(Transpose, [src], [tp], src=src, dst=tp)


def _copy(b, t: Tiles, u: Unit, *_) -> None:
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


def _rescale(b, t: Tiles, u: Unit, *_) -> None:
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


def _pv(b, t: Tiles, u: Unit, *_) -> None:
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


def _finish(b, t: Tiles, u: Unit, *_) -> None:
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


STAGES = {
    "prepare": _prepare, "max": _max, "transpose": _transpose, "pv": _pv, "exp": _exp,
    "scores": _scores, "copy": _copy, "rescale": _rescale, "finish": _finish,
}  # fmt: skip
