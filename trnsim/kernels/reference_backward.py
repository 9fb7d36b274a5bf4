"""The numpy references of the backward and optimizer ops (`reference.reference` hands them
here), in float64 from the stored inputs, with PyTorch's formulas (its CPU kernels'): an op
with several outputs returns their list, in `out`'s order."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["backward_reference"]


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid(x):
    with np.errstate(over="ignore"):  # e^-x overflows to inf for x << 0: the sigmoid is 0
        return 1 / (1 + np.exp(-x))


def _gelu_dx(x, approximate):
    if approximate == "tanh":
        k, c = math.sqrt(2 / math.pi), 0.044715
        t = np.tanh(k * (x + c * x**3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x)
    return 0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _layer_norm_backward(g, x, mean, rstd, w, mask):
    """(grad_input, grad_weight, grad_bias) of layer_norm over the last dim, as `mask` asks."""
    d = x.shape[-1]
    mean, rstd = mean.reshape(*x.shape[:-1], 1), rstd.reshape(*x.shape[:-1], 1)
    xhat = (x - mean) * rstd
    gw = g * w if w is not None else g
    a = gw.sum(-1, keepdims=True) / d
    c = (gw * xhat).sum(-1, keepdims=True) / d
    outs = [rstd * (gw - a - xhat * c), (g * xhat).reshape(-1, d).sum(0), g.reshape(-1, d).sum(0)]
    return [o for o, m in zip(outs, mask) if m]


def _batch_norm_backward(val, args):
    """(grad_input, grad_weight, grad_bias) of batch norm over dim 1, as output_mask asks."""
    g, x = val("grad_out"), val("input")
    axes, shape = (0, *range(2, x.ndim)), (1, -1) + (1,) * (x.ndim - 2)
    w = val("weight") if args.get("weight") is not None else np.ones(x.shape[1])
    if args.get("train", True):
        mean, inv = val("save_mean"), val("save_invstd")
    else:
        mean = val("running_mean")
        inv = 1 / np.sqrt(val("running_var") + float(args.get("eps", 1e-5)))
    xhat = (x - mean.reshape(shape)) * inv.reshape(shape)
    gb, gw = g.sum(axis=axes), (g * xhat).sum(axis=axes)
    k = (w * inv).reshape(shape)
    if args.get("train", True):
        m = x.size // x.shape[1]
        gi = k * (g - gb.reshape(shape) / m - xhat * gw.reshape(shape) / m)
    else:
        gi = k * g
    has_w = args.get("weight") is not None
    mask = args.get("output_mask") or [True, has_w, has_w]
    return [o for o, keep in zip((gi, gw, gb), mask) if keep]


def _pool_backward(op, args, val):
    """grad_input of 2-D pooling, of shape input_size."""
    from trnsim.kernels.pooling import window

    g = val("grad_output")
    N, C, Ho, Wo = g.shape
    H, W = args["input_size"][2:]
    win = window(op, args, (N, C, H, W))
    (kh, kw), (sh, sw), (ph, pw) = win.k, win.s, win.p
    out = np.zeros((N, C, H * W))
    if op == "max_pool2d_with_indices_backward":
        idx = val("indices").astype(np.int64).reshape(N * C, -1)
        flat = out.reshape(N * C, -1)
        for p in range(N * C):
            np.add.at(flat[p], idx[p], g.reshape(N * C, -1)[p])
        return out.reshape(N, C, H, W)
    out = np.zeros((N, C, H + 2 * ph, W + 2 * pw))
    div = args.get("divisor_override")
    for i in range(Ho):
        for j in range(Wo):
            r, c = i * sh, j * sw
            if div is not None:
                d = float(div)
            elif args.get("count_include_pad", True):
                d = kh * kw
            else:
                d = (min(r + kh, H + ph) - max(r, ph)) * (min(c + kw, W + pw) - max(c, pw))
            out[:, :, r : r + kh, c : c + kw] += g[:, :, i : i + 1, j : j + 1] / d
    return out[:, :, ph : ph + H, pw : pw + W]


def _nll_loss_backward(go, x, target, weight, reduction, ignore_index, total_weight):
    n, c = x.shape[0] if x.ndim > 1 else 1, x.shape[-1]
    t = target.reshape(-1).astype(np.int64)
    w = weight if weight is not None else np.ones(c)
    keep = t != ignore_index
    scale = np.where(keep, w[np.where(keep, t, 0)], 0.0)
    reduction = {0: "none", 1: "mean", 2: "sum"}.get(reduction, reduction)
    if reduction == "none":
        scale = scale * go.reshape(-1)
    else:
        scale = scale * float(np.asarray(go).reshape(-1)[0])
        if reduction == "mean":
            scale = scale / float(np.asarray(total_weight).reshape(-1)[0])
    out = np.zeros((n, c))
    out[np.arange(n)[keep], t[keep]] = -scale[keep]
    return out.reshape(x.shape)


def _lerp(x, end, w):
    return x + w * (end - x) if w < 0.5 else end - (end - x) * (1 - w)


def _sdpa_backward(go, q, k, v, causal, scale):
    """(dq, dk, dv) of softmax(q k^T scale + mask) v, grouped-query heads summed into k, v."""
    group = q.shape[-3] // k.shape[-3]
    kk, vv = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    scale = scale or 1 / math.sqrt(q.shape[-1])
    s = np.matmul(q, np.swapaxes(kk, -1, -2)) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dv = np.matmul(np.swapaxes(p, -1, -2), go)
    dp = np.matmul(go, np.swapaxes(vv, -1, -2))
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    dq = np.matmul(ds, kk)
    dk = np.matmul(np.swapaxes(ds, -1, -2), q)

    def fold(t):  # the query heads of one kv head, summed
        return t.reshape(*t.shape[:-3], k.shape[-3], group, *t.shape[-2:]).sum(-3)

    return [dq, fold(dk), fold(dv)]


def _num(args, key, default=None) -> float:
    v = args.get(key, default)
    return float(default if v is None else v)


def _elu_dx(val, args):
    a, s, i = (_num(args, k, 1.0) for k in ("alpha", "scale", "input_scale"))
    z = val("self_or_result")
    if args.get("is_result"):
        return np.where(z <= 0, i * (z + a * s), s)
    with np.errstate(over="ignore"):
        return np.where(z <= 0, i * a * s * np.exp(i * np.minimum(z, 0)), s)


def _softplus_dx(val, args):
    z = val("x") * _num(args, "beta", 1.0)
    return np.where(z > _num(args, "threshold", 20.0), 1.0, _sigmoid(z))


_ACTIVATIONS = {  # op -> f'(...) as PyTorch's CPU kernels take it
    "leaky_relu_backward": lambda val, a: np.where(val("x") > 0, 1.0,
                                                   _num(a, "negative_slope", 0.01)),
    "hardsigmoid_backward": lambda val, a: np.where(np.abs(val("x")) < 3, 1 / 6, 0.0),
    "hardswish_backward": lambda val, a: np.where(
        val("x") <= -3, 0.0, np.where(val("x") < 3, val("x") / 3 + 0.5, 1.0)
    ),
    "hardtanh_backward": lambda val, a: np.where(
        (val("x") <= _num(a, "min_val")) | (val("x") >= _num(a, "max_val")), 0.0, 1.0
    ),
    "elu_backward": _elu_dx,
    "softplus_backward": _softplus_dx,
}  # fmt: skip


def backward_reference(op: str, args: dict[str, Any], arrays: dict[str, np.ndarray]):
    """The expected output (or list of outputs) of backward or optimizer op `op`."""

    def val(k, i=None):
        v = args.get(k)
        if i is not None and isinstance(v, list):
            v = v[i]
        if v is None:
            return None
        return arrays[v].astype(np.float64) if isinstance(v, str) else float(v)

    if op.startswith("_foreach_"):
        base = op[len("_foreach_") :]
        items = []
        for i in range(len(args["x"])):
            item = {"x": val("x", i)}
            for k in ("other", "tensor1", "tensor2", "tensors1", "value"):
                if k in args:
                    item[k] = val(k, i)
            items.append(_foreach_item(base, item, float(args.get("alpha", 1.0)), args))
        return items
    return _one(op, args, val)


def _foreach_item(base: str, a: dict, alpha: float, args: dict):
    x = a["x"]
    if base == "sqrt":
        return np.sqrt(x)
    if base in ("add", "mul", "div"):
        o = a["other"]
        if base == "add":
            return x + (alpha * o if isinstance(o, np.ndarray) else o)
        return x * o if base == "mul" else x / o
    if base == "lerp":
        return _lerp(x, a["tensors1"], float(args["weight"]))
    value = a.get("value", 1.0)
    q = a["tensor1"] / a["tensor2"] if base == "addcdiv" else a["tensor1"] * a["tensor2"]
    return x + value * q


def _one(op: str, args: dict, val):
    if op == "threshold_backward":
        return np.where(val("x") <= float(args["threshold"]), 0.0, val("grad_output"))
    if op == "gelu_backward":
        return val("grad_output") * _gelu_dx(val("x"), args.get("approximate", "none"))
    if op == "silu_backward":
        s = _sigmoid(val("x"))
        return val("grad_output") * s * (1 + val("x") * (1 - s))
    if op == "sigmoid_backward":
        y = val("output")
        return val("grad_output") * y * (1 - y)
    if op == "tanh_backward":
        return val("grad_output") * (1 - val("output") ** 2)
    if op in _ACTIVATIONS:
        return val("grad_output") * _ACTIVATIONS[op](val, args)
    if op == "_softmax_backward_data":
        g, y = val("grad_output"), val("output")
        return y * (g - (g * y).sum(axis=args.get("dim", -1), keepdims=True))
    if op == "_log_softmax_backward_data":
        g, y = val("grad_output"), val("output")
        return g - np.exp(y) * g.sum(axis=args.get("dim", -1), keepdims=True)
    if op == "native_layer_norm_backward":
        w = val("weight")
        mask = args.get("output_mask") or [True, w is not None, args.get("bias") is not None]
        x = val("input")
        return _layer_norm_backward(val("grad_out"), x, val("mean"), val("rstd"), w, mask)
    if op == "native_batch_norm_backward":
        return _batch_norm_backward(val, args)
    if op in ("max_pool2d_with_indices_backward", "avg_pool2d_backward"):
        return _pool_backward(op, args, val)
    if op == "embedding_dense_backward":
        g, idx = val("grad_output"), val("indices").astype(np.int64).reshape(-1)
        d = g.shape[-1]
        out = np.zeros((int(args["num_weights"]), d))
        keep = idx != args.get("padding_idx", -1)
        np.add.at(out, idx[keep], g.reshape(-1, d)[keep])
        return out
    if op == "nll_loss_backward":
        return _nll_loss_backward(
            val("grad_output"), val("x"), val("target"), val("weight"),
            args.get("reduction", "mean"), int(args.get("ignore_index", -100)),
            val("total_weight"),
        )  # fmt: skip
    if op == "scaled_dot_product_attention_backward":
        return _sdpa_backward(
            val("grad_out"), val("q"), val("k"), val("v"), bool(args.get("is_causal")),
            args.get("scale"),
        )  # fmt: skip
    if op in ("addcdiv", "addcmul"):
        item = {k: val(k) for k in ("x", "tensor1", "tensor2")}
        item["value"] = 1.0 if args.get("value") is None else float(args["value"])
        return _foreach_item(op, item, 1.0, args)
    if op == "lerp":
        return _lerp(val("x"), val("end"), float(args["weight"]))
    raise KeyError(op)
