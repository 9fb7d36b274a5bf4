"""The high-level ops a trace's `ops:` may name (PyTorch aten names and argument names), checked
when the trace loads so that a misspelt op or operand is an error at its line. The kernel
library that lowers them has not landed: a run refuses them (docs/trace_format.md).
"""

from __future__ import annotations

import re

from trnsim.inputs.validate import Loc, hint, one_of, show, unknown

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

__all__ = ["OPS", "check_op"]

_UNARY = {"x": "tensor", "out": "tensor"}
_BINARY = {"a": "tensor", "b": "tensor", "out": "tensor"}

# op -> argument -> "tensor" (must name a tensor of the trace) or "value"; optional ones end in ?
OPS: dict[str, dict[str, str]] = {
    "matmul": _BINARY,
    "add": _BINARY,
    "sub": _BINARY,
    "mul": _BINARY,
    "div": _BINARY,
    "linear": {"x": "tensor", "w": "tensor", "bias?": "tensor", "out": "tensor"},
    "gelu": {**_UNARY, "approximate?": "value"},
    **{f: _UNARY for f in ("relu", "silu", "sigmoid", "tanh", "exp", "sqrt", "rsqrt")},
    "softmax": {**_UNARY, "dim?": "value"},
    "layer_norm": {**_UNARY, "weight?": "tensor", "bias?": "tensor", "eps?": "value"},
    "rms_norm": {**_UNARY, "weight?": "tensor", "eps?": "value"},
    "transpose": {**_UNARY, "dim0?": "value", "dim1?": "value"},
}


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
        if names[key] == "tensor" and not (isinstance(value, str) and IDENT.fullmatch(value)):
            args_loc.key(args, key).fail(f"{op}: {key}: got {show(value)}", "a tensor name")
