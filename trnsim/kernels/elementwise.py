"""Elementwise ops: unary (`exp`, `gelu`, casts, ...) and binary (`add`, `mul`, ...) on tensors of
one shape, a tensor and a number, or a tensor and a row ([D]) or column ([..., 1]) broadcast
over it.

The kernel: the tensors are walked in blocks of up to 128 x FREE elements (`layout.flat_blocks`:
elementwise ops do not care which element sits on which partition, so whatever the rank and size
every block fills all 128 partitions but a remainder); each block is loaded (inputs on separate
DMA queues), computed in SBUF (ScalarE for functions, VectorE for arithmetic and `select`; a
number rides along as the instruction's immediate) into the first input's buffer when the output
has its dtype, and stored. DEPTH rotating buffers per operand keep that many blocks in flight, so
the DMA moves the next blocks while an engine computes one and the completion of a transfer is
not waited for by the next (with three buffers, one block's load, compute and store in turn left
the DMA idle between them: 78% of the DMA bound for a 16 MiB bf16 `exp` at LNC 2, 86% with
four). The buffers of every op of a kernel share SBUF, so one op's take at most SBUF_SHARE of a
partition: with many operands (a `where` in fp32) blocks narrow below FREE rather than rotate
fewer.
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import (
    Activation,
    Ap,
    DmaCopy,
    Engine,
    Memset,
    Select,
    TensorCopy,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.broadcast import lower_broadcast, spread
from trnsim.kernels.broadcast_table import is_table, lower_table
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import flat_blocks, row_blocks
from trnsim.kernels.queues import Queues, Stream

__all__ = ["UNARY", "BINARY", "lower_unary", "lower_binary", "lower_where", "FREE"]

FREE = 2048  # elements per partition of a block at most: 4 KiB of bf16, where DMA runs at full rate
BUFS = 3  # rotating buffers per tensor of a fused run (`fusion`, whose runs hold up to 6 tensors)
DEPTH = 4  # rotating buffers per operand of one op: blocks in flight (module doc)
MOST_DEPTH = 8  # ... and of a unary op's, as many as SBUF_SHARE holds up to this (`_depth`)
SBUF_SHARE = 0.25  # of a partition's bytes for one op's buffers: blocks narrow below FREE to keep
# DEPTH (the buffers of every op of a kernel are in SBUF at once)

UNARY = {  # op -> activation function of ScalarE
    "exp": "exp",
    "log": "log",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "relu": "relu",
    "gelu": "gelu",
    "gelu_tanh": "gelu_tanh",
    "silu": "silu",
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "square": "square",
    "abs": "abs",
    "reciprocal": "reciprocal",
    "sin": "sin",
    "cos": "cos",
    "erf": "erf",
    "copy": "copy",
    "neg": "identity",  # with scale -1
}
BINARY = {  # op -> VectorE ALU op
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "div": "divide",
    "maximum": "max",
    "minimum": "min",
    "pow": "pow",
}


def lower_unary(b: KernelBuilder, cfg: ChipConfig, op: str, x: str, out: str) -> None:
    """out = op(x) (module doc); out's dtype may differ from x's (the result is cast)."""
    tx, to = b.tensors[x], b.tensors[out]
    _same_shape(op, ("x", tx), ("out", to))
    cast = to.dtype != tx.dtype
    blocks, big = _plan(b, cfg, to.shape, [tx.dtype] + [to.dtype] * cast)
    loads, stores = _queues(cfg, 1, big, tx.dtype)
    depth = _depth(cfg, big, [tx.dtype] + [to.dtype] * cast)
    for n, (index, p, f) in enumerate(blocks):
        xt = _buf(b, "x", n, big, tx.dtype, depth)
        ot = _buf(b, "o", n, big, to.dtype, depth) if cast else xt
        src, t = ap(x, *index), ap(xt, slice(0, p), slice(0, f))
        b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=loads[n])
        o = ap(ot, slice(0, p), slice(0, f))
        if op == "copy" and ot != xt:
            b.emit(TensorCopy, [t], [o], src=t, dst=o)
        elif op != "copy":
            scale = -1.0 if op == "neg" else 1.0
            b.emit(Activation, [t], [o], func=UNARY[op], src=t, dst=o, scale=scale)
        dst = ap(out, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=stores[n])


def lower_binary(b: KernelBuilder, cfg: ChipConfig, op: str, a, bb, out: str) -> None:
    """out = a <op> b; `a` and `b` are tensor names of out's shape, or one of them a number,
    or one of them broadcast along out's rows or columns (`_broadcast`)."""
    to = b.tensors[out]
    names = [v for v in (a, bb) if isinstance(v, str)]
    if not names:
        raise TraceError(f"{op}: a and b are both numbers; expected at least one tensor")
    if len(names) == 2 and b.tensors[a].shape != b.tensors[bb].shape:
        _broadcast(b, cfg, op, a, bb, out)
        return
    _same_shape(op, *[(k, b.tensors[v]) for k, v in (("a", a), ("b", bb)) if isinstance(v, str)])
    _same_shape(op, ("a" if isinstance(a, str) else "b", b.tensors[names[0]]), ("out", to))
    alu = BINARY[op]
    dts = [b.tensors[v].dtype for v in (a, bb) if isinstance(v, str)]
    inplace = dts[0] == to.dtype  # the result overwrites the first tensor operand's block
    blocks, big = _plan(b, cfg, to.shape, dts + [to.dtype] * (not inplace))
    loads, stores = _queues(cfg, 2, big, *dts)
    for n, (index, p, f) in enumerate(blocks):
        tiles = []
        for k, v in enumerate((a, bb)):
            if not isinstance(v, str):
                tiles.append(v)
                continue
            t = ap(_buf(b, "ab"[k], n, big, b.tensors[v].dtype), slice(0, p), slice(0, f))
            src = ap(v, *index)
            b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=loads[2 * n + k])
            tiles.append(t)
        t0, t1 = tiles
        first = t0 if isinstance(t0, Ap) else t1
        o = first if inplace else ap(_buf(b, "o", n, big, to.dtype), slice(0, p), slice(0, f))
        if isinstance(t0, Ap) and isinstance(t1, Ap):
            b.emit(TensorTensor, [t0, t1], [o], alu=alu, src0=t0, src1=t1, dst=o)
        else:  # a number rides along as the immediate (first when it is a: reversed)
            t, v = (t0, t1) if isinstance(t0, Ap) else (t1, t0)
            b.emit(TensorScalar, [t], [o], src=t, dst=o, op0=alu, operand0=float(v),
                   reverse0=t is t1)  # fmt: skip
        dst = ap(out, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=stores[n])


def _broadcast(b: KernelBuilder, cfg: ChipConfig, op: str, a: str, bb: str, out: str) -> None:
    """out = a <op> b where one of them has out's shape and the other is a row ([D], or
    [1, ..., D]) or a column (out's shape with a last dim of 1): `broadcast.lower_broadcast`;
    or one element (`_scalar_tensor`)."""
    to = b.tensors[out]
    shapes = {k: tuple(b.tensors[v].shape) for k, v in (("a", a), ("b", bb))}
    full = [k for k in ("a", "b") if shapes[k] == tuple(to.shape)]
    d = to.shape[-1] if to.shape else 1
    other = "b" if full == ["a"] else "a"
    part = shapes[other]
    is_row = math.prod(part) == d and part[-1:] == (d,)
    is_col = part == tuple(to.shape[:-1]) + (1,)
    names = {"a": a, "b": bb}
    if len(full) == 1 and math.prod(part) == 1 and d > 1 and len(part) <= len(to.shape):  # [1]
        _scalar_tensor(b, cfg, op, names[full[0]], names[other], out, other == "a")
        return
    if len(full) == 1 and not (is_row or is_col) and is_table(part, tuple(to.shape)):
        lower_table(b, cfg, BINARY[op], names[full[0]], names[other], out, other == "a")
        return
    if len(full) != 1 or not (is_row or is_col):
        raise TraceError(
            f"{op}: a {list(shapes['a'])}, b {list(shapes['b'])} -> out {list(to.shape)}: this "
            "broadcast is not lowered yet; expected one operand of out's shape and the other "
            "of its last dim [D], of its last two [T, D], of out's shape with a last dim of 1, or "
            "of one element"
        )
    lower_broadcast(b, cfg, BINARY[op], names[full[0]], names[other], out, other == "a", is_row)


def _scalar_tensor(b: KernelBuilder, cfg: ChipConfig, op: str, x: str, s: str, out: str,
                   first: bool) -> None:  # fmt: skip
    """out = x <op> s (s <op> x when `first`), s a tensor of one element: spread once over the
    partitions (`broadcast.spread`, a [128, 1] column), then x's flat blocks as with a number,
    the column the `tensor_scalar`'s per-partition operand."""
    to, dx = b.tensors[out], b.tensors[x].dtype
    col = spread(b, cfg, [(ap(s), 1)], b.tensors[s].dtype, f"{s}_col")
    inplace = dx == to.dtype
    blocks, big = _plan(b, cfg, to.shape, [dx] + [to.dtype] * (not inplace))
    loads, stores = _queues(cfg, 1, big, dx)
    for n, (index, p, f) in enumerate(blocks):
        t = ap(_buf(b, "a", n, big, dx), slice(0, p), slice(0, f))
        src = ap(x, *index)
        b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=loads[n])
        o = t if inplace else ap(_buf(b, "o", n, big, to.dtype), slice(0, p), slice(0, f))
        c = ap(col, slice(0, p))
        b.emit(TensorScalar, [t, c], [o], src=t, dst=o, op0=BINARY[op], operand0=c,
               reverse0=first)  # fmt: skip
        dst = ap(out, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=stores[n])


def _plan(b: KernelBuilder, cfg: ChipConfig, shape, dtypes: list) -> tuple[list, tuple]:
    """(blocks, tile shape): this core's flat blocks of `shape` (`layout.flat_blocks`), each at
    most FREE elements a partition, fewer when DEPTH buffers of each of `dtypes` (the
    operands that have a buffer) would take more than SBUF_SHARE of a partition; the tile
    shape is the largest block's ((1, 1) for a core with no elements of the op)."""
    per_elem = sum(dt.itemsize for dt in dtypes)
    room = int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) // (DEPTH * per_elem)
    blocks = flat_blocks(shape, cfg.core.sbuf.partitions, max(1, min(FREE, room)), b.share(shape))
    return blocks, _largest(blocks)


def _depth(cfg: ChipConfig, big: tuple, dtypes: list) -> int:
    """Rotating buffers of a unary op's blocks of `big`: as many as SBUF_SHARE holds, DEPTH to
    MOST_DEPTH. A block's ScalarE pass takes about its DMA's time, so it holds its buffer
    through load, compute and store: with 4, bf16 exp on [5, 7, 50257] at LNC 2 (a core's 4
    blocks of [128, 1834] and 2 small ones) left the loads waiting for a buffer, 13.5 us; with
    8 12.2 us (fp32 at 2048 columns takes 7)."""
    per_elem = sum(dt.itemsize for dt in dtypes)
    room = int(cfg.core.sbuf.partition_bytes * SBUF_SHARE) // (big[1] * per_elem)
    return max(DEPTH, min(MOST_DEPTH, room))


def _queues(cfg: ChipConfig, inputs: int, big: tuple, *dts) -> tuple[Stream, Stream]:
    """(loads, stores): as many queues per input, and for the stores, as keep a stream of
    blocks of `big` moving (`balance.dma_queues`: one for blocks of 4 KiB a partition or
    more, each transfer then moving at the engines' full rate in turn, so the first block
    arrives first instead of all DEPTH together); block n's input k on load queue
    inputs x n + k."""
    n = dma_queues(cfg, big[1] * max(dt.itemsize for dt in dts))
    qs = Queues(cfg)
    return qs.loads().take(inputs * n), qs.stores().take(n)


def _largest(blocks: list[tuple]) -> tuple[int, int]:
    """The largest block's (partitions, free); (1, 1) for none (`fusion` sizes its buffers so)."""
    return max((p for _, p, _ in blocks), default=1), max((f for _, _, f in blocks), default=1)


def _buf(b: KernelBuilder, kind: str, n: int, shape: tuple[int, int], dt, depth=DEPTH) -> str:
    """Rotating buffer n % depth of `kind` (of `shape`: the largest block's), allocated at the
    first use of its slot."""
    return b.scratch_tile(f"{kind}{n % depth}", kind, shape, dt)


def _same_shape(op: str, *named) -> None:
    shapes = {tuple(t.shape) for _, t in named}
    if len(shapes) > 1:
        given = ", ".join(f"{k} {list(t.shape)}" for k, t in named)
        raise TraceError(
            f"{op}: {given}: shapes differ; expected one shape (broadcasting is not lowered yet)"
        )


def _where_numbers(b: KernelBuilder, cfg: ChipConfig, cond: str, a: float, other: float,
                   out: str) -> None:  # fmt: skip
    """out = where(cond, a, other), both numbers (a causal mask made from a boolean one:
    where(mask, 0.0, -inf)): one tile of `a` set once, then per flat block a load of the
    condition, a `select` of that tile or `other`, and a store."""
    to, tc = b.tensors[out], b.tensors[cond]
    blocks, big = _plan(b, cfg, to.shape, [tc.dtype, to.dtype])
    loads, stores = _queues(cfg, 1, big, tc.dtype)
    if not blocks:
        return
    fill = b.tile("where_a", "sbuf", big, to.dtype)
    b.emit(Memset, [], [ap(fill)], dst=ap(fill), value=a)
    for n, (index, p, f) in enumerate(blocks):
        r = (slice(0, p), slice(0, f))
        pred = ap(_buf(b, "c", n, big, tc.dtype), *r)
        src = ap(cond, *index)
        b.emit(DmaCopy, [src], [pred], src=src, dst=pred, queue=loads[n])
        on_true = ap(fill, *r)
        o = ap(_buf(b, "o", n, big, to.dtype), *r)
        b.emit(Select, [pred, on_true], [o], predicate=pred, on_true=on_true, on_false=other,
               dst=o)  # fmt: skip
        dst = ap(out, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=stores[n])


def _where_column(b: KernelBuilder, cfg: ChipConfig, cond: str, a, other, out: str) -> None:
    """out = where(cond, a, other) with cond a column ([..., 1]: one value a row of out) and a,
    other tensors of out's shape or one a number (SDPA's math path zeroes the rows of a fully
    masked score matrix so: where(all(-inf), 0.0, scores)). Up to 128 rows a block (this
    core's share), in column chunks of at most FREE: the block's column loaded once and
    widened to the chunk by one `tensor_scalar` on a zero tile (VectorE or GpSimd in turn), then
    the tensors loaded, one `select`, a store."""
    to, tc = b.tensors[out], b.tensors[cond]
    if not isinstance(a, str):  # select takes a number only when false: flip the condition
        a, other, flip = other, a, True
    else:
        flip = False
    _same_shape("where", *[(k, b.tensors[v]) for k, v in (("a", a), ("other", other))
                           if isinstance(v, str)], ("out", to))  # fmt: skip
    P, d, nd = cfg.core.sbuf.partitions, to.shape[-1], len(to.shape)
    free = min(FREE, d)
    tensors = [v for v in (a, other) if isinstance(v, str)]
    loads, stores = _queues(cfg, len(tensors), (P, free), *(b.tensors[v].dtype for v in tensors))
    f32 = dtype("float32")
    zero = b.tile("where_zero", "sbuf", (P, free), f32)
    b.emit(Memset, [], [ap(zero)], dst=ap(zero), value=0.0)
    n = 0
    for i, (index, rows) in enumerate(row_blocks(tuple(to.shape), P, b.share(to.shape))):
        r = slice(0, rows)
        lead = (*index, *(slice(None),) * (nd - 1 - len(index)))
        col = ap(b.scratch_tile(f"wc{i % 2}", "wc", (P, 1), tc.dtype), r)
        src = ap(cond, *lead, slice(0, 1))
        b.emit(DmaCopy, [src], [col], src=src, dst=col, queue=loads[n])
        colf = ap(b.scratch_tile(f"wcf{i % 2}", "wcf", (P, 1), f32), r)
        b.emit(TensorScalar, [col], [colf], src=col, dst=colf, op0="add", operand0=0.0,
               **({"op1": "equal", "operand1": 0.0} if flip else {}))  # fmt: skip
        for c0 in range(0, d, free):
            cw = min(free, d - c0)
            cols = slice(c0, c0 + cw)
            pred = ap(_buf(b, "wp", n, (P, free), f32), r, slice(0, cw))
            b.emit(TensorScalar, [ap(zero, r, slice(0, cw)), colf], [pred],
                   src=ap(zero, r, slice(0, cw)), dst=pred, op0="add", operand0=colf,
                   engine=(Engine.VECTOR, Engine.GPSIMD)[n % 2])  # fmt: skip
            loaded = {}
            for k, v in enumerate(tensors):
                t = ap(_buf(b, f"w{k}", n, (P, free), b.tensors[v].dtype), r, slice(0, cw))
                src = ap(v, *lead, cols)
                b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=loads[len(tensors) * n + k])
                loaded[v] = t
            on_true = loaded[a]
            on_false = loaded[other] if isinstance(other, str) else float(other)
            o = ap(_buf(b, "wo", n, (P, free), to.dtype), r, slice(0, cw))
            reads = [pred, on_true] + ([on_false] if isinstance(on_false, Ap) else [])
            b.emit(Select, reads, [o], predicate=pred, on_true=on_true, on_false=on_false,
                   dst=o)  # fmt: skip
            dst = ap(out, *lead, cols)
            b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=stores[n])
            n += 1


def lower_where(b: KernelBuilder, cfg: ChipConfig, cond: str, a, other, out: str) -> None:
    """out = where(cond, a, other) (`masked_fill(x, mask, value)` is where(mask, value, x)):
    `cond` and the tensors among `a`, `other` of out's shape; `a` or `other` may be a number
    (both: `_where_numbers`).
    Flat blocks, each a VectorE `select` (a number `a` is first swapped with `other` by
    negating the condition, as select takes a number only when false)."""
    to = b.tensors[out]
    tc = b.tensors[cond]
    if to.shape and tuple(tc.shape) == (*to.shape[:-1], 1) and to.shape[-1] > 1:
        if isinstance(a, str) or isinstance(other, str):
            _where_column(b, cfg, cond, a, other, out)
            return
    tensors = [("condition", cond)] + [(k, v) for k, v in (("a", a), ("other", other))
                                        if isinstance(v, str)]  # fmt: skip
    _same_shape("where", *[(k, b.tensors[v]) for k, v in tensors], ("out", to))
    if not isinstance(a, str) and not isinstance(other, str):
        _where_numbers(b, cfg, cond, float(a), float(other), out)
        return
    negate = not isinstance(a, str)  # select(pred, on_true: tile, on_false: tile or number)
    if negate:
        a, other = other, a
    named = [(k, v) for k, v in (("c", cond), ("a", a), ("o", other)) if isinstance(v, str)]
    inplace = b.tensors[a].dtype == to.dtype  # the result overwrites a's block
    dts = [b.tensors[v].dtype for _, v in named] + [b.tensors[cond].dtype] * negate
    blocks, big = _plan(b, cfg, to.shape, dts + [to.dtype] * (not inplace))
    loads, stores = _queues(cfg, 3, big, *dts)
    for n, (index, p, f) in enumerate(blocks):
        r = (slice(0, p), slice(0, f))
        loaded = {}
        for k, v in named:
            t = ap(_buf(b, k, n, big, b.tensors[v].dtype), *r)
            src = ap(v, *index)
            b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=loads[3 * n + len(loaded)])
            loaded[k] = t
        pred = loaded["c"]
        if negate:  # the condition flipped: 1 where it was 0
            flipped = ap(_buf(b, "nc", n, big, b.tensors[cond].dtype), *r)
            b.emit(TensorScalar, [pred], [flipped], src=pred, dst=flipped, op0="equal",
                   operand0=0.0)  # fmt: skip
            pred = flipped
        o = loaded["a"] if inplace else ap(_buf(b, "o", n, big, to.dtype), *r)
        on_false = loaded.get("o", other if not isinstance(other, str) else None)
        on_false = float(on_false) if not isinstance(on_false, Ap) else on_false
        reads = [pred, loaded["a"]] + ([on_false] if isinstance(on_false, Ap) else [])
        b.emit(Select, reads, [o], predicate=pred, on_true=loaded["a"], on_false=on_false, dst=o)
        dst = ap(out, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=stores[n])
