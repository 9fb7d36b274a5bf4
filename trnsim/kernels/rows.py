"""Reductions over the last dim: `sum`, `mean`, `amax`, `amin` (`layer_norm` and `rms_norm` are
in `norms`, other dims in `reduce`).

**Rows that fit a partition** (`rows_fit`) go in blocks of [p, per, D] (short rows several to a
partition, up to ROW_ELEMENTS, `layout.row_tiles`): one VectorE `tensor_reduce` over the
last axis gives the block's [p, per] results at once (into out's dtype when 16-bit, a bf16 sum
or max at two elements a cycle, the sum rounded once, or fp32), `mean` scales them on GpSimd
(on VectorE, each scale waited for its sum and the next sum for it), and one DMA stores
them (a partition's rows are consecutive in out). Blocks rotate through BUFS buffers and load
on as many queues as hide the next transfer's setup (`balance.dma_queues`). Rows longer than
ROW_ELEMENTS / 2 (one a partition): the last rows % 128 of a core's share in pieces, after the
whole blocks (`tail_pieces`, `rows_ragged`), and the rows shared evenly between the cores when
`layout.core_rows` would load one core more than a meeting costs (`even_rows`).

**Longer rows, or fewer rows than partitions** (`rows_pieces`): in pieces over the partitions
(`row_pieces`), each partition's partial sum (VectorE's `tensor_reduce`, or ScalarE's
`activation` with its add reduction, by tiles in turn as their cost models even them out) or
max, then the k partials of each row on TensorE: a sum by one matmul (E^T as the stationary
operand), a max or min by a transpose and one `tensor_reduce` over [rows, k]. Such a
reduction shares its rows evenly between the cores of an LNC 2 logical core (it is isolated:
`kernels.isolated`, `rows_fit` false).
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import Activation, DmaCopy, Engine, TensorCopy, TensorReduce, TensorScalar
from trnsim.kernels.balance import cost_ns, dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import core_rows, row_tiles
from trnsim.kernels.queues import Queues
from trnsim.kernels.ragged import RaggedLayout, ragged_layout
from trnsim.kernels.reduce import lower_any, meets_exactly, on_last_dim
from trnsim.kernels.row_pieces import layout as pieces_layout
from trnsim.kernels.row_plan import S, Spread, V

__all__ = [
    "REDUCTIONS",
    "lower_reduction",
    "rows_fit",
    "core_share",
    "even_rows",
    "even_norm",
    "norm_share",
]

BUFS = 4
BUFFER_SHARE = 0.3  # what the rotating buffers may take
ROW_ELEMENTS = 2048  # short rows are grouped up to this many elements a partition (1 MiB
# blocks of fp32: many, so the first load and the last reduction are short)
PIECE_BYTES = 4096  # a piece tile's bytes a partition (`rows_pieces`: small, so the last tile's
# reduction after the last load is short)
REDUCTIONS = {"sum": "add", "mean": "add", "amax": "max", "amin": "min"}
EVEN_NORMS = ("rms_norm",)  # norms whose rows may go evenly (`even_norm`; layer_norm's
# fp32 rows of 5120 ran 72.6 us either way: 410 rows are four blocks a core as 435 are)
EVEN_NORM_BLOCKS = 4  # ... when a core has at most this many blocks of 128 rows
EVEN_LAYER_ROW = 8192  # layer_norm's rows this long go evenly so too (they may go in pieces
# of 16 rows a tile, `norms.FIT_PIECES`, whose time follows a core's rows, not its blocks of
# 128: trn2 LNC 2, 16 MiB, bf16 rows of 14336, 256 and 329 rows a core, 67.5 -> 61.9 us)
EVEN_LAYER_FP32 = 2048  # ... and fp32 rows this long (`norm_stt`'s plan: a core's last rows in
# segments a row, `norm_stt._tails`, on all the DMA engines; trn2 LNC 2, 16 MiB, rows of 5120,
# 384 and 435 rows a core -> 409 and 410: 56.9 -> 53.4 us; 6144 57.3 -> 55.6)
EVEN_LAYER_16 = 4096  # ... and 16-bit rows longer than this (one a partition in the
# pipelined plan, `norms.PIPE_ROW_BYTES`: a core's last rows in segments, `norm_tail`)
EVEN_FP32_BLOCKS = 8  # ... when a core has at most this many blocks of 128 rows (rows of 3072,
# 640 and 725 rows a core -> 682 and 683: 56.6 -> 54.9 us; 2560 51.8 -> 51.7)


def lower_reduction(
    b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str, dim=-1, keepdim=False
) -> None:
    """out = op(x, dim, keepdim): over the last dim here (rows that fit, or in pieces), over
    other dims in `reduce.lower_any`."""
    tx, to = b.tensors[x], b.tensors[out]
    if not tx.shape or not on_last_dim(dim, len(tx.shape)) or one_long_row(cfg, op, tx, to):
        lower_any(b, cfg, op, x, out, dim, keepdim)
        return
    want = tuple(tx.shape[:-1]) + ((1,) if keepdim else ())
    if tuple(to.shape) != want and not (want == () and tuple(to.shape) in ((), (1,))):
        raise TraceError(
            f"{op}: x {list(tx.shape)} reduced over its last dim gives {list(want)}, "
            f"but out is {list(to.shape)}; expected out of shape {list(want)}"
        )
    if not rows_fit(cfg, tx):
        lay = _pieces(cfg, tx)
        if lay is None:  # not a multiple of 128: with a remainder column
            from trnsim.kernels.rows_ragged import lower_reduction_ragged

            most = PIECE_BYTES // tx.dtype.itemsize
            rag = ragged_layout(tx.shape[-1], most, cfg.core.sbuf.partitions)
            lower_reduction_ragged(b, cfg, op, x, out, rag)
            return
        from trnsim.kernels.rows_pieces import lower_reduction_pieces

        lower_reduction_pieces(b, cfg, op, x, out, lay, PIECE_BYTES // tx.dtype.itemsize)
        return
    _packed(b, cfg, op, x, out)


def one_long_row(cfg: ChipConfig, op: str, tx, to) -> bool:
    """Whether x is one row too long for a partition (a 1-D tensor, or its other dims 1)
    that the cores can share exactly (`reduce.meets_exactly`): reduced as everything
    (`reduce.lower_any`), its blocks shared by the cores, not the one row's pieces on one core
    (a 1-D sum of 2^22 fp32: 47% of its bound at LNC 2)."""
    return (math.prod(tx.shape[:-1]) == 1 and not rows_fit(cfg, tx)
            and meets_exactly(cfg, op, to.dtype))  # fmt: skip


def rows_fit(cfg: ChipConfig, tx) -> bool:
    """Whether x's rows go one or more to a partition (else in pieces, or by
    `reduce.lower_any`): rows that fit one VectorE instruction and a buffer, and, when they
    are long (PIECE_BYTES or more), enough of them to fill the partitions."""
    if not tx.shape:
        return True
    d, rows = tx.shape[-1], math.prod(tx.shape[:-1])
    room = int(cfg.core.sbuf.partition_bytes * BUFFER_SHARE)
    if d > cfg.core.vector.dve_max_free_elements or d * tx.dtype.itemsize * 2 > room:
        return False
    long = d * tx.dtype.itemsize >= PIECE_BYTES and d % cfg.core.sbuf.partitions == 0
    return not (long and rows < 2 * cfg.core.sbuf.partitions)


def core_share(b: KernelBuilder, cfg: ChipConfig, tx) -> tuple[int, int]:
    """The flattened rows of x that this physical core computes in a row op split by
    "reduce_rows" (`trace.ops.SPLITS`: the reductions, softmax, log_softmax and the norms over
    the last dim): `layout.core_rows`' share (cut at multiples of 128 rows, the same for every
    op of the kernel) when x's rows fit (`rows_fit`); else the op is isolated
    (`kernels.isolated`) and its rows are cut evenly between the cores (a few long rows in
    pieces, all on one core under `core_rows`, then keep both cores busy)."""
    total = math.prod(tx.shape[:-1]) if tx.shape else 1
    c, n = b.part
    if n == 1:
        return 0, total
    if rows_fit(cfg, tx):
        lo, hi = b.share(tx.shape)
        return lo, hi
    return even_share(b, tx)


def even_rows(cfg: ChipConfig, tx) -> bool:
    """Whether a reduction over x's rows that fit (`rows_fit`) shares them evenly between the
    two cores of an LNC 2 logical core (it is then isolated, `kernels.isolated`) rather than
    by `layout.core_rows`, which cuts at a multiple of 128 rows: rows one a partition (longer
    than ROW_ELEMENTS / 2; shorter rows go several to one, in blocks that need whole groups),
    when core_rows' larger share would take longer to load than the cores' meeting costs, at
    the core's DMA rate (fp32 rows of 5120, 16 MiB: 819 rows, 384 and 435 a core)."""
    if not tx.shape or 2 * tx.shape[-1] <= ROW_ELEMENTS:
        return False
    return _uneven(cfg, tx)


def _uneven(cfg: ChipConfig, tx) -> bool:
    """Whether `layout.core_rows`' larger share of x's rows takes longer to load, at the core's
    DMA rate, than the cores' meeting costs (`core.barrier_latency`)."""
    total = math.prod(tx.shape[:-1])
    aligned = max(hi - lo for lo, hi in (core_rows(tuple(tx.shape), (c, 2)) for c in (0, 1)))
    extra = (aligned - -(-total // 2)) * tx.shape[-1] * tx.dtype.itemsize
    rate = cfg.core.dma.engines * cfg.core.dma.engine_bandwidth  # bytes/s
    return extra / rate > cfg.core.barrier_latency


def even_norm(cfg: ChipConfig, op: str, tx) -> bool:
    """Whether a norm (EVEN_NORMS) over x's rows that fit (`rows_fit`) shares them evenly
    between the cores of an LNC 2 logical core (it is then isolated, `kernels.isolated`): when
    `layout.core_rows`' cut at a multiple of 128 rows gives one core more than a meeting costs
    (`_uneven`), and x has no more than EVEN_NORM_BLOCKS blocks of 128 rows a core: rms_norm's
    plan (`rms_plan`: in pieces or lanes) then takes as long as its larger share (trn2 LNC 2,
    16 MiB, fp32 rows of 5120: 384 and 435 rows 53.2 us, 409 and 410 50.2 us; with more rows
    the cut at 128 rows ran as fast or faster: fp32 rows of 2560 50.5 -> 50.9 us). So too
    layer_norm's rows of EVEN_LAYER_ROW or more, and its fp32 ones of EVEN_LAYER_FP32 or more
    up to EVEN_FP32_BLOCKS blocks a core (`norm_stt`'s tails in segments)."""
    if not tx.shape or not rows_fit(cfg, tx):
        return False
    fp32 = op == "layer_norm" and tx.dtype.itemsize == 4 and tx.shape[-1] >= EVEN_LAYER_FP32
    fp32 = fp32 or (op == "layer_norm" and tx.dtype.itemsize == 2 and tx.shape[-1] > EVEN_LAYER_16)
    long = tx.shape[-1] >= EVEN_LAYER_ROW
    if op not in EVEN_NORMS and not (op == "layer_norm" and long) and not fp32:
        return False
    blocks = EVEN_FP32_BLOCKS if fp32 else EVEN_NORM_BLOCKS
    few = math.prod(tx.shape[:-1]) <= 2 * blocks * cfg.core.sbuf.partitions
    return few and _uneven(cfg, tx)


def norm_share(b: KernelBuilder, cfg: ChipConfig, op: str, tx, align: int = 1) -> tuple[int, int]:
    """This physical core's flattened rows of x in a norm: cut evenly where `even_norm` or
    they do not fit (at a multiple of `align` rows: a plan whose rounding follows its groups
    of rows, `norms._lower`), else `core_share`."""
    if b.part[1] > 1 and (even_norm(cfg, op, tx) or not rows_fit(cfg, tx)):
        return even_share(b, tx, align)
    return core_share(b, cfg, tx)


def even_share(b: KernelBuilder, tx, align: int = 1) -> tuple[int, int]:
    """This physical core's flattened rows of x, x's rows cut evenly between the cores (at the
    nearest multiples of `align` rows)."""
    total = math.prod(tx.shape[:-1]) if tx.shape else 1
    c, n = b.part

    def cut(i):
        return min(total, round(total * i / n / align) * align) if align > 1 else total * i // n

    return cut(c), total if c + 1 == n else cut(c + 1)


def _pieces(cfg: ChipConfig, tx):
    return pieces_layout(tx.shape[-1], PIECE_BYTES // tx.dtype.itemsize,
                         cfg.core.sbuf.partitions)  # fmt: skip


def _packed(b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str) -> None:
    """Rows one or more to a partition (module doc); the last rows of the core's share, too few
    to fill the partitions, in pieces (`tail_pieces`)."""
    tx = b.tensors[x]
    d, P = tx.shape[-1], cfg.core.sbuf.partitions
    lo, hi = even_share(b, tx) if even_rows(cfg, tx) else b.share(tx.shape) or (
        0, math.prod(tx.shape[:-1]))  # fmt: skip
    from trnsim.kernels.rows_ragged import made, ragged_rows  # (which imports this module)

    tiles = tail_pieces(cfg, tx, hi - lo) if in_fp32(cfg, op, tx, b.tensors[out]) else []
    steps = [made(b, cfg, op, x, out, RaggedLayout(d, 1, k, P)) for k, _ in tiles]
    # the tail's tiles but its last (the smallest) before the whole blocks, their passes
    # hidden behind the blocks' loads; the last after them, a short chain after the last load
    r = hi - sum(n for _, n in tiles)
    cuts = [r + sum(n for _, n in tiles[:i]) for i in range(len(tiles) + 1)]
    for i in range(len(tiles) - 1):
        ragged_rows(steps[i], (cuts[i], cuts[i + 1]))
    if r > lo:
        _whole_rows(b, cfg, op, x, out, (lo, r))
    if tiles:
        ragged_rows(steps[-1], (cuts[-2], cuts[-1]))


def in_fp32(cfg: ChipConfig, op: str, tx, to) -> bool:
    """Whether a core's last rows may go in pieces (`tail_pieces`): always but for a sum or mean
    into 16-bit out, whose rows one a partition then sum in fp32 and round once, as the rows in
    pieces do (the same values whichever way a row goes, so at LNC 1 and 2), not in out's
    dtype straight from VectorE (two elements a cycle, each column chunk rounded): only where
    the pieces save more than FP32_SUMS_NS of an LNC 2 core's loads (by `_load_ns`; a choice
    by the shape alone, the same at any LNC)."""
    if REDUCTIONS[op] != "add" or not (to.dtype.itemsize == 2 and to.dtype.is_float):
        return True
    n = -(-math.prod(tx.shape[:-1]) // 2) if tx.shape else 1
    tiles = tail_pieces(cfg, tx, n)
    if not tiles:
        return False
    whole = _load_ns(cfg, tx, 1, n % cfg.core.sbuf.partitions)
    return whole - sum(_load_ns(cfg, tx, k, g) for k, g in tiles) > FP32_SUMS_NS


FP32_SUMS_NS = 1000  # ASSUMED: what summing a 16-bit sum's rows in fp32 costs more (VectorE's one
# element a cycle, not two): bf16 rows of 1536 to 3072, 16 MiB, trn2 LNC 2: 0.7 - 1.7 us


def tail_pieces(cfg: ChipConfig, tx, rows: int) -> list[tuple[int, int]]:
    """[(k, n)]: the last rows % 128 of a core's share of x's rows, when they go one a partition
    (longer than ROW_ELEMENTS / 2), in tiles of n rows cut in k pieces each (k dividing the row:
    no remainder), the tiles that take the least time to load by the estimate `_load_ns` (the
    rows whole, then none). A tile of few whole rows takes as long as a whole block: its load
    goes as fast as the DMA engines its partitions reach (`dma.descriptors`: 8 partitions an
    engine), VectorE's pass over it as a block's whatever its partitions; in k pieces about
    1 / k of that (fp32 rows of 5120, 16 MiB, trn2 LNC 2: 409 rows a core, three blocks and 25
    rows, 30.6 -> 26.8 us)."""
    d, P = tx.shape[-1], cfg.core.sbuf.partitions
    n = rows % P
    if 2 * d <= ROW_ELEMENTS or n == 0:
        return []
    ks = [k for k in range(2, P + 1) if d % k == 0]
    best: list[tuple[float, list]] = [(0.0, [])]  # best[m]: the tiles of the last m rows
    for m in range(1, n + 1):
        opts = [(_load_ns(cfg, tx, k, min(m, P // k)), k, min(m, P // k)) for k in ks]
        best.append(min(((t + best[m - g][0], [(k, g)] + best[m - g][1]) for t, k, g in opts),
                        default=(math.inf, [])))  # fmt: skip
    return best[n][1] if best[n][0] < _load_ns(cfg, tx, 1, n) else []


def _load_ns(cfg: ChipConfig, tx, k: int, n: int) -> float:
    """The estimated ns of loading n rows of x in k pieces each (one tile): the busiest DMA
    engine's bytes at its bandwidth, and a transfer's setup (ASSUMED: what a tile costs more)."""
    dma, P = cfg.core.dma, cfg.core.sbuf.partitions
    busiest = min(P // dma.engines, n * k) * -(-tx.shape[-1] // k) * tx.dtype.itemsize
    return (busiest / dma.engine_bandwidth + dma.transfer_setup) * 1e9


def _whole_rows(b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str, rows) -> None:
    """Rows [lo, hi) one or more to a partition (module doc); a row longer than ROW_ELEMENTS in
    column chunks of its own tiles, their partials reduced once more."""
    tx, to = b.tensors[x], b.tensors[out]
    d, P, f32 = tx.shape[-1], cfg.core.sbuf.partitions, dtype("float32")
    room = int(cfg.core.sbuf.partition_bytes * BUFFER_SHARE)
    lo, hi = rows
    per, blocks = row_tiles(tx.shape, P, (lo, hi), max(1, ROW_ELEMENTS // d),
                            max(1, room // (BUFS * d * tx.dtype.itemsize)))  # fmt: skip
    chunks = [(0, d)] if per > 1 or d <= ROW_ELEMENTS else _runs(d, ROW_ELEMENTS)
    w = max(hi - lo for lo, hi in chunks)
    bufs = max(1, min(BUFS * len(chunks), room // (per * w * tx.dtype.itemsize)))
    q, qs = dma_queues(cfg, per * w * tx.dtype.itemsize), Queues(cfg)
    loads, stores = qs.loads().take(q), qs.stores(0, 1 / 2)
    # into out's dtype straight from the reduction when it is 16-bit (bf16 sums and maxima at
    # two elements a cycle, rounded once; a mean's sum then scaled in place, rounded again, as
    # are the chunks' partial sums: within a unit or two in the last place) or fp32; else fp32,
    # cast. A 16-bit sum of rows one a partition with rows in pieces (`in_fp32`): in fp32,
    # rounded once (a mean with its scale), as the rows in pieces are: the same values
    # whichever way a row goes
    direct = to.dtype.is_float and (to.dtype.itemsize == 2 or to.dtype == f32)
    one = per == 1 and 2 * d > ROW_ELEMENTS  # (rows one a partition: short rows VectorE's)
    if one and REDUCTIONS[op] == "add" and to.dtype.itemsize == 2:
        direct = direct and not in_fp32(cfg, op, tx, to)
    nd = len(tx.shape)
    n = 0
    pdt = to.dtype if direct else f32
    spread = Spread(_shares(b, cfg, op, tx, chunks, pdt) if one else {V: 1.0},
                    len(blocks) * len(chunks))  # fmt: skip
    for m, (index, rows, k) in enumerate(blocks):
        p = rows // k
        full = tuple(index) + (slice(None),) * (nd - 1 - len(index))
        res = ap(b.scratch_tile(f"rows.r{m % BUFS}", "r", (P, per), to.dtype), slice(0, p),
                 slice(0, k))  # fmt: skip
        acc = res if direct else ap(b.scratch_tile(f"rows.c{m % BUFS}", "c", (P, per), f32),
                                    slice(0, p), slice(0, k))  # fmt: skip
        if len(chunks) > 1:
            parts = ap(b.scratch_tile(f"rows.p{m % BUFS}", "p", (P, len(chunks)), pdt),
                       slice(0, p))  # fmt: skip
        for i, (lo, hi) in enumerate(chunks):
            xa = ap(b.scratch_tile(f"rows.x{n % bufs}", "x", (P, per, w), tx.dtype), slice(0, p),
                    slice(0, k), slice(0, hi - lo))  # fmt: skip
            src = ap(x, *index) if len(chunks) == 1 else ap(x, *full, slice(lo, hi))
            b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=loads[n])
            n += 1
            dst = acc if len(chunks) == 1 else ap(parts.name, slice(0, p), slice(i, i + 1))
            if spread() == S:
                junk = ap(b.scratch_tile("rows.junk", "junk", (P, w), dtype("bfloat16")),
                          slice(0, p), slice(0, hi - lo))  # fmt: skip
                b.emit(Activation, [xa], [junk, dst], func="copy", src=xa, dst=junk,
                       reduce="add" if REDUCTIONS[op] == "add" else "max",
                       reduce_dst=dst)  # fmt: skip
            else:
                b.emit(TensorReduce, [xa], [dst], alu=REDUCTIONS[op], src=xa, dst=dst)
        if len(chunks) > 1:
            b.emit(TensorReduce, [parts], [acc], alu=REDUCTIONS[op], src=parts, dst=acc)
        if op == "mean":  # on GpSimd, idle: on VectorE it waited for the sum before it, and
            # the next block's reduction for it (bf16 rows of 80, trn2 LNC 2: 29.7 -> 26.7 us)
            b.emit(TensorScalar, [acc], [res], src=acc, dst=res, op0="multiply", operand0=1.0 / d,
                   engine=Engine.GPSIMD)  # fmt: skip
        elif not direct:
            b.emit(TensorCopy, [acc], [res], src=acc, dst=res)
        dst = ap(out, *index) if b.tensors[out].shape else ap(out)
        b.emit(DmaCopy, [res], [dst], src=res, dst=dst, queue=stores[m])


def _shares(b: KernelBuilder, cfg: ChipConfig, op: str, tx, chunks: list, pdt) -> dict:
    """A whole block's row chunks reduced on VectorE (`tensor_reduce`) alone when its cost
    model's time for a block (the chunks, their partials' reduction, a mean's scale) is within
    the block's load (at the core's DMA rate), else with ScalarE (`activation` with its add or
    max reduction) in the shares that even out their time a chunk (VectorE alone for a min, or
    a max where ScalarE has no max reduction). bf16 rows of 2560, 16 MiB, trn2 LNC 2: mean
    31.2 -> 27.2 us."""
    alu, P = REDUCTIONS[op], cfg.core.sbuf.partitions
    if alu == "min" or (alu == "max" and not cfg.core.scalar.reduce_max):
        return {V: 1.0}
    w = max(hi - lo for lo, hi in chunks)
    t = ap(b.scratch_tile("rows.cost", "x", (P, w), tx.dtype))
    c = ap(b.scratch_tile("rows.cost_c", "c", (P, 1), pdt))
    v = cost_ns(b, cfg, TensorReduce, alu=alu, src=t, dst=c)
    s = cost_ns(b, cfg, Activation, func="copy", src=t, dst=t, reduce=alu, reduce_dst=c)
    small = cost_ns(b, cfg, TensorScalar, src=c, dst=c, op0="multiply", operand0=1.0)
    busy = len(chunks) * v + small * ((len(chunks) > 1) + (op == "mean"))
    dma = cfg.core.dma.engines * cfg.core.dma.engine_bandwidth
    if busy <= P * tx.shape[-1] * tx.dtype.itemsize / dma * 1e9:
        return {V: 1.0}
    return {V: s / (v + s), S: v / (v + s)}


def _runs(n: int, most: int) -> list[tuple[int, int]]:
    k = -(-n // most)
    cuts = [n * i // k for i in range(k + 1)]
    return list(zip(cuts, cuts[1:]))
