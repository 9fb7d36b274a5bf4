"""Activations with parameters: `leaky_relu`, `hardswish`, `hardsigmoid`, `elu`, `hardtanh`,
`softplus`, each one fused pass over the tensor (`pipelined`), built from the engines'
instructions (ScalarE's activation table has no leaky, hard or ELU function):

- `leaky_relu`: s x on ScalarE, then max(x, s x) (min for a slope s > 1);
- `hardsigmoid`: relu(x / 6 + 1/2) on ScalarE, then min(., 1); `hardswish`: that, times x;
- `elu`: s max(x, 0) + min(s a e^(i x) - s a, 0), the exponential on ScalarE with s a folded
  into its bias as ln(s a), the rest on VectorE or GpSimd (in 16-bit work max(x, min(..., 0))
  for ELU and CELU: scale 1, alpha times input_scale at most 1);
- `hardtanh`: one `tensor_scalar`, max(x, min_val) then min(., max_val);
- `softplus`: ScalarE's softplus of beta x, over beta; x where beta x > threshold (a
  `select`; none when threshold >= 17.5, above which softplus(z) / beta rounds to z / beta).

Blocks are software-pipelined (`pipelined`). A pass that VectorE or GpSimd may run goes to
the one that finishes it first (`spread`);
temporaries are fp32 except where the 16-bit result is exact (a max of x and its rounded
multiple, ELU's two halves of which one is 0), so VectorE runs 16-bit work at its fast rate.
The backward ops are in `activations_backward`.
"""

from __future__ import annotations

import math

import numpy as np

from trnsim.config import ChipConfig
from trnsim.dtypes import DType
from trnsim.errors import TraceError
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.pipelined import pipelined
from trnsim.kernels.pointwise import F32, Block, work_dtype
from trnsim.kernels.spread import Spread

__all__ = ["ACTIVATIONS", "lower_activation", "number", "above", "below", "EXACT_THRESHOLD"]

ACTIVATIONS = ("leaky_relu", "hardswish", "hardsigmoid", "elu", "hardtanh", "softplus")
DEPTH = 4  # blocks in flight (`pipelined`): a body's steps, at most 4
EXACT_THRESHOLD = 17.5  # softplus(z) / beta and sigmoid(z) round to z / beta and 1 above it
DEFAULTS = {
    "negative_slope": 0.01, "alpha": 1.0, "scale": 1.0, "input_scale": 1.0, "min_val": -1.0,
    "max_val": 1.0, "beta": 1.0, "threshold": 20.0,
}  # fmt: skip


def number(op: str, args: dict, key: str) -> float:
    """Argument `key` of `op` as a float (its aten default when absent)."""
    v = args.get(key, DEFAULTS.get(key))
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TraceError(f"{op}: {key} {v!r}; expected a finite number")
    return float(v)


def lower_activation(b: KernelBuilder, cfg: ChipConfig, op: str, args: dict) -> None:
    """out = op(x) with the op's parameters (module doc)."""
    x, out = args["x"], args["out"]
    xdt, odt = b.tensors[x].dtype, b.tensors[out].dtype
    wdt = work_dtype(xdt, odt)
    sp = Spread(b, cfg)
    body = {
        "leaky_relu": _leaky_relu, "hardswish": _hard, "hardsigmoid": _hard, "elu": _elu,
        "hardtanh": _hardtanh, "softplus": _softplus,
    }[op]  # fmt: skip
    params = {k: number(op, args, k) for k in _PARAMS[op]}
    if op == "elu" and params["input_scale"] <= 0:
        raise TraceError(f"elu: input_scale {params['input_scale']}; expected a positive number")
    if op == "hardtanh" and params["min_val"] > params["max_val"]:
        raise TraceError(f"hardtanh: min_val {params['min_val']} > max_val {params['max_val']}")

    def run(blk: Block):
        yield from body(sp, blk, op, params, odt, wdt)

    pipelined(b, cfg, op, [x], [out], run, temps=_TEMPS[op](wdt), depth=DEPTH)


_TEMPS = {  # op -> the bytes per element of its temporaries, by the work dtype
    "leaky_relu": lambda w: 4, "hardswish": lambda w: w.itemsize, "hardsigmoid": lambda w: 4,
    "elu": lambda w: 4 + 2 * w.itemsize, "hardtanh": lambda w: 0, "softplus": lambda w: 8,
}  # fmt: skip
_PARAMS = {
    "leaky_relu": ("negative_slope",), "hardswish": (), "hardsigmoid": (),
    "elu": ("alpha", "scale", "input_scale"), "hardtanh": ("min_val", "max_val"),
    "softplus": ("beta", "threshold"),
}  # fmt: skip


def _leaky_relu(sp: Spread, blk: Block, op, p, odt: DType, wdt: DType):
    """max(x, s x) for s <= 1 (min for s > 1): s x rounded to out's dtype, as PyTorch rounds
    the product, and the max exact."""
    (x,), (o,) = blk.ins, blk.outs
    s = p["negative_slope"]
    sx = blk.tmp("sx", odt)
    sp.act("copy", x, sx, scale=s)
    yield
    sp.tt("max" if s <= 1 else "min", x, sx, o)
    yield


def _hard(sp: Spread, blk: Block, op, p, odt: DType, wdt: DType):
    """hardsigmoid = min(relu(x / 6 + 1/2), 1); hardswish = x times it."""
    (x,), (o,) = blk.ins, blk.outs
    r = blk.tmp("r", odt if op == "hardsigmoid" else wdt)
    sp.act("relu", x, r, scale=1 / 6, bias=0.5)
    yield
    if op == "hardsigmoid":
        sp.ts(r, o, "min", 1.0)
        yield
        return
    sp.ts(r, r, "min", 1.0)
    yield
    sp.tt("multiply", x, r, o)
    yield


def _elu(sp: Spread, blk: Block, op, p, odt: DType, wdt: DType):
    """s max(x, 0) + min(s a e^(i x) - s a, 0) (s a > 0; max and a subtraction for s a < 0):
    for x > 0 the second term is 0, for x <= 0 the first, so both may be rounded to the 16-bit
    work dtype; e^(i x) overflows to inf for large x, where min(inf, 0) is 0. With s = 1 and
    0 < a i <= 1 (ELU, CELU) a (e^(i x) - 1) >= x for x <= 0, so y = max(x, min(.., 0)): one
    pass less, which pays in 16-bit work (VectorE's max at its fast rate)."""
    (x,), (o,) = blk.ins, blk.outs
    s, a, i = p["scale"], p["alpha"], p["input_scale"]
    sa = s * a
    if s == 1 and 0 < a * i <= 1 and wdt.is_16bit_float:
        e, neg = blk.tmp("e", F32), blk.tmp("neg", wdt)
        sp.act("exp", x, e, scale=i, bias=math.log(sa))
        yield
        sp.ts(e, neg, "subtract", sa, "min", 0.0)
        yield
        sp.tt("max", x, neg, o)
        yield
        return
    pos = blk.tmp("pos", wdt) if sa else o
    sp.ts(x, pos, "max", 0.0, "multiply", s)
    yield
    if sa == 0:
        return
    e = blk.tmp("e", F32)
    sp.act("exp", x, e, scale=i, bias=math.log(abs(sa)))
    neg = blk.tmp("neg", wdt)
    sp.ts(e, neg, "subtract", abs(sa), "min", 0.0)
    yield
    sp.tt("add" if sa > 0 else "subtract", pos, neg, o)
    yield


def _hardtanh(sp: Spread, blk: Block, op, p, odt: DType, wdt: DType):
    (x,), (o,) = blk.ins, blk.outs
    sp.ts(x, o, "max", p["min_val"], "min", p["max_val"])
    yield


def _softplus(sp: Spread, blk: Block, op, p, odt: DType, wdt: DType):
    """softplus(beta x) / beta on ScalarE; x where beta x > threshold (below EXACT_THRESHOLD:
    above it the two round alike)."""
    (x,), (o,) = blk.ins, blk.outs
    beta, threshold = p["beta"], p["threshold"]
    exact = threshold >= EXACT_THRESHOLD
    if exact and beta == 1:
        sp.act("softplus", x, o, scale=beta)
        yield
        return
    s = blk.tmp("s", F32)
    sp.act("softplus", x, s, scale=beta)
    yield
    if beta != 1:
        sp.ts(s, o if exact else s, "multiply", 1 / beta)
        yield
    if not exact:
        keep = blk.tmp("keep", F32)
        sp.ts(x, keep, "multiply", beta, "less_equal", threshold)
        yield
        sp.select(keep, s, x, o)
        yield


def above(v: float, dt: DType) -> float:
    """The least value of `dt` (a float dtype) greater than v."""
    r = np.array(v, np.float64).astype(dt.np)
    return float(r) if float(r) > v else _step(r, dt, up=True)


def below(v: float, dt: DType) -> float:
    """The greatest value of `dt` (a float dtype) less than v."""
    r = np.array(v, np.float64).astype(dt.np)
    return float(r) if float(r) < v else _step(r, dt, up=False)


def _step(r, dt: DType, up: bool) -> float:
    """The neighbour of `r` (a value of `dt`) above or below it, by its bits (IEEE-like
    sign-magnitude formats: bf16, fp16, fp32)."""
    u = {2: np.uint16, 4: np.uint32, 1: np.uint8}[dt.itemsize]
    bits = np.array(r, dt.np).reshape(1).view(u)
    if float(r) == 0:
        bits = np.array([1 if up else 1 | (1 << (8 * dt.itemsize - 1))], u)
    elif (float(r) > 0) == up:
        bits = bits + u(1)
    else:
        bits = bits - u(1)
    return float(bits.view(dt.np)[0])
