"""The elementwise backward ops of a training step: grad_input = grad_output * f'(...), one
fused pass over the tensors (`pointwise`).

Each kernel computes the derivative factor from x (or the forward's output) in fp32 on ScalarE
(its activation table has NKI's `gelu_dx` and `silu_dx`; the others are a square and a
multiply-add), rounds it once to the work dtype (the gradient's when it and the output are
16-bit, so VectorE's product runs at its 16-bit rate), and VectorE multiplies it into
grad_output:

| op | factor |
|---|---|
| `threshold_backward` | x > threshold (1 or 0), VectorE `tensor_scalar greater` |
| `gelu_backward` (none) | gelu_dx(x) on ScalarE |
| `gelu_backward` (tanh) | s + x s (1 - s) z', s = sigma(z), z = 2k (x + c x^3) (below) |
| `silu_backward` | silu_dx(x) on ScalarE |
| `sigmoid_backward` | y (1 - y) = 0.25 - (y - 0.5)^2: a square and a multiply-add on ScalarE |
| `tanh_backward` | 1 - y^2: a square and a multiply-add on ScalarE |
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.isa import Activation, Ap, Engine, TensorScalar, TensorTensor
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.pointwise import F32, Block, pointwise, work_dtype

__all__ = ["ELEMENTWISE_BACKWARD", "lower_elementwise_backward", "tt", "ts", "act"]

ELEMENTWISE_BACKWARD = (
    "threshold_backward", "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
)  # fmt: skip
_K = math.sqrt(2.0 / math.pi)
_C = 0.044715


def tt(b: KernelBuilder, alu: str, a: Ap, c: Ap, dst: Ap, engine=Engine.VECTOR) -> None:
    """dst = a <alu> c (VectorE, or GpSimd)."""
    b.emit(TensorTensor, [a, c], [dst], alu=alu, src0=a, src1=c, dst=dst, engine=engine)


def ts(b: KernelBuilder, src: Ap, dst: Ap, op0: str, v0, op1=None, v1=None, engine=None) -> None:
    """dst = (src <op0> v0) <op1> v1, v0 and v1 numbers or [rows, 1] columns; on ScalarE when
    it is a multiply-add (which ScalarE's tensor_scalar takes on every core) unless `engine`
    says otherwise, else VectorE."""
    if engine is None:
        scalar = op0 in ("multiply", "add") and op1 in (None, "add") and op1 != op0
        engine = Engine.SCALAR if scalar else Engine.VECTOR
    reads = [src] + [v for v in (v0, v1) if isinstance(v, Ap)]
    more = {"op1": op1, "operand1": v1} if op1 is not None else {}
    b.emit(TensorScalar, reads, [dst], src=src, dst=dst, op0=op0, operand0=v0, engine=engine,
           **more)  # fmt: skip


def act(b: KernelBuilder, func: str, src: Ap, dst: Ap, scale=1.0, bias=0.0) -> None:
    """dst = func(src * scale + bias) on ScalarE."""
    reads = [src] + [v for v in (scale, bias) if isinstance(v, Ap)]
    b.emit(Activation, reads, [dst], func=func, src=src, dst=dst, scale=scale, bias=bias)


def lower_elementwise_backward(b: KernelBuilder, cfg: ChipConfig, op: str, args: dict) -> None:
    """out = grad_output * f'(x or output) (module doc)."""
    g, out = args["grad_output"], args["out"]
    x = args.get("x", args.get("output"))
    wdt = work_dtype(b.tensors[g].dtype, b.tensors[out].dtype)
    approximate = args.get("approximate", "none")
    if op == "gelu_backward" and approximate not in ("none", "tanh"):
        raise TraceError(f"gelu_backward: approximate {approximate!r}; expected 'none' or 'tanh'")
    factor = {
        "threshold_backward": lambda blk, xa, f: ts(
            b, xa, f, "greater", float(args["threshold"]), engine=Engine.VECTOR
        ),
        "gelu_backward": (
            (lambda blk, xa, f: act(b, "gelu_dx", xa, f))
            if approximate == "none"
            else (lambda blk, xa, f: _gelu_tanh_dx(b, blk, xa, f))
        ),
        "silu_backward": lambda blk, xa, f: act(b, "silu_dx", xa, f),
        "sigmoid_backward": lambda blk, xa, f: _one_minus_square(b, blk, xa, f, -0.5, 0.25),
        "tanh_backward": lambda blk, xa, f: _one_minus_square(b, blk, xa, f, 0.0, 1.0),
    }[op]

    def body(blk: Block):
        ga, xa = blk.ins
        f = blk.tmp("f", wdt)
        steps = factor(blk, xa, f)
        if steps is not None:  # a factor in steps (a generator)
            yield from steps
        tt(b, "multiply", ga, f, blk.outs[0])

    pointwise(b, cfg, op, [g, x], [out], body)


def _one_minus_square(b: KernelBuilder, blk: Block, y: Ap, f: Ap, shift: float, top: float):
    """f = top - (y + shift)^2: a ScalarE square into fp32, then its multiply-add."""
    sq = blk.tmp("sq", F32)
    act(b, "square", y, sq, bias=shift)
    ts(b, sq, f, "multiply", -1.0, "add", top)


def _gelu_tanh_dx(b: KernelBuilder, blk: Block, x: Ap, f: Ap):
    """f = d/dx x sigma(z), z = 2k(x + c x^3): sigma(z) + x z' sigma(z)(1 - sigma(z)), z' =
    2k(1 + 3c x^2), with sigma (1 - sigma) = 0.25 - (sigma - 0.5)^2; in the work dtype, over
    ScalarE (squares, the sigmoid), VectorE and GpSimd (the products); a generator of steps
    (`pointwise`)."""
    wdt = b.tiles[f.name].dtype
    u, q, sg, t = (blk.tmp(k, wdt) for k in ("sq", "q", "sg", "t"))
    g = Engine.GPSIMD
    act(b, "square", x, u)  # x^2
    ts(b, u, q, "multiply", _C, "add", 1.0, engine=Engine.VECTOR)  # 1 + c x^2
    tt(b, "multiply", q, x, q)  # x + c x^3
    ts(b, u, t, "multiply", 3 * _C, "add", 1.0, engine=g)  # 1 + 3c x^2
    tt(b, "multiply", t, x, t, engine=g)  # x z' / 2k
    yield
    act(b, "sigmoid", q, sg, scale=2 * _K)  # sigma(z)
    act(b, "square", sg, q, bias=-0.5)  # (sigma - 0.5)^2
    yield
    ts(b, q, q, "multiply", -2 * _K, "add", 0.5 * _K, engine=Engine.VECTOR)  # 2k sigma(1-sigma)
    tt(b, "multiply", t, q, t)
    yield
    tt(b, "add", t, sg, f, engine=g)
    yield
