"""VectorE (DVE): two-input elementwise ops, reductions, batch-norm statistics, copies, selects.

Semantics follow `isa.md` sections 3, 5 and 8.3; costs follow `trainium.md` 3.2 (NKI cost
docstrings, stated for NC-v2) with the NC-v3+ perf modes of `trainium.md` 2.3.
"""

from __future__ import annotations

import math

import numpy as np

from trnsim.engines.alu import AluEngine
from trnsim.engines.base import check_same_free, check_same_partitions, per_partition
from trnsim.errors import SimError
from trnsim.isa import Engine
from trnsim.memory.buffer import Ref

FAST_TT_ALU = ("add", "subtract", "multiply")  # N-A2 one-pass tensor_tensor ops


class VectorEngine(AluEngine):
    """The Vector engine: reads and writes SBUF and PSUM, fp32 math with free casts."""

    engine = Engine.VECTOR
    OPS = (
        "tensor_tensor",
        "tensor_scalar",
        "scalar_tensor_tensor",
        "tensor_reduce",
        "bn_stats",
        "bn_aggr",
        "tensor_copy",
        "memset",
        "select",
        "core_barrier",
    )

    @property
    def max_free(self) -> int:
        # NKL: DVE instructions take at most 2^14 free elements on NC-v3/v4
        return self.core.vector.dve_max_free_elements

    def copy_factor(self, src: Ref, dst: Ref) -> float:
        # NC-v3+ perf mode (trainium.md 2.3): bf16/fp16 tensor_copy/tensor_scalar run 4x when
        # both sides are SBUF with a contiguous innermost dim, 2x when strided or one is PSUM.
        cfg = self.cfg
        if not (cfg.perf_mode and src.dtype.is_16bit_float and dst.dtype.is_16bit_float):
            return 1.0
        if src.memory == dst.memory == "sbuf" and src.contiguous and dst.contiguous:
            return cfg.copy_fast_factor
        return cfg.copy_fast_factor_strided

    # -- tensor_tensor (shared check/exec in AluEngine) -----------------------------------------

    def cost_tensor_tensor(self, ins, prev) -> float:
        # max(MIN_II, N) with one input in PSUM, or all-16-bit SBUF add/subtract/multiply with
        # unit stride (N-A2); NC-v3+ perf mode: 2N / tt_fast_factor with both inputs in SBUF and
        # every operand 16-bit; otherwise max(MIN_II, 2N) (trainium.md 3.2).
        a, b, d = ins.src0, ins.src1, ins.dst
        n = d.free_size
        all16 = all(r.dtype.is_16bit_float for r in (a, b, d))
        both_sbuf = a.memory == b.memory == "sbuf"
        contiguous = all(r.contiguous for r in (a, b, d))
        if "psum" in (a.memory, b.memory) or (
            all16 and both_sbuf and contiguous and ins.alu in FAST_TT_ALU
        ):
            cycles = n
        elif self.cfg.perf_mode and all16 and both_sbuf:
            cycles = 2 * n / self.cfg.tt_fast_factor
        else:
            cycles = 2 * n
        return self.ii(cycles) + self.overhead(ins)

    # -- scalar_tensor_tensor (shared check/exec in AluEngine) ----------------------------------

    def cost_scalar_tensor_tensor(self, ins, prev) -> float:
        # N with data and operand1 bf16, op0 subtract, op1 multiply and N even, else 2N
        # (trainium.md 3.2; the MIN_II floor and no perf-mode halving of 2N are assumptions:
        # the published rule names neither)
        n = ins.dst.free_size
        fast = (
            ins.data.dtype.name == ins.operand1.dtype.name == "bfloat16"
            and ins.op0 == "subtract"
            and ins.op1 == "multiply"
            and n % 2 == 0
        )
        return self.ii(n if fast else 2 * n) + self.overhead(ins)

    # -- tensor_reduce -------------------------------------------------------------------------

    def reduce_axes(self, ins) -> tuple[int, ...]:
        """The src view dims to reduce: None = the last; ints may count from the end (-1).

        The hardware requires trailing free dims, but its access patterns can reorder dims and
        ours cannot, so any set of free dims is accepted here."""
        nd = len(ins.src.shape)
        axes = ins.axis if isinstance(ins.axis, (list, tuple)) else [ins.axis]
        out = []
        for a in axes:
            d = nd - 1 if a is None else (a + nd if a < 0 else a)
            if not 1 <= d < nd:
                raise SimError(
                    f"{ins.label}: axis {a} is not a free axis of src '{ins.src}' "
                    f"(shape {list(ins.src.shape)}; axis 0 is the partition axis)"
                )
            out.append(d)
        if len(set(out)) != len(out):
            raise SimError(f"{ins.label}: axis lists a dimension twice: {ins.axis}")
        return tuple(sorted(out))

    def check_tensor_reduce(self, ins) -> None:
        self.check_operand(ins, "src", ins.src)
        self.check_operand(ins, "dst", ins.dst)
        check_same_partitions(ins, "dst", ins.dst, "src", ins.src)
        axes = self.reduce_axes(ins)
        n = math.prod(s for d, s in enumerate(ins.src.shape) if d and d not in axes)
        if ins.dst.free_size != n:
            raise SimError(
                f"{ins.label}: dst '{ins.dst}' has {ins.dst.free_size} elements per "
                f"partition but reducing src '{ins.src}' over axis {list(axes)} "
                f"leaves {n}"
            )

    def cost_tensor_reduce(self, ins, prev) -> float:
        # N/2 for bf16 in and out with add or max, else N (isa.md 10); the MIN_II floor is an
        # assumption (the docstring gives none for tensor_reduce).
        n = ins.src.free_size
        fast = ins.src.dtype.name == ins.dst.dtype.name == "bfloat16" and ins.alu in ("add", "max")
        return self.ii(n / 2 if fast else n) + self.overhead(ins)

    def exec_tensor_reduce(self, ins) -> None:
        # add/multiply accumulate in float64 and round once to fp32 (assumption: the hardware's
        # accumulation order is not published)
        x, axes = ins.src.read_f32(), self.reduce_axes(ins)
        with np.errstate(all="ignore"):
            if ins.alu == "add":
                r = x.sum(axis=axes, dtype=np.float64)
            elif ins.alu == "multiply":
                r = x.prod(axis=axes, dtype=np.float64)
            else:
                r = (x.max if ins.alu == "max" else x.min)(axis=axes)
        ins.dst.write(np.asarray(r).astype(np.float32))

    # -- bn_stats / bn_aggr --------------------------------------------------------------------

    def check_bn_stats(self, ins) -> None:
        self.check_operand(ins, "src", ins.src)
        self.check_operand(ins, "dst", ins.dst)
        check_same_partitions(ins, "dst", ins.dst, "src", ins.src)
        limit = self.cfg.bn_stats_max_free  # nl.tile_size.bn_stats_fmax (isa.md 1)
        if ins.src.free_size > limit:
            raise SimError(
                f"{ins.label}: src '{ins.src}' has {ins.src.free_size} elements per "
                f"partition, more than bn_stats' limit of {limit}"
            )
        if ins.dst.free_size != 6:
            raise SimError(
                f"{ins.label}: dst '{ins.dst}' has {ins.dst.free_size} elements per "
                f"partition; bn_stats writes 6 (count, mean, M2 for even and odd)"
            )

    def cost_bn_stats(self, ins, prev) -> float:
        return self.ii(ins.src.free_size) + self.overhead(ins)  # max(MIN_II, N) (isa.md 10)

    def exec_bn_stats(self, ins) -> None:
        # [n, mean, M2] of the even then the odd free indices (isa.md 8.3), in float64
        x = per_partition(ins.src.read_f32(), ins.src.partitions).astype(np.float64)
        out = []
        for part in (x[:, 0::2], x[:, 1::2]):
            n = part.shape[1]
            mean = part.mean(axis=1) if n else np.zeros(len(x))
            m2 = ((part - mean[:, None]) ** 2).sum(axis=1)
            out += [np.full(len(x), float(n)), mean, m2]
        ins.dst.write(np.stack(out, axis=1).astype(np.float32))

    def check_bn_aggr(self, ins) -> None:
        self.check_operand(ins, "src", ins.src)
        self.check_operand(ins, "dst", ins.dst)
        check_same_partitions(ins, "dst", ins.dst, "src", ins.src)
        if ins.src.free_size % 3:
            raise SimError(
                f"{ins.label}: src '{ins.src}' has {ins.src.free_size} elements per "
                f"partition; bn_aggr needs (count, mean, M2) triples, a multiple of 3"
            )
        if ins.dst.free_size != 2:
            raise SimError(
                f"{ins.label}: dst '{ins.dst}' has {ins.dst.free_size} elements per "
                f"partition; bn_aggr writes 2 (mean, variance)"
            )

    def cost_bn_aggr(self, ins, prev) -> float:
        # max(MIN_II, 13*(N/3)) (isa.md 10)
        return self.ii(13 * (ins.src.free_size / 3)) + self.overhead(ins)

    def exec_bn_aggr(self, ins) -> None:
        # Chan's parallel combination of (count, mean, M2) triples; population variance
        s = per_partition(ins.src.read_f32(), ins.src.partitions).astype(np.float64)
        n, mean, m2 = s[:, 0], s[:, 1], s[:, 2]
        with np.errstate(all="ignore"):
            for k in range(3, s.shape[1], 3):
                nb, mb, m2b = s[:, k], s[:, k + 1], s[:, k + 2]
                tot = n + nb
                safe = np.where(tot > 0, tot, 1.0)
                delta = mb - mean
                mean = np.where(tot > 0, mean + delta * nb / safe, 0.0)
                m2 = m2 + m2b + delta * delta * n * nb / safe
                n = tot
            var = np.where(n > 0, m2 / np.where(n > 0, n, 1.0), 0.0)
        ins.dst.write(np.stack([mean, var], axis=1).astype(np.float32))

    # -- select --------------------------------------------------------------------------------

    def check_select(self, ins) -> None:
        self.check_like(ins, "dst", ins.dst, ("predicate", ins.predicate), ("on_true", ins.on_true))
        if ins.predicate.memory == ins.on_true.memory == "psum":
            raise SimError(
                f"{ins.label}: predicate '{ins.predicate}' and on_true "
                f"'{ins.on_true}' are both in PSUM; at most one may be"
            )
        f = ins.on_false
        if isinstance(f, Ref):
            self.check_operand(ins, "on_false", f)
            check_same_partitions(ins, "on_false", f, "dst", ins.dst)
            if f.free_size != 1:
                check_same_free(ins, "on_false", f, "dst", ins.dst)

    def cost_select(self, ins, prev) -> float:
        # tensor_copy_predicated: max(MIN_II, N) with one side in PSUM, else max(MIN_II, 2N)
        n = ins.dst.free_size
        psum = "psum" in (ins.predicate.memory, ins.on_true.memory)
        return self.ii(n if psum else 2 * n) + self.overhead(ins)

    def exec_select(self, ins) -> None:
        pred = self.load(ins.predicate) != 0
        self.where(pred, ins.on_true, ins.on_false, ins.dst)
