"""Each lowered op's numpy reference: what its output should be, computed in float64 from the
input values as stored (so only the kernel's own rounding counts against it), and the tolerance
a correct kernel meets for the output's dtype."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trnsim.kernels.reference_backward import BACKWARD_REFERENCES, backward_reference

__all__ = ["reference", "tolerance"]


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _gelu(x):
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


_UNARY = {
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, 0),
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "silu": lambda x: x * _sigmoid(x),
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "square": np.square,
    "abs": np.abs,
    "reciprocal": lambda x: 1 / x,
    "sin": np.sin,
    "cos": np.cos,
    "erf": _erf,
    "copy": lambda x: x,
    "neg": np.negative,
}
_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "pow": np.power,
}


def _softmax(x, dim):
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def _log_softmax(x, dim):
    m = x - x.max(axis=dim, keepdims=True)
    return m - np.log(np.exp(m).sum(axis=dim, keepdims=True))


def reference(op: str, args: dict[str, Any], arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The expected `out` of op `op` with `args` (tensor names or numbers) on `arrays`; for
    `split`, the list of its outputs."""

    def val(k):
        v = args[k]
        return arrays[v].astype(np.float64) if isinstance(v, str) else float(v)

    if op in ("matmul", "mm", "bmm"):
        return np.matmul(val("a"), val("b"))
    if op == "where":
        return np.where(val("condition") != 0, val("a"), val("other"))
    if op == "masked_fill":
        return np.where(val("mask") != 0, float(args["value"]), val("x"))
    if op == "transpose":
        return np.swapaxes(val("x"), args.get("dim0", -2), args.get("dim1", -1))
    if op == "linear":
        y = np.matmul(val("x"), val("weight").T)
        return y + val("bias") if args.get("bias") is not None else y
    if op in _UNARY:
        return _UNARY[op](val("x"))
    if op in _BINARY:
        return _BINARY[op](val("a"), val("b"))
    if op == "softmax":
        return _softmax(val("x"), args.get("dim", -1))
    if op == "log_softmax":
        return _log_softmax(val("x"), args.get("dim", -1))
    if op in ("sum", "mean", "amax", "amin"):
        f = {"sum": np.sum, "mean": np.mean, "amax": np.max, "amin": np.min}[op]
        return f(val("x"), axis=_axes(args.get("dim", -1)), keepdims=bool(args.get("keepdim")))
    if op in _MORE:
        return _MORE[op](args, val, arrays)
    if op in ("layer_norm", "rms_norm"):
        x = val("x")
        eps = float(args.get("eps", 1e-5))
        if op == "layer_norm":
            x = x - x.mean(axis=-1, keepdims=True)
        y = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
        if args.get("weight") is not None:
            y = y * val("weight")
        if args.get("bias") is not None:
            y = y + val("bias")
        return y
    if op == "scaled_dot_product_attention":
        q, k, v = val("q"), val("k"), val("v")
        group = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
        scale = args.get("scale") or 1 / math.sqrt(q.shape[-1])
        s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
        if args.get("is_causal"):
            s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
        return np.matmul(_softmax(s, -1), v)
    if op in BACKWARD_REFERENCES:  # the backward and optimizer ops
        return backward_reference(op, args, arrays)
    raise KeyError(op)


def _axes(dim):
    """numpy's axis for a reduction's `dim` (None or [] is every dim)."""
    return None if dim is None or dim == [] else tuple(dim) if isinstance(dim, list) else dim


def _argmax(args, val, arrays):
    x, dim = val("x"), args.get("dim", -1)
    i = np.argmax(x, axis=dim)
    return np.expand_dims(i, dim) if args.get("keepdim") else i


def _split(args, val, arrays):
    x, dim, size = val("x"), args.get("dim", 0), args["split_size"]
    n = x.shape[dim]
    sizes = [min(size, n - a) for a in range(0, n, size)] if isinstance(size, int) else size
    return np.split(x, np.cumsum(sizes)[:-1], axis=dim)


def _loss(op):
    def f(args, val, arrays):
        x, t = val("input"), val("target").astype(np.int64)
        logp = _log_softmax(x, -1) if op == "cross_entropy" else x
        loss = -logp[np.arange(len(t)), t]
        red = args.get("reduction", "mean")
        return loss if red == "none" else loss.sum() / (len(t) if red == "mean" else 1)

    return f


def _addmm(args, val, arrays):
    mm = np.matmul(val("mat1"), val("mat2"))
    beta, alpha = float(args.get("beta", 1)), float(args.get("alpha", 1))
    return alpha * mm + (beta * val("input") if beta else 0.0)


_MORE = {  # op -> f(args, val, arrays)
    "argmax": _argmax,
    "contiguous": lambda args, val, arrays: val("x"),
    "permute": lambda args, val, arrays: np.transpose(val("x"), args["dims"]),
    "cat": lambda args, val, arrays: np.concatenate(
        [arrays[n].astype(np.float64) for n in args["tensors"]], axis=args.get("dim", 0)
    ),
    "split": _split,
    "embedding": lambda args, val, arrays: val("weight")[val("indices").astype(np.int64)],
    "addmm": _addmm,
    "cross_entropy": _loss("cross_entropy"),
    "nll_loss": _loss("nll_loss"),
}


def tolerance(dtype_name: str) -> tuple[float, float]:
    """(rtol, atol relative to the reference's largest magnitude) a correct kernel meets
    when it writes `dtype_name`: a few units in the last place of the output's format (the
    engines compute in fp32 and round once on the way out, ScalarE's functions are
    approximations within that)."""
    eps = {
        "float32": 2.0**-23,
        "bfloat16": 2.0**-8,
        "float16": 2.0**-11,
        "float8_e4m3": 2.0**-3,
        "float8_e5m2": 2.0**-2,
    }.get(dtype_name, 0.0)
    return max(8 * eps, 1e-5), max(8 * eps, 1e-5)
