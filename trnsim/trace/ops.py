"""The high-level ops a trace's `ops:` may name (PyTorch aten names and argument names): one
table, checked when the trace loads (so that a misspelt op or argument is an error at its line)
and used by the kernel library (`trnsim.kernels`), which lowers every op in it.
"""

from __future__ import annotations

import re

from trnsim.inputs.validate import Loc, hint, one_of, show, unknown

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

__all__ = ["OPS", "UNARY", "BINARY", "REDUCTIONS", "check_op"]

UNARY = (
    "exp", "log", "tanh", "sigmoid", "relu", "gelu", "gelu_tanh", "silu", "sqrt", "rsqrt",
    "square", "abs", "reciprocal", "sin", "cos", "erf", "copy", "neg",
)  # fmt: skip
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "pow")
REDUCTIONS = ("sum", "mean", "amax", "amin")

_X = {"x": "tensor", "out": "tensor"}

# op -> argument -> "tensor" (names a tensor of the trace), "operand" (a tensor or a number),
# "tensors" (a non-empty list of tensor names), "operands" (a list of tensor names or numbers,
# or one number), "value" (anything the lowering checks) or "values" (a list of integers);
# optional arguments end in ?
OPS: dict[str, dict[str, str]] = {
    **{op: {"a": "tensor", "b": "tensor", "out": "tensor"} for op in ("matmul", "mm", "bmm")},
    "linear": {"x": "tensor", "weight": "tensor", "bias?": "tensor", "out": "tensor"},
    **{op: _X for op in UNARY},
    **{op: {"a": "operand", "b": "operand", "out": "tensor"} for op in BINARY},
    **{op: {**_X, "dim?": "value"} for op in ("softmax", "log_softmax")},
    **{op: {**_X, "dim?": "value", "keepdim?": "value"} for op in REDUCTIONS},
    "transpose": {**_X, "dim0?": "value", "dim1?": "value"},
    "where": {"condition": "tensor", "a": "operand", "other": "operand", "out": "tensor"},
    "masked_fill": {"x": "tensor", "mask": "tensor", "value": "value", "out": "tensor"},
    "layer_norm": {**_X, "weight?": "tensor", "bias?": "tensor", "eps?": "value"},
    "rms_norm": {**_X, "weight?": "tensor", "eps?": "value"},
    "scaled_dot_product_attention": {
        "q": "tensor",
        "k": "tensor",
        "v": "tensor",
        "out": "tensor",
        "is_causal?": "value",
        "scale?": "value",
    },  # fmt: skip
    # data movement, gathers, losses (kernels/movement.py, gather.py, loss.py; rows.py: argmax)
    "argmax": {**_X, "dim?": "value", "keepdim?": "value"},
    "contiguous": _X,
    "permute": {**_X, "dims": "values"},
    "cat": {"tensors": "tensors", "out": "tensor", "dim?": "value"},
    "split": {"x": "tensor", "split_size": "value", "outs": "tensors", "dim?": "value"},
    "embedding": {"weight": "tensor", "indices": "tensor", "out": "tensor"},
    "addmm": {
        "input": "tensor",
        "mat1": "tensor",
        "mat2": "tensor",
        "out": "tensor",
        "beta?": "value",
        "alpha?": "value",
    },
    **{
        op: {"input": "tensor", "target": "tensor", "out": "tensor", "reduction?": "value"}
        for op in ("cross_entropy", "nll_loss")
    },
    # -- the backward ops of a training step and the optimizer's elementwise ops (kernels.
    # backward, kernels.optim); several outputs: `out` a list, in aten's order
    **{op: {"grad_output": "tensor", "x": "tensor", "out": "tensor"} for op in ("silu_backward",)},
    "threshold_backward": {"grad_output": "tensor", "x": "tensor", "threshold": "value",
                           "out": "tensor"},
    "gelu_backward": {"grad_output": "tensor", "x": "tensor", "approximate?": "value",
                      "out": "tensor"},
    **{op: {"grad_output": "tensor", "output": "tensor", "out": "tensor"}
       for op in ("sigmoid_backward", "tanh_backward")},
    "_softmax_backward_data": {"grad_output": "tensor", "output": "tensor", "dim?": "value",
                               "input_dtype?": "value", "out": "tensor"},
    "native_layer_norm_backward": {
        "grad_out": "tensor", "input": "tensor", "normalized_shape?": "value", "mean": "tensor",
        "rstd": "tensor", "weight?": "tensor", "bias?": "tensor", "output_mask?": "value",
        "out": "tensors",
    },
    "embedding_dense_backward": {
        "grad_output": "tensor", "indices": "tensor", "num_weights?": "value",
        "padding_idx?": "value", "scale_grad_by_freq?": "value", "out": "tensor",
    },
    "nll_loss_backward": {
        "grad_output": "tensor", "x": "tensor", "target": "tensor", "weight?": "tensor",
        "reduction?": "value", "ignore_index?": "value", "total_weight?": "tensor",
        "out": "tensor",
    },
    "scaled_dot_product_attention_backward": {
        "grad_out": "tensor", "q": "tensor", "k": "tensor", "v": "tensor", "output?": "tensor",
        "is_causal?": "value", "scale?": "value", "out": "tensors",
    },
    "addcdiv": {"x": "tensor", "tensor1": "tensor", "tensor2": "tensor", "value?": "value",
                "out": "tensor"},
    "addcmul": {"x": "tensor", "tensor1": "tensor", "tensor2": "tensor", "value?": "value",
                "out": "tensor"},
    "lerp": {"x": "tensor", "end": "tensor", "weight": "value", "out": "tensor"},
    **{op: {"x": "tensors", "other": "operands", "alpha?": "value", "out": "tensors"}
       for op in ("_foreach_add", "_foreach_mul", "_foreach_div")},
    **{op: {"x": "tensors", "tensor1": "tensors", "tensor2": "tensors", "value?": "value",
            "out": "tensors"} for op in ("_foreach_addcdiv", "_foreach_addcmul")},
    "_foreach_lerp": {"x": "tensors", "tensors1": "tensors", "weight": "value",
                      "out": "tensors"},
    "_foreach_sqrt": {"x": "tensors", "out": "tensors"},
}  # fmt: skip


def check_op(op: str, args: dict, loc: Loc, args_loc: Loc) -> None:
    """Fail at `loc` for an unknown op, at `args_loc` for a missing or unknown argument, or a
    tensor operand that is not a name. Whether a name is a declared tensor is left to the
    kernel library: the format's own examples name intermediates (`out: h`) and tensors that
    are declared elsewhere."""
    spec = OPS.get(op)
    if spec is None:
        loc.fail(unknown("op", op, OPS), one_of(sorted(OPS), limit=40))
    names = {k.rstrip("?"): kind for k, kind in spec.items()}
    for key in args:
        if key not in names:
            args_loc.fail(
                f"{op}: unknown argument {show(key)}{hint(key, names)}",
                f"{op}'s arguments: {', '.join(spec)} (? = optional)",
            )
    for key in spec:
        if not key.endswith("?") and key not in args:
            args_loc.fail(f"{op}: missing argument {key!r}", f"{op}'s arguments: {', '.join(spec)}")
    for key, value in args.items():
        name = isinstance(value, str) and IDENT.fullmatch(value)
        if names[key] == "tensor" and not name:
            args_loc.key(args, key).fail(f"{op}: {key}: got {show(value)}", "a tensor name")
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if names[key] == "operand" and not (name or number):
            args_loc.key(args, key).fail(
                f"{op}: {key}: got {show(value)}", "a tensor name or a number"
            )
        _check_list(op, key, names[key], value, args_loc.key(args, key))


def _check_list(op: str, key: str, kind: str, value, loc: Loc) -> None:
    """Fail at `loc` for a "tensors" argument that is not a non-empty list of names, an
    "operands" one that is neither that, a list of numbers nor a number, or a "values" one that
    is not a list of integers."""
    if kind in ("tensors", "operands") and not _listed(value, kind):
        expected = "a non-empty list of tensor names" + (
            ", a list of numbers, or a number" if kind == "operands" else ""
        )
        loc.fail(f"{op}: {key}: got {show(value)}", expected)
    items = value if isinstance(value, list) else None
    if kind == "values" and not (
        items is not None and all(isinstance(v, int) and not isinstance(v, bool) for v in items)
    ):
        loc.fail(f"{op}: {key}: got {show(value)}", "a list of integers")


def _listed(value, kind: str) -> bool:
    """A "tensors" argument: a non-empty list of names; "operands": that, a list of numbers,
    or one number."""

    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if kind == "operands" and number(value):
        return True
    if not isinstance(value, list) or not value:
        return False
    names = all(isinstance(v, str) and IDENT.fullmatch(v) for v in value)
    return names or (kind == "operands" and all(number(v) for v in value))
