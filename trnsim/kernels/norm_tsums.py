"""A 16-bit layer_norm's row mean on TensorE for rows in pieces (`NormStages.tsums`, with
`stat_group`: a block of g rows of k pieces in lanes): ScalarE's statistics then take one pass
over their c columns, not two (their mean, then the squares about it).

TensorE sums the block over the partitions COLS columns at a time: x's columns as the
stationary operand ([p, COLS], bf16) times E^T (a row group's ones, [p, g]) accumulate into
PSUM [COLS, g], each entry the sum of one column position over a row's partitions and the
block's column groups (a matmul costs TensorE a stationary load and max(64, g) cycles: a third
of what the same columns cost it as the moving operand). Copied to SBUF, those partial sums are
summed by a second matmul (ones of 1 / N, N the row's elements) into [g, 1], and spread over
each row's partitions by E ([g, p]): the row's mean M on every partition, in PSUM.

ScalarE then takes S2 = sum((M - x)^2) over its c columns (`square` with scale -1 and bias M,
its add reduction), VectorE bn_stats and bn_aggr over the others as before (their mean m_V and
variance v_V per partition, n_V columns), and the row's variance is the sum over its k
partitions of S2 + n_V (v_V + (m_V - M)^2), over N: every term about the row's own mean, so no
cancellation at any mean (as the plain plan's `combine`). (After helper k1's reference.)"""

from __future__ import annotations

from trnsim.isa import Activation, AffineSelect, Matmul, Memset, TensorCopy
from trnsim.kernels.builder import ap
from trnsim.kernels.row_plan import G, S, V

__all__ = ["TSUM_BUFS", "applies", "row_mean"]

TSUM_BUFS = 3  # buffers of a block's partial sums (few: each tile takes semaphores)
COPY_ON = (S, V)  # the engines of the partial sums' and the means' copies out of PSUM
# (the first on ScalarE: its one statistics pass leaves it the time; both there 57.6 us, the
# second there 57.4, neither 59.3)
COLS = 128  # columns of x a stationary operand (TensorE's rows)
SPREAD = True  # the first matmuls' moving operand the row groups' [p, p] ones (each partition
# its row's sums), so the second gives each partition its row's mean in PSUM: no copy of the
# means out of PSUM, no matmul spreading them (TensorE's moving operand p columns, not g):
# trn2 LNC 2, 16 MiB, bf16 rows of 12288 in pieces (STT_PARTS) 66.2 -> 63.0 us (VectorE's copies
# a block, 0.22 us each, gone); as chosen, 10240 68.0 -> 66.9, 14336 61.6 -> 60.6, 12288 63.0 ->
# 62.5, 24576 62.7 -> 63.2
SPREAD_PSUM = 2  # ... their PSUM tiles ([P, P] fp32: three left TensorE's bias no room)


def applies(k) -> bool:
    """Whether the blocks take their mean on TensorE (`NormStages.tsums`): 16-bit rows in
    pieces (not segments), `stat_group`, one row slot a block, ScalarE's columns one piece,
    every lane COLS columns or more (its last matmul on fewer: bf16 rows of 32000, lanes of
    1000, and of 100000, 1562 and 1563, took two ScalarE passes: trn2 LNC 2, 16 MiB, 64.5 ->
    58.5 us and 67.2 -> 62.8; 128256 63.6 -> 60.6, 151936 63.1 -> 62.4)."""
    return (k.tsums and bool(k.pieces) and k.pieces.t == 1 and k.layer and k.c > 0
            and k.stat_group > 1 and k.per == 1 and len(k.spieces) == 1
            and k.xdt.itemsize == 2 and k.P % min(k.pieces.k, k.P) == 0
            and all(ln.hi - ln.lo >= COLS for ln in k.lanes))  # fmt: skip


def _const(k, name: str, shape, dt, fill):
    """A constant tile made once per op (`fill` emits its values)."""
    key = f"norm.{name}"
    new = f"{key}:{dt.name}:{tuple(shape)}" not in k.b.scratch
    t = k.b.scratch_tile(key, name, tuple(shape), dt)
    if new:
        fill(ap(t))
    return t


def _et(k):
    """E^T [P, g] in x's dtype: 1 where partition m is in row r (m // k == r)."""
    kk, g = min(k.pieces.k, k.P), k.P // min(k.pieces.k, k.P)

    def fill(a):
        b = k.b
        b.emit(Memset, [], [a], dst=a, value=1.0, engine=G)
        b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=0.0, cmp="greater_equal",
               start=0, step=-kk, partition_step=1, engine=G)  # fmt: skip
        b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=0.0, cmp="greater_equal",
               start=kk - 1, step=kk, partition_step=-1, engine=G)  # fmt: skip

    return _const(k, f"tsum_et{kk}", (k.P, g), k.xdt, fill)


def _spread(k):
    """[P, P] in x's dtype: 1 where partitions p and m are in one row (`Groups.sum_matrix`)."""

    def fill(a):
        src = ap(k.groups.sum_matrix)
        k.b.emit(TensorCopy, [src], [a], src=src, dst=a, engine=G)

    return _const(k, f"tsum_sum{min(k.pieces.k, k.P)}", (k.P, k.P), k.xdt, fill)


def _ones(k, total: int):
    """[COLS, 1] fp32 of 1 / total (the second matmul's moving operand)."""

    def fill(a):
        k.b.emit(Memset, [], [a], dst=a, value=1.0 / total, engine=G)

    return _const(k, f"tsum_n{total}", (COLS, 1), k.f32, fill)


def _copy(b, src, dst, e) -> None:
    """A copy out of PSUM on engine e (`COPY_ON`)."""
    if e == S:
        b.emit(Activation, [src], [dst], func="copy", src=src, dst=dst)
    else:
        b.emit(TensorCopy, [src], [dst], src=src, dst=dst, engine=V)


def row_mean(k, n: int, p: int) -> None:
    """Stage 1 of block n (after its bn_stats): the rows' means on TensorE (module doc) into
    its column of the group's PSUM tile rm, then ScalarE's S2 about them over its c columns
    into its column of the group's tile s2."""
    b, kk, g = k.b, min(k.pieces.k, k.P), k.stat_group
    rows, slot, u = p // kk, n % TSUM_BUFS, n % g
    wide = k.P if SPREAD else k.P // kk + 1  # (a row's sums on each of its partitions)
    key = ("tsum", slot % SPREAD_PSUM if SPREAD else slot)  # (PSUM holds few of the wide)
    if key not in k.psum_cols:
        k.psum_cols[key] = b.psum("ntsum", (k.P, wide), k.f32)
    ps = k.psum_cols[key]
    sb = b.scratch_tile(f"norm.tsum{slot}", "tsum", (k.P, wide), k.f32)
    if SPREAD:
        rows = p
        et = ap(_spread(k), slice(0, p), slice(0, p))
    else:
        et = ap(_et(k), slice(0, p), slice(0, rows))
    sums = ap(ps, slice(0, COLS), slice(0, rows))
    first = True
    for i, lane in enumerate(k.lanes):
        for j in range(0, lane.hi - lane.lo, COLS):
            w = min(COLS, lane.hi - lane.lo - j)  # (a lane's last columns: fewer rows of sums)
            st = k.lane_tile("x", n, i, p, 0, (j, j + w))
            dst = ap(ps, slice(0, w), slice(0, rows))
            b.emit(Matmul, [st, et], [dst], stationary=st, moving=et, dst=dst,
                   accumulate=not first)  # fmt: skip
            first = False
    part = ap(sb, slice(0, COLS), slice(0, rows))
    _copy(b, sums, part, COPY_ON[0])
    ones = ap(_ones(k, k.d * kk - k.pad), slice(0, COLS), slice(None))  # (`norm_pad`)
    m = ap(k.gpsum("rm", n, p, g).name, slice(0, p), slice(u, u + 1))
    if SPREAD:  # each partition's row's mean, straight into rm
        b.emit(Matmul, [part, ones], [m], stationary=part, moving=ones, dst=m)
    else:
        g0 = k.P // kk
        mean = ap(ps, slice(0, rows), slice(g0, g0 + 1))
        b.emit(Matmul, [part, ones], [mean], stationary=part, moving=ones, dst=mean)
        mcol = ap(sb, slice(0, rows), slice(g0, g0 + 1))
        _copy(b, mean, mcol, COPY_ON[1])
        e = ap(k.groups.e, slice(0, rows), slice(0, p))
        b.emit(Matmul, [e, mcol], [m], stationary=e, moving=mcol, dst=m)
    ((i, lo, hi),) = k.spieces
    junk = ap(k.tile("junk", 0, (k.P, k.c), k.xdt), slice(0, p), slice(0, hi - lo))
    xs = k.lane_tile("x", n, i, p, 0, (lo, hi))
    s2 = ap(k.gtile("gs2", n, (k.P, g)), slice(0, p), slice(u, u + 1))
    b.emit(Activation, [xs, m], [junk, s2], func="square", src=xs, dst=junk, scale=-1.0,
           bias=m, reduce="add", reduce_dst=s2)  # fmt: skip
