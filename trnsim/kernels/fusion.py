"""Fusion: a run of consecutive elementwise ops on tensors of one shape lowered as one kernel
that keeps every intermediate on chip.

`chains(ops, tensors)` groups an op list into runs: an elementwise op (`UNARY`, or `BINARY` on
tensors of out's shape and at most one number; broadcasts, `where` and `masked_fill` are left
alone) joins the run before it when its output has the run's shape. `lower_chain` walks the
shape in flat blocks (`layout.flat_blocks`) and, per block: loads each tensor the first time
the run reads it, applies the ops in order in SBUF (each result rounded to its output's dtype,
as the device would store it), and stores each tensor the run writes once, with its final
value. So `h = x @ w; h = h + b; h = gelu(h); y = h * 2` reads x, w, b once, never reads h
back, and writes h and y once; unfused, the three elementwise ops would read 3 and write 3
tensors of that shape. The transfers take the queues an eager op's would (`_loaded`: one
stream per tensor loaded, one per tensor stored, each `balance.dma_queues` wide) and the
arithmetic of two tensors goes to VectorE or GpSimd, whichever finishes it first (`spread`).

A tensor has one buffer per block, which each op writing it overwrites, so a value must be read
before it is overwritten: an op whose result the run overwrites before any op reads it (and
before the final store) computes nothing the run keeps, and is left out (`live`). Otherwise two
engines would write one buffer with no read between them: the builder's "write over a write
not yet read" (a race: which write lands last is not ordered).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trnsim.config import ChipConfig
from trnsim.isa import Ap, DmaCopy, TensorCopy, TensorScalar
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.elementwise import BINARY, BUFS, FREE, UNARY
from trnsim.kernels.layout import flat_blocks
from trnsim.kernels.queues import Queues, Stream
from trnsim.kernels.spread import Spread
from trnsim.trace.program import OpSpec, TensorSpec

__all__ = ["chains", "lower_chain", "live"]


def _inputs(op: OpSpec) -> list:
    """The operands an elementwise op reads (tensor names or numbers), in order."""
    return [op.args.get("x")] if op.op in UNARY else [op.args.get("a"), op.args.get("b")]


def _fusable(op: OpSpec, tensors: dict[str, TensorSpec]) -> tuple | None:
    """The shape of an elementwise op's output when every tensor it reads has that shape and it
    reads at least one (an op of two numbers is refused by its own lowering)."""
    out = op.args.get("out")
    if op.op not in UNARY and op.op not in BINARY or out not in tensors:
        return None
    shape = tuple(tensors[out].shape)
    ins = _inputs(op)
    if not any(isinstance(v, str) for v in ins):
        return None
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


def live(ops: list[OpSpec]) -> list[OpSpec]:
    """The ops of a run whose result is read by a later op of the run or is a tensor's final
    value (stored), in order: the others' results are overwritten unread (module doc)."""
    needed = {op.args["out"] for op in ops}  # the final values, stored
    keep = []
    for op in reversed(ops):
        out = op.args["out"]
        if out not in needed:
            continue
        needed.discard(out)
        needed.update(v for v in _inputs(op) if isinstance(v, str))
        keep.append(op)
    return keep[::-1]


def lower_chain(b: KernelBuilder, cfg: ChipConfig, ops: list[OpSpec]) -> None:
    """Emit a run of fusable ops (module doc) into `b` as one op: one generation of each
    tensor's accesses."""
    shape = tuple(b.tensors[ops[0].args["out"]].shape)
    blocks = flat_blocks(shape, cfg.core.sbuf.partitions, FREE, b.share(shape))
    big = _largest(blocks)
    written = list(dict.fromkeys(op.args["out"] for op in ops))
    run = live(ops)
    place = {v: k for k, v in enumerate(dict.fromkeys(v for op in run for v in _names(op)))}
    loaded = _loaded(run)
    widest = max(b.tensors[v].dtype.itemsize for v in place)
    per = dma_queues(cfg, big[1] * widest)  # queues per stream, as eager elementwise ops take
    qs = Queues(cfg)
    loads = qs.loads().take(max(1, len(loaded)) * per)
    stores = qs.stores().take(len(written) * per)
    sp = Spread(b, cfg)
    for n, (index, p, f) in enumerate(blocks):
        blk = _Block(b, n, big, place, (slice(0, p), slice(0, f)), index, loads, loaded)
        for op in run:
            _apply(sp, blk, op)
        for k, name in enumerate(written):
            t, dst = blk.value(name), ap(name, *index)
            b.emit(DmaCopy, [t], [dst], src=t, dst=dst, queue=stores[n * len(written) + k])


def _loaded(run: list[OpSpec]) -> list[str]:
    """The tensors a run loads from HBM in each block: those it reads before writing them."""
    written, loaded = set(), []
    for op in run:
        loaded += [v for v in _inputs(op) if isinstance(v, str) and v not in written]
        written.add(op.args["out"])
    return list(dict.fromkeys(loaded))


@dataclass
class _Block:
    """Block `n` of a run: where each tensor's value lives in SBUF (`held`), loaded from HBM
    region `index` the first time an op reads it."""

    b: KernelBuilder
    n: int
    big: tuple[int, int]  # the buffers' shape: the largest block's
    place: dict[str, int]  # tensor -> its place among the run's tensors
    r: tuple[slice, slice]  # this block's part of a buffer
    index: tuple
    loads: Stream
    loaded: list[str]  # the tensors the run loads in each block (`_loaded`), in order
    held: dict[str, str] = field(default_factory=dict)  # tensor -> its buffer

    def operand(self, v):
        """Operand `v` (a tensor name or a number) of an instruction: block n's k-th load goes
        on load queue len(loaded) x n + k, as an eager op's inputs do."""
        if not isinstance(v, str):
            return v
        if v not in self.held:  # first read in this block: from HBM
            t, src = ap(self.buffer(v), *self.r), ap(v, *self.index)
            q = self.loads[len(self.loaded) * self.n + self.loaded.index(v)]
            self.b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=q)
        return self.value(v)

    def value(self, name: str) -> Ap:
        """Where `name`'s value is (an op's result goes to its tensor's own buffer: an in-place
        op writes where it reads)."""
        return ap(self.buffer(name), *self.r)

    def buffer(self, name: str) -> str:
        """Rotating buffer n % BUFS of the run's k-th tensor (of the blocks' shape, its dtype):
        the k-th tensors of a kernel's runs share them, so runs over other tensors do not pile
        buffers up in SBUF (the builder orders a buffer's reuse like any access)."""
        if name not in self.held:
            key = f"fuse{self.place[name]}:{self.n % BUFS}"
            self.held[name] = self.b.scratch_tile(key, "f", self.big, self.b.tensors[name].dtype)
        return self.held[name]


def _apply(sp: Spread, blk: _Block, op: OpSpec) -> None:
    """One op of the run on one block: its inputs from the block's buffers, its result into its
    output's buffer; arithmetic on whichever of VectorE and GpSimd finishes it first (`spread`)."""
    b, args = blk.b, op.args
    if op.op in UNARY:
        x = blk.operand(args["x"])
        o = blk.value(args["out"])
        if op.op == "copy":
            b.emit(TensorCopy, [x], [o], src=x, dst=o)
        else:
            sp.act(UNARY[op.op], x, o, scale=-1.0 if op.op == "neg" else 1.0)
        return
    a, bb = blk.operand(args["a"]), blk.operand(args["b"])
    o = blk.value(args["out"])
    alu = BINARY[op.op]
    if isinstance(a, Ap) and isinstance(bb, Ap):
        sp.tt(alu, a, bb, o)
    elif isinstance(a, Ap):
        b.emit(TensorScalar, [a], [o], src=a, dst=o, op0=alu, operand0=float(bb))
    else:
        b.emit(TensorScalar, [bb], [o], src=bb, dst=o, op0=alu, operand0=float(a), reverse0=True)


def _names(op: OpSpec) -> list[str]:
    """The tensors an elementwise op touches: its inputs, then its output."""
    return [v for v in _inputs(op) if isinstance(v, str)] + [op.args["out"]]


def _largest(blocks: list[tuple]) -> tuple[int, int]:
    """The largest block's (partitions, free); (1, 1) for a core with no rows of the run."""
    return max((p for _, p, _ in blocks), default=1), max((f for _, _, f in blocks), default=1)
