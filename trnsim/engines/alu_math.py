"""The arithmetic the Vector, Scalar and GpSimd engines share: ALU operators and activations.

`isa.md` section 3: every input is converted to fp32, the operation runs in fp32 and the fp32
result is cast to the destination dtype on write (`Ref.write`). This module holds the ALU
operators (section 5, `ALU`, `alu`), the immediates' conversions (`fp32`, `is_int`), erf without
scipy, and the activation functions (section 6, `ACT`, `activate`: standard definitions, since
the hardware's polynomial approximations are not published). Pure numpy: no engine, no config.
"""

from __future__ import annotations

import math

import numpy as np


def _cmp(fn):
    return lambda a, b: fn(a, b).astype(np.result_type(a, b))


ALU = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
    "equal": _cmp(np.equal),
    "not_equal": _cmp(np.not_equal),
    "less": _cmp(np.less),
    "less_equal": _cmp(np.less_equal),
    "greater": _cmp(np.greater),
    "greater_equal": _cmp(np.greater_equal),
}
"""ALU operators: (a, b) -> a op b in the inputs' dtype; comparisons give 1 or 0."""

INT_EXACT_ALU = frozenset(ALU) - {"divide", "pow"}
"""Operators GpSimd computes exactly on integers (the rest go through fp32)."""


def is_int(x) -> bool:
    """True for a number with an exact int64 value that float64 also holds exactly."""
    if isinstance(x, (int, np.integer)):  # also ints too large for a float (no OverflowError)
        return abs(int(x)) <= 2**53
    return float(x).is_integer() and abs(x) <= 2**53


def fp32(x) -> np.float32:
    """A number as an fp32 immediate. Beyond fp32's range it is +-inf, as the cast gives for a
    large float; Python ints too large even for float64 (`1e400` written as digits) too."""
    try:
        return np.float32(x)
    except OverflowError:
        return np.float32(np.inf if x > 0 else -np.inf)


def alu(op: str, a, b, reverse: bool = False):
    """`a op b` (or `b op a` when `reverse`), with IEEE specials (inf, NaN) and no warnings."""
    if reverse:
        a, b = b, a
    with np.errstate(all="ignore"):
        return ALU[op](a, b)


# ----------------------------------------------------------------------------------------------
# erf without scipy, float64. erfc is Numerical Recipes' Chebyshev fit (erfcc, 2nd ed. 6.2):
# fractional error below 1.2e-7 everywhere, tails included (gelu of large negative x needs
# relative accuracy there), one exp per element. Hardware evaluates these functions with
# unpublished piece-wise polynomials (isa.md section 6), so fp32-level accuracy is what we model.

_NR = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erfc_pos(z: np.ndarray) -> np.ndarray:
    """erfc(z) for z >= 0."""
    t = 1.0 / (1.0 + 0.5 * z)
    poly = _NR[-1]
    for c in _NR[-2::-1]:
        poly = c + t * poly
    with np.errstate(over="ignore", under="ignore"):
        return t * np.exp(-z * z + poly)


def erfc(x) -> np.ndarray:
    """1 - erf(x), float64, with relative accuracy in the right tail."""
    x = np.asarray(x, np.float64)
    c = _erfc_pos(np.abs(x))
    return np.where(x >= 0, c, 2.0 - c)


def erf(x) -> np.ndarray:
    """The error function, float64 (a Taylor series near 0 keeps small values accurate)."""
    x = np.asarray(x, np.float64)
    out = 1.0 - _erfc_pos(np.abs(x))
    out = np.where(x >= 0, out, -out)
    small = np.abs(x) < 0.5
    if small.any():
        xs = x[small]
        x2 = xs * xs
        series = xs * (
            1
            + x2
            * (
                -1 / 3
                + x2
                * (
                    1 / 10
                    + x2
                    * (-1 / 42 + x2 * (1 / 216 + x2 * (-1 / 1320 + x2 * (1 / 9360 - x2 / 75600))))
                )
            )
        )
        out[small] = _TWO_OVER_SQRT_PI * series
    return out


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


ACT = {
    "identity": lambda x: x,
    "copy": lambda x: x,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * erfc(-x / math.sqrt(2.0)),
    # 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): no cancellation
    "gelu_tanh": lambda x: x * _sigmoid(2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)),
    "silu": lambda x: x * _sigmoid(x),
    "square": np.square,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x,
    "sin": np.sin,
    "cos": np.cos,
    "abs": np.abs,
    "sign": np.sign,
    "softplus": lambda x: np.logaddexp(0.0, x),
    "erf": erf,
    "arctan": np.arctan,
    "mish": lambda x: x * np.tanh(np.logaddexp(0.0, x)),
    # the derivatives NKI names nl.gelu_dx and nl.silu_dx (isa.md 6)
    "gelu_dx": lambda x: (
        0.5 * erfc(-x / math.sqrt(2.0)) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    ),
    "silu_dx": lambda x: _sigmoid(x) * (1.0 + x * (1.0 - _sigmoid(x))),
}
"""Activation functions by trace name (isa.py ACT_FUNCS), on float64 arrays."""


def activate(func: str, x: np.ndarray) -> np.ndarray:
    """func(x) for fp32 x: evaluated in float64 and rounded once to fp32."""
    with np.errstate(all="ignore"):
        return ACT[func](x.astype(np.float64)).astype(np.float32)
