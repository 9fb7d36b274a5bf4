"""Fusion: a run of consecutive elementwise ops on tensors of one shape lowered as one kernel
that keeps every intermediate on chip.

`chains(ops, tensors)` groups an op list into runs: an elementwise op (`UNARY`, `BINARY` on
tensors of out's shape or numbers, `where`/`masked_fill` are left alone) joins the run before it
when its output has the run's shape. `lower_chain` walks the shape in flat blocks
(`layout.flat_blocks`) and, per block: loads each tensor the first time the run reads it, applies
the ops in order in SBUF (each result rounded to its output's dtype, as the device would store
it), and stores each tensor the run writes once, with its final value. So `h = x @ w; h = h +
b; h = gelu(h); y = h * 2` reads x, w, b once, never reads h back, and writes h and y once;
unfused, the three elementwise ops would read 3 and write 3 tensors of that shape.
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.isa import Activation, Ap, DmaCopy, TensorCopy, TensorScalar, TensorTensor
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.elementwise import BINARY, BUFS, FREE, UNARY, _largest
from trnsim.kernels.layout import flat_blocks
from trnsim.kernels.queues import Queues
from trnsim.trace.program import OpSpec, TensorSpec

__all__ = ["chains", "lower_chain"]


def _fusable(op: OpSpec, tensors: dict[str, TensorSpec]) -> tuple | None:
    """The shape of an elementwise op's output when every tensor it reads has that shape."""
    out = op.args.get("out")
    if op.op not in UNARY and op.op not in BINARY or out not in tensors:
        return None
    shape = tuple(tensors[out].shape)
    ins = [op.args.get("x")] if op.op in UNARY else [op.args.get("a"), op.args.get("b")]
    for v in ins:
        if isinstance(v, str) and (v not in tensors or tuple(tensors[v].shape) != shape):
            return None
    return shape


MOST_TENSORS = 6  # tensors of one run: each has BUFS block buffers in SBUF


def chains(ops: list[OpSpec], tensors: dict[str, TensorSpec]) -> list[list[OpSpec]]:
    """`ops` in runs: a run of fusable ops of one shape (touching at most MOST_TENSORS
    tensors), or a single other op."""
    out: list[list[OpSpec]] = []
    shape, seen = None, set()
    for op in ops:
        s = _fusable(op, tensors)
        names = {v for v in op.args.values() if isinstance(v, str)}
        if s is not None and s == shape and len(seen | names) <= MOST_TENSORS:
            out[-1].append(op)
            seen |= names
        else:
            out.append([op])
            seen = names
        shape = s
    return out


def lower_chain(b: KernelBuilder, cfg: ChipConfig, ops: list[OpSpec]) -> None:
    """Emit a run of fusable ops (module doc) into `b` as one op: one generation of each
    tensor's accesses."""
    shape = tuple(b.tensors[ops[0].args["out"]].shape)
    blocks = flat_blocks(shape, cfg.core.sbuf.partitions, FREE, b.share(shape))
    big = _largest(blocks)
    written = list(dict.fromkeys(op.args["out"] for op in ops))
    slots: dict[str, str] = {}  # tensor -> its buffer in this block
    qs = Queues(cfg)
    loads, stores = qs.loads(), qs.stores()
    for n, (index, p, f) in enumerate(blocks):
        r = (slice(0, p), slice(0, f))
        slots.clear()
        for op in ops:
            _apply(b, op, n, big, r, index, slots, loads)
        for k, name in enumerate(written):
            t = ap(slots[name], *r)
            dst = ap(name, *index)
            b.emit(DmaCopy, [t], [dst], src=t, dst=dst, queue=stores[n * len(written) + k])


def _apply(b: KernelBuilder, op: OpSpec, n: int, big, r, index, slots: dict, loads) -> None:
    """One op of the run on block `n`: its inputs from the block's buffers (loaded the first
    time, on the `loads` queues), its result into its output's buffer."""

    def operand(v, k: int):
        if not isinstance(v, str):
            return v
        if v not in slots:  # first read in this block: from HBM
            slots[v] = _slot(b, v, n, big)
            t = ap(slots[v], *r)
            src = ap(v, *index)
            b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=loads[2 * n + k])
        return ap(slots[v], *r)

    args, out = op.args, op.args["out"]
    if op.op in UNARY:
        x = operand(args["x"], 0)
        o = ap(_out_slot(b, out, n, big, slots), *r)
        if op.op == "copy":
            b.emit(TensorCopy, [x], [o], src=x, dst=o)
        else:
            scale = -1.0 if op.op == "neg" else 1.0
            b.emit(Activation, [x], [o], func=UNARY[op.op], src=x, dst=o, scale=scale)
        return
    a, bb = operand(args["a"], 0), operand(args["b"], 1)
    o = ap(_out_slot(b, out, n, big, slots), *r)
    alu = BINARY[op.op]
    if isinstance(a, Ap) and isinstance(bb, Ap):
        b.emit(TensorTensor, [a, bb], [o], alu=alu, src0=a, src1=bb, dst=o)
    elif isinstance(a, Ap):
        b.emit(TensorScalar, [a], [o], src=a, dst=o, op0=alu, operand0=float(bb))
    else:
        b.emit(TensorScalar, [bb], [o], src=bb, dst=o, op0=alu, operand0=float(a), reverse0=True)


def _out_slot(b: KernelBuilder, name: str, n: int, big, slots: dict) -> str:
    """The buffer the op writes `name` into: its own (an in-place op writes where it reads)."""
    if name not in slots:
        slots[name] = _slot(b, name, n, big)
    return slots[name]


def _slot(b: KernelBuilder, name: str, n: int, big) -> str:
    """Rotating buffer n % BUFS of tensor `name` (of the block shape `big`, its dtype)."""
    dt = b.tensors[name].dtype
    key = f"fuse:{name}:{n % BUFS}:{big}"
    if key not in b.scratch:
        b.scratch[key] = b.tile("f", "sbuf", big, dt)
    return b.scratch[key]
