"""`_softmax_backward_data`: grad_input = y * (g - sum(g * y, dim)), y softmax's output, over
the last dim.

Per block of up to 128 rows (one row per partition, the whole row in the free dim): g and y
are loaded on separate queues; GpSimd forms g * y (it is otherwise idle), VectorE sums it to a
[rows, 1] column and negates it; ScalarE computes g - sum as one `activation identity` with the
column as bias; VectorE multiplies by y into the output tile, which is stored. The three
engines each make about one pass over the row, so the kernel runs near the DMA bound. In the
work dtype (the gradient's when it and the output are 16-bit, else fp32; the row sum is
accumulated in fp32 and rounded once to it, which lets VectorE reduce at its bf16 rate).
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.isa import DmaCopy, Engine, TensorReduce
from trnsim.kernels.backward import act, ts, tt
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks
from trnsim.kernels.pointwise import work_dtype
from trnsim.kernels.queues import Queues
from trnsim.kernels.softmax_backward_pieces import lower_softmax_backward_pieces

__all__ = ["lower_softmax_backward", "row_tile", "row_buffers"]

BUFS = 4
SBUF_SHARE = 0.75


def row_buffers(cfg: ChipConfig, op: str, d: int, bytes_per_elem: int, fixed: int = 0) -> int:
    """How many row blocks of `d` elements rotate (up to BUFS) when each takes
    `bytes_per_elem` per element of a partition and the kernel's other tiles `fixed` bytes; a
    TraceError when not even one fits or the row is longer than one VectorE instruction
    takes."""
    budget = int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) - fixed
    bufs = min(BUFS, budget // (d * bytes_per_elem))
    if bufs < 1 or d > cfg.core.vector.dve_max_free_elements:
        raise TraceError(
            f"{op}: rows of {d} elements do not fit a partition's SBUF or one VectorE "
            f"instruction ({cfg.core.vector.dve_max_free_elements} elements); rows this long "
            "are not lowered yet"
        )
    return bufs


def row_tile(b: KernelBuilder, key: str, shape: tuple[int, ...], dt) -> str:
    """The tile of `key` (a kind and its slot), made at its first use."""
    full = f"rowsb.{key}:{dt.name}:{shape}"
    if full not in b.scratch:
        b.scratch[full] = b.tile(key.rstrip("0123456789"), "sbuf", shape, dt)
    return b.scratch[full]


def lower_softmax_backward(b: KernelBuilder, cfg: ChipConfig, op: str, args: dict) -> None:
    """out = _softmax_backward_data(grad_output, output, dim) (module doc)."""
    g, y, out = args["grad_output"], args["output"], args["out"]
    tg, ty, to = (b.tensors[n] for n in (g, y, out))
    if not tuple(tg.shape) == tuple(ty.shape) == tuple(to.shape):
        raise TraceError(
            f"{op}: grad_output {list(tg.shape)}, output {list(ty.shape)}, out "
            f"{list(to.shape)}: expected one shape"
        )
    dim = args.get("dim", -1)
    if dim not in (-1, len(tg.shape) - 1):
        raise TraceError(f"{op}: dim {dim}; only the last dim (-1) is lowered yet")
    d, P = tg.shape[-1], cfg.core.sbuf.partitions
    wdt = work_dtype(tg.dtype, ty.dtype, to.dtype)
    # g, y, and one tile for g * y, then g - sum, then (in place, when of out's dtype) out
    per = tg.dtype.itemsize + ty.dtype.itemsize + wdt.itemsize
    per += to.dtype.itemsize if to.dtype != wdt else 0
    budget = int(cfg.core.sbuf.partition_bytes * SBUF_SHARE)
    # in pieces: rows past one VectorE instruction, or too long for two buffers (one buffer
    # reused while its block's last step is still pending gave a lowering error, `_finish`)
    if d > cfg.core.vector.dve_max_free_elements or budget < 2 * d * per:
        rows = b.share(to.shape) or (0, math.prod(to.shape[:-1]))
        lower_softmax_backward_pieces(b, cfg, g, y, out, rows)
        return
    bufs = row_buffers(cfg, op, d, per)
    pending = None  # the previous block's last step, emitted after this block's first ones
    qs = Queues(cfg)
    loads, stores = qs.loads(), qs.stores()
    for n, (index, rows) in enumerate(row_blocks(tuple(tg.shape), P, b.share(to.shape))):
        slot, r = n % bufs, slice(0, rows)
        ga, ya = (
            ap(row_tile(b, f"{k}{slot}", (P, d), t.dtype), r) for k, t in (("g", tg), ("y", ty))
        )
        for k, (src_name, t) in enumerate(((g, ga), (y, ya))):
            src = ap(src_name, *index)
            b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=loads[2 * n + k])
        prod = ap(row_tile(b, f"p{slot}", (P, d), wdt), r)
        tt(b, "multiply", ga, ya, prod, engine=Engine.GPSIMD)
        s = ap(row_tile(b, f"s{slot}", (P, 1), wdt), r)  # bf16: VectorE's fast reduction
        b.emit(TensorReduce, [prod], [s], alu="add", src=prod, dst=s)
        ts(b, s, s, "multiply", -1.0, engine=Engine.VECTOR)
        t = prod  # read by the sum: ScalarE may write it
        act(b, "identity", ga, t, bias=s)
        if pending:
            _finish(b, *pending)
        o = t if to.dtype == wdt else ap(row_tile(b, f"o{slot}", (P, d), to.dtype), r)
        pending = (t, ya, o, ap(out, *index), stores[n])
    if pending:
        _finish(b, *pending)


def _finish(b: KernelBuilder, t, ya, o, dst, queue: int) -> None:
    """A block's last step, out = t * y, and its store (on `queue`): emitted after the next
    block's sum, so VectorE sums block n + 1 while ScalarE forms block n's t."""
    tt(b, "multiply", t, ya, o)
    b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=queue)
