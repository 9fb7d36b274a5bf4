"""ScalarE (ACT): func(src * scale + bias) with an optional free-axis reduction, plus copies and
(multiply/add) tensor_scalar.

Semantics follow `isa.md` sections 3, 6 and 8.2; costs follow `trainium.md` 3.2 and 2.3.
"""

from __future__ import annotations

import numpy as np

from trnsim.engines.alu import AluEngine
from trnsim.engines.alu_math import activate
from trnsim.errors import SimError
from trnsim.isa import Engine
from trnsim.memory.buffer import Ref

# The (op0, op1) pairs ScalarE's tensor_scalar takes on a core without `tensor_scalar_any_ops`
# (NC-v2, NC-v3: isa.md 8.3); NC-v4 runs any pair natively like VectorE.
LIMITED_TS = {("multiply", "add"), ("multiply", None), ("add", None)}


class ScalarEngine(AluEngine):
    """The Scalar (activation) engine: one input tile per instruction, SBUF or PSUM."""

    engine = Engine.SCALAR
    OPS = ("activation", "tensor_copy", "tensor_scalar", "core_barrier")

    @property
    def exact_copy(self) -> bool:
        # NC-v2 ScalarE copies through fp32 (isa.md 3 item 3, reading J); v3+ are bit-exact.
        return self.cfg.copy_bit_exact

    def copy_factor(self, src: Ref, dst: Ref) -> float:
        # NC-v4: up to 2x for bf16/fp16 tensor_scalar/tensor_copy (trainium.md 2.3); the
        # config's perf_mode_factor is 1 on cores without it.
        if src.dtype.is_16bit_float and dst.dtype.is_16bit_float:
            return self.cfg.perf_mode_factor
        return 1.0

    def check_tensor_scalar(self, ins) -> None:
        super().check_tensor_scalar(ins)
        pair = (ins.op0, ins.op1)
        if not self.cfg.tensor_scalar_any_ops and pair not in LIMITED_TS:
            allowed = ", ".join(f"({a}, {b})" for a, b in sorted(LIMITED_TS, key=str))
            raise SimError(
                f"{ins.label}: op0={ins.op0}, op1={ins.op1} is not supported by "
                f"tensor_scalar on the scalar engine of {self.core.version}; "
                f"allowed: {allowed}"
            )

    # -- activation ----------------------------------------------------------------------------

    def check_activation(self, ins) -> None:
        self.check_like(ins, "src", ins.src, ("dst", ins.dst))
        self.check_column(ins, "scale", ins.scale, "src", ins.src)
        self.check_column(ins, "bias", ins.bias, "src", ins.src)
        if (ins.reduce is None) != (ins.reduce_dst is None):
            given, missing = ("reduce", "reduce_dst") if ins.reduce else ("reduce_dst", "reduce")
            raise SimError(f"{ins.label}: {given} is given without {missing}; both or neither")
        if ins.reduce_dst is not None:
            self.check_column(ins, "reduce_dst", ins.reduce_dst, "src", ins.src)
        cfg, version = self.cfg, self.core.version
        if not cfg.reduce_max and ins.reduce not in (None, "add"):
            raise SimError(
                f"{ins.label}: reduce={ins.reduce} is not supported on {version}; "
                f"the activation reduction there is add only"
            )
        if (
            not cfg.reciprocal_bias
            and ins.func == "reciprocal"
            and (isinstance(ins.bias, Ref) or ins.bias != 0)
        ):
            raise SimError(
                f"{ins.label}: func reciprocal cannot be combined with a bias on {version}"
            )

    def cost_activation(self, ins, prev) -> float:
        # max(MIN_II, N) whatever the scale and bias; a reduction adds the ActReadAccumulator
        # instruction, ~MIN_II cycles (trainium.md 3.2)
        cycles = self.ii(ins.src.free_size) + self.overhead(ins)
        return cycles + (self.cfg.reduce_cycles if ins.reduce else 0)

    def exec_activation(self, ins) -> None:
        # fp32 multiply then fp32 add (two roundings), func in float64 rounded to fp32; the
        # reduction folds the fp32 activated values (before the output cast)
        with np.errstate(all="ignore"):
            x = self.load(ins.src) * self.column(ins.scale) + self.column(ins.bias)
        y = activate(ins.func, x)
        ins.dst.write(y)
        if ins.reduce == "add":
            total = y.sum(axis=1, keepdims=True, dtype=np.float64)
            ins.reduce_dst.write(total.astype(np.float32))
        elif ins.reduce == "max":
            ins.reduce_dst.write(y.max(axis=1, keepdims=True))
