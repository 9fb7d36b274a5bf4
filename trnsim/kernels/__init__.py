"""The kernel library: high-level ops (PyTorch's aten names and argument names) lowered to one
core's instruction program, as a good NKI engineer would write them.

`lower(ops, tensors, cfg)` turns a list of `OpSpec`s on HBM tensors into a `CoreProgram`
(tiles and instructions, their semaphores derived by `builder.KernelBuilder`); `reference(op,
args, arrays)` is each op's numpy result, against which `--check` compares. The lowerings:
`matmul` (`mm`, `bmm`), elementwise unary and binary ops (`elementwise.UNARY`, `BINARY`),
`softmax` and `log_softmax`, row reductions (`sum`, `mean`, `amax`, `amin` over the last dim),
`layer_norm`, `rms_norm`, and `scaled_dot_product_attention` (flash-style). An op without a
lowering is a TraceError naming it.
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.kernels.attention import lower_attention
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.elementwise import BINARY, UNARY, lower_binary, lower_unary  # noqa: F401
from trnsim.kernels.matmul import lower_matmul
from trnsim.kernels.reference import reference
from trnsim.kernels.rows import REDUCTIONS, lower_norm, lower_reduction
from trnsim.kernels.softmax import lower_softmax
from trnsim.trace.ops import OPS
from trnsim.trace.program import CoreProgram, OpSpec, TensorSpec

__all__ = ["lower", "lower_op", "reference", "OPS"]


def lower(
    ops: list[OpSpec], tensors: dict[str, TensorSpec], cfg: ChipConfig, source: str = ""
) -> CoreProgram:
    """One core's program running `ops` in order (each op's accesses wait for the earlier
    ops' conflicting ones). Raises TraceError for an op it cannot lower, naming the op and, as
    `<source>:<line>: `, where it is written."""
    b = KernelBuilder(tensors)
    for op in ops:
        b.barrier()
        try:
            lower_op(b, cfg, op)
        except TraceError as e:
            where = f"{source}:{op.line}: " if source else f"line {op.line}: " if op.line else ""
            raise TraceError(f"{where}{e}") from None
    return b.program()


def lower_op(b: KernelBuilder, cfg: ChipConfig, op: OpSpec) -> None:
    """Emit one op into `b`."""
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
    if op.op in ("matmul", "mm", "bmm"):
        lower_matmul(b, cfg, args["a"], args["b"], args["out"])
    elif op.op in UNARY:
        lower_unary(b, cfg, op.op, args["x"], args["out"])
    elif op.op in BINARY:
        lower_binary(b, cfg, op.op, args["a"], args["b"], args["out"])
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
