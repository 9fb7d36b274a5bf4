"""Reductions over the last dim: `sum`, `mean`, `amax`, `amin` (`layer_norm` and `rms_norm` are
in `norms`, other dims in `reduce`).

**Rows that fit a partition** (`rows_fit`) go in blocks of [p, per, D] (short rows several to a
partition, up to ROW_ELEMENTS, `layout.row_tiles`): one VectorE `tensor_reduce` over the
last axis gives the block's [p, per] results at once (into out's dtype when 16-bit, a bf16 sum
or max at two elements a cycle, the sum rounded once, or fp32), `mean` scales them on GpSimd
(on VectorE, each scale waited for its sum and the next sum for it), and one DMA stores
them (a partition's rows are consecutive in out). Blocks rotate through BUFS buffers and load
on as many queues as hide the next transfer's setup (`balance.dma_queues`).

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
from trnsim.isa import DmaCopy, Engine, TensorCopy, TensorReduce, TensorScalar
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_tiles
from trnsim.kernels.queues import Queues
from trnsim.kernels.ragged import ragged_layout
from trnsim.kernels.reduce import lower_any, on_last_dim
from trnsim.kernels.row_pieces import layout as pieces_layout

__all__ = ["REDUCTIONS", "lower_reduction", "rows_fit", "core_share"]

BUFS = 4
BUFFER_SHARE = 0.3  # what the rotating buffers may take
ROW_ELEMENTS = 2048  # short rows are grouped up to this many elements a partition (1 MiB
# blocks of fp32: many, so the first load and the last reduction are short)
PIECE_BYTES = 4096  # a piece tile's bytes a partition (`rows_pieces`: small, so the last tile's
# reduction after the last load is short)
REDUCTIONS = {"sum": "add", "mean": "add", "amax": "max", "amin": "min"}


def lower_reduction(
    b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str, dim=-1, keepdim=False
) -> None:
    """out = op(x, dim, keepdim): over the last dim here (rows that fit, or in pieces), over
    other dims in `reduce.lower_any`."""
    tx, to = b.tensors[x], b.tensors[out]
    if not tx.shape or not on_last_dim(dim, len(tx.shape)):
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


def even_share(b: KernelBuilder, tx) -> tuple[int, int]:
    """This physical core's flattened rows of x, x's rows cut evenly between the cores."""
    total = math.prod(tx.shape[:-1]) if tx.shape else 1
    c, n = b.part
    return total * c // n, total * (c + 1) // n


def _pieces(cfg: ChipConfig, tx):
    return pieces_layout(tx.shape[-1], PIECE_BYTES // tx.dtype.itemsize,
                         cfg.core.sbuf.partitions)  # fmt: skip


def _packed(b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str) -> None:
    """Rows one or more to a partition (module doc); a row longer than ROW_ELEMENTS in column
    chunks of its own tiles, their partials reduced once more."""
    tx, to = b.tensors[x], b.tensors[out]
    d, P, f32 = tx.shape[-1], cfg.core.sbuf.partitions, dtype("float32")
    room = int(cfg.core.sbuf.partition_bytes * BUFFER_SHARE)
    per, blocks = row_tiles(tx.shape, P, b.share(tx.shape), max(1, ROW_ELEMENTS // d),
                            max(1, room // (BUFS * d * tx.dtype.itemsize)))  # fmt: skip
    chunks = [(0, d)] if per > 1 or d <= ROW_ELEMENTS else _runs(d, ROW_ELEMENTS)
    w = max(hi - lo for lo, hi in chunks)
    bufs = max(1, min(BUFS * len(chunks), room // (per * w * tx.dtype.itemsize)))
    q, qs = dma_queues(cfg, per * w * tx.dtype.itemsize), Queues(cfg)
    loads, stores = qs.loads().take(q), qs.stores(0, 1 / 2)
    # into out's dtype straight from the reduction when it is 16-bit (bf16 sums and maxima at
    # two elements a cycle, rounded once; a mean's sum then scaled in place, rounded again, as
    # are the chunks' partial sums: within a unit or two in the last place) or fp32; else fp32,
    # cast
    direct = to.dtype.is_float and (to.dtype.itemsize == 2 or to.dtype == f32)
    nd = len(tx.shape)
    n = 0
    for m, (index, rows, k) in enumerate(blocks):
        p = rows // k
        full = tuple(index) + (slice(None),) * (nd - 1 - len(index))
        res = ap(b.scratch_tile(f"rows.r{m % BUFS}", "r", (P, per), to.dtype), slice(0, p),
                 slice(0, k))  # fmt: skip
        acc = res if direct else ap(b.scratch_tile(f"rows.c{m % BUFS}", "c", (P, per), f32),
                                    slice(0, p), slice(0, k))  # fmt: skip
        if len(chunks) > 1:
            pdt = to.dtype if direct else f32
            parts = ap(b.scratch_tile(f"rows.p{m % BUFS}", "p", (P, len(chunks)), pdt),
                       slice(0, p))  # fmt: skip
        for i, (lo, hi) in enumerate(chunks):
            xa = ap(b.scratch_tile(f"rows.x{n % bufs}", "x", (P, per, w), tx.dtype), slice(0, p),
                    slice(0, k), slice(0, hi - lo))  # fmt: skip
            src = ap(x, *index) if len(chunks) == 1 else ap(x, *full, slice(lo, hi))
            b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=loads[n])
            n += 1
            dst = acc if len(chunks) == 1 else ap(parts.name, slice(0, p), slice(i, i + 1))
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


def _runs(n: int, most: int) -> list[tuple[int, int]]:
    k = -(-n // most)
    cuts = [n * i // k for i in range(k + 1)]
    return list(zip(cuts, cuts[1:]))
