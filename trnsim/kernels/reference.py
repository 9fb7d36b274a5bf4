"""Each lowered op's numpy reference: what its output should be, computed in float64 from the
input values as stored (so only the kernel's own rounding counts against it), and the tolerance
a correct kernel meets for the output's dtype."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trnsim.trace.ops import OPS

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


def _param(args, key, default):
    v = args.get(key)
    return float(default if v is None else v)


def activation(op, args, arrays):
    """The activations with parameters, as PyTorch's CPU kernels compute them."""
    x = _val(args, arrays)("x")
    if op == "leaky_relu":
        return np.where(x > 0, x, x * _param(args, "negative_slope", 0.01))
    if op in ("hardsigmoid", "hardswish"):
        h = np.minimum(np.maximum(x + 3, 0), 6) / 6
        return h if op == "hardsigmoid" else x * h
    if op == "elu":
        a, s, i = (_param(args, k, 1.0) for k in ("alpha", "scale", "input_scale"))
        with np.errstate(over="ignore"):
            return np.where(x > 0, s * x, s * a * np.expm1(i * np.minimum(x, 0)))
    if op == "hardtanh":
        return np.clip(x, _param(args, "min_val", -1.0), _param(args, "max_val", 1.0))
    if op == "softplus":
        beta, threshold = _param(args, "beta", 1.0), _param(args, "threshold", 20.0)
        return np.where(x * beta > threshold, x, np.logaddexp(0, x * beta) / beta)
    raise KeyError(op)


def batch_norm(op, args, arrays):
    """native_batch_norm: [out, save_mean, save_invstd] and, given running statistics, them
    updated (stored where `out` names them) in training; [out] in inference."""
    val = _val(args, arrays)
    x = val("input")
    axes = (0, *range(2, x.ndim))

    def channel(k, default):  # a [C] argument, shaped to broadcast over x
        v = val(k) if args.get(k) is not None else np.full(x.shape[1], default)
        return v.reshape((1, -1) + (1,) * (x.ndim - 2))

    w, b, eps = channel("weight", 1.0), channel("bias", 0.0), float(args.get("eps", 1e-5))
    if not args.get("training", True):
        mean, var = channel("running_mean", 0.0), channel("running_var", 1.0)
        return [(x - mean) / np.sqrt(var + eps) * w + b]
    mean, var = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    outs = [(x - mean) / np.sqrt(var + eps) * w + b, mean.ravel(), 1 / np.sqrt(var.ravel() + eps)]
    if args.get("running_mean") is not None:  # (out names them when it updates them)
        m, n = float(args.get("momentum", 0.1)), x.size // x.shape[1]
        for k, stat in (("running_mean", mean), ("running_var", var * n / max(1, n - 1))):
            outs.append((1 - m) * channel(k, 0.0).ravel() + m * stat.ravel())
    return outs


def pool(op, args, arrays):
    """max_pool2d_with_indices ([out, indices], the first maximum in row-major order) or
    avg_pool2d, over windows of x's last two dims (dilation 1, ceil_mode false)."""
    from trnsim.kernels.pooling import window

    x = _val(args, arrays)("x")
    win = window(op, args, x.shape)
    (kh, kw), (sh, sw), (ph, pw) = win.k, win.s, win.p
    H, W = x.shape[2:]
    Ho, Wo = win.out(H, W)
    pad = -np.inf if op == "max_pool2d_with_indices" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=pad)
    pos = np.pad(np.arange(H * W).reshape(H, W), ((ph, ph), (pw, pw)), constant_values=-1)
    valid = np.pad(np.ones((H, W)), ((ph, ph), (pw, pw)))
    wins, where, count = [], [], []
    for a in range(kh):
        for c in range(kw):
            rows, cols = slice(a, a + sh * (Ho - 1) + 1, sh), slice(c, c + sw * (Wo - 1) + 1, sw)
            wins.append(xp[:, :, rows, cols])
            where.append(pos[rows, cols])
            count.append(valid[rows, cols])
    wins = np.stack(wins)
    if op == "max_pool2d_with_indices":
        first = np.argmax(wins, axis=0)[None]  # the first maximum, taps in row-major order
        where = np.broadcast_to(np.stack(where)[:, None, None], wins.shape)
        return [wins.max(axis=0), np.take_along_axis(where, first, 0)[0]]
    total = wins.sum(axis=0)
    if args.get("divisor_override") is not None:
        return total / float(args["divisor_override"])
    if args.get("count_include_pad", True):
        return total / (kh * kw)
    return total / np.sum(count, axis=0)


def _softmax(x, dim):
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def _log_softmax(x, dim):
    m = x - x.max(axis=dim, keepdims=True)
    return m - np.log(np.exp(m).sum(axis=dim, keepdims=True))


def reference(op: str, args: dict[str, Any], arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The expected `out` of op `op` with `args` (tensor names or numbers) on `arrays` (for
    `split` and the ops of several outputs, the list of them), by the op's record's reference
    (`trace.ops.Op.reference`). KeyError for an op not in the table."""
    return OPS[op].reference_fn(op, args, arrays)


def _val(args, arrays):
    def val(k):
        v = args[k]
        return arrays[v].astype(np.float64) if isinstance(v, str) else float(v)

    return val


def matmul(op, args, arrays):
    val = _val(args, arrays)
    return np.matmul(val("a"), val("b"))


def where(op, args, arrays):
    val = _val(args, arrays)
    return np.where(val("condition") != 0, val("a"), val("other"))


def masked_fill(op, args, arrays):
    val = _val(args, arrays)
    return np.where(val("mask") != 0, float(args["value"]), val("x"))


def transpose(op, args, arrays):
    return np.swapaxes(_val(args, arrays)("x"), args.get("dim0", -2), args.get("dim1", -1))


def linear(op, args, arrays):
    val = _val(args, arrays)
    y = np.matmul(val("x"), val("weight").T)
    return y + val("bias") if args.get("bias") is not None else y


def unary(op, args, arrays):
    return _UNARY[op](_val(args, arrays)("x"))


def binary(op, args, arrays):
    val = _val(args, arrays)
    return _BINARY[op](val("a"), val("b"))


def softmax(op, args, arrays):
    f = _log_softmax if op == "log_softmax" else _softmax
    return f(_val(args, arrays)("x"), args.get("dim", -1))


def reduction(op, args, arrays):
    f = {"sum": np.sum, "mean": np.mean, "amax": np.max, "amin": np.min}[op]
    x = _val(args, arrays)("x")
    return f(x, axis=_axes(args.get("dim", -1)), keepdims=bool(args.get("keepdim")))


def norm(op, args, arrays):
    val = _val(args, arrays)
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


def attention(op, args, arrays):
    val = _val(args, arrays)
    q, k, v = val("q"), val("k"), val("v")
    group = q.shape[-3] // k.shape[-3]
    k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    scale = args.get("scale") or 1 / math.sqrt(q.shape[-1])
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if args.get("is_causal"):
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    return np.matmul(_softmax(s, -1), v)


def _axes(dim):
    """numpy's axis for a reduction's `dim` (None or [] is every dim)."""
    return None if dim is None or dim == [] else tuple(dim) if isinstance(dim, list) else dim


def argmax(op, args, arrays):
    x, dim = _val(args, arrays)("x"), args.get("dim", -1)
    i = np.argmax(x, axis=dim)
    return np.expand_dims(i, dim) if args.get("keepdim") else i


def contiguous(op, args, arrays):
    return _val(args, arrays)("x")


def permute(op, args, arrays):
    return np.transpose(_val(args, arrays)("x"), args["dims"])


def cat(op, args, arrays):
    parts = [arrays[n].astype(np.float64) for n in args["tensors"]]
    return np.concatenate(parts, axis=args.get("dim", 0))


def split(op, args, arrays):
    x, dim, size = _val(args, arrays)("x"), args.get("dim", 0), args["split_size"]
    n = x.shape[dim]
    sizes = [min(size, n - a) for a in range(0, n, size)] if isinstance(size, int) else size
    return np.split(x, np.cumsum(sizes)[:-1], axis=dim)


def embedding(op, args, arrays):
    val = _val(args, arrays)
    return val("weight")[val("indices").astype(np.int64)]


def loss(op, args, arrays):
    val = _val(args, arrays)
    x, t = val("input"), val("target").astype(np.int64)
    logp = _log_softmax(x, -1) if op == "cross_entropy" else x
    loss = -logp[np.arange(len(t)), t]
    red = args.get("reduction", "mean")
    return loss if red == "none" else loss.sum() / (len(t) if red == "mean" else 1)


def addmm(op, args, arrays):
    val = _val(args, arrays)
    mm = np.matmul(val("mat1"), val("mat2"))
    beta, alpha = float(args.get("beta", 1)), float(args.get("alpha", 1))
    return alpha * mm + (beta * val("input") if beta else 0.0)


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


def mismatched(expected: np.ndarray, got: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    """The elements of `got` that do not match `expected` (both float64, same shape): a NaN
    where the other has none, an infinity that is not the same infinity, or finite values
    further apart than rtol of the expected value plus atol of the largest finite expected
    magnitude. (NaN never compares unequal, so a plain tolerance test passes a NaN output; an
    infinite reference, log_softmax of a masked -inf, would make the scale infinite.)"""
    nan_e, nan_g = np.isnan(expected), np.isnan(got)
    finite = np.isfinite(expected) & np.isfinite(got)
    fin = np.abs(expected[np.isfinite(expected)])
    scale = max(1.0, float(fin.max())) if fin.size else 1.0
    with np.errstate(invalid="ignore"):
        far = np.abs(got - expected) > atol * scale + rtol * np.abs(expected)
        other = ~finite & ~(nan_e | nan_g) & (got != expected)  # an infinity against another
    return (nan_e != nan_g) | other | (finite & far)


def errors(expected: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    """(max abs, max rel) error of `got` over the elements both hold finite; inf when a
    non-finite element differs (see `mismatched`)."""
    finite = np.isfinite(expected) & np.isfinite(got)
    same = (expected == got) | (np.isnan(expected) & np.isnan(got))
    if (~finite & ~same).any():
        return float("inf"), float("inf")
    e, g = expected[finite], got[finite]
    err = np.abs(g - e)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(e != 0, err / np.abs(e), 0.0)
    return (float(err.max()) if err.size else 0.0), (float(rel.max()) if rel.size else 0.0)
