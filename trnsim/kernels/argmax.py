"""`argmax` over one dim: the first index of the maximum, as PyTorch gives.

Per block of up to 128 rows (one row per partition): the row max (VectorE `tensor_reduce`, in
x's dtype when it is 16-bit: exact, at the 16-bit rate); (x != max) x BIG into an fp32 tile
(VectorE, one `tensor_scalar`, BIG a power of two above twice the row length); plus the column
index, in place (a GpSimd `iota`, made once; the add on GpSimd); the row minimum
of that (as the maximum of its negation, by ScalarE's activation reduction; VectorE's
`tensor_reduce min` on NC-v2, whose ScalarE reduces by add only), cast to out's dtype (int32,
or a float: the simulator has no int64) and stored. The blocks are staggered
(`reduce.staggered`): VectorE works on block n + 2 while GpSimd and ScalarE finish block n.
Over another dim than the last, `_argmax_across` turns blocks on TensorE so that the dim lies
along the free axis, and keeps a running (max, index) per column.
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import (
    Activation,
    DmaCopy,
    Engine,
    Iota,
    Select,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    Transpose,
)
from trnsim.kernels.argmax_chunks import (
    chunk,
    lower_argmax_chunks,
    piece_layout,
    remainder_layout,
)
from trnsim.kernels.argmax_ragged import lower_argmax_ragged
from trnsim.kernels.argmax_rows import ROW_ELEMENTS, lower_argmax_rows
from trnsim.kernels.argmax_stream import lower_argmax_stream, streams
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks
from trnsim.kernels.queues import Queues
from trnsim.kernels.reduce import Reduce, _runs, _unravel, staggered
from trnsim.kernels.rows import core_share, rows_fit

__all__ = ["lower_argmax"]

BUFS = 3
SBUF_SHARE = 0.75
CHUNK_ROWS = 1024  # rows this long (and fitting a partition) go by chunk maxima, a row a
# partition (`argmax_chunks`); shorter ones by the passes below, several rows a partition


def lower_argmax(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, dim=-1, keepdim=False):
    """out = argmax(x, dim, keepdim) (module doc)."""
    tx, to = b.tensors[x], b.tensors[out]
    nd = len(tx.shape)
    if nd == 0 or isinstance(dim, bool) or not isinstance(dim, int) or not -nd <= dim < nd:
        raise TraceError(
            f"argmax: dim {dim!r} of x {list(tx.shape)}; expected one dim in {-nd}..{nd - 1}"
        )
    if dim % nd != nd - 1:
        _argmax_across(b, cfg, x, out, dim % nd, keepdim)
        return
    want = list(tx.shape[:-1]) + ([1] if keepdim else [])
    if list(to.shape) != want and not (want == [] and list(to.shape) == [1]):
        raise TraceError(
            f"argmax: x {list(tx.shape)} over its last dim gives {want}, but out is "
            f"{list(to.shape)}; expected out of shape {want}"
        )
    P, d, f32 = cfg.core.sbuf.partitions, tx.shape[-1], dtype("float32")
    low = tx.dtype if tx.dtype.itemsize == 2 and tx.dtype.is_float else f32  # exact
    per_row = d * (tx.dtype.itemsize + 4)  # x, and the candidates (fp32: exact indices)
    fixed = d * (4 + 2)  # the iota, the scratch of ScalarE's results
    bufs = min(BUFS, (int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) - fixed) // per_row)
    share = core_share(b, cfg, tx)  # rows that do not fit: split evenly (isolated)
    if rows_fit(cfg, tx):
        if d >= CHUNK_ROWS and chunk(d) is not None:
            lower_argmax_chunks(b, cfg, x, out, share, None)
            return
        if d <= ROW_ELEMENTS:
            lower_argmax_rows(b, cfg, x, out, share)
            return
    else:
        lay = piece_layout(d, tx.dtype.itemsize, P)
        if lay is None:
            lay = remainder_layout(d, tx.dtype.itemsize, P)
        if lay is not None:
            lower_argmax_chunks(b, cfg, x, out, share, lay)
            return
    if bufs < 1 or d > cfg.core.vector.dve_max_free_elements:  # with a remainder column
        if streams(cfg, tx):  # longer than 128 partitions of a segment
            lower_argmax_stream(b, cfg, x, out, share)
        else:
            lower_argmax_ragged(b, cfg, x, out, share)
        return
    on_scalar = cfg.core.scalar.reduce_max
    qs = Queues(cfg)
    loads, stores = qs.loads(0, 1 / 2), qs.stores(0, 1 / 2)
    big = float(2 ** math.ceil(math.log2(2 * d + 2)))  # a power of 2: exact in bf16
    r = Reduce(b, cfg, "amax", x, out, 1.0)
    iota = r.tile("iota", (P, d))
    b.emit(Iota, [], [ap(iota)], dst=ap(iota), start=0, step=1, partition_step=0)

    def first(item):
        n, (index, rows) = item
        slot, rr = n % bufs, slice(0, rows)
        xa = ap(r.tile(f"x{slot}", (P, d), tx.dtype), rr)
        src = ap(x, *index)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=loads[n])
        mx = ap(r.tile(f"mx{slot}", (P, 1), low), rr)
        b.emit(TensorReduce, [xa], [mx], alu="max", src=xa, dst=mx)
        cand = ap(r.tile(f"i{slot}", (P, d)), rr)  # big where x is not the max, else 0
        b.emit(TensorScalar, [xa, mx], [cand], src=xa, dst=cand, op0="not_equal", operand0=mx,
               op1="multiply", operand1=big)  # fmt: skip
        io = ap(iota, rr)  # + the column index, in place
        b.emit(TensorTensor, [cand, io], [cand], alu="add", src0=cand, src1=io, dst=cand,
               engine=Engine.GPSIMD)  # fmt: skip
        return cand

    def second(item, cand):
        n, (index, rows) = item
        slot, rr = n % bufs, slice(0, rows)
        col = ap(r.tile(f"c{slot}", (P, 1)), rr)
        res = ap(r.tile(f"r{slot}", (P, 1), to.dtype), rr)
        if on_scalar:  # max(-cand) = -min(cand), the elementwise results unread
            junk = ap(r.tile("junk", (P, d), dtype("bfloat16")), rr)
            b.emit(Activation, [cand], [junk, col], func="copy", src=cand, dst=junk, scale=-1.0,
                   reduce="max", reduce_dst=col)  # fmt: skip
            b.emit(TensorScalar, [col], [res], src=col, dst=res, op0="multiply", operand0=-1.0)
        else:
            b.emit(TensorReduce, [cand], [col], alu="min", src=cand, dst=col)
            b.emit(TensorCopy, [col], [res], src=col, dst=res)
        dst = ap(out, *index)
        b.emit(DmaCopy, [res], [dst], src=res, dst=dst, queue=stores[n])

    blocks = enumerate(row_blocks(tx.shape, P, share))
    staggered(blocks, first, second, bufs - 1)


def _argmax_across(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, d: int, keepdim) -> None:
    """argmax over dim d, not the last: per block of x's rows along d (up to 128) by up to 128
    of the dims after it, loaded as they lie, turned on TensorE (PSUM [columns, rows]), the
    last-dim steps per column (max, (x != max) x BIG + row index, minimum), and a running
    (max, index) per column kept by a strict `greater` and `select` (the first maximum wins)."""
    tx, to = b.tensors[x], b.tensors[out]
    shape = list(tx.shape)
    want = [1 if k == d else n for k, n in enumerate(shape) if keepdim or k != d]
    if list(to.shape) != want:
        raise TraceError(
            f"argmax: x {shape} over dim {d} gives {want}, but out is {list(to.shape)}; "
            f"expected out of shape {want}"
        )
    P, f32, R = cfg.core.sbuf.partitions, dtype("float32"), shape[d]
    inner = shape[d + 1 :]
    kin = math.prod(inner)
    big = float(2 ** math.ceil(math.log2(2 * R + 2)))
    r = Reduce(b, cfg, "amax", x, out, 1.0)
    iota = r.tile("riota", (P, P))
    b.emit(Iota, [], [ap(iota)], dst=ap(iota), start=0, step=1, partition_step=0)
    psum = [b.psum("tp", (P, P), f32) for _ in range(2)]
    stores = Queues(cfg).stores()
    n = blk = 0
    for o in range(math.prod(shape[:d])):
        for cidx, cn, coff in _runs(inner or [1], 0, kin, P):
            blk += 1
            if not r.mine(blk - 1):
                continue
            run = [ap(r.tile(f"run{k}{blk % 2}", (P, 1)), slice(0, cn)) for k in "mi"]
            for r0 in range(0, R, P):
                rb = min(P, R - r0)
                t = r.next_x(P, tx.dtype)
                entries = [*_unravel(o, shape[:d]), slice(r0, r0 + rb)]
                entries += list(cidx) + [slice(None)] * (len(inner) - len(cidx))
                r.load_at(entries, ap(t, slice(0, rb), slice(0, cn)))
                tp = ap(psum[n % 2], slice(0, cn), slice(0, rb))
                src = ap(t, slice(0, rb), slice(0, cn))
                b.emit(Transpose, [src], [tp], src=src, dst=tp)
                _fold_rows(b, r, tp, ap(iota, slice(0, cn), slice(0, rb)), run, r0, big, n)
                n += 1
            res = ap(r.tile(f"r{blk % 2}", (P, 1), to.dtype), slice(0, cn))
            b.emit(TensorCopy, [run[1]], [res], src=run[1], dst=res)
            lo = o * kin + coff
            for index, k, off in _runs(list(to.shape) or [1], lo, lo + cn, cn):
                dst, part = ap(out, *index), ap(res.name, slice(off, off + k))
                b.emit(DmaCopy, [part], [dst], src=part, dst=dst, queue=stores[blk])
    b.release(*psum)


def _fold_rows(b, r: Reduce, tp, iota, run, r0: int, big: float, n: int) -> None:
    """The index of each column's first maximum among rows r0.. (tp: PSUM [columns, rows]),
    folded into the running (max, index) `run`."""
    P, rows = r.P, slice(0, tp.index[0][1])
    first = r0 == 0
    m = run[0] if first else ap(r.tile(f"m{n % 2}", (P, 1)), rows)
    b.emit(TensorReduce, [tp], [m], alu="max", src=tp, dst=m)
    cand = ap(r.tile(f"cand{n % 2}", (P, P)), rows, slice(0, tp.index[1][1]))
    b.emit(TensorScalar, [tp, m], [cand], src=tp, dst=cand, op0="not_equal", operand0=m,
           op1="multiply", operand1=big)  # fmt: skip
    b.emit(TensorTensor, [cand, iota], [cand], alu="add", src0=cand, src1=iota, dst=cand,
           engine=Engine.GPSIMD)  # fmt: skip
    i = run[1] if first else ap(r.tile(f"i{n % 2}", (P, 1)), rows)
    b.emit(TensorReduce, [cand], [i], alu="min", src=cand, dst=i)
    b.emit(TensorScalar, [i], [i], src=i, dst=i, op0="add", operand0=float(r0))
    if first:
        return
    better = ap(r.tile(f"gt{n % 2}", (P, 1)), rows)  # strictly: an equal later max loses
    b.emit(TensorTensor, [m, run[0]], [better], alu="greater", src0=m, src1=run[0], dst=better)
    b.emit(Select, [better, i, run[1]], [run[1]], predicate=better, on_true=i,
           on_false=run[1], dst=run[1])  # fmt: skip
    b.emit(TensorTensor, [run[0], m], [run[0]], alu="max", src0=run[0], src1=m, dst=run[0])
