"""The kernel library: high-level ops (PyTorch's aten names and argument names) lowered to one
core's instruction program, as a good NKI engineer would write them.

`lower(ops, tensors, cfg)` turns a list of `OpSpec`s on HBM tensors into a `CoreProgram`
(tiles and instructions, their semaphores derived by `builder.KernelBuilder`); `reference(op,
args, arrays)` is each op's numpy result, against which `--check` compares. The lowerings:
`matmul` (`mm`, `bmm`), `linear`, `transpose` (of the last two dims), elementwise unary and
binary ops (`elementwise.UNARY`, `BINARY`), `softmax` and `log_softmax`, reductions (`sum`,
`mean`, `amax`, `amin` over any dims), `argmax`, `layer_norm`, `rms_norm`, `where`,
`masked_fill`, `scaled_dot_product_attention` (flash-style), data movement (`contiguous`,
`permute`, `cat`, `split`), `embedding` (a gather DMA), `addmm`, `cross_entropy` and
`nll_loss`; the backward ops of a training step and the optimizer's elementwise ops
(`backward`, `softmax_backward`, `loss_backward`, `grads`, `attention_backward`, `optim`).
Which module lowers an op, which tensors it touches and how the cores of an LNC 2 logical core
share it are in the op's record (`trace.ops.OPS`); `lowerings` holds the adapters between the
records and the modules. An op without a lowering is a TraceError naming it. `lower_cores`
splits the ops between the physical cores of an LNC 2 logical core.
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.gcpause import no_gc
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.elementwise import BINARY, UNARY  # noqa: F401
from trnsim.kernels.fusion import chains, lower_chain
from trnsim.kernels.reduce import on_last_dim
from trnsim.kernels.reference import reference
from trnsim.kernels.rows import rows_fit
from trnsim.trace.ops import OPS, problem
from trnsim.trace.program import CoreProgram, OpSpec, TensorSpec

__all__ = ["lower", "lower_cores", "lower_op", "reference", "OPS"]


def lower(
    ops: list[OpSpec], tensors: dict[str, TensorSpec], cfg: ChipConfig, source: str = ""
) -> CoreProgram:
    """One core's program running `ops` in order (each op's accesses wait for the earlier
    ops' conflicting ones). Raises TraceError for an op it cannot lower, naming the op and, as
    `<source>:<line>: `, where it is written."""
    return _lower_into(KernelBuilder(tensors), ops, cfg, source)


def _lower_into(b: KernelBuilder, ops: list[OpSpec], cfg: ChipConfig, source: str):
    """The ops into `b`, runs of elementwise ops fused (`fusion`), each run or op a generation
    of its tensors' accesses, its instructions tagged with its row (`roofline.op_rows`)."""
    for row, run in enumerate(chains(ops, b.tensors)):
        op = run[0]
        b.barrier()
        b.row = row
        try:
            for op in run:
                check_args(b, op)
            op = run[0]
            lower_chain(b, cfg, run) if len(run) > 1 else lower_op(b, cfg, op)
        except TraceError as e:
            where = f"{source}:{op.line}: " if source else f"line {op.line}: " if op.line else ""
            raise TraceError(f"{where}{e}") from None
    return b.program()


def isolated(op: OpSpec, tensors: dict[str, TensorSpec], cfg: ChipConfig) -> bool:
    """Whether `op` shares its work between physical cores otherwise than by rows (its record's
    `split`: "alone"; "reduce_rows" over other dims than the last or over rows too long for
    `rows`, which `reduce.lower_any` shares otherwise; "last_dim_rows" over another dim)."""
    split = OPS[op.op].split
    if split == "alone":
        return True
    x = op.args.get("x")
    if split in ("reduce_rows", "last_dim_rows") and x in tensors:
        tx = tensors[x]
        last = on_last_dim(op.args.get("dim", -1), len(tx.shape))
        return not (last and (split == "last_dim_rows" or rows_fit(cfg, tx)))
    return False


def lower_cores(
    ops: list[OpSpec], tensors: dict[str, TensorSpec], cfg: ChipConfig, cores: int, source=""
) -> list[CoreProgram]:
    """`ops` split over the `cores` physical cores of a logical core: each computes its share
    of every op's output rows (`layout.core_rows`), the same share for every op, so a core reads
    back only rows it wrote itself. The cores do not synchronise between ops (inside one, a
    lowering may meet at a `core_barrier`: `reduce.Reduce.everything`), so an op that
    reads a whole tensor (a matmul's b, a norm's weight, attention's k and v, a broadcast
    operand) written by an earlier op of the kernel, or that reads a tensor written with
    another row split, is an error: such ops belong in a kernel of their own, launched after
    (launches on a stream run one after another)."""
    if cores > 1:
        _check_split(ops, tensors, cfg, source)
    programs = []
    with no_gc():  # a lowering makes millions of objects and no cycles (`gcpause`)
        for c in range(cores):
            b = KernelBuilder(tensors)
            b.part = (c, cores)
            programs.append(_lower_into(b, ops, cfg, source))
    return programs


def _check_split(ops: list[OpSpec], tensors: dict[str, TensorSpec], cfg, source: str) -> None:
    rows_of = {}  # tensor -> the row count of the split its writer used (-1: one core's)
    seen: dict[str, set] = {}  # tensor -> the kinds of access ("r", "w") of the ops so far
    alone: dict[str, set] = {}  # the same, by isolated ops only
    for op in ops:
        _check_alone(op, isolated(op, tensors, cfg), tensors, seen, alone, source)
        if isolated(op, tensors, cfg):
            continue
        rec = OPS[op.op]
        out = op.args.get("out")
        outs = out if isinstance(out, list) else [out]  # several, or a list op: per item
        by_x = rec.split in ("reduce_rows", "last_dim_rows")  # rows of the input reduced
        r_outs = [_rows(tensors[op.args["x"] if by_x else o].shape) for o in outs]
        if rec.split == "first_core":  # computed whole on the first core
            r_outs = [-1] * len(outs)
        tensor_args = rec.tensor_args()
        for k, arg in op.args.items():
            if k not in tensor_args:
                continue
            items = arg if isinstance(arg, list) else [arg]
            for i, v in enumerate(items):
                if k == "out" or not isinstance(v, str) or v not in rows_of:
                    continue
                r_out = r_outs[min(i, len(r_outs) - 1)]
                whole = k in rec.whole or (
                    rec.broadcast_whole and tensors[v].shape != tensors[out].shape
                )
                if (whole and rows_of[v] != -1) or rows_of[v] != r_out:
                    where = f"{source}:{op.line}: " if source else ""
                    raise TraceError(
                        f"{where}{op.op}: {k} {v!r} was written by an earlier op of this kernel "
                        "on both physical cores (lnc 2), and this op needs rows of it the other "
                        "core wrote; cores synchronise only between launches: put the op in a "
                        "kernel of its own"
                    )
        rows_of.update(zip(outs, r_outs))


def _check_alone(op: OpSpec, mine: bool, tensors, seen: dict, alone: dict, source: str) -> None:
    """An isolated op (`mine`) may not conflict (one access a write) with any earlier op's
    access to its tensors, nor any op with an earlier isolated op's."""
    for k, name, kind in OPS[op.op].accesses(op.args, tensors):
        before = seen.get(name, set()) if mine else alone.get(name, set())
        if "w" in before or (kind == "w" and before):
            where = f"{source}:{op.line}: " if source else ""
            raise TraceError(
                f"{where}{op.op}: {k} {name!r} is used by another op of this kernel, and "
                f"{'this op' if mine else 'that op'} shares its work between the physical "
                "cores (lnc 2) otherwise than by rows; cores synchronise only between "
                "launches: put the op in a kernel of its own"
            )
    for _, name, kind in OPS[op.op].accesses(op.args, tensors):
        seen.setdefault(name, set()).add(kind)
        if mine:
            alone.setdefault(name, set()).add(kind)


def _rows(shape) -> int:
    return math.prod(shape[:-1])


def check_args(b: KernelBuilder, op: OpSpec) -> None:
    """Raise TraceError for an op that is not in the table, a missing, unknown or ill-typed
    argument, or a tensor argument naming no tensor (`trace.ops.problem`: one wording)."""
    found = problem(op.op, op.args, b.tensors)
    if found is not None:
        _, what, expected = found
        raise TraceError(f"{what}; expected {expected}")


def lower_op(b: KernelBuilder, cfg: ChipConfig, op: OpSpec) -> None:
    """Emit one op into `b` (its arguments checked by `check_args`) by its record's lowering;
    an op computed whole on the first physical core ("first_core") only there."""
    rec = OPS[op.op]
    if rec.split == "first_core" and b.part[0] != 0:
        return
    rec.lowering_fn(b, cfg, op.op, op.args)
