"""The kernel library: high-level ops (PyTorch's aten names and argument names) lowered to one
core's instruction program, as a good NKI engineer would write them.

`lower(ops, tensors, cfg)` turns a list of `OpSpec`s on HBM tensors into a `CoreProgram`
(tiles and instructions, their semaphores derived by `builder.KernelBuilder`); `reference(op,
args, arrays)` is each op's numpy result, against which `--check` compares. The lowerings:
`matmul` (`mm`, `bmm`), `linear`, `transpose` (of the last two dims), elementwise unary and
binary ops (`elementwise.UNARY`, `BINARY`), `softmax` and `log_softmax`, row reductions (`sum`,
`mean`, `amax`, `amin` over the last dim), `layer_norm`, `rms_norm`, `where`, `masked_fill`
and `scaled_dot_product_attention` (flash-style). An op without a lowering is a TraceError
naming it. `lower_cores` splits the ops between the physical cores of an LNC 2 logical core.
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
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
from trnsim.kernels.matmul import lower_matmul
from trnsim.kernels.reference import reference
from trnsim.kernels.rows import REDUCTIONS, lower_norm, lower_reduction
from trnsim.kernels.softmax import lower_softmax
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
}


def lower_cores(
    ops: list[OpSpec], tensors: dict[str, TensorSpec], cfg: ChipConfig, cores: int, source=""
) -> list[CoreProgram]:
    """`ops` split over the `cores` physical cores of a logical core: each computes its share
    of every op's output rows (`layout.core_rows`), the same share for every op, so a core reads
    back only rows it wrote itself. The cores of one launch do not synchronise, so an op that
    reads a whole tensor (a matmul's b, a norm's weight, attention's k and v, a broadcast
    operand) written by an earlier op of the kernel, or that reads a tensor written with
    another row split, is an error: such ops belong in a kernel of their own, launched after
    (launches on a stream run one after another)."""
    if cores > 1:
        _check_split(ops, tensors, source)
    programs = []
    for c in range(cores):
        b = KernelBuilder(tensors)
        b.part = (c, cores)
        programs.append(_lower_into(b, ops, cfg, source))
    return programs


def _check_split(ops: list[OpSpec], tensors: dict[str, TensorSpec], source: str) -> None:
    rows_of = {}  # tensor -> the row count of the split its writer used
    for op in ops:
        out = op.args.get("out")
        r_out = (
            _rows(tensors[out].shape)
            if op.op not in REDUCTIONS
            else _rows(tensors[op.args["x"]].shape)
        )
        full = FULL_READS.get(op.op, ())
        for k, v in op.args.items():
            if k == "out" or not isinstance(v, str) or v not in rows_of:
                continue
            whole = k in full or (op.op in BINARY and tensors[v].shape != tensors[out].shape)
            if whole or rows_of[v] != r_out:
                where = f"{source}:{op.line}: " if source else ""
                raise TraceError(
                    f"{where}{op.op}: {k} {v!r} was written by an earlier op of this kernel on "
                    "both physical cores (lnc 2), and this op needs rows of it the other core "
                    "wrote; cores synchronise only between launches: put the op in a kernel "
                    "of its own"
                )
        rows_of[out] = r_out


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
        if kind != "value" and isinstance(v, str) and v not in b.tensors:
            raise TraceError(f"{op.op}: {k} names {v!r}, which is not a tensor")
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
    else:
        lower_softmax(
            b, cfg, args["x"], args["out"], args.get("dim", -1), log=op.op == "log_softmax"
        )
