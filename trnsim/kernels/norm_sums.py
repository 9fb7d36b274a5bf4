"""A 16-bit layer_norm's statistics of rows in segments (`norms._lower_pieces`) as two sums
(`NormStages.sums`, the `SEG_SUMS` variant) instead of VectorE's bn_stats and ScalarE's two
passes a column: TensorE sums x (a matrix of ones times each 512 columns of a segment, all of
the row's accumulated in one PSUM bank: every partition gets the column sums over the row's
partitions), and ScalarE takes sum((x - x0)^2) in one `activation` a segment (square, with its
add reduction), x0 the row's first element. Then

    mean = S1 / N,  var = S2 / N - (mean - x0)^2

over the row's N elements. ScalarE's statistics cost one pass a column, not two (its mean, then
the squares about it), VectorE's none, and TensorE's sums go beside its bias.

Why the values hold: x - x0 is exact in fp32 for 16-bit x (an 8-bit mantissa difference), so
S2 is a sum of exact squares; the subtraction loses only what (mean - x0)^2 carries beyond the
variance (x0 one of the row's values: a few standard deviations from the mean), not what
E[x^2] - E[x]^2 loses at a large mean. TensorE's products by 1 are exact and its sums fp32."""

from __future__ import annotations

from trnsim.isa import Activation, Matmul, Memset, TensorCopy, TensorReduce, TensorScalar
from trnsim.kernels.builder import ap
from trnsim.kernels.row_plan import G, V, runs

__all__ = ["square_stats", "sum_stats", "SUM_BUFS"]

SUM_BUFS = 2  # PSUM banks of the rows' sums of x, in turn (a row's sums read before the next
# but one's begin)


def square_stats(k, n: int, p: int) -> None:
    """Stage 1 of row n (a block of one row in segments, `NormStages.first`, after its loads):
    -x0 on each partition, then each segment's TensorE sums and ScalarE squares."""
    b, P, cfg = k.b, k.P, k.cfg
    x0, nx = k.col("x0", n, p), k.col("nx", n, p)
    first = ap(k.lane_tile("x", n, 0, p).name, slice(0, p), slice(None), 0)
    b.emit(TensorCopy, [first], [x0], src=first, dst=x0, engine=G)
    ps0 = k.groups.firsts(x0, p)  # (-x0 out of PSUM on VectorE: GpSimd does not read it)
    b.emit(TensorScalar, [ps0], [nx], src=ps0, dst=nx, op0="multiply", operand0=-1.0, engine=V)
    ones = _ones(k)
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
