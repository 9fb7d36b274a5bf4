"""A pipelined 16-bit layer_norm's (`NormStages.fused`, rows one a partition) last block of a
core, g rows fewer than 128, in k segments a row (`tail_segs`): segment s, columns [s f,
(s + 1) f) of its rows (f = D / k), on partitions [s g, (s + 1) g), so each of its passes
costs 1/k of a whole block's (an engine's time is by the free size: 51 rows of 5120 cost a
whole block's passes; in 2 segments, 102 partitions, half).

Its stages, as the other blocks' (`NormStages`), over the segments:

1. load a segment a transfer (on the DMA engines of its own partitions); VectorE's bn_stats
   of each segment;
2. bn_aggr: the segment's mean m_s and variance v_s; the row's mean M, the mean of its k
   segments' (summed over the row's partitions by a TensorE matmul, `tail_segs.pairs`), and
   variance, the mean of v_s + (m_s - M)^2 (equal counts: no E[x^2] - E[x]^2, so a mean of
   10^4 keeps its digits); rstd; diag(rstd) (`NormStages.diagonals`);
3. each output piece (x - M) * weight, one `scalar_tensor_tensor` (VectorE or GpSimd, the
   list schedule's pick), the weight's segments on the segments' partitions (`_setup`: copied
   from the spread weight by DMA, no engine pass);
4. TensorE: diag(rstd) times it, and the bias as a K = k selector times its segments
   (`tail_segs.selector`, the bias loaded as [k, f]) into PSUM, ScalarE copying out
   (`norm_affine.PeBias`); a store a segment.

The rows a tail takes are a core's last at the chip's default LNC (`tail_segs.ranges`, at any
LNC), so a row's values are the same at LNC 1 and 2."""

from __future__ import annotations

from trnsim.dtypes import dtype
from trnsim.isa import BnAggr, BnStats, DmaCopy, Matmul, ScalarTensorTensor
from trnsim.kernels.builder import ap
from trnsim.kernels.row_plan import G, V, runs
from trnsim.kernels.tail_segs import pairs, selector

__all__ = ["tail_blocks", "first", "second", "third", "fourth"]

SEGS_MOST = 8  # a tail row's segments at most (each loaded on a queue of its own)


def tail_blocks(cfg, blocks: list[tuple], d: int) -> dict[int, tuple[int, int]]:
    """{block: (g, k)}: the blocks of g rows fewer than the partitions (a 2-D x's, one a
    partition: a range's last, `tail_segs.ranges`) in the most segments k that fit them (k
    dividing D into even widths, for bf16 passes at one element a cycle; g k partitions)."""
    P, out = cfg.core.sbuf.partitions, {}
    for n, (_, rows) in enumerate(blocks):
        ks = [k for k in range(2, SEGS_MOST + 1) if d % k == 0 and d // k % 2 == 0
              and rows * k <= P]  # fmt: skip
        if rows < P and ks:
            out[n] = (rows, max(ks))
    return out


def _shape(st, n: int) -> tuple[int, int, int, int]:
    """Tail block n's (g rows, k segments, f columns a segment, g k partitions)."""
    g, k = st.segs[n]
    return g, k, st.d // k, g * k


def _x(st, n: int) -> str:
    """Block n's x tile, the whole row's ([P, 1, D]; a tail's segment in its first f
    columns)."""
    return st.tile("x0.0.", n, (st.P, st.tper, st.d), st.xdt)


def _queue(st, n: int, s: int):
    """Tail block n's segment s's load queue: the block's own (`NormStages.first`'s), in
    turn, behind the blocks before it on them (on queues of their own, the tails' loads and
    weights took the DMA engines beside the first blocks': trn2 LNC 2, 16 MiB, bf16 rows of
    6144, the first block in at 17.5 us)."""
    return st.loads[len(st.lanes) * n + s]


def _setup(st, g: int, k: int, n: int) -> tuple:
    """(pairs, selector, bias, weight) tiles of tails of g rows in k segments, made once: the
    pair matrix and the selector (GpSimd), the bias as [k, f] on partitions [0, k) (one
    transfer), the weight's segments ([P, f]: segment s on partitions [s g, (s + 1) g)) copied
    from the spread weight's (`NormStages.rows`) by DMA (SBUF to SBUF, a transfer a segment),
    on tail block n's queues (`_queue`)."""
    if (g, k) in st.tail_tiles:
        return st.tail_tiles[(g, k)]
    b, P, f = st.b, st.P, st.d // k
    pr = pairs(b, P, g, k)
    bdt, wdt = b.tensors[st.bias].dtype, b.tensors[st.weight].dtype
    sel = selector(b, f"norm.tsel{g}.{k}", P, g, k, (0,), bdt)
    bk = b.scratch_tile(f"norm.tbias{k}", "tail_bias", (P, f), bdt)
    if k not in st.tail_bias:
        st.tail_bias.add(k)
        dst = ap(bk, slice(0, k), slice(0, f))
        b.emit(DmaCopy, [ap(st.bias)], [dst], src=ap(st.bias), dst=dst, queue=_queue(st, n, 0))
    w = b.scratch_tile(f"norm.tweight{g}.{k}", "tail_weight", (P, f), wdt)
    for s in range(k):
        src = ap(st.rows[st.weight], slice(s * g, (s + 1) * g), slice(s * f, (s + 1) * f))
        dst = ap(w, slice(s * g, (s + 1) * g), slice(0, f))
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=_queue(st, n, s))
    if st.tail_pm is None:
        st.tail_pm = b.psum("tailpm", (P, 2), dtype("float32"))
    st.tail_tiles[(g, k)] = (pr, sel, bk, w)
    return st.tail_tiles[(g, k)]


def first(st, n: int, index: tuple, rows: int) -> None:
    """Stage 1: a load a segment, on queues of their own; VectorE's bn_stats."""
    st.at(n)
    b, (g, k, f, p) = st.b, _shape(st, n)
    st.parts_of[n] = p
    x, r0 = _x(st, n), index[-1].start
    _setup(st, g, k, n)
    for s in range(k):
        src = ap(st.x, *index[:-1], slice(r0, r0 + g), slice(s * f, (s + 1) * f))
        dst = ap(x, slice(s * g, (s + 1) * g), 0, slice(0, f))
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=_queue(st, n, s))
    chunks = runs(f, st.bn)
    t = st.tile(f"tst{len(chunks)}.", n, (st.P, 6 * len(chunks)))
    for q, (lo, hi) in enumerate(chunks):
        xs, sd = ap(x, slice(0, p), 0, slice(lo, hi)), ap(t, slice(0, p), slice(6 * q, 6 * q + 6))
        b.emit(BnStats, [xs], [sd], src=xs, dst=sd)


def second(st, n: int, index: tuple, rows: int) -> None:
    """Stage 2: the row's mean M (in `agg`'s mean) and rstd (`col` rs) over its segments
    (module doc), diag(rstd)."""
    st.at(n)
    b, (g, k, f, p) = st.b, _shape(st, n)
    chunks = runs(f, st.bn)
    t = ap(st.tile(f"tst{len(chunks)}.", n, (st.P, 6 * len(chunks))), slice(0, p))
    ag = st.tile("tag", n, (st.P, 2))
    b.emit(BnAggr, [t], [ap(ag, slice(0, p))], src=t, dst=ap(ag, slice(0, p)))
    m_s, v_s = ap(ag, slice(0, p), slice(0, 1)), ap(ag, slice(0, p), slice(1, 2))
    pm = ap(st.tail_tiles[(g, k)][0], slice(0, p), slice(0, p))
    s1, s2 = (ap(st.tail_pm, slice(0, p), slice(u, u + 1)) for u in (0, 1))
    b.emit(Matmul, [pm, m_s], [s1], stationary=pm, moving=m_s, dst=s1)
    mean = st.agg(n, p, 0, 0)
    st.alu(mean, s1, ("multiply", 1.0 / k))
    e, e2 = st.col("dm", n, p, 0), st.col("q", n, p, 0)
    st.alu(e, m_s, ("subtract", mean))
    st.alu(e2, e, ("multiply", e), ("add", v_s))
    b.emit(Matmul, [pm, e2], [s2], stationary=pm, moving=e2, dst=s2)
    rs = st.col("rs", n, p, 0)
    st.alu(rs, s2, ("multiply", 1.0 / k), ("add", st.eps))
    st.alu(rs, rs, ("pow", -0.5))
    st.diagonals(n, p)


def _pieces(st, f: int) -> list[tuple[int, int, int]]:
    """(lo, hi, w): a segment's output pieces, the whole rows' (`NormStages.opieces`) cut at
    f, each in its whole row's piece's tile (w its columns)."""
    return [(lo, min(hi, f), hi - lo) for lo, hi in runs(st.d, min(st.out_pieces, st.most))
            if lo < f]  # fmt: skip


def _piece(st, kind: str, n: int, p: int, lo: int, hi: int, w: int):
    return ap(st.piece(kind, n, 0, 0, lo, lo + w, p).name, slice(0, p), slice(0, hi - lo))


def third(st, n: int, index: tuple, rows: int, only=None) -> None:
    """Stage 3: each piece's (x - M) * weight (VectorE or GpSimd, the list schedule's pick)."""
    st.at(n)
    b, (g, k, f, p) = st.b, _shape(st, n)
    x, w = _x(st, n), st.tail_tiles[(g, k)][3]
    mean = st.agg(n, p, 0, 0)
    for lo, hi, width in _pieces(st, f):
        o = _piece(st, "p", n, p, lo, hi, width)
        xs, wt = ap(x, slice(0, p), 0, slice(lo, hi)), ap(w, slice(0, p), slice(lo, hi))
        ops = [(ScalarTensorTensor, [xs, mean, wt], [o], dict(
                   data=xs, op0="subtract", operand0=mean, op1="multiply", operand1=wt, dst=o,
                   engine=e)) for e in (V, G)]  # fmt: skip
        b.emit(*ops[0][:3], **ops[0][3], **st.others(ops))


def fourth(st, n: int, index: tuple, rows: int) -> None:
    """Stage 4: TensorE's diag(rstd) times each piece plus the selector times the bias'
    segments, ScalarE's copy out; a store a segment."""
    st.at(n)
    b, (g, k, f, p) = st.b, _shape(st, n)
    _, sel, bk, _ = st.tail_tiles[(g, k)]
    sel = (ap(sel, slice(0, k), slice(0, p)), bk, k)
    r0 = index[-1].start
    for lo, hi, width in _pieces(st, f):
        o, fo = (_piece(st, kind, n, p, lo, hi, width) for kind in "pf")
        split = n >= st.blocks - st.tail_copies
        st.pe.add(o, fo, lo, hi - lo, p, st.pe_span, st.diagonal(n, p, 0), split, sel=sel)
        for s in range(k):
            src = ap(fo.name, slice(s * g, (s + 1) * g), slice(0, hi - lo))
            dst = ap(st.out, *index[:-1], slice(r0, r0 + g), slice(s * f + lo, s * f + hi))
            st.stored += 1
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=st.stores[st.stored])
