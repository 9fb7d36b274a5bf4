"""The ALU that Vector, Scalar and GpSimd share: numpy semantics once, for all three engines.

`isa.md` section 3: every input is converted to fp32, the operation runs in fp32 and the fp32
result is cast to the destination dtype on write (`Ref.write`). This module holds the ALU
operators (section 5), the activation functions (section 6, standard definitions: the hardware's
polynomial approximations are not published), and `AluEngine`, the base of the three engine
models, with the operand rules and the instructions more than one of them runs (`tensor_copy`,
`tensor_scalar`, `tensor_tensor`, `memset`).
"""

from __future__ import annotations

import math

import numpy as np

from trnsim.dtypes import to_dtype
from trnsim.engines.base import (
    EngineModel,
    check_memory,
    check_partition_start,
    check_same_free,
    check_same_partitions,
    per_partition,
)
from trnsim.errors import SimError
from trnsim.isa import Instr
from trnsim.memory.buffer import Ref


def _cmp(fn):
    return lambda a, b: fn(a, b).astype(np.result_type(a, b))


ALU = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "max": np.maximum, "min": np.minimum, "pow": np.power,
    "equal": _cmp(np.equal), "not_equal": _cmp(np.not_equal), "less": _cmp(np.less),
    "less_equal": _cmp(np.less_equal), "greater": _cmp(np.greater),
    "greater_equal": _cmp(np.greater_equal),
}
"""ALU operators: (a, b) -> a op b in the inputs' dtype; comparisons give 1 or 0."""

INT_EXACT_ALU = frozenset(ALU) - {"divide", "pow"}
"""Operators GpSimd computes exactly on integers (the rest go through fp32)."""


def is_int(x) -> bool:
    """True for a number with an exact int64 value that float64 also holds exactly."""
    if isinstance(x, (int, np.integer)):  # also ints too large for a float (no OverflowError)
        return abs(int(x)) <= 2 ** 53
    return float(x).is_integer() and abs(x) <= 2 ** 53


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

_NR = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
       1.48851587, -0.82215223, 0.17087277)
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
        series = xs * (1 + x2 * (-1 / 3 + x2 * (1 / 10 + x2 * (-1 / 42 + x2 * (
            1 / 216 + x2 * (-1 / 1320 + x2 * (1 / 9360 - x2 / 75600)))))))
        out[small] = _TWO_OVER_SQRT_PI * series
    return out


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


ACT = {
    "identity": lambda x: x, "copy": lambda x: x, "exp": np.exp, "log": np.log,
    "tanh": np.tanh, "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * erfc(-x / math.sqrt(2.0)),
    # 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): no cancellation
    "gelu_tanh": lambda x: x * _sigmoid(2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)),
    "silu": lambda x: x * _sigmoid(x), "square": np.square, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "reciprocal": lambda x: 1.0 / x,
    "sin": np.sin, "cos": np.cos, "abs": np.abs, "sign": np.sign,
    "softplus": lambda x: np.logaddexp(0.0, x), "erf": erf, "arctan": np.arctan,
    "mish": lambda x: x * np.tanh(np.logaddexp(0.0, x)),
}
"""Activation functions by trace name (isa.py ACT_FUNCS), on float64 arrays."""


def activate(func: str, x: np.ndarray) -> np.ndarray:
    """func(x) for fp32 x: evaluated in float64 and rounded once to fp32."""
    with np.errstate(all="ignore"):
        return ACT[func](x.astype(np.float64)).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# the engines' shared base


class AluEngine(EngineModel):
    """Base of the Vector, Scalar and GpSimd models: operand rules, shared instructions, costs.

    Subclasses list the ops they run in `OPS` (others are rejected, even if defined here), the
    memories their operands may use in `MEMORIES`, whether integer operands are computed exactly
    (`INT_EXACT`, GpSimd) and, through `copy_factor`, their tensor_copy/tensor_scalar speed-up.
    """

    OPS: tuple[str, ...] = ()
    MEMORIES: tuple[str, ...] = ("sbuf", "psum")
    INT_EXACT = False
    exact_copy = True  # tensor_copy of equal dtypes is bit-exact

    @property
    def cfg(self):
        """This engine's section of the core config."""
        return getattr(self.core, self.engine.label)

    def execute(self, ins: Instr) -> None:
        """Compute ins; overflow to inf and NaN results are values here, not warnings."""
        with np.errstate(all="ignore"):
            super().execute(ins)

    def _method(self, prefix: str, ins: Instr):
        if ins.OP not in self.OPS:
            raise SimError(f"{ins.label}: not supported on the {self.engine.label} engine")
        return super()._method(prefix, ins)

    # -- operand checks ------------------------------------------------------------------------

    def check_operand(self, ins: Instr, name: str, ref: Ref) -> None:
        """Memory, partition start and free-size limit (64K elements SBUF, 4K PSUM: N-A2)."""
        check_memory(ins, name, ref, self.MEMORIES)
        mem = self.core.psum if ref.memory == "psum" else self.core.sbuf
        check_partition_start(ins, name, ref, mem.partitions)
        vec = self.core.vector
        limit = vec.psum_max_free_elements if ref.memory == "psum" else vec.max_free_elements
        if ref.free_size > limit:
            raise SimError(f"{ins.label}: {name} '{ref}' has {ref.free_size} elements per "
                           f"partition, more than the {ref.memory.upper()} limit of {limit}")

    def check_like(self, ins: Instr, a: str, ra: Ref, *others: tuple[str, Ref]) -> None:
        """Check every operand, and that all have ra's partition count and element count."""
        self.check_operand(ins, a, ra)
        for b, rb in others:
            self.check_operand(ins, b, rb)
            check_same_partitions(ins, b, rb, a, ra)
            check_same_free(ins, b, rb, a, ra)

    def check_column(self, ins: Instr, name: str, ref, a: str, ra: Ref) -> None:
        """A per-partition operand: a number, or a [P,1] tile with ra's partition count."""
        if not isinstance(ref, Ref):
            return
        self.check_operand(ins, name, ref)
        check_same_partitions(ins, name, ref, a, ra)
        if ref.free_size != 1:
            raise SimError(f"{ins.label}: {name} '{ref}' has {ref.free_size} elements per "
                           f"partition; a per-partition operand must be a [P,1] tile")

    # -- values --------------------------------------------------------------------------------

    def load(self, ref: Ref, exact: bool = False) -> np.ndarray:
        """ref's values as [P, N]: fp32, or int64 on the integer-exact path."""
        v = ref.read().astype(np.int64) if exact else ref.read_f32()
        return per_partition(v, ref.partitions)

    def column(self, x, exact: bool = False):
        """A per-partition operand as a scalar or a [P,1] array."""
        if isinstance(x, Ref):
            return self.load(x, exact)
        return np.int64(x) if exact else fp32(x)

    def int_exact(self, ops, *operands) -> bool:
        """GpSimd computes integer operands exactly (isa.md section 2) for these operators."""
        return self.INT_EXACT and all(op is None or op in INT_EXACT_ALU for op in ops) and all(
            not x.dtype.is_float if isinstance(x, Ref) else is_int(x)
            for x in operands if x is not None)

    def where(self, pred: np.ndarray, on_true: Ref, on_false, dst: Ref) -> None:
        """dst = on_true where pred else on_false; bit-exact when the dtypes equal dst's."""
        p = dst.partitions
        same = on_true.dtype == dst.dtype and (not isinstance(on_false, Ref)
                                               or on_false.dtype == dst.dtype)
        if same:
            t = per_partition(on_true.read(), p)
            f = (per_partition(on_false.read(), p) if isinstance(on_false, Ref)
                 else to_dtype(np.full((1, 1), fp32(on_false), np.float32), dst.dtype))
        else:
            t, f = self.load(on_true), self.column(on_false)
        dst.write(np.where(pred, t, f))

    # -- costs ---------------------------------------------------------------------------------

    def ii(self, cycles: float) -> float:
        """max(MIN_II, cycles): the initiation-interval floor of every instruction (isa.md 10)."""
        return max(self.cfg.min_ii_cycles, cycles)

    def overhead(self, ins: Instr) -> float:
        """Static overhead of an instruction that waited on a semaphore: N-A2 says +~100 cycles
        for a serial RAW dependency. Engines without the config field pay none."""
        return self.cfg.fixed_overhead_cycles if ins.wait else 0

    def copy_factor(self, src: Ref, dst: Ref) -> float:
        """tensor_copy/tensor_scalar speed-up for this src/dst pair (1 = one element/cycle)."""
        return 1.0

    # -- shared instructions -------------------------------------------------------------------

    def check_tensor_copy(self, ins) -> None:
        self.check_like(ins, "src", ins.src, ("dst", ins.dst))

    def cost_tensor_copy(self, ins, prev) -> float:
        # max(MIN_II, N) (isa.md 10), divided by the engine's perf-mode factor
        return self.ii(ins.dst.free_size / self.copy_factor(ins.src, ins.dst)) + self.overhead(ins)

    def exec_tensor_copy(self, ins) -> None:
        # bit-exact when the dtypes match, else an fp32 round trip (isa.md section 3 item 3)
        same = ins.src.dtype == ins.dst.dtype
        ins.dst.write(ins.src.read() if same and self.exact_copy else ins.src.read_f32())

    def check_tensor_scalar(self, ins) -> None:
        self.check_like(ins, "src", ins.src, ("dst", ins.dst))
        if (ins.op1 is None) != (ins.operand1 is None):
            raise SimError(f"{ins.label}: op1 and operand1 must be given together")
        self.check_column(ins, "operand0", ins.operand0, "src", ins.src)
        self.check_column(ins, "operand1", ins.operand1, "src", ins.src)

    cost_tensor_scalar = cost_tensor_copy  # one or two ops cost the same (isa.md 8.3)

    def exec_tensor_scalar(self, ins) -> None:
        exact = self.int_exact((ins.op0, ins.op1), ins.src, ins.dst, ins.operand0, ins.operand1)
        t = alu(ins.op0, self.load(ins.src, exact), self.column(ins.operand0, exact), ins.reverse0)
        if ins.op1 is not None:
            t = alu(ins.op1, t, self.column(ins.operand1, exact), ins.reverse1)
        ins.dst.write(t)

    def check_tensor_tensor(self, ins) -> None:
        self.check_like(ins, "src0", ins.src0, ("src1", ins.src1), ("dst", ins.dst))
        if ins.src0.memory == ins.src1.memory == "psum":
            raise SimError(f"{ins.label}: src0 '{ins.src0}' and src1 '{ins.src1}' are both in "
                           f"PSUM; at most one input may be")

    def exec_tensor_tensor(self, ins) -> None:
        exact = self.int_exact((ins.alu,), ins.src0, ins.src1, ins.dst)
        ins.dst.write(alu(ins.alu, self.load(ins.src0, exact), self.load(ins.src1, exact)))

    def check_memset(self, ins) -> None:
        self.check_operand(ins, "dst", ins.dst)

    def cost_memset(self, ins, prev) -> float:
        # max(MIN_II, N/2) for zero into bf16/fp16, else max(MIN_II, N) (isa.md 10)
        n = ins.dst.free_size
        fast = ins.value == 0 and ins.dst.dtype.is_16bit_float
        return self.ii(n / 2 if fast else n) + self.overhead(ins)

    def exec_memset(self, ins) -> None:
        exact = self.int_exact((), ins.dst, ins.value)
        value = ins.value if exact else fp32(ins.value)
        ins.dst.write(np.full(ins.dst.shape, value, np.int64 if exact else np.float32))
