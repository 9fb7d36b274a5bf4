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
from trnsim.errors import TraceError
from trnsim.kernels.attention_stages import STAGES, Block, Shared, Unit
from trnsim.kernels.attention_tiles import Tiles, causal_mask
from trnsim.kernels.builder import KernelBuilder

__all__ = ["lower_attention"]

GROUP = 2  # query blocks of one head that share each key block loaded (`Shared`)
# the stages of `_pipeline`, in the order a step emits them, with the unit each works on
# (step i: unit i + offset)
ORDER = (
    ("prepare", 4), ("max", 1), ("transpose", -2), ("pv", -3), ("exp", 0), ("scores", 2),
    ("copy", -2), ("rescale", -1), ("finish", -3),
)  # fmt: skip


def lower_attention(
    b: KernelBuilder, cfg: ChipConfig, q: str, k: str, v: str, out: str, is_causal=False, scale=None
) -> None:
    """Emit out = scaled_dot_product_attention(q, k, v) (module doc)."""
    tq, tk, tv, to = (b.tensors[n] for n in (q, k, v, out))
    lead, (H, S, D) = tuple(tq.shape[:-3]), tq.shape[-3:]
    if len(tq.shape) < 3 or tk.shape != tv.shape or tuple(to.shape) != tuple(tq.shape):
        raise TraceError(_shapes(tq, tk, tv, to, cfg.core.tensor.rows))
    Hkv, Skv, Dk = tk.shape[-3:]
    if tuple(tk.shape[:-3]) != lead or Dk != D or H % Hkv or D > cfg.core.tensor.rows:
        raise TraceError(_shapes(tq, tk, tv, to, cfg.core.tensor.rows))
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    t = Tiles(b, cfg, D, tq.dtype, to.dtype)
    t.reserve()
    share = b.share(to.shape)
    if share is not None and S % t.P and t.P % S:  # cuts fall at multiples of P rows
        raise TraceError(
            f"scaled_dot_product_attention: a sequence of {S} split over {b.part[1]} cores: "
            f"query blocks of {t.P} would straddle the cores' shares; expected a multiple of "
            f"{t.P} (or lnc: 1)"
        )
    lo, hi = share or (0, math.prod(tq.shape[:-1]))
    mask = causal_mask(b, t) if is_causal else None
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


def _shapes(tq, tk, tv, to, rows: int) -> str:
    return (
        f"scaled_dot_product_attention: q {list(tq.shape)}, k {list(tk.shape)}, "
        f"v {list(tv.shape)}, out {list(to.shape)}: expected q and out [..., H, S, D], k and v "
        f"[..., Hkv, Skv, D] with H a multiple of Hkv and D <= {rows}"
    )


def _indices(lead: tuple[int, ...]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for n in lead:
        out = [(*x, i) for x in out for i in range(n)]
    return out


def _group_units(t: Tiles, names, heads, q0s, seqs, causal) -> list:
    """The units of query blocks q0s of one head: key block by key block, the blocks in
    turn, so consecutive units are independent; each key block is loaded once for all the
    blocks that read it (`Shared`)."""
    (qi, ki), (S, skv) = heads, seqs
    blocks = []
    for q0 in q0s:
        qw = min(t.P, S - q0)
        blocks.append(Block(names, qi, q0, qw, min(skv, q0 + qw) if causal else skv))
    shared = Shared(t, (names[1], names[2], ki), [blk.end for blk in blocks])
    units = []
    for t0 in range(0, max(blk.end for blk in blocks), t.KB):
        for blk in blocks:
            if t0 < blk.end:
                blk.units.append(Unit(blk, shared, len(blk.units), t0, min(t.KB, blk.end - t0)))
                units.append(blk.units[-1])
    for blk in blocks:
        blk.units[-1].last = True
    return units


def _pipeline(b, t: Tiles, units: list, scale: float, mask) -> None:
    """Emit the units software-pipelined (ORDER): step i loads key block i + 4, computes
    unit i + 2's scores and i + 1's row max, i's exp, i - 1's rescale, i - 2's transposes
    and copy, and i - 3's P v (and output), so each engine's next instruction reads what an
    earlier step made, and one unit's chain hides behind its neighbours' work."""
    steps = [(offset, STAGES[name]) for name, offset in ORDER]
    first, last = max(o for o, _ in steps), -min(o for o, _ in steps)
    for i, u in enumerate(units):
        u.i = i
    for i in range(-first, len(units) + last):
        for offset, stage in steps:
            if 0 <= i + offset < len(units):
                stage(b, t, units[i + offset], scale, mask)
