"""Which kernel-library ops (`trnsim/trace/ops.py`) an aten op is, with which tensors.

`library_ops(base, overload, args, kwargs, r)` gives ([OpSpec], {name: tensor}) for an aten op
the library lowers, else None (the op is then timed by the roofline estimate). Each mapper
reads aten's schema: positional arguments as aten passes them (kwargs where aten's Python
signature makes them keyword-only), the result `r` (a tuple for several outputs, the first
argument for an in-place op, nothing for an in-place `_foreach_*`). Tensors are named in the
dict; the timer only needs their shapes and dtypes, so an intermediate of a composition, or an
out of another shape than aten's (a loss's [1] for aten's 0-dim), is a `meta` tensor.
"""

from __future__ import annotations

import itertools
import math

import torch

from trnsim.trace.program import OpSpec

Tensor = torch.Tensor

UNARY = {
    "exp": "exp", "log": "log", "tanh": "tanh", "sigmoid": "sigmoid", "relu": "relu",
    "silu": "silu", "sqrt": "sqrt", "rsqrt": "rsqrt", "abs": "abs", "reciprocal": "reciprocal",
    "sin": "sin", "cos": "cos", "erf": "erf", "neg": "neg",
}  # fmt: skip
BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "maximum",
          "minimum": "minimum", "pow": "pow"}  # fmt: skip
COMMUTE = ("add", "mul", "maximum", "minimum")  # a number first: swapped
REDUCE = ("sum", "mean", "amax", "amin")
REDUCTION = {0: "none", 1: "mean", 2: "sum"}  # aten's reduction enum
MAPPERS: dict = {}
FUSED_LOG_SOFTMAX_ROWS = 64  # rows from which log_softmax's backward is the library's one op


def library_ops(base: str, overload: str, args, kwargs, r):
    """The kernel library's ops (and their tensors) for aten op `base.overload`, or None."""
    name = base.rstrip("_")
    fn = MAPPERS.get(name)
    if fn is None or not args:
        return None
    out = r[0] if isinstance(r, (tuple, list)) and r else r
    if not isinstance(out, Tensor) and not name.startswith("_foreach"):
        return None
    return fn(name, overload, list(args), kwargs, out, r)


def _maps(*names):
    def deco(fn):
        for n in names:
            MAPPERS[n] = fn
        return fn

    return deco


def _meta(shape, dt) -> Tensor:
    return torch.empty(tuple(shape), dtype=dt, device="meta")


def _arg(args, kwargs, i: int, name: str, default=None):
    if i < len(args):
        return args[i]
    return kwargs.get(name, default)


def _last(dim, ndim: int) -> bool:
    if isinstance(dim, (list, tuple)):
        if len(dim) != 1:
            return False
        dim = dim[0]
    return dim is not None and dim % max(ndim, 1) == ndim - 1


def _one(op: str, args: dict, tensors: dict):
    return [OpSpec(op, args)], tensors


def _num(v) -> float:
    return float(v.item() if isinstance(v, Tensor) else v)


# -- forward ops -----------------------------------------------------------------------------


@_maps("mm", "bmm")
def _mm(name, ov, a, kw, out, r):
    if ov not in ("default", "out"):
        return None
    return _one("matmul", {"a": "a", "b": "b", "out": "out"}, {"a": a[0], "b": a[1], "out": out})


@_maps("addmm")
def _addmm(name, ov, a, kw, out, r):
    if ov not in ("default", "out"):
        return None
    t = {"input": a[0], "mat1": a[1], "mat2": a[2], "out": out}
    args = {k: k for k in t}
    args.update(beta=_num(kw.get("beta", 1)), alpha=_num(kw.get("alpha", 1)))
    return _one("addmm", args, t)


@_maps(*UNARY)
def _unary(name, ov, a, kw, out, r):
    return _one(UNARY[name], {"x": "x", "out": "out"}, {"x": a[0], "out": out})


@_maps("gelu")
def _gelu(name, ov, a, kw, out, r):
    approx = _arg(a, kw, 1, "approximate", "none")
    op = "gelu_tanh" if approx == "tanh" else "gelu"
    return _one(op, {"x": "x", "out": "out"}, {"x": a[0], "out": out})


@_maps(*BINARY)
def _binary(name, ov, a, kw, out, r):
    if ov not in ("Tensor", "Scalar", "default", "out", "Tensor_Scalar", "Scalar_out"):
        return None
    if _num(kw.get("alpha", 1)) != 1 or kw.get("rounding_mode") is not None:
        return None
    x, y = a[0], a[1]
    if not isinstance(x, Tensor) or not x.dim():
        if name not in COMMUTE or not isinstance(y, Tensor):
            return None
        x, y = y, x
    t = {"a": x, "out": out}
    if isinstance(y, Tensor) and y.dim():
        t["b"] = y
        _trailing(t)
        return _per_item(BINARY[name], t) or _one(
            BINARY[name], {"a": "a", "b": "b", "out": "out"}, t
        )
    return _one(BINARY[name], {"a": "a", "b": _num(y), "out": "out"}, t)


def _trailing(t: dict) -> None:
    """A tensor of out's trailing dims broadcast over its leading ones ([T, D] over [B, T, D]:
    GPT-2's learned positions, a rotary table over [B, H, T, hd], a mask over attention's
    scores) is a row broadcast of out seen as [rows, T x D]: the operands in `t` become those
    views (contiguous tensors only; values and bytes are the same)."""
    a, b, out = t["a"], t["b"], t["out"]
    small = b if tuple(a.shape) == tuple(out.shape) else a
    full = [v for v in (a, b) if v is not small]
    dims = list(small.shape)
    while dims and dims[0] == 1:
        dims.pop(0)
    k = len(dims)
    if (len(full) != 1 or k < 2 or k >= out.dim() or tuple(out.shape[-k:]) != tuple(dims)
            or not all(v.is_contiguous() for v in (a, b, out))):  # fmt: skip
        return
    n = small.numel()
    for key, v in t.items():
        t[key] = v.view(n) if v is small else v.view(-1, n)


PER_ITEM = 64  # leading items at most of a broadcast lowered as one op per item


def _per_item(op: str, t: dict):
    """A tensor [B, 1, ..., 1, T..] over out [B, H, .., T..] (BERT's padding mask [B, 1, 1, T]
    added to attention's scores [B, H, T, T]): one library op per leading item, each a row
    broadcast of [H x .., T..] views (contiguous tensors, PER_ITEM items at most); None
    when `t` is not so."""
    a, b, out = t["a"], t["b"], t["out"]
    small = b if tuple(a.shape) == tuple(out.shape) else a
    full = [v for v in (a, b) if v is not small]
    if len(full) != 1 or small.dim() != out.dim() or small.dim() < 3:
        return None
    shape, lead = tuple(small.shape), 0
    while lead < out.dim() and shape[lead] == out.shape[lead] != 1:
        lead += 1
    rest = lead
    while rest < out.dim() and shape[rest] == 1 != out.shape[rest]:
        rest += 1
    items = math.prod(out.shape[:lead])
    if (not lead or rest == lead or rest == out.dim() or shape[rest:] != tuple(out.shape[rest:])
            or items > PER_ITEM or not all(v.is_contiguous() for v in (a, b, out))):  # fmt: skip
        return None
    n = math.prod(out.shape[rest:])
    ops, tensors = [], {}
    for i, idx in enumerate(itertools.product(*(range(k) for k in out.shape[:lead]))):
        for key, v in t.items():
            tensors[f"{key}{i}"] = v[idx].reshape(n) if v is small else v[idx].view(-1, n)
        ops.append(OpSpec(op, {k: f"{k}{i}" for k in t}))
    return ops, tensors


@_maps("_softmax", "_log_softmax")
def _softmax(name, ov, a, kw, out, r):
    if not _last(a[1], a[0].dim()):
        return None
    return _one(name[1:], {"x": "x", "out": "out", "dim": -1}, {"x": a[0], "out": out})


@_maps(*REDUCE)
def _reduce(name, ov, a, kw, out, r):
    x = a[0]
    whole = name in ("sum", "mean") and ov == "default"  # sum(x): every dim
    dim = None if whole else _arg(a, kw, 1, "dim")
    keep = bool(_arg(a, kw, 2, "keepdim", False)) if dim is not None else False
    if isinstance(dim, (list, tuple)):
        dim = list(dim) or None  # [] reduces every dim
    args = {"x": "x", "out": "out", "dim": dim, "keepdim": keep}
    return _one(name, args, {"x": x, "out": out})


@_maps("argmax")
def _argmax(name, ov, a, kw, out, r):
    dim = _arg(a, kw, 1, "dim")
    if dim is None:
        return None  # over all dims: not lowered
    keep = bool(_arg(a, kw, 2, "keepdim", False))
    return _one("argmax", {"x": "x", "out": "out", "dim": dim, "keepdim": keep},
                {"x": a[0], "out": out})  # fmt: skip


@_maps("native_layer_norm")
def _layer_norm(name, ov, a, kw, out, r):
    if len(a[1]) != 1:
        return None
    t = {"x": a[0], "out": out}
    args = {"x": "x", "out": "out", "eps": float(a[4])}
    for k, v in (("weight", a[2]), ("bias", a[3])):
        if v is not None:
            t[k], args[k] = v, k
    return _one("layer_norm", args, t)


@_maps("where")
def _where(name, ov, a, kw, out, r):
    if ov not in ("self", "self_out"):
        return None
    t = {"condition": a[0], "out": out}
    args = {"condition": "condition", "out": "out"}
    for k, v in (("a", a[1]), ("other", a[2])):
        if isinstance(v, Tensor) and v.dim():
            t[k], args[k] = v, k
        else:  # a number, or a 0-dim tensor (a scalar)
            args[k] = _num(v)
    return _one("where", args, t)


@_maps("masked_fill")
def _masked_fill(name, ov, a, kw, out, r):
    if ov not in ("Scalar", "Tensor"):
        return None
    t = {"x": a[0], "mask": a[1], "out": out}
    return _one("masked_fill", {"x": "x", "mask": "mask", "value": _num(a[2]), "out": "out"}, t)


@_maps("index_select")
def _index_select(name, ov, a, kw, out, r):
    """An embedding lookup reaches a device outside PyTorch as index_select(weight, 0, ids)."""
    if a[0].dim() != 2 or a[1] % 2 != 0 or a[2].dim() != 1:
        return None
    t = {"weight": a[0], "indices": a[2], "out": out}
    return _one("embedding", {k: k for k in t}, t)


@_maps("cat")
def _cat(name, ov, a, kw, out, r):
    ts = [x for x in a[0] if x.numel()]  # PyTorch skips empty inputs
    if not ts:
        return None
    t = {f"t{i}": x for i, x in enumerate(ts)}
    names = list(t)
    t["out"] = out
    return _one("cat", {"tensors": names, "out": "out", "dim": _arg(a, kw, 1, "dim", 0)}, t)


def permuted(x: Tensor):
    """(the dense tensor, dims) with x == dense.permute(dims): a view of a contiguous
    tensor's permutation; None for other strides (gaps, broadcasts)."""
    order = sorted(range(x.dim()), key=lambda d: (-x.stride()[d], d))
    shape = [x.shape[d] for d in order]
    step = 1
    for d in reversed(order):
        if x.shape[d] != 1 and x.stride()[d] != step:
            return None
        step *= x.shape[d]
    return _meta(shape, x.dtype), [order.index(i) for i in range(x.dim())]


def copy_ops(x: Tensor, out: Tensor):
    """A copy of x into contiguous out of its shape: `contiguous` (a cast when the dtypes
    differ), or the `permute` of the contiguous tensor x is a view of."""
    if x.is_contiguous():
        return _one("contiguous", {"x": "x", "out": "out"}, {"x": x, "out": out})
    p = permuted(x)
    if p is None or x.dtype != out.dtype:
        return None
    return _one("permute", {"x": "x", "out": "out", "dims": p[1]}, {"x": p[0], "out": out})


# -- activations with parameters (kernels.activations), their backward ops -----------------

ACTIVATIONS = {  # aten op -> its parameters after self, with aten's defaults
    "leaky_relu": (("negative_slope", 0.01),), "hardswish": (), "hardsigmoid": (),
    "elu": (("alpha", 1.0), ("scale", 1.0), ("input_scale", 1.0)),
    "hardtanh": (("min_val", -1.0), ("max_val", 1.0)),
    "softplus": (("beta", 1.0), ("threshold", 20.0)),
}  # fmt: skip


@_maps(*ACTIVATIONS)
def _activation(name, ov, a, kw, out, r):
    args = {"x": "x", "out": "out"}
    for i, (k, default) in enumerate(ACTIVATIONS[name], start=1):
        args[k] = _num(_arg(a, kw, i, k, default))
    return _one(name, args, {"x": a[0], "out": out})


@_maps(*(f"{n}_backward" for n in ACTIVATIONS if n != "elu"))
def _activation_backward(name, ov, a, kw, out, r):
    t = {"grad_output": a[0], "x": a[1], "out": out}
    args = {k: k for k in t}
    for i, (k, _) in enumerate(ACTIVATIONS[name[: -len("_backward")]], start=2):
        args[k] = _num(_arg(a, kw, i, k))
    if name == "leaky_relu_backward":
        args["self_is_result"] = bool(_arg(a, kw, 3, "self_is_result", False))
    return _one(name, args, t)


@_maps("elu_backward")
def _elu_backward(name, ov, a, kw, out, r):
    t = {"grad_output": a[0], "self_or_result": a[5], "out": out}
    args = {k: k for k in t}
    for i, k in enumerate(("alpha", "scale", "input_scale"), start=1):
        args[k] = _num(a[i])
    args["is_result"] = bool(a[4])
    return _one(name, args, t)


# -- batch norm (kernels.batch_norm) ----------------------------------------------------------


@_maps("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training")
def _batch_norm(name, ov, a, kw, out, r):
    """(out, save_mean, save_invstd); in training the running statistics, when given, are
    updated in place (the library's out names them too). In inference aten's save_mean and
    save_invstd are empty: out alone."""
    if name == "_native_batch_norm_legit_no_training":
        a = [*a[:5], False, *a[5:]]  # (input, weight, bias, rm, rv, momentum, eps)
    elif ov == "no_stats":
        a = [*a[:3], None, None, *a[3:]]  # (input, weight, bias, training, momentum, eps)
    x, w, bias, rm, rv, training, momentum, eps = a[:8]
    t = {"input": x, "out": out}
    args = {"input": "input", "training": bool(training), "momentum": _num(momentum),
            "eps": _num(eps)}  # fmt: skip
    for k, v in (("weight", w), ("bias", bias), ("running_mean", rm), ("running_var", rv)):
        if v is not None:
            t[k], args[k] = v, k
    outs = ["out"]
    if training:
        t["save_mean"], t["save_invstd"] = r[1], r[2]
        outs += ["save_mean", "save_invstd"]
        if rm is not None and rv is not None:
            outs += ["running_mean", "running_var"]
    args["out"] = outs
    return _one("native_batch_norm", args, t)


@_maps("native_batch_norm_backward")
def _batch_norm_backward(name, ov, a, kw, out, r):
    g, x, w, rm, rv, sm, si, train, eps, mask = a[:10]
    t = {"grad_out": g, "input": x}
    args = {"grad_out": "grad_out", "input": "input", "train": bool(train), "eps": _num(eps)}
    for k, v in (("weight", w), ("running_mean", rm), ("running_var", rv), ("save_mean", sm),
                 ("save_invstd", si)):  # fmt: skip
        if v is not None:
            t[k], args[k] = v, k
    outs = []
    for k, v in zip(("grad_input", "grad_weight", "grad_bias"), r):
        if v is not None:
            t[k] = v
            outs.append(k)
    args.update(output_mask=[v is not None for v in r], out=outs)
    return [OpSpec("native_batch_norm_backward", args)], t


# -- 2-D pooling (kernels.pooling) -----------------------------------------------------------


def _window(a, kw, first: int, names: tuple) -> dict:
    """The pooling arguments `names` from position `first` (aten's defaults when absent)."""
    defaults = {"stride": [], "padding": 0, "dilation": 1, "ceil_mode": False,
                "count_include_pad": True, "divisor_override": None}  # fmt: skip
    out = {}
    for i, k in enumerate(names, start=first):
        v = _arg(a, kw, i, k, defaults.get(k))
        if v is not None:
            out[k] = list(v) if isinstance(v, (list, tuple)) else v
    return out


_MAX = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
_AVG = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")


@_maps("max_pool2d_with_indices")
def _max_pool(name, ov, a, kw, out, r):
    t = {"x": a[0], "out": r[0], "indices": r[1]}
    return _one(name, {"x": "x", **_window(a, kw, 1, _MAX), "out": ["out", "indices"]}, t)


@_maps("avg_pool2d")
def _avg_pool(name, ov, a, kw, out, r):
    return _one(name, {"x": "x", **_window(a, kw, 1, _AVG), "out": "out"},
                {"x": a[0], "out": out})  # fmt: skip


@_maps("max_pool2d_with_indices_backward", "avg_pool2d_backward")
def _pool_backward(name, ov, a, kw, out, r):
    """aten passes the forward's input; the library takes its shape (input_size)."""
    t = {"grad_output": a[0], "out": out}
    names = _MAX if name.startswith("max") else _AVG
    args = {"grad_output": "grad_output", "input_size": list(a[1].shape),
            **_window(a, kw, 2, names), "out": "out"}  # fmt: skip
    if name.startswith("max"):
        t["indices"], args["indices"] = _arg(a, kw, 7, "indices"), "indices"
    return _one(name, args, t)


# -- backward ops ----------------------------------------------------------------------------


@_maps("threshold_backward")
def _threshold_backward(name, ov, a, kw, out, r):
    t = {"grad_output": a[0], "x": a[1], "out": out}
    return _one("threshold_backward", {**{k: k for k in t}, "threshold": _num(a[2])}, t)


@_maps("gelu_backward")
def _gelu_backward(name, ov, a, kw, out, r):
    t = {"grad_output": a[0], "x": a[1], "out": out}
    approx = _arg(a, kw, 2, "approximate", "none")
    return _one("gelu_backward", {**{k: k for k in t}, "approximate": approx}, t)


@_maps("silu_backward")
def _silu_backward(name, ov, a, kw, out, r):
    t = {"grad_output": a[0], "x": a[1], "out": out}
    return _one("silu_backward", {k: k for k in t}, t)


@_maps("sigmoid_backward", "tanh_backward")
def _output_backward(name, ov, a, kw, out, r):
    t = {"grad_output": a[0], "output": a[1], "out": out}
    return _one(name, {k: k for k in t}, t)


@_maps("_softmax_backward_data")
def _softmax_backward(name, ov, a, kw, out, r):
    if not _last(a[2], a[1].dim()):
        return None
    t = {"grad_output": a[0], "output": a[1], "out": out}
    return _one("_softmax_backward_data", {**{k: k for k in t}, "dim": -1}, t)


@_maps("_log_softmax_backward_data")
def _log_softmax_backward(name, ov, a, kw, out, r):
    """The library's `_log_softmax_backward_data` (g - exp(y) * sum(g), rows on the
    partitions); for rows too few to fill them, four library ops on flat layouts."""
    g, y = a[0], a[1]
    if not _last(a[2], y.dim()):
        return None
    if y.numel() // max(y.shape[-1], 1) >= FUSED_LOG_SOFTMAX_ROWS:
        t = {"grad_output": g, "output": y, "out": out}
        return _one("_log_softmax_backward_data", {**{k: k for k in t}, "dim": -1}, t)
    t = {"g": g, "y": y, "p": _meta(y.shape, y.dtype), "s": _meta((*g.shape[:-1], 1), g.dtype),
         "out": out}  # fmt: skip
    ops = [
        OpSpec("exp", {"x": "y", "out": "p"}),
        OpSpec("sum", {"x": "g", "out": "s", "dim": -1, "keepdim": True}),
        OpSpec("mul", {"a": "p", "b": "s", "out": "p"}),
        OpSpec("sub", {"a": "g", "b": "p", "out": "out"}),
    ]
    return ops, t


@_maps("native_layer_norm_backward")
def _layer_norm_backward(name, ov, a, kw, out, r):
    if len(a[2]) != 1:
        return None
    t = {"grad_out": a[0], "input": a[1], "mean": a[3], "rstd": a[4]}
    args = {k: k for k in t}
    for k, v in (("weight", a[5]), ("bias", a[6])):
        if v is not None:
            t[k], args[k] = v, k
    outs = []
    for name, g in zip(("grad_input", "grad_weight", "grad_bias"), r):
        if g is not None:
            t[name] = g
            outs.append(name)
    args.update(normalized_shape=list(a[2]), output_mask=[bool(m) for m in a[7]], out=outs)
    return [OpSpec("native_layer_norm_backward", args)], t


@_maps("embedding_dense_backward")
def _embedding_backward(name, ov, a, kw, out, r):
    if a[4]:  # scale_grad_by_freq: not lowered
        return None
    t = {"grad_output": a[0], "indices": a[1], "out": out}
    return _one("embedding_dense_backward",
                {**{k: k for k in t}, "num_weights": int(a[2]), "padding_idx": int(a[3])},
                t)  # fmt: skip


@_maps("nll_loss_forward")
def _nll_loss(name, ov, a, kw, out, r):
    x, target, weight, reduction = a[0], a[1], a[2], int(a[3])
    if weight is not None or x.dim() != 2:
        return None  # class weights, and other than [N, C]: not lowered
    loss = out if reduction == 0 else _meta((1,), out.dtype)
    t = {"input": x, "target": target, "out": loss}
    return _one("nll_loss", {**{k: k for k in t}, "reduction": REDUCTION[reduction]}, t)


@_maps("nll_loss_backward")
def _nll_loss_backward(name, ov, a, kw, out, r):
    go, x, target, weight, reduction, ignore, total = a[:7]
    t = {"grad_output": go, "x": x, "target": target, "out": out}
    args = {**{k: k for k in t}, "reduction": int(reduction), "ignore_index": int(ignore)}
    for k, v in (("weight", weight), ("total_weight", total)):
        if v is not None:
            t[k], args[k] = v, k
    return _one("nll_loss_backward", args, t)


# -- the optimizer's ops ---------------------------------------------------------------------


@_maps("addcdiv", "addcmul")
def _addc(name, ov, a, kw, out, r):
    if ov not in ("default", "out"):
        return None
    t = {"x": a[0], "tensor1": a[1], "tensor2": a[2], "out": out}
    return _one(name, {**{k: k for k in t}, "value": _num(kw.get("value", 1))}, t)


@_maps("lerp")
def _lerp(name, ov, a, kw, out, r):
    if ov not in ("Scalar", "Scalar_out"):
        return None
    t = {"x": a[0], "end": a[1], "out": out}
    return _one("lerp", {"x": "x", "end": "end", "weight": _num(a[2]), "out": "out"}, t)


def _names(t: dict, key: str, tensors) -> list[str]:
    """Each of `tensors` in `t` as key0, key1, ...; their names."""
    names = [f"{key}{i}" for i in range(len(tensors))]
    t.update(zip(names, tensors))
    return names


def _foreach_out(t: dict, a, r) -> list[str]:
    """A `_foreach_*` op's results: its list (in place: the first argument)."""
    return _names(t, "out", r if isinstance(r, (list, tuple)) and r else a[0])


def _scalars(v):
    """A number, a list of numbers, or a tensor of them (`.Tensor` overloads)."""
    if isinstance(v, Tensor):
        return v.tolist() if v.dim() else v.item()
    return [float(x) for x in v] if isinstance(v, (list, tuple)) else float(v)


@_maps("_foreach_add", "_foreach_mul", "_foreach_div")
def _foreach_binary(name, ov, a, kw, out, r):
    t: dict = {}
    args = {"x": _names(t, "x", a[0])}
    other = a[1]
    if ov in ("List", "List_out"):
        args["other"] = _names(t, "other", other)
        alpha = _num(_arg(a, kw, 2, "alpha", 1))
        if alpha != 1:
            args["alpha"] = alpha
    elif ov.startswith(("Scalar", "Tensor")):
        if isinstance(other, Tensor) and other.dim():
            return None  # one tensor for every item: not lowered
        args["other"] = _scalars(other)
        if _num(_arg(a, kw, 2, "alpha", 1)) != 1:
            return None
    else:
        return None
    args["out"] = _foreach_out(t, a, r)
    return [OpSpec(name, args)], t


@_maps("_foreach_addcdiv", "_foreach_addcmul")
def _foreach_addc(name, ov, a, kw, out, r):
    t: dict = {}
    args = {"x": _names(t, "x", a[0]), "tensor1": _names(t, "tensor1", a[1]),
            "tensor2": _names(t, "tensor2", a[2])}  # fmt: skip
    value = _arg(a, kw, 3, "scalars" if ov.startswith(("ScalarList", "Tensor")) else "value", 1)
    args["value"] = _scalars(value)
    args["out"] = _foreach_out(t, a, r)
    return [OpSpec(name, args)], t


@_maps("_foreach_lerp")
def _foreach_lerp(name, ov, a, kw, out, r):
    if not ov.startswith("Scalar") or ov.startswith("ScalarList"):
        return None  # weights per item, or tensors of them: not lowered
    t: dict = {}
    args = {"x": _names(t, "x", a[0]), "tensors1": _names(t, "end", a[1]),
            "weight": _num(a[2])}  # fmt: skip
    args["out"] = _foreach_out(t, a, r)
    return [OpSpec(name, args)], t


@_maps("_foreach_sqrt")
def _foreach_sqrt(name, ov, a, kw, out, r):
    t: dict = {}
    args = {"x": _names(t, "x", a[0])}
    args["out"] = _foreach_out(t, a, r)
    return [OpSpec(name, args)], t
