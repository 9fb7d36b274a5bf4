"""`_log_softmax_backward_data` over the last dim: out = g - exp(y) * sum(g), y the forward's
log-probabilities (cross_entropy's backward: rows of a vocabulary, 32000 to 128256 elements).

Rows on the partitions, up to 128 a block (this core's share of out's rows, `layout.
row_blocks`), each row in chunks of CHUNK columns: first every chunk of g is loaded and summed
into the row's fp32 column (VectorE `tensor_reduce` and ScalarE's summing copy in turn, the
partials added on GpSimd), negated; then every chunk of y and g is loaded again, exp(y) taken
on ScalarE and out = exp(y) * -s + g made by one `scalar_tensor_tensor` (VectorE and GpSimd in
turn), and stored. HBM traffic: g twice, y and out once (four passes of the rows; the four
library ops it replaces, exp, sum, mul and sub, made seven), which bounds it from 128 rows a
core on (trn2, fp32 [128, 50257] on one core: 276 us, its four passes 284 us at the core's
share of HBM). Few rows are bound by the engines' work a partition (a row's length): the
shim maps fewer than 64 rows to the four ops' flat layouts. Chunks rotate through BUFS
buffers over the load and store queues. Rows are split between the cores of an LNC 2 core by
out's rows.
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import (
    Activation,
    DmaCopy,
    Engine,
    ScalarTensorTensor,
    TensorReduce,
    TensorScalar,
)
from trnsim.kernels.backward import tt
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks
from trnsim.kernels.queues import Queues

__all__ = ["lower_log_softmax_backward"]

CHUNK = 2048  # columns of a row a chunk (8 KiB of fp32 a partition)
BUFS = 6  # rotating buffers of each kind of chunk
F32 = dtype("float32")
ENGINES = (Engine.VECTOR, Engine.GPSIMD)  # out's chunks in turn


def lower_log_softmax_backward(b: KernelBuilder, cfg: ChipConfig, op: str, args: dict) -> None:
    """out = g - exp(y) * sum(g) over the last dim (module doc)."""
    g, y, out = args["grad_output"], args["output"], args["out"]
    tg, ty, to = (b.tensors[n] for n in (g, y, out))
    nd = len(to.shape)
    if not (tg.shape == ty.shape == to.shape) or nd < 1 or args.get("dim", -1) % nd != nd - 1:
        raise TraceError(
            f"{op}: grad_output {list(tg.shape)}, output {list(ty.shape)}, out "
            f"{list(to.shape)}, dim {args.get('dim', -1)}: expected one shape, over the last dim"
        )
    P, d = cfg.core.sbuf.partitions, to.shape[-1]
    width = min(CHUNK, d)
    qs = Queues(cfg)
    loads, stores = qs.loads(), qs.stores()
    n = 0  # chunks so far (buffers, queues)

    def tile(kind: str, dt, slot: int):
        return b.scratch_tile(f"lsb.{kind}{slot}", kind, (P, width), dt)

    for index, rows in row_blocks(tuple(to.shape), P, b.share(to.shape)):
        lead = (*index, *(slice(None),) * (nd - 1 - len(index)))
        r = slice(0, rows)
        acc = ap(b.scratch_tile(f"lsb.acc{n % 2}", "s", (P, 1), F32), r)
        parts = b.scratch_tile("lsb.part", "part", (P, 2), F32)
        chunks = [(c0, min(width, d - c0)) for c0 in range(0, d, width)]
        for k, (c0, cw) in enumerate(chunks):  # s = sum(g)
            gt = ap(tile("g", tg.dtype, n % BUFS), r, slice(0, cw))
            src = ap(g, *lead, slice(c0, c0 + cw))
            b.emit(DmaCopy, [src], [gt], src=src, dst=gt, queue=loads[n])
            dst = acc if k == 0 else ap(parts, r, slice(k % 2, k % 2 + 1))
            if k % 2:  # VectorE and ScalarE (a copy that sums as it goes) in turn
                junk = ap(tile("junk", tg.dtype, 0), r, slice(0, cw))  # ScalarE's alone
                b.emit(Activation, [gt], [junk, dst], func="copy", src=gt, dst=junk,
                       reduce="add", reduce_dst=dst)  # fmt: skip
            else:
                b.emit(TensorReduce, [gt], [dst], alu="add", src=gt, dst=dst)
            if k:
                tt(b, "add", acc, dst, acc, engine=Engine.GPSIMD)
            n += 1
        b.emit(TensorScalar, [acc], [acc], src=acc, dst=acc, op0="multiply", operand0=-1.0)
        for c0, cw in chunks:  # out = exp(y) * -s + g
            yt = ap(tile("y", ty.dtype, n % BUFS), r, slice(0, cw))
            gt = ap(tile("g", tg.dtype, n % BUFS), r, slice(0, cw))
            cols = slice(c0, c0 + cw)
            for name, t, q in ((y, yt, loads[n]), (g, gt, loads[n + loads.count // 2])):
                src = ap(name, *lead, cols)
                b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=q)
            # exp in y's buffer when it is fp32, the result in g's when out has its dtype
            e = yt if ty.dtype == F32 else ap(tile("e", F32, n % BUFS), r, slice(0, cw))
            b.emit(Activation, [yt], [e], func="exp", src=yt, dst=e)
            o = gt if to.dtype == tg.dtype else ap(tile("o", to.dtype, n % BUFS), r, slice(0, cw))
            b.emit(ScalarTensorTensor, [e, acc, gt], [o], data=e, op0="multiply", operand0=acc,
                   op1="add", operand1=gt, dst=o, engine=ENGINES[n % 2])  # fmt: skip
            dst = ap(out, *lead, cols)
            b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=stores[n])
            n += 1
