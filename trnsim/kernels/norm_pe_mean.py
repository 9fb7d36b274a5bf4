"""layer_norm of 16-bit rows in pieces with the row's mean first (`NormStages.pe_mean`, with
`stt`): TensorE sums each block's x (a block-diagonal matrix of 1 / D, bf16, as the stationary:
each partition gets its row's column sums over the row's partitions, the block's 512-column
chunks accumulated in one PSUM bank), VectorE reduces that bank to the row's mean, and then:

- the fused pass (x - mean) * weight (`NormStages._third_stt`) needs nothing more, so it
  starts one load, four matmuls and a reduction after the block lands, not after the whole
  statistics chain;
- ScalarE's statistics of its c columns are one pass, sum((mean - x)^2) about the row's
  exact mean (its mean pass before is gone), and VectorE's bn_stats of the rest give their
  mean m_v and variance v_v: a partition's M2 = S2 + n_v (v_v + (m_v - mean)^2) (Chan's
  combination), summed over the row's partitions by TensorE (times 1 / D): the variance.

The mean is fp32 sums of exact products (bf16 x times 2^-k); the squares are about the mean
itself (the two-pass formula: nothing cancels). D must be a power of two (1 / D exact in
bf16)."""

from __future__ import annotations

from trnsim.isa import Activation, BnAggr, BnStats, Matmul, TensorCopy, TensorReduce
from trnsim.kernels.builder import ap

__all__ = ["pe_mean_fits", "pe_mean_stats", "pe_mean_second"]


def pe_mean_fits(k) -> bool:
    """Whether a norm's rows may take this path: `stt`, rows in pieces (not segments), one
    row slot a partition, D a power of two."""
    d = k.pieces.d if k.pieces else 0
    return bool(k.stt and k.pieces and k.pieces.t == 1 and d and not d & (d - 1))


def _ones(k) -> str:
    """The block-diagonal [P, P] matrix of 1 / D (`Groups.scaled`) in x's dtype: TensorE's
    stationary for x's 16-bit moving values (made once)."""
    if k.pe_ones is None:
        t = k.b.tile("pe_mean_ones", "sbuf", (k.P, k.P), k.xdt)
        src = ap(k.groups.scaled(1.0 / k.pieces.d))
        k.b.emit(TensorCopy, [src], [ap(t)], src=src, dst=ap(t))
        k.pe_ones = t
    return k.pe_ones


def pe_mean_stats(k, n: int, p: int) -> None:
    """Stage 1 of block n (its [p, 1, w] tile loaded): the row's mean into column mn (TensorE's
    sums, VectorE's reduction), ScalarE's sum((mean - x)^2) over the first c columns into s2,
    VectorE's bn_stats over the rest."""
    b, P = k.b, k.P
    ones = ap(_ones(k), slice(0, p), slice(0, p))
    if "pm" not in k.psum_cols:  # (one bank: PSUM has no room for two beside TensorE's bias)
        k.psum_cols["pm"] = b.psum("npm", (P, k.pe_step), k.f32)
    xa = k.lane_tile("x", n, 0, p)
    w, step = k.d, min(k.pe_step, k.pe_mean_cols)
    acc = ap(k.psum_cols["pm"], slice(0, p), slice(0, min(w, step)))
    for c0 in range(0, w, step):
        c1 = min(w, c0 + step)
        mv = ap(xa.name, slice(0, p), 0, slice(c0, c1))
        dst = ap(acc.name, slice(0, p), slice(0, c1 - c0))
        b.emit(Matmul, [ones, mv], [dst], stationary=ones, moving=mv, dst=dst,
               accumulate=c0 > 0)  # fmt: skip
    mn = k.col("mn", n, p)
    if k.pe_mean_s:  # (ScalarE's copy with its add reduction)
        junk = ap(k.tile("pmjunk", 0, (P, k.pe_step), k.xdt), slice(0, p),
                  slice(0, acc.index[-1][1]))  # fmt: skip
        b.emit(Activation, [acc], [junk, mn], func="copy", src=acc, dst=junk, reduce="add",
               reduce_dst=mn)  # fmt: skip
    else:
        b.emit(TensorReduce, [acc], [mn], alu="add", src=acc, dst=mn)
    if k.c:
        junk = ap(k.tile("junk", 0, (P, k.c), k.xdt), slice(0, p))
        xs = k.lane_tile("x", n, 0, p, 0, (0, k.c))
        s2 = k.col("s2", n, p)
        b.emit(Activation, [xs, mn], [junk, s2], func="square", src=xs, dst=junk, scale=-1.0,
               bias=mn, reduce="add", reduce_dst=s2)  # fmt: skip
    for q, (i, lo, hi) in enumerate(k.chunks):
        xs, st = k.lane_tile("x", n, i, p, 0, (lo, hi)), k.stat(n, p, 0, (6 * q, 6 * q + 6))
        b.emit(BnStats, [xs], [st], src=xs, dst=st)


def pe_mean_second(k, n: int, p: int) -> None:
    """Stage 2: VectorE's part's mean and variance (bn_aggr), each partition's M2 about the
    row's mean, the row's variance (TensorE's sums times 1 / D, PSUM), rstd and diag(rstd)."""
    b, nch = k.b, len(k.chunks)
    mn, rs = k.col("mn", n, p), k.col("rs", n, p)
    m2 = k.col("dm", n, p)
    if nch:
        st = ap(k.stat(n, p).name, slice(0, p), 0, slice(0, 6 * nch))
        ag = ap(k.tile("ag", n, (k.P, k.tper, 2)), slice(0, p), 0)
        b.emit(BnAggr, [st], [ag], src=st, dst=ag)
        mv, vv = k.agg(n, p, 0), k.agg(n, p, 1)
        nv = float(k.d - k.c)
        k.alu(m2, mv, ("subtract", mn))  # m_v - mean
        k.alu(m2, m2, ("multiply", m2), ("add", vv))  # (m_v - mean)^2 + v_v
        if k.c:
            k.alu(m2, m2, ("multiply", nv), ("add", k.col("s2", n, p)))
        else:
            k.alu(m2, m2, ("multiply", nv))
    else:
        m2 = k.col("s2", n, p)
    var = k.groups.sums(m2, p, scale=1.0 / k.pieces.d, dst=k.psum_col("vr", n, p))
    k.alu(rs, var, ("add", k.eps), ("pow", -0.5))
    k.stt_scales(n, p, None, rs)
