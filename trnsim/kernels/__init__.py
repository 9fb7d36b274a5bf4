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
(`training`: `backward`, `softmax_backward`, `loss_backward`, `grads`, `attention_backward`,
`optim`). An op without a lowering is a TraceError naming it. `lower_cores` splits the ops
between the physical cores of an LNC 2 logical core.
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.gcpause import no_gc
from trnsim.kernels.argmax import lower_argmax
from trnsim.kernels.attention import lower_attention
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.elementwise import (  # noqa: F401
    BINARY,
    UNARY,
    lower_binary,
    lower_unary,
    lower_where,
)
from trnsim.kernels.fusion import chains, lower_chain
from trnsim.kernels.gather import lower_embedding
from trnsim.kernels.loss import lower_loss
from trnsim.kernels.matmul import lower_matmul
from trnsim.kernels.movement import lower_cat, lower_contiguous, lower_permute, lower_split
from trnsim.kernels.norms import lower_norm
from trnsim.kernels.reduce import on_last_dim
from trnsim.kernels.reference import reference
from trnsim.kernels.rows import REDUCTIONS, lower_reduction, rows_fit
from trnsim.kernels.softmax import lower_softmax
from trnsim.kernels.training import FULL_READS as TRAINING_FULL_READS
from trnsim.kernels.training import ONE_CORE, TRAINING_OPS, lower_training
from trnsim.kernels.transpose import lower_transpose
from trnsim.trace.ops import OPS
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


FULL_READS = {  # op -> arguments it reads whole on every core (the others: by the core's rows)
    **{op: ("b",) for op in ("matmul", "mm", "bmm")},
    "linear": ("weight", "bias"),
    "transpose": ("x",),
    "layer_norm": ("weight", "bias"),
    "rms_norm": ("weight",),
    "scaled_dot_product_attention": ("k", "v"),
    "addmm": ("mat2", "input"),
    **TRAINING_FULL_READS,
}

ALONE = ("permute", "contiguous", "cat", "split", "embedding", "cross_entropy", "nll_loss")
"""Ops that share their work between physical cores otherwise than by out's rows (or leave it
to one core): with LNC 2, no other op of the kernel may touch their tensors (`_check_split`)."""


def isolated(op: OpSpec, tensors: dict[str, TensorSpec], cfg: ChipConfig) -> bool:
    """Whether `op` is one of ALONE, a reduction over other dims than the last or over rows
    too long for `rows` (`reduce.lower_any` shares its blocks otherwise), or an argmax over
    another dim than the last."""
    if op.op in ALONE:
        return True
    x = op.args.get("x")
    if op.op in REDUCTIONS and x in tensors:
        tx = tensors[x]
        return not (on_last_dim(op.args.get("dim", -1), len(tx.shape)) and rows_fit(cfg, tx))
    if op.op == "argmax" and x in tensors:
        return not on_last_dim(op.args.get("dim", -1), len(tensors[x].shape))
    return False


def accesses(op: OpSpec, tensors) -> list[tuple[str, str, str]]:
    """(argument, tensor, "r" or "w") for each tensor `op` names."""
    out = []
    for k, v in op.args.items():
        for name in v if isinstance(v, list) else [v]:
            if isinstance(name, str) and name in tensors:
                out.append((k, name, "w" if k in ("out", "outs") else "r"))
    return out


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
        out = op.args.get("out")
        outs = out if isinstance(out, list) else [out]  # several, or a list op: per item
        r_outs = [
            _rows(tensors[o].shape)
            if op.op not in REDUCTIONS and op.op != "argmax"
            else _rows(tensors[op.args["x"]].shape)
            for o in outs
        ]
        if op.op in ONE_CORE:  # computed whole on the first core
            r_outs = [-1] * len(outs)
        full = FULL_READS.get(op.op, ())
        for k, arg in op.args.items():
            items = arg if isinstance(arg, list) else [arg]
            for i, v in enumerate(items):
                if k == "out" or not isinstance(v, str) or v not in rows_of:
                    continue
                r_out = r_outs[min(i, len(r_outs) - 1)]
                whole = k in full or (op.op in BINARY and tensors[v].shape != tensors[out].shape)
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
    for k, name, kind in accesses(op, tensors):
        before = seen.get(name, set()) if mine else alone.get(name, set())
        if "w" in before or (kind == "w" and before):
            where = f"{source}:{op.line}: " if source else ""
            raise TraceError(
                f"{where}{op.op}: {k} {name!r} is used by another op of this kernel, and "
                f"{'this op' if mine else 'that op'} shares its work between the physical "
                "cores (lnc 2) otherwise than by rows; cores synchronise only between "
                "launches: put the op in a kernel of its own"
            )
    for _, name, kind in accesses(op, tensors):
        seen.setdefault(name, set()).add(kind)
        if mine:
            alone.setdefault(name, set()).add(kind)


def _rows(shape) -> int:
    return math.prod(shape[:-1])


def check_args(b: KernelBuilder, op: OpSpec) -> None:
    """Raise TraceError for an op that is not in the table, a missing or unknown argument, or
    a tensor argument naming no tensor."""
    spec = OPS.get(op.op)
    if spec is None:
        raise TraceError(
            f"op {op.op!r} has no lowering yet; expected one of {', '.join(sorted(OPS))}"
        )
    args = op.args
    for key, kind in spec.items():
        k = key.rstrip("?")
        if k == key and k not in args:
            raise TraceError(f"{op.op}: missing argument {k!r}; expected {', '.join(spec)}")
        v = args.get(k)
        if kind in ("tensor", "operand") and isinstance(v, str) and v not in b.tensors:
            raise TraceError(f"{op.op}: {k} names {v!r}, which is not a tensor")
        if kind == "tensors" and (not isinstance(v, list) or not v):
            raise TraceError(f"{op.op}: {k} is {v!r}; expected a list of tensor names")
        if kind in ("tensors", "operands") and isinstance(v, list):
            for name in v:
                if isinstance(name, str) and name not in b.tensors:
                    raise TraceError(f"{op.op}: {k} names {name!r}, which is not a tensor")
        if kind == "values" and not (
            isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in v)
        ):
            raise TraceError(f"{op.op}: {k} is {v!r}; expected a list of integers")
    names = {k.rstrip("?") for k in spec}
    extra = [k for k in args if k not in names]
    if extra:
        raise TraceError(f"{op.op}: unknown argument {extra[0]!r}; expected {', '.join(spec)}")


def lower_op(b: KernelBuilder, cfg: ChipConfig, op: OpSpec) -> None:
    """Emit one op into `b` (its arguments checked by `check_args`)."""
    args = op.args
    if op.op in ("matmul", "mm", "bmm"):
        lower_matmul(b, cfg, args["a"], args["b"], args["out"])
    elif op.op == "linear":  # out = x @ weight^T (+ bias, broadcast over the rows)
        lower_matmul(b, cfg, args["x"], args["weight"], args["out"], b_transposed=True)
        if args.get("bias") is not None:
            b.barrier()  # the add reads what the matmul wrote: a generation of its own
            lower_binary(b, cfg, "add", args["out"], args["bias"], args["out"])
    elif op.op in UNARY:
        lower_unary(b, cfg, op.op, args["x"], args["out"])
    elif op.op in BINARY:
        lower_binary(b, cfg, op.op, args["a"], args["b"], args["out"])
    elif op.op == "where":
        lower_where(b, cfg, args["condition"], args["a"], args["other"], args["out"])
    elif op.op == "masked_fill":
        lower_where(b, cfg, args["mask"], float(args["value"]), args["x"], args["out"])
    elif op.op == "transpose":
        lower_transpose(b, cfg, args["x"], args["out"], args.get("dim0", -2), args.get("dim1", -1))
    elif op.op in REDUCTIONS:
        lower_reduction(
            b, cfg, op.op, args["x"], args["out"], args.get("dim", -1), args.get("keepdim", False)
        )
    elif op.op in ("layer_norm", "rms_norm"):
        lower_norm(
            b,
            cfg,
            op.op,
            args["x"],
            args["out"],
            args.get("weight"),
            args.get("bias"),
            args.get("eps", 1e-5),
        )
    elif op.op in ALONE or op.op in ("argmax", "addmm"):
        _lower_more(b, cfg, op)
    elif op.op == "scaled_dot_product_attention":
        lower_attention(
            b,
            cfg,
            args["q"],
            args["k"],
            args["v"],
            args["out"],
            bool(args.get("is_causal")),
            args.get("scale"),
        )
    elif op.op in TRAINING_OPS:  # backward and optimizer ops (kernels.training)
        lower_training(b, cfg, op)
    else:
        lower_softmax(
            b, cfg, args["x"], args["out"], args.get("dim", -1), log=op.op == "log_softmax"
        )


def _lower_more(b: KernelBuilder, cfg: ChipConfig, op: OpSpec) -> None:
    """Movement, gathers, losses, argmax and addmm (one block, next to lower_op's)."""
    a = op.args
    if op.op == "contiguous":
        lower_contiguous(b, cfg, a["x"], a["out"])
    elif op.op == "permute":
        lower_permute(b, cfg, a["x"], a["out"], a["dims"])
    elif op.op == "cat":
        lower_cat(b, cfg, a["tensors"], a["out"], a.get("dim", 0))
    elif op.op == "split":
        lower_split(b, cfg, a["x"], a["split_size"], a["outs"], a.get("dim", 0))
    elif op.op == "embedding":
        lower_embedding(b, cfg, a["weight"], a["indices"], a["out"])
    elif op.op in ("cross_entropy", "nll_loss"):
        lower_loss(b, cfg, op.op, a["input"], a["target"], a["out"], a.get("reduction", "mean"))
    elif op.op == "argmax":
        lower_argmax(b, cfg, a["x"], a["out"], a.get("dim", -1), a.get("keepdim", False))
    else:  # addmm: out = beta * input + alpha * (mat1 @ mat2)
        lower_addmm(b, cfg, a["input"], a["mat1"], a["mat2"], a["out"], a.get("beta", 1),
                    a.get("alpha", 1))  # fmt: skip


def lower_addmm(b: KernelBuilder, cfg: ChipConfig, inp, m1, m2, out, beta=1, alpha=1) -> None:
    """The matmul into out, then out = beta * (out * alpha / beta + input): the scalings as
    in-place `mul`s where alpha or beta is not 1, the input added by `add` (of out's shape, a
    row [N] or a column [M, 1] broadcast); beta 0 leaves input out."""
    for k, v in (("beta", beta), ("alpha", alpha)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TraceError(f"addmm: {k} {v!r}; expected a number")
    lower_matmul(b, cfg, m1, m2, out)
    scale = alpha / beta if beta else alpha
    steps = [("mul", scale)] if scale != 1 else []
    if beta:
        steps.append(("add", inp))
        if beta != 1:
            steps.append(("mul", beta))
    for name, v in steps:
        b.barrier()  # each reads what the one before wrote: a generation of its own
        lower_binary(b, cfg, name, out, float(v) if name == "mul" else v, out)
