"""`scaled_dot_product_attention`: out = softmax(q k^T * scale + mask) v, fused flash-style.

q [..., H, S, D], k and v [..., Hkv, Skv, D] (grouped-query heads: H a multiple of Hkv, head h
reads kv head h // (H / Hkv)), D <= 128; `is_causal` masks key j > query i (PyTorch's
top-left alignment); `scale` defaults to 1 / sqrt(D). The scores never leave the chip:

- per block of 128 query rows: q^T [D, 128] is loaded once (DMA transpose; TensorE transpose
  on chips without one); the running row max m, row sum l and the output accumulator acc
  [128, D] (fp32, SBUF) start at -inf, 0, 0;
- per block of KB = 512 keys (stopping at the diagonal when causal): k^T [D, KB] and v (four
  [128, D] chunks) are loaded on rotating DMA queues; S = q k^T on TensorE into one PSUM bank;
  on the diagonal block S goes to SBUF and GpSimd masks it (`affine_select`); VectorE takes
  the block's row max, m' = max(m, scale * max) (kept negated, in one instruction); ScalarE
  computes P = exp(scale * S - m') (bf16, with its row sum in the same instruction) and the
  correction c = exp(m - m'); TensorE transposes P in 128-key chunks (PSUM), ScalarE copies
  them to SBUF, TensorE accumulates P^T-chunk x v-chunk into PSUM; GpSimd rescales
  l = l * c + rowsum(P) and acc * c, VectorE adds P v;
- out = acc / l, cast and stored.

Query blocks are emitted INTERLEAVE at a time, stage by stage, so each engine alternates
between independent blocks; every buffer rotates; and the scores of key block j + 1 are issued
before block j's softmax, so TensorE computes them while the other engines work on block j.
TensorE does three passes per block (scores, transposes, P v) of which two count as FLOPs: it
can reach about 2/3 of peak, less where ScalarE or VectorE bind.
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
    TensorTensor,
    Transpose,
)
from trnsim.kernels.builder import KernelBuilder, ap

__all__ = ["lower_attention"]

SCORE_BANKS = 2  # PSUM banks of fp32 scores per key block: KB = 1,024 keys with 2 KiB banks
GROUP = 2  # query blocks of one head that share each key block loaded (`_Shared`)
INTERLEAVE = 2  # groups in flight at once (`_interleave`)
_DONE = object()
QUEUES = {"q": (0, 2), "k": (2, 3), "v": (5, 3), "out": (8, 4)}  # kind -> (first, count)
DEPTH = {  # tiles of a kind before any is reused: enough for the blocks in flight
    "qT": GROUP * INTERLEAVE + 1,
    "kT": 2 * INTERLEAVE + 1,
    "v": 2 * INTERLEAVE + 1,
    "s": 3,  # PSUM (16 KiB): 3 x 4 KiB of scores, 1 x 2 KiB of P^T, 4 x 512 B of P v
    "p": GROUP * INTERLEAVE,
    "pT": 1,
    "pT_sb": 2,
    "pv": 4,
    "acc": GROUP * INTERLEAVE + 1,
    "o": 2,
    "col": 6 * (GROUP * INTERLEAVE + 1),
}
NEG = -3.4028234663852886e38  # the most negative fp32: m's start
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
    share = b.share(to.shape)
    if share is not None and S % t.P:
        raise TraceError(
            f"scaled_dot_product_attention: a sequence of {S} split over {b.part[1]} cores: "
            f"query blocks of {t.P} would straddle the cores' shares; expected a multiple of "
            f"{t.P} (or lnc: 1)"
        )
    lo, hi = share or (0, math.prod(tq.shape[:-1]))
    heads = [
        ((*batch, h), (*batch, h // (H // Hkv)), [q0 for q0 in range(0, S, t.P) if lo <= (i * H + h) * S + q0 < hi])
        for i, batch in enumerate(_indices(lead))
        for h in range(H)
    ]
    mask = _mask(b, t) if is_causal else None
    groups = (
        _query_group(b, t, (q, k, v, out), qi, ki, q0s[g : g + GROUP], (S, Skv), is_causal, scale, mask)
        for qi, ki, q0s in heads
        for g in range(0, len(q0s), GROUP)
    )
    _interleave(groups, INTERLEAVE)
    b.release(*t.psum)


def _interleave(gens, width: int) -> None:
    """Emit the generators' stages round-robin, `width` at a time: they are independent, so
    each engine alternates between them and one's dependency chain (load, scores, max, exp,
    transposes, P v) hides behind the others' work."""
    active: list = []
    for g in gens:
        active.append(g)
        if len(active) < width:
            continue
        while len(active) == width:
            active = [g for g in active if next(g, _DONE) is not _DONE]
    while active:
        active = [g for g in active if next(g, _DONE) is not _DONE]


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
            "v": ("sbuf", (P, KB // P * D), in_dt),
            "s": ("psum", (P, KB), f32),
            "p": ("sbuf", (P, KB), bf16),
            "pT": ("psum", (P, KB), bf16),  # P^T's chunks side by side
            "pT_sb": ("sbuf", (P, KB), bf16),
            "pv": ("psum", (P, D), f32),
            "acc": ("sbuf", (P, D), f32),
            "o": ("sbuf", (P, D), out_dt),
            "col": ("sbuf", (P, 1), f32),  # the [rows, 1] statistics
            "raw": ("sbuf", (P, P), in_dt),  # NC-v2: loads turned on TensorE
            "tp": ("psum", (P, P), in_dt),
        }
        self.free: dict[str, list[str]] = {k: [] for k in self.kinds}
        self.made: dict[str, int] = {}
        self.psum: list[str] = []  # every PSUM tile taken, released when the op ends
        self.scalar_max = cfg.core.scalar.reduce_max  # NC-v2's ScalarE reduces by add only
        self.turns = 0
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
        return self.b.tile(kind, memory, shape, dt)

    def give(self, kind: str, *names: str) -> None:
        self.free[kind].extend(names)

    def turn(self) -> bool:
        """Alternates: whether ScalarE (else VectorE) takes the row max of the next key
        block."""
        self.turns += 1
        return self.scalar_max and self.turns % 2 == 1

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


def _query_group(b, t: _Tiles, names, qi, ki, q0s, seqs, causal, scale, mask):
    """Query blocks q0s of one head in lockstep, as a generator of rounds of their stages:
    each key block is loaded once for all of them (`_Shared`)."""
    q, k, v, out = names
    S, skv = seqs
    spans = [(q0, min(t.P, S - q0)) for q0 in q0s]
    ends = [min(skv, q0 + qw) if causal else skv for q0, qw in spans]
    shared = _Shared(b, t, (k, v, ki), ends)
    active = [
        _query_block(b, t, (q, qi), shared, (out, qi), q0, qw, end, causal, scale, mask)
        for (q0, qw), end in zip(spans, ends)
    ]
    while active:
        active = [g for g in active if next(g, _DONE) is not _DONE]
        yield


class _Shared:
    """The key blocks of a group of query blocks: each loaded once, as wide as the widest
    block that reads it, and given back when the last one is done with it."""

    def __init__(self, b, t: _Tiles, kv, ends: list[int]):
        self.b, self.t, self.kv = b, t, kv
        self.widths: dict[int, list[int]] = {}
        for end in ends:
            for t0 in range(0, end, t.KB):
                self.widths.setdefault(t0, []).append(min(t.KB, end - t0))
        self.loaded: dict[int, tuple] = {}
        self.left: dict[tuple[str, int], int] = {}

    def get(self, t0: int, kw: int) -> tuple:
        """(k^T tile, v tile, v's chunks for kw keys) of key block t0, loaded on first use."""
        if t0 not in self.loaded:
            self.loaded[t0] = _load_kv(self.b, self.t, self.kv, t0, self.widths[t0])
            n = len(self.widths[t0])
            self.left["kT", t0] = self.left["v", t0] = n
        kt, vt, layout = self.loaded[t0]
        return kt, vt, _chunks(self.t, layout, kw)

    def done(self, kind: str, t0: int) -> None:
        """One block is done with key block t0's k^T (or v)."""
        self.left[kind, t0] -= 1
        if not self.left[kind, t0]:
            kt, vt, _ = self.loaded[t0]
            self.t.give(kind, kt if kind == "kT" else vt)


def _query_block(b, t: _Tiles, qh, shared: _Shared, oh, q0, qw, end, causal, scale, mask):
    """One block of qw query rows from q0 against keys [0, end), as a generator of its
    stages (`_interleave`): key block j + 1 is asked for while block j's scores are
    computed, and every block's scores come one stage before the previous block's softmax and
    P v, so TensorE computes S(j + 1) while the other engines work on block j."""
    (q, qi), (out, oi) = qh, oh
    D, r = t.D, slice(0, qw)
    qt = t.take("qT")
    _load_t(b, t, "q", q, qi, q0, qw, qt)
    qT = ap(qt, slice(0, D), slice(0, qw))
    # the state: -m (negated running max; two tiles, this block's and the next's), l, acc
    cols = [t.take("col") for _ in range(6)]
    acc_t = t.take("acc")
    state = {
        "nm": [ap(cols[0], r), ap(cols[1], r)],
        "l": ap(cols[2], r),
        "acc": ap(acc_t, r),
        "cols": {n: ap(c, r) for n, c in zip(("c", "lb", "mx"), cols[3:])},
    }
    b.emit(Memset, [], [state["nm"][0]], dst=state["nm"][0], value=-NEG, engine=Engine.GPSIMD)
    b.emit(Memset, [], [state["l"]], dst=state["l"], value=0.0, engine=Engine.GPSIMD)
    b.emit(Memset, [], [state["acc"]], dst=state["acc"], value=0.0, engine=Engine.GPSIMD)
    blocks = [(t0, min(t.KB, end - t0)) for t0 in range(0, end, t.KB)]
    loaded = shared.get(*blocks[0])
    yield
    pending = None
    for n, (t0, kw) in enumerate(blocks):
        scores = _scores(b, t, qT, loaded, (q0, qw, t0, kw), mask if causal else None)
        shared.done("kT", t0)
        if n + 1 < len(blocks):
            loaded = shared.get(*blocks[n + 1])
        yield
        if pending is not None:
            yield from _softmax_pv(b, t, state, *pending, scale)
        pending = (n, (*scores, lambda t0=t0: shared.done("v", t0)), qw, kw)
    yield from _softmax_pv(b, t, state, *pending, scale)
    ot = t.take("o")
    o = ap(ot, r)
    acc, l_ = state["acc"], state["l"]
    b.emit(TensorScalar, [acc, l_], [o], src=acc, dst=o, op0="divide", operand0=l_)
    dst = ap(out, *oi, slice(q0, q0 + qw), slice(None))
    b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=t.q("out"))
    t.give("o", ot)
    t.give("col", *cols)
    t.give("acc", acc_t)
    t.give("qT", qt)


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
        dst = ap(vt, slice(0, kw // nc), slice(0, nc * D))
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=t.q("v"))
        return kt, vt, nc
    for j in range(nc):
        cw = min(P, kw - j * P)
        src = ap(v, *ki, slice(t0 + j * P, t0 + j * P + cw), slice(None))
        dst = ap(vt, slice(0, cw), slice(j * D, (j + 1) * D))
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=t.q("v"))
    return kt, vt, 0


def _chunks(t: _Tiles, nc: int, kw: int) -> list[tuple]:
    """v's chunks for the first kw keys: (P's columns as a slice, its keys, v's columns) per
    128-or-fewer keys; nc > 0: interleaved in nc chunks (`_load_kv`), 0: consecutive."""
    P, D = t.P, t.D
    if nc:
        return [(slice(j, kw, nc), kw // nc, slice(j * D, (j + 1) * D)) for j in range(nc)]
    return [
        (slice(c, min(c + P, kw)), min(P, kw - c), slice(j * D, (j + 1) * D))
        for j, c in enumerate(range(0, kw, P))
    ]


def _scores(b, t: _Tiles, qT, loaded: tuple, block: tuple, mask) -> tuple:
    """S = q k^T of a loaded key block into PSUM, N columns a matmul; on the diagonal the
    mask's bias added by one more matmul, I x B accumulated over the last keys (`_mask`):
    (S, its kind, v tile, chunks)."""
    kt, vt, chunks = loaded
    q0, qw, t0, kw = block
    r, kr = slice(0, qw), slice(0, kw)
    s_t = t.take("s")
    for c0 in range(0, kw, t.N):
        w = min(t.N, kw - c0)
        kT, s = ap(kt, slice(0, t.D), slice(c0, c0 + w)), ap(s_t, r, slice(c0, c0 + w))
        b.emit(Matmul, [qT, kT], [s], stationary=qT, moving=kT, dst=s)
    if mask is not None and t0 + kw - 1 > q0:  # the diagonal: keys after the query
        c0, w = q0 - t0, kw - (q0 - t0)
        ident, bias = ap(mask[0], r, r), ap(mask[1], r, slice(0, w))
        s = ap(s_t, r, slice(c0, c0 + w))
        b.emit(Matmul, [ident, bias], [s], stationary=ident, moving=bias, dst=s, accumulate=True)
    return ap(s_t, r, kr), "s", vt, chunks


def _softmax_pv(b, t: _Tiles, state: dict, n: int, scores: tuple, qw: int, kw: int, scale):
    """Block n's online softmax, then P v into the state: stages of a generator (module doc);
    every step on another engine than the last is a stage of its own."""
    p, turn = yield from _softmax(b, t, state, n, scores, qw, kw, scale)
    yield from _pv(b, t, state, scores, p, turn, qw)


def _softmax(b, t: _Tiles, state: dict, n: int, scores: tuple, qw: int, kw: int, scale):
    """The row max on VectorE or ScalarE in turn, -m' = min(-scale * max, -m) in one VectorE
    instruction; then P and its row sum in one ScalarE instruction, the correction c =
    exp(-(-m) + (-m')) on ScalarE, l = l * c + rowsum on GpSimd. Returns (P, turn)."""
    s, s_kind, _, _, _ = scores
    r, kr = slice(0, qw), slice(0, kw)
    nm_old, nm = state["nm"][n % 2], state["nm"][(n + 1) % 2]
    c, lb, mx = (state["cols"][k] for k in ("c", "lb", "mx"))
    l_ = state["l"]
    p = ap(t.take("p"), r, kr)
    turn = t.turn()
    if turn:  # ScalarE's copy with a max reduction; its elementwise result is overwritten
        b.emit(Activation, [s], [p, mx], func="copy", src=s, dst=p, reduce="max", reduce_dst=mx)
    else:
        b.emit(TensorReduce, [s], [mx], alu="max", src=s, dst=mx)
    b.emit(TensorScalar, [mx, nm_old], [nm], src=mx, dst=nm, op0="multiply",
           operand0=-scale, op1="min", operand1=nm_old, engine=Engine.GPSIMD)  # fmt: skip
    yield
    b.emit(Activation, [s, nm], [p, lb], func="exp", src=s, dst=p, scale=scale, bias=nm,
           reduce="add", reduce_dst=lb)  # fmt: skip
    b.emit(Activation, [nm_old, nm], [c], func="exp", src=nm_old, dst=c, scale=-1.0, bias=nm)
    b.emit(TensorScalar, [l_, c, lb], [l_], src=l_, dst=l_, op0="multiply", operand0=c,
           op1="add", operand1=lb, engine=Engine.GPSIMD)  # fmt: skip
    t.give(s_kind, s.name)
    yield
    return p, turn


def _pv(b, t: _Tiles, state: dict, scores: tuple, p, turn: bool, qw: int):
    """P^T's chunks on TensorE into one PSUM tile; out of it in one copy (by the engine that
    did not take the max); P v accumulated on TensorE; acc rescaled on GpSimd, P v added on
    VectorE."""
    _, _, vt, chunks, release = scores
    P, r = t.P, slice(0, qw)
    c, acc = state["cols"]["c"], state["acc"]
    pT, pT_sb = t.take("pT"), t.take("pT_sb")
    for j, (cols, keys, _) in enumerate(chunks):
        src = ap(p.name, r, cols)
        tp = ap(pT, slice(0, keys), slice(j * P, j * P + qw))
        b.emit(Transpose, [src], [tp], src=src, dst=tp)
    yield
    rows = max(keys for _, keys, _ in chunks)
    spans = (
        [(slice(0, rows), slice(0, len(chunks) * P))]
        if qw == P
        else [(slice(0, keys), slice(j * P, j * P + qw)) for j, (_, keys, _) in enumerate(chunks)]
    )  # one copy of the whole tile, or one per chunk where qw < 128 leaves gaps
    for rs, cs in spans:
        a, z = ap(pT, rs, cs), ap(pT_sb, rs, cs)
        b.emit(TensorCopy, [a], [z], src=a, dst=z)
    yield
    pv = ap(t.take("pv"), r, slice(0, t.D))
    for j, (_, keys, vcols) in enumerate(chunks):
        st = ap(pT_sb, slice(0, keys), slice(j * P, j * P + qw))
        mv = ap(vt, slice(0, keys), vcols)
        b.emit(Matmul, [st, mv], [pv], stationary=st, moving=mv, dst=pv, accumulate=j > 0)
    yield
    b.emit(TensorScalar, [acc, c], [acc], src=acc, dst=acc, op0="multiply", operand0=c,
           engine=Engine.GPSIMD)  # fmt: skip
    b.emit(TensorTensor, [acc, pv], [acc], alu="add", src0=acc, src1=pv, dst=acc)
    t.give("p", p.name)
    t.give("pT", pT)
    t.give("pT_sb", pT_sb)
    t.give("pv", pv.name)
    release()
    yield
