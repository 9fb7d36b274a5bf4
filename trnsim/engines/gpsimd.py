"""GpSimd (Pool): eight SIMD cores of 16 partitions; iota, affine masks, integer-exact ALU ops.

All operands live in SBUF (`isa.md` 1). Semantics follow `isa.md` 8.4; costs `trainium.md` 3.3.
"""

from __future__ import annotations

import numpy as np

from trnsim.engines.alu import AluEngine
from trnsim.engines.alu_math import alu, fp32, is_int
from trnsim.isa import Engine

# ALU operators GpSimd evaluates as transcendentals (pow: exp(b * log a)), charged
# `transcendental_cycles_per_element` per element instead of one
TRANSCENDENTAL_ALU = frozenset({"pow"})


class GpSimdEngine(AluEngine):
    """The GpSimd engine: SBUF only; integer operands are computed exactly, not through fp32."""

    engine = Engine.GPSIMD
    OPS = (
        "iota",
        "affine_select",
        "tensor_copy",
        "memset",
        "tensor_scalar",
        "tensor_tensor",
        "scalar_tensor_tensor",
        "core_barrier",
    )
    MEMORIES = ("sbuf",)
    INT_EXACT = True

    def per_element(self, *ops) -> int:
        """Cycles per element of the ALU ops: the transcendental figure if one of them is
        (N-SH: rsqrt on GpSimd has 4x lower throughput than on ScalarE), else 1."""
        slow = any(op in TRANSCENDENTAL_ALU for op in ops)
        return self.cfg.transcendental_cycles_per_element if slow else 1

    def cost_tensor_scalar(self, ins, prev) -> float:
        # max(MIN_II, c N): c = 1 (isa.md 10), or the transcendental figure with a pow
        n = ins.dst.free_size * self.per_element(ins.op0, ins.op1)
        return self.ii(n) + self.overhead(ins)

    def cost_tensor_tensor(self, ins, prev) -> float:
        # assumption: like VectorE without its fast paths, two input streams at one element per
        # cycle each: max(MIN_II, 2N) (no GpSimd figure is published, trainium.md 3.3); a pow
        # is bound by its evaluation instead: max(MIN_II, c N)
        n = ins.dst.free_size * max(2, self.per_element(ins.alu))
        return self.ii(n) + self.overhead(ins)

    def cost_scalar_tensor_tensor(self, ins, prev) -> float:
        # assumption: as its tensor_tensor (two input streams, nothing published for GpSimd):
        # max(MIN_II, 2N), or max(MIN_II, c N) with a pow
        n = ins.dst.free_size * max(2, self.per_element(ins.op0, ins.op1))
        return self.ii(n) + self.overhead(ins)

    # -- iota / affine_select ------------------------------------------------------------------

    def affine(self, ins, partitions: int, n: int) -> np.ndarray:
        """[P, N] of start + p*partition_step + i*step: int32 arithmetic (wrapping) when all
        three are integers, else fp32 (isa.md 8.4)."""
        terms = (ins.start, ins.partition_step, ins.step)
        if all(is_int(t) for t in terms):
            start, ps, step = (np.int64(t) for t in terms)
            p, i = np.arange(partitions, dtype=np.int64), np.arange(n, dtype=np.int64)
            return (start + p[:, None] * ps + i[None, :] * step).astype(np.int32)
        start, ps, step = (fp32(t) for t in terms)
        p, i = np.arange(partitions, dtype=np.float32), np.arange(n, dtype=np.float32)
        return (start + p[:, None] * ps) + i[None, :] * step

    def check_iota(self, ins) -> None:
        self.check_operand(ins, "dst", ins.dst)

    def cost_iota(self, ins, prev) -> float:
        # GPSIMD_START + N (trainium.md 3.3)
        return self.cfg.start_cycles + ins.dst.free_size + self.overhead(ins)

    def exec_iota(self, ins) -> None:
        v = self.affine(ins, ins.dst.partitions, ins.dst.free_size)
        # an int32 result reaches a float dst through fp32, the engines' cast path
        ins.dst.write(v.astype(np.float32) if ins.dst.dtype.is_float else v)

    def check_affine_select(self, ins) -> None:
        self.check_like(ins, "dst", ins.dst, ("on_true", ins.on_true))

    cost_affine_select = cost_iota

    def exec_affine_select(self, ins) -> None:
        v = self.affine(ins, ins.dst.partitions, ins.dst.free_size)
        pred = alu(ins.cmp, v, v.dtype.type(0)) != 0
        self.where(pred, ins.on_true, ins.on_false, ins.dst)
