"""`AluEngine`: the base of the Vector, Scalar and GpSimd models.

It holds the operand rules (memory, partition start, free-size limits, matching shapes), the
value helpers (fp32 or integer-exact loads, per-partition columns, selects), the cost helpers
(the MIN_II floor, the dependency overhead) and the instructions more than one of the three
engines runs (`tensor_copy`, `tensor_scalar`, `tensor_tensor`, `scalar_tensor_tensor`,
`memset`). The arithmetic itself
is in `trnsim.engines.alu_math`.
"""

from __future__ import annotations

import numpy as np

from trnsim.dtypes import to_dtype
from trnsim.engines.alu_math import INT_EXACT_ALU, alu, fp32, is_int
from trnsim.engines.base import (
    BarrierOps,
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


class AluEngine(BarrierOps, EngineModel):
    """Base of the Vector, Scalar and GpSimd models: operand rules, shared instructions, costs.

    Subclasses list the ops they run in `OPS` (others are rejected, even if defined here), the
    memories their operands may use in `MEMORIES`, whether integer operands are computed exactly
    (`INT_EXACT`, GpSimd) and, through `copy_factor`, their tensor_copy/tensor_scalar speed-up.
    """

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

    @property
    def max_free(self) -> int:
        """Elements per partition an SBUF operand may have (VectorE: its own, lower limit on
        NC-v3/v4)."""
        return self.core.vector.max_free_elements

    # -- operand checks ------------------------------------------------------------------------

    def check_operand(self, ins: Instr, name: str, ref: Ref) -> None:
        """Memory, partition start and free-size limit (`max_free` in SBUF, 4K in PSUM)."""
        check_memory(ins, name, ref, self.MEMORIES)
        check_partition_start(ins, name, ref, self.core)
        vec = self.core.vector
        limit = vec.psum_max_free_elements if ref.memory == "psum" else self.max_free
        if ref.free_size > limit:
            raise SimError(
                f"{ins.label}: {name} '{ref}' has {ref.free_size} elements per "
                f"partition, more than the {ref.memory.upper()} limit of {limit}"
            )

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
            raise SimError(
                f"{ins.label}: {name} '{ref}' has {ref.free_size} elements per "
                f"partition; a per-partition operand must be a [P,1] tile"
            )

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
        return (
            self.INT_EXACT
            and all(op is None or op in INT_EXACT_ALU for op in ops)
            and all(
                not x.dtype.is_float if isinstance(x, Ref) else is_int(x)
                for x in operands
                if x is not None
            )
        )

    def where(self, pred: np.ndarray, on_true: Ref, on_false, dst: Ref) -> None:
        """dst = on_true where pred else on_false; bit-exact when the dtypes equal dst's."""
        p = dst.partitions
        same = on_true.dtype == dst.dtype and (
            not isinstance(on_false, Ref) or on_false.dtype == dst.dtype
        )
        if same:
            t = per_partition(on_true.read(), p)
            f = (
                per_partition(on_false.read(), p)
                if isinstance(on_false, Ref)
                else to_dtype(np.full((1, 1), fp32(on_false), np.float32), dst.dtype)
            )
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
            raise SimError(
                f"{ins.label}: src0 '{ins.src0}' and src1 '{ins.src1}' are both in "
                f"PSUM; at most one input may be"
            )

    def exec_tensor_tensor(self, ins) -> None:
        exact = self.int_exact((ins.alu,), ins.src0, ins.src1, ins.dst)
        ins.dst.write(alu(ins.alu, self.load(ins.src0, exact), self.load(ins.src1, exact)))

    def check_scalar_tensor_tensor(self, ins) -> None:
        self.check_like(ins, "data", ins.data, ("operand1", ins.operand1), ("dst", ins.dst))
        self.check_column(ins, "operand0", ins.operand0, "data", ins.data)
        if ins.data.memory == ins.operand1.memory == "psum":
            raise SimError(
                f"{ins.label}: data '{ins.data}' and operand1 '{ins.operand1}' are both in "
                f"PSUM; at most one input may be"
            )

    def exec_scalar_tensor_tensor(self, ins) -> None:
        # (data op0 operand0) op1 operand1 in fp32 (integer-exact on GpSimd), rounded once to
        # dst's dtype, as tensor_scalar's two ops
        exact = self.int_exact((ins.op0, ins.op1), ins.data, ins.operand1, ins.dst, ins.operand0)
        t = alu(ins.op0, self.load(ins.data, exact), self.column(ins.operand0, exact),
                ins.reverse0)  # fmt: skip
        ins.dst.write(alu(ins.op1, t, self.load(ins.operand1, exact), ins.reverse1))

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
