"""A 16-bit layer_norm's statistics of rows in segments (`norms._lower_pieces`) as two sums
(`NormStages.sums`, the `SEG_SUMS` variant) instead of VectorE's bn_stats and ScalarE's two
passes a column: TensorE sums x (a matrix of ones times each 512 columns of a segment, all of
the row's accumulated in one PSUM bank: every partition gets the column sums over the row's
partitions), and ScalarE takes sum((x - c)^2) in one `activation` a segment (square, with its
add reduction), c the mean of the row's first segment (its sums, read once they are in). Then

    mean = S1 / N,  var = S2 / N - (mean - c)^2

over the row's N elements. ScalarE's statistics cost one pass a column, not two (its mean, then
the squares about it), VectorE's none, and TensorE's sums go beside its bias.

Why the values hold: c is within a few standard deviations over sqrt(a segment's elements) of
the mean, so the subtraction loses only what (mean - c)^2 carries beyond the variance (next to
nothing), not what E[x^2] - E[x]^2 loses at a large mean; each x - c and its square round once
in fp32. c = the row's first element gave the same values for rows of mean 0 and 100 but not
where that element is far from the mean (one of 1000 among values of spread 1: errors up to
9x SEG_AFFINE's, 44% of the outputs different); the segment's mean gives SEG_AFFINE's values
bit for bit there too (`test_segment_sums_values`). TensorE's products by 1 are exact and its
sums fp32."""

from __future__ import annotations

from trnsim.isa import Activation, Matmul, Memset, TensorReduce
from trnsim.kernels.builder import ap
from trnsim.kernels.row_plan import G, runs

__all__ = ["square_stats", "sum_stats", "SUM_BUFS"]

SUM_BUFS = 2  # PSUM banks of the rows' sums of x, in turn (a row's sums read before the next
# but one's begin)


def square_stats(k, n: int, p: int) -> None:
    """Stage 1 of row n (a block of one row in segments, `NormStages.first`, after its loads):
    each segment's TensorE sums, then its ScalarE squares about c, the mean of the row's first
    segment (from its sums, read before the next segment's add to them)."""
    b, P, cfg = k.b, k.P, k.cfg
    ones, nx = _ones(k), k.col("nx", n, p)
    step = min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)
    ps = _sums_tile(k, n, step)
    sq = k.tile("sq", n, (P, len(k.lanes)))
    junk = k.tile("sjunk", 0, (P, max(lane.hi - lane.lo for lane in k.lanes)), k.xdt)
    more = False
    for i, lane in enumerate(k.lanes):
        w = lane.hi - lane.lo
        for lo, hi in runs(w, step):
            mv, dst = k.lane_tile("x", n, i, p, 0, (lo, hi)), ap(ps, slice(0, p), slice(0, hi - lo))
            b.emit(Matmul, [ones, mv], [dst], stationary=ones, moving=mv, dst=dst, accumulate=more)
            more = True
        if i == 0:  # -c: the first segment's sums over its elements, negated
            cols = ap(ps, slice(0, p), slice(0, max(hi - lo for lo, hi in runs(w, step))))
            b.emit(TensorReduce, [cols], [nx], alu="add", src=cols, dst=nx)
            k.alu(nx, nx, ("multiply", -1.0 / (w * min(k.pieces.k, P))))
        xs, jk = k.lane_tile("x", n, i, p, 0), ap(junk, slice(0, p), slice(0, w))
        s2 = ap(sq, slice(0, p), slice(i, i + 1))
        b.emit(Activation, [xs, nx], [jk, s2], func="square", src=xs, dst=jk, bias=nx,
               reduce="add", reduce_dst=s2)  # fmt: skip


def sum_stats(k, n: int, p: int):
    """Stage 2's mean and variance of row n ([p, 1] each, every partition of the row) from
    `square_stats`' sums (module doc)."""
    b, P = k.b, k.P
    total = k.d * min(k.pieces.k, P)  # the row's elements (k.d: a partition's)
    step = min(k.cfg.core.tensor.moving_free_max, k.cfg.core.psum.bank_bytes // 4)
    w = max(hi - lo for lane in k.lanes for lo, hi in runs(lane.hi - lane.lo, step))
    ps = ap(_sums_tile(k, n, step), slice(0, p), slice(0, w))
    s1, s2 = k.col("s1", n, p), k.col("s2", n, p)
    b.emit(TensorReduce, [ps], [s1], alu="add", src=ps, dst=s1)
    sq = ap(k.tile("sq", n, (P, len(k.lanes))), slice(0, p), slice(None))
    b.emit(TensorReduce, [sq], [s2], alu="add", src=sq, dst=s2)
    mean, dm, var = k.col("rm", n, p), k.col("dm", n, p), k.col("vr", n, p)
    k.alu(mean, s1, ("multiply", 1.0 / total))
    k.alu(dm, mean, ("add", k.col("nx", n, p)))
    k.alu(dm, dm, ("multiply", dm))
    k.alu(var, k.groups.sums(s2, p), ("multiply", 1.0 / total), ("subtract", dm))
    return mean, var


def _ones(k) -> object:
    """[P, P] of ones in x's dtype (TensorE's stationary operand for the sums), set once."""
    t = k.b.scratch_tile(f"norm.ones.{k.xdt.name}", "ones", (k.P, k.P), k.xdt)
    if not getattr(k, "_ones_set", False):
        k._ones_set = True
        k.b.emit(Memset, [], [ap(t)], dst=ap(t), value=1.0, engine=G)
    return ap(t)


def _sums_tile(k, n: int, step: int) -> str:
    """Row n's PSUM bank of its sums of x ([P, step] fp32, SUM_BUFS in turn)."""
    slot = ("sums", n % SUM_BUFS)
    if slot not in k.psum_cols:
        k.psum_cols[slot] = k.b.psum("nsums", (k.P, step), k.f32)
    return k.psum_cols[slot]
