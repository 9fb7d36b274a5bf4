"""The backward ops of `activations`: out = grad_output * f'(x), one fused pass (`pipelined`),
with PyTorch's formulas and boundaries (its CPU kernels'):

- `leaky_relu_backward`: 1 where x > 0, else the slope s: for 0 <= s <= 1 one
  `tensor_scalar`, max(x > 0, s); else (x > 0) (1 - s), plus s on ScalarE;
- `hardsigmoid_backward`: 1/6 where |x| < 3 (|x| on ScalarE, exact), else 0;
  `hardtanh_backward`: 1 where min_val < x < max_val, else 0 (|x| < max_val when
  min_val = -max_val; else x clamped to the values of its dtype nearest inside the interval,
  `activations.above` and `below`, equals x exactly inside);
- `hardswish_backward`: 0 where x <= -3, x / 3 + 1/2 where x < 3, else 1 (PyTorch 2.13's
  CPU kernel): min(max(t, d), e) with t = x / 3 + 1/2 (ScalarE), d = (x <= -3) - 1 and
  e = (x < 3) + 1 (a `tensor_scalar` each); for a 16-bit x, min(t, e) times a 0/1 mask
  of x > -3 that ScalarE makes (`_hardswish`);
- `elu_backward`: s where x > 0, else c e^(i x), c = s a i: the exponential of i min(x, 0)
  on ScalarE with c in its bias as ln c, which is the factor itself when c = s (ELU, CELU);
  else max with s (x > 0) for c < s, or plus (s - c) (x > 0). From the result y
  (`is_result`): i min(y, 0) + i a s + (s - i a s) (y > 0);
- `softplus_backward`: sigmoid(beta x) on ScalarE; 1 where beta x > threshold (a max with
  that mask; none when threshold >= 17.5, where the sigmoid rounds to 1).

The passes VectorE or GpSimd may run go to the one that finishes first (`spread`); the factor
is in the work dtype (16-bit when the gradient and out are: VectorE's product at its fast
rate), rounded once from fp32.
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.kernels.activations import DEPTH, EXACT_THRESHOLD, above, below, number
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.pipelined import pipelined
from trnsim.kernels.pointwise import F32, Block, work_dtype
from trnsim.kernels.spread import Spread, V

__all__ = ["ACTIVATIONS_BACKWARD", "lower_activation_backward"]

ACTIVATIONS_BACKWARD = (
    "leaky_relu_backward", "hardswish_backward", "hardsigmoid_backward", "elu_backward",
    "hardtanh_backward", "softplus_backward",
)  # fmt: skip
_PARAMS = {
    "leaky_relu_backward": ("negative_slope",), "hardswish_backward": (),
    "hardsigmoid_backward": (), "hardtanh_backward": ("min_val", "max_val"),
    "elu_backward": ("alpha", "scale", "input_scale"), "softplus_backward": ("beta", "threshold"),
}  # fmt: skip


_TEMPS = {  # op -> the bytes per element of its temporaries, by the work dtype
    "leaky_relu_backward": lambda w: 4 + w.itemsize, "hardswish_backward": lambda w: 3 * w.itemsize,
    "hardsigmoid_backward": lambda w: 4 + w.itemsize, "hardtanh_backward": lambda w: 4 + w.itemsize,
    "elu_backward": lambda w: 12 + w.itemsize, "softplus_backward": lambda w: 2 * w.itemsize,
}  # fmt: skip


def lower_activation_backward(b: KernelBuilder, cfg: ChipConfig, op: str, args: dict) -> None:
    """out = grad_output * f'(x) (module doc)."""
    g, out = args["grad_output"], args["out"]
    x = args.get("x", args.get("self_or_result"))
    wdt = work_dtype(b.tensors[g].dtype, b.tensors[out].dtype)
    xdt = b.tensors[x].dtype
    if not xdt.is_float:
        raise TraceError(f"{op}: {x!r} is {xdt.name}; expected a float tensor")
    p = {k: number(op, args, k) for k in _PARAMS[op]}
    if op == "elu_backward":
        if p["input_scale"] <= 0:
            raise TraceError(f"{op}: input_scale {p['input_scale']}; expected a positive number")
        p["is_result"] = bool(args.get("is_result", False))
    if op == "hardtanh_backward":
        lo, hi = p["min_val"], p["max_val"]
        p["inside"] = (above(lo, xdt), below(hi, xdt))
    sp = Spread(b, cfg)
    body = {
        "leaky_relu_backward": _leaky_relu, "hardswish_backward": _hardswish,
        "hardsigmoid_backward": _hardsigmoid, "hardtanh_backward": _hardtanh,
        "elu_backward": _elu, "softplus_backward": _softplus,
    }[op]  # fmt: skip

    def run(blk: Block):
        ga, xa = blk.ins
        f = yield from body(sp, blk, p, xa, ga, wdt)
        sp.tt("multiply", ga, f, blk.outs[0])
        yield

    pipelined(b, cfg, op, [g, x], [out], run, temps=_TEMPS[op](wdt), depth=DEPTH)


def _leaky_relu(sp: Spread, blk: Block, p, x, g, wdt):
    s = p["negative_slope"]
    f = blk.tmp("f", wdt)
    if 0 <= s <= 1:  # (x > 0) is 1 or 0; its max with s is 1 or s
        sp.ts(x, f, "greater", 0.0, "max", s)
        yield
        return f
    m = blk.tmp("m", F32)
    sp.ts(x, m, "greater", 0.0, "multiply", 1.0 - s)
    yield
    sp.act("identity", m, f, bias=s)
    yield
    return f


def _hardsigmoid(sp: Spread, blk: Block, p, x, g, wdt):
    """(|x| < 3) / 6: |x| is exact, so is the test."""
    a, f = blk.tmp("a", sp.b.tiles[x.name].dtype), blk.tmp("f", wdt)
    sp.act("abs", x, a)
    yield
    sp.ts(a, f, "less", 3.0, "multiply", 1 / 6)
    yield
    return f


def _hardtanh(sp: Spread, blk: Block, p, x, g, wdt):
    """(min_val < x < max_val): |x| < max_val for an interval symmetric about 0; else x
    clamped to [a', b'] (the values of x's dtype nearest inside) equals x exactly inside."""
    lo, hi = p["min_val"], p["max_val"]
    xdt = sp.b.tiles[x.name].dtype
    f = blk.tmp("f", wdt)
    if lo == -hi:
        a = blk.tmp("a", xdt)
        sp.act("abs", x, a)
        yield
        sp.ts(a, f, "less", hi, "multiply", 1.0)
        yield
        return f
    u = blk.tmp("u", xdt)
    sp.ts(x, u, "max", p["inside"][0], "min", p["inside"][1])
    yield
    sp.tt("equal", u, x, f)
    yield
    return f


def _hardswish(sp: Spread, blk: Block, p, x, g, wdt):
    """min(max(t, d), e): t = x / 3 + 1/2; d = -1 where x > -3 (below t there), 0 where
    x <= -3 (at or above t); e = 2 where x < 3 (above t), 1 where x >= 3 (at or below t).

    For a 16-bit x the jump at -3 is a product with a mask m that ScalarE makes, which has
    the time to spare where VectorE and GpSimd bound the kernel: min(t, e) m, with m the
    sigmoid of K (x - c), c halfway between -3 and the next 16-bit value above it (no x
    equals c, and K (x - c) is at least 128 away from 0, where the sigmoid is 0 or 1 in fp32).
    One comparison fewer on VectorE (on trn2 at [8, 64, 64, 64] in bf16: 1.63 -> 1.43x its
    roofline, with `pipelined`'s ramp); x = -inf gives NaN there where PyTorch gives 0."""
    t, e = blk.tmp("t", wdt), blk.tmp("e", wdt)
    xdt = sp.b.tiles[x.name].dtype
    sp.act("identity", x, t, scale=1 / 3, bias=0.5)
    if xdt.itemsize <= 2:
        m = blk.tmp("d", wdt)
        up = above(-3.0, xdt)
        k = 256 / (up + 3.0)  # a power of two: K x is exact
        sp.act("sigmoid", x, m, scale=k, bias=-k * (up - 3.0) / 2)
        sp.ts(x, e, "less", 3.0, "add", 1.0, engines=(V,))
        yield
        sp.tt("min", t, e, t)
        yield
        sp.tt("multiply", t, m, t)
        yield
        return t
    d = blk.tmp("d", wdt)
    sp.ts(x, d, "less_equal", -3.0, "subtract", 1.0, engines=(V,))
    yield
    sp.ts(x, e, "less", 3.0, "add", 1.0, engines=(V,))
    sp.tt("max", t, d, t)
    yield
    sp.tt("min", t, e, t)
    yield
    return t


def _elu(sp: Spread, blk: Block, p, x, g, wdt):
    s, a, i = p["scale"], p["alpha"], p["input_scale"]
    xdt = sp.b.tiles[x.name].dtype
    f = blk.tmp("f", wdt)
    if p["is_result"]:  # f = i min(y, 0) + c + (s - c) (y > 0), c = i a s
        c = i * a * s
        e = blk.tmp("e", xdt)
        sp.ts(x, e, "min", 0.0)
        yield
        if c == s:
            sp.act("identity", e, f, scale=i, bias=c)
            yield
            return f
        m = blk.tmp("m", F32)
        sp.act("identity", e, m, scale=i, bias=c)
        sp.ts(x, e, "greater", 0.0, "multiply", s - c)
        yield
        sp.tt("add", m, e, f)
        yield
        return f
    c = s * a * i  # f = c e^(i min(x, 0)) where x <= 0, s where x > 0
    e = blk.tmp("e", xdt)
    sp.ts(x, e, "min", 0.0)
    yield
    if c == 0:
        sp.ts(x, f, "greater", 0.0, "multiply", s)
        yield
        return f
    if c == s:  # e^0 = 1 where x > 0: the exponential is the factor
        sp.act("exp", e, f, scale=i, bias=math.log(c))
        yield
        return f
    ce, m = blk.tmp("ce", F32), blk.tmp("m", F32)
    sp.act("exp", e, ce, scale=i, bias=math.log(abs(c)))
    sp.ts(x, m, "greater", 0.0, "multiply", s if 0 < c < s else s - c)
    yield
    if 0 < c < s:  # c e^(i x) <= c < s: the max is s where x > 0, c e^(i x) elsewhere
        sp.tt("max", ce, m, f)
    else:
        sp.tt("add" if c > 0 else "subtract", m, ce, f)
    yield
    return f


def _softplus(sp: Spread, blk: Block, p, x, g, wdt):
    beta, threshold = p["beta"], p["threshold"]
    f = blk.tmp("f", wdt)
    sp.act("sigmoid", x, f, scale=beta)
    yield
    if threshold < EXACT_THRESHOLD:
        over = blk.tmp("over", wdt)
        sp.ts(x, over, "multiply", beta, "greater", threshold)
        yield
        sp.tt("max", f, over, f)
        yield
    return f
