"""TensorE: the 128x128 systolic array. Reads SBUF, writes fp32 (or bf16 on NC-v4) into PSUM.

Cost (trainium.md 3.1 and 3.5, published for NC-v2, used for later cores as a labelled
assumption): a back-to-back matmul takes `max(min(64, M), N)` cycles (M = stationary free size,
N = moving free size), four times that for fp32 inputs, and at least MM_INIT_LATENCY (64): the
initiation interval is `max(N, MM_INIT_LATENCY)`, a floor, not an addition. fp8 in double-row
mode contracts K = 2 x 128 in the same time, so it does twice the FLOPs. LoadStationary runs in
the background behind the previous matmul; when the engine starts cold (first instruction, or
one that waits on a semaphore) a new stationary's LoadStationary is exposed. The warm-up of the
PE array (the dI/dt throttle) depends on when instructions run, so the run loop applies it
(`trnsim.engines.warmup`).
"""

from __future__ import annotations

import numpy as np

from trnsim.engines.base import (
    EngineModel,
    check_memory,
    check_partition_start,
)
from trnsim.errors import SimError
from trnsim.isa import Engine, Instr, Matmul, Transpose


def _same_operand(a, b) -> bool:
    return a.buf is b.buf and a.ranges == b.ranges


class TensorEngine(EngineModel):
    """Matmul and transpose on the PE array."""

    engine = Engine.TENSOR
    OPS = ("matmul", "transpose")

    def execute(self, ins: Instr) -> None:
        """Compute ins; inf * 0 = NaN and overflow to inf are values here, not warnings."""
        with np.errstate(all="ignore"):
            super().execute(ins)

    # -- matmul --------------------------------------------------------------------------------

    def _double_row(self, ins: Matmul) -> bool:
        """fp8 x fp8 with a [K, 2, M] stationary and [K, 2, N] moving on a double-row core."""
        s, m = ins.stationary, ins.moving
        return (
            self.core.tensor.fp8_double_row
            and s.dtype.is_fp8
            and m.dtype.is_fp8
            and len(s.shape) == 3
            and len(m.shape) == 3
            and s.shape[1] == 2
            and m.shape[1] == 2
        )

    def _mkn(self, ins: Matmul) -> tuple[int, int, int]:
        """(M, K, N) with K the full contraction (2 x partitions in double-row mode)."""
        s, m = ins.stationary, ins.moving
        if self._double_row(ins):
            return s.shape[2], 2 * s.partitions, m.shape[2]
        return s.free_size, s.partitions, m.free_size

    def check_matmul(self, ins: Matmul) -> None:
        t, s, m, d = self.core.tensor, ins.stationary, ins.moving, ins.dst
        check_memory(ins, "stationary", s, ("sbuf",))
        check_memory(ins, "moving", m, ("sbuf",))
        check_memory(ins, "dst", d, ("psum",))
        for name, r in (("stationary", s), ("moving", m), ("dst", d)):
            check_partition_start(ins, name, r, self.core)
        for name, r in (("stationary", s), ("moving", m)):
            if not r.dtype.is_float:
                raise SimError(
                    f"{ins.label}: {name} '{r}' is {r.dtype.name}; matmul takes "
                    f"float inputs (fp8, bf16, fp16, fp32)"
                )
        if (s.dtype.name == "float32") != (m.dtype.name == "float32"):
            raise SimError(
                f"{ins.label}: stationary is {s.dtype.name} and moving is "
                f"{m.dtype.name}; fp32 can only be multiplied by fp32"
            )
        if s.partitions != m.partitions:
            raise SimError(
                f"{ins.label}: stationary '{s}' has {s.partitions} partitions (K) "
                f"but moving '{m}' has {m.partitions}; K must match"
            )
        if s.partitions > t.rows:
            raise SimError(
                f"{ins.label}: contraction K={s.partitions} exceeds the {t.rows}-row PE array"
            )
        mm, _, n = self._mkn(ins)
        if mm > t.cols:
            raise SimError(
                f"{ins.label}: stationary '{s}' has free size M={mm}, more than {t.cols}"
            )
        if d.dtype.name == "bfloat16" and not t.bf16_dst:
            raise SimError(
                f"{ins.label}: dst '{d}' is bfloat16; this core's matmul writes float32 into PSUM"
            )
        if d.dtype.name not in ("float32", "bfloat16"):
            raise SimError(
                f"{ins.label}: dst '{d}' is {d.dtype.name}; matmul writes float32"
                f"{' or bfloat16' if t.bf16_dst else ''} into PSUM"
            )
        limit = t.moving_free_max if d.dtype.name == "float32" else t.moving_free_max_bf16_dst
        if n > limit:
            raise SimError(
                f"{ins.label}: moving '{m}' has free size N={n}, more than this "
                f"core's limit of {limit} for a {d.dtype.name} PSUM destination"
            )
        if d.partitions != mm or d.free_size != n:
            raise SimError(
                f"{ins.label}: dst '{d}' is {d.partitions} x {d.free_size} per "
                f"partition but the product is M x N = {mm} x {n}"
            )
        self._check_psum_span(ins, d, limit)

    def _check_psum_span(self, ins: Instr, d, limit_elems: int) -> None:
        """A matmul output must stay inside one PSUM bank on NC-v2/v3 (all banks on NC-v4)."""
        p = self.core.psum
        span_banks = max(1, (limit_elems * 4) // p.bank_bytes)
        first = d.buf.offset + _free_byte_offset(d, first=True)
        last = d.buf.offset + _free_byte_offset(d, first=False)
        if first // p.bank_bytes + span_banks <= last // p.bank_bytes:
            what = "one PSUM bank" if span_banks == 1 else f"{span_banks} PSUM banks"
            raise SimError(
                f"{ins.label}: dst '{d}' covers PSUM bytes {first}..{last} of each "
                f"partition, which crosses a bank boundary; a matmul output must fit "
                f"in {what} ({p.bank_bytes} B each)"
            )

    def cost_matmul(self, ins: Matmul, prev: Instr | None) -> float:
        t = self.core.tensor
        mm, _, n = self._mkn(ins)
        cycles = max(min(t.stationary_min_cycles, mm), n)
        if ins.stationary.dtype.name == "float32":
            cycles /= t.fp32_rate
        cycles = max(cycles, t.mm_init_latency_cycles)
        if prev is None or ins.wait:
            if not (isinstance(prev, Matmul) and _same_operand(prev.stationary, ins.stationary)):
                cycles += t.load_stationary_cycles
        return cycles

    def exec_matmul(self, ins: Matmul) -> None:
        _, k, _ = self._mkn(ins)
        # the products summed in float64 and rounded once to fp32 (assumption: the PE array's
        # accumulation order is not published), as VectorE's reductions are: an fp32 BLAS
        # product rounds by the host's SIMD kernel and the operands' shapes, so the same
        # values gave other sums at another LNC or on another machine
        st = ins.stationary.read_f32().reshape(k, -1).astype(np.float64)
        mv = ins.moving.read_f32().reshape(k, -1).astype(np.float64)
        out = (st.T @ mv).astype(np.float32)
        if ins.accumulate:
            out = ins.dst.read_f32().reshape(out.shape) + out
        ins.dst.write(out)

    def flops_matmul(self, ins: Matmul) -> int:
        mm, k, n = self._mkn(ins)
        return 2 * mm * k * n

    # -- transpose -----------------------------------------------------------------------------

    def check_transpose(self, ins: Transpose) -> None:
        s, d = ins.src, ins.dst
        check_memory(ins, "src", s, ("sbuf",))
        check_memory(ins, "dst", d, ("psum",))
        check_partition_start(ins, "src", s, self.core)
        check_partition_start(ins, "dst", d, self.core)
        if s.free_size > self.core.tensor.cols:
            raise SimError(
                f"{ins.label}: src '{s}' has {s.free_size} elements per partition; "
                f"a TensorE transpose takes at most {self.core.tensor.cols}"
            )
        if d.partitions != s.free_size or d.free_size != s.partitions:
            raise SimError(
                f"{ins.label}: dst '{d}' is {d.partitions} x {d.free_size}; the "
                f"transpose of '{s}' is {s.free_size} x {s.partitions}"
            )
        if d.dtype.name not in ("float32", s.dtype.name):
            raise SimError(
                f"{ins.label}: dst '{d}' is {d.dtype.name}; a transpose writes "
                f"float32 or the source dtype ({s.dtype.name})"
            )

    def cost_transpose(self, ins: Transpose, prev: Instr | None) -> float:
        t = self.core.tensor
        cycles = max(ins.src.partitions, min(t.stationary_min_cycles, ins.src.free_size))
        if ins.src.dtype.name == "float32":
            cycles /= t.transpose_fp32_rate
        return max(cycles, t.mm_init_latency_cycles)

    def exec_transpose(self, ins: Transpose) -> None:
        src = ins.src.read().reshape(ins.src.partitions, -1)
        ins.dst.write(src.T if src.dtype == ins.dst.dtype.np else src.T.astype(np.float32))


def _free_byte_offset(ref, first: bool) -> int:
    """Byte offset inside a partition of the first (or last) byte a tile view touches."""
    item = ref.buf.dtype.itemsize
    strides, acc = [], item
    for n in reversed(ref.buf.shape[1:]):
        strides.append(acc)
        acc *= n
    off = 0
    for (start, stop, step), stride in zip(ref.ranges[1:], reversed(strides)):
        idx = start if first else start + ((stop - 1 - start) // step) * step
        off += idx * stride
    return off if first else off + item - 1
