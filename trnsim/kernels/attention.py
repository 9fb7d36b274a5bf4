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
  the block's row max, m' = max(m, scale * max); ScalarE computes P = exp(scale * S - m')
  (bf16, with its row sum in the same instruction) and the correction c = exp(m - m');
  TensorE transposes P in 128-key chunks (PSUM), ScalarE copies them to SBUF, TensorE
  accumulates P^T-chunk x v-chunk into PSUM; VectorE updates l = l * c + rowsum(P) and
  acc = acc * c + P v;
- out = acc / l, cast and stored.

Every buffer rotates (two or three deep) so the next block's loads and matmuls overlap this
block's softmax. TensorE does three passes per block (scores, transposes, P v) of which two
count as FLOPs: it can reach about 2/3 of peak, less where ScalarE or VectorE bind.
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

KB = 512  # keys per block: one PSUM bank of fp32 scores
NEG = -3.4028234663852886e38  # the most negative fp32: the mask's fill and m's start


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
    for batch in _indices(lead):
        for h in range(H):
            hk = h // (H // Hkv)
            for q0 in range(0, S, t.P):
                qw = min(t.P, S - q0)
                kv = (k, v, (*batch, hk), Skv)
                _query_block(
                    b, t, (q, (*batch, h)), kv, (out, (*batch, h)), q0, qw, is_causal, scale
                )


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
    """The kernel's rotating buffers and a counter per kind."""

    def __init__(self, b: KernelBuilder, cfg: ChipConfig, D: int, in_dt, out_dt):
        self.P, self.D, self.in_dt, self.out_dt = cfg.core.tensor.rows, D, in_dt, out_dt
        self.dma_transpose = in_dt.itemsize in (2, 4) and cfg.core.dma.transpose_hbm_rate > 0
        f32, bf16, P = dtype("float32"), dtype("bfloat16"), self.P
        chunks = KB // P
        sb = lambda n, shape, dt, k: [b.tile(n, "sbuf", shape, dt) for _ in range(k)]  # noqa: E731
        ps = lambda n, shape, dt, k: [b.tile(n, "psum", shape, dt) for _ in range(k)]  # noqa: E731
        self.qT = sb("qT", (P, P), in_dt, 2)
        self.kT = sb("kT", (P, KB), in_dt, 3)
        self.v = sb("v", (P, chunks * D), in_dt, 3)
        self.s = ps("s", (P, KB), f32, 2)
        self.s_sb = sb("s_sb", (P, KB), f32, 2)
        self.p = sb("p", (P, KB), bf16, 2)
        self.pT = ps("pT", (P, chunks * P), bf16, 2)
        self.pT_sb = sb("pT_sb", (P, chunks * P), bf16, 2)
        self.pv = ps("pv", (P, D), f32, 2)
        self.acc = sb("acc", (P, D), f32, 2)
        self.o = sb("o", (P, D), out_dt, 2)
        cols = ("m", "m_new", "nm", "c", "l", "lb", "mx")
        self.col = {n: sb(n, (P, 1), f32, 2) for n in cols}
        self.raw = (
            None
            if self.dma_transpose
            else (sb("q_raw", (P, P), in_dt, 1)[0], ps("q_tp", (P, P), in_dt, 1)[0])
        )
        self.n: dict[str, int] = {}
        self.queue = 0

    def next(self, kind: str, pool: list[str]) -> str:
        i = self.n.get(kind, 0)
        self.n[kind] = i + 1
        return pool[i % len(pool)]

    def q(self) -> int:
        self.queue += 1
        return (self.queue - 1) % 8


def _load_t(b: KernelBuilder, t: _Tiles, tensor: str, index: tuple, r0: int, rows: int, dst: str):
    """dst[0:D, 0:rows] = tensor[*index, r0:r0 + rows, :] transposed: a DMA transpose, or
    128-row loads each turned on TensorE where the chip's DMA has none."""
    D = t.D
    if t.dma_transpose:
        src = ap(tensor, *index, slice(r0, r0 + rows), slice(None))
        d = ap(dst, slice(0, D), slice(0, rows))
        b.emit(DmaCopy, [src], [d], src=src, dst=d, queue=t.q(), transpose=True)
        return
    raw, tp = t.raw
    for c in range(0, rows, t.P):
        w = min(t.P, rows - c)
        src = ap(tensor, *index, slice(r0 + c, r0 + c + w), slice(None))
        r = ap(raw, slice(0, w), slice(0, D))
        b.emit(DmaCopy, [src], [r], src=src, dst=r, queue=t.q())
        p = ap(tp, slice(0, D), slice(0, w))
        b.emit(Transpose, [r], [p], src=r, dst=p)
        d = ap(dst, slice(0, D), slice(c, c + w))
        b.emit(TensorCopy, [p], [d], src=p, dst=d)


def _query_block(b, t: _Tiles, qh, kv, oh, q0: int, qw: int, causal: bool, scale: float):
    (q, qi), (k, v, ki, skv), (out, oi) = qh, kv, oh
    D, r = t.D, slice(0, qw)
    qt = t.next("qT", t.qT)
    _load_t(b, t, q, qi, q0, qw, qt)
    qT = ap(qt, slice(0, D), slice(0, qw))
    col = {n: ap(t.next(n, pool), r) for n, pool in t.col.items()}
    acc = ap(t.next("acc", t.acc), r)
    b.emit(Memset, [], [col["m"]], dst=col["m"], value=NEG)
    b.emit(Memset, [], [col["l"]], dst=col["l"], value=0.0)
    b.emit(Memset, [], [acc], dst=acc, value=0.0)
    end = min(skv, q0 + qw) if causal else skv
    for t0 in range(0, end, KB):
        kw = min(KB, skv - t0, end - t0 if causal else KB)
        _key_block(b, t, qT, col, acc, (k, v, ki), q0, qw, t0, kw, causal, scale)
    o = ap(t.next("o", t.o), r)
    b.emit(TensorScalar, [acc, col["l"]], [o], src=acc, dst=o, op0="divide", operand0=col["l"])
    dst = ap(out, *oi, slice(q0, q0 + qw), slice(None))
    b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=8 + t.q())


def _key_block(b, t: _Tiles, qT, col, acc, kv, q0, qw, t0, kw, causal, scale) -> None:
    """One block of kw keys from t0: scores, online softmax, P v into acc (module doc)."""
    k, v, ki = kv
    P, D, r, kr = t.P, t.D, slice(0, qw), slice(0, kw)
    kt = t.next("kT", t.kT)
    _load_t(b, t, k, ki, t0, kw, kt)
    kT = ap(kt, slice(0, D), kr)
    vt = t.next("v", t.v)
    chunks = [(j, min(P, kw - j * P)) for j in range((kw + P - 1) // P)]
    for j, cw in chunks:
        src = ap(v, *ki, slice(t0 + j * P, t0 + j * P + cw), slice(None))
        dst = ap(vt, slice(0, cw), slice(j * D, (j + 1) * D))
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=t.q())
    s = ap(t.next("s", t.s), r, kr)
    b.emit(Matmul, [qT, kT], [s], stationary=qT, moving=kT, dst=s)
    if causal and t0 + kw - 1 > q0:  # the diagonal: keys after the query get -inf
        masked = ap(t.next("s_sb", t.s_sb), r, kr)
        b.emit(TensorCopy, [s], [masked], src=s, dst=masked)
        b.emit(
            AffineSelect,
            [masked],
            [masked],
            on_true=masked,
            dst=masked,
            on_false=NEG,
            cmp="greater_equal",
            start=q0 - t0,
            partition_step=1,
            step=-1,
        )
        s = masked
    m, mn, nm, c, lb, mx = (col[n] for n in ("m", "m_new", "nm", "c", "lb", "mx"))
    b.emit(TensorReduce, [s], [mx], alu="max", src=s, dst=mx)
    b.emit(
        TensorScalar,
        [mx, m],
        [mn],
        src=mx,
        dst=mn,
        op0="multiply",
        operand0=scale,
        op1="max",
        operand1=m,
    )
    b.emit(TensorScalar, [mn], [nm], src=mn, dst=nm, op0="multiply", operand0=-1.0)
    p = ap(t.next("p", t.p), r, kr)
    b.emit(
        Activation,
        [s, nm],
        [p, lb],
        func="exp",
        src=s,
        dst=p,
        scale=scale,
        bias=nm,
        reduce="add",
        reduce_dst=lb,
    )
    b.emit(Activation, [m, nm], [c], func="exp", src=m, dst=c, bias=nm)
    b.emit(TensorCopy, [mn], [m], src=mn, dst=m)
    l_ = col["l"]
    b.emit(
        TensorScalar,
        [l_, c, lb],
        [l_],
        src=l_,
        dst=l_,
        op0="multiply",
        operand0=c,
        op1="add",
        operand1=lb,
    )
    pT, pT_sb = t.next("pT", t.pT), t.next("pT_sb", t.pT_sb)
    pv = ap(t.next("pv", t.pv), r)
    for j, cw in chunks:
        src = ap(p.name, r, slice(j * P, j * P + cw))
        tp = ap(pT, slice(0, cw), slice(j * P, j * P + qw))
        b.emit(Transpose, [src], [tp], src=src, dst=tp)
        sbt = ap(pT_sb, slice(0, cw), slice(j * P, j * P + qw))
        b.emit(Activation, [tp], [sbt], func="copy", src=tp, dst=sbt)
    for j, cw in chunks:
        st = ap(pT_sb, slice(0, cw), slice(j * P, j * P + qw))
        mv = ap(vt, slice(0, cw), slice(j * D, (j + 1) * D))
        b.emit(Matmul, [st, mv], [pv], stationary=st, moving=mv, dst=pv, accumulate=j > 0)
    b.emit(TensorScalar, [acc, c], [acc], src=acc, dst=acc, op0="multiply", operand0=c)
    b.emit(TensorTensor, [acc, pv], [acc], alu="add", src0=acc, src1=pv, dst=acc)
