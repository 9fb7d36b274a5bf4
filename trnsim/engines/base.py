"""What every engine model supplies, and the helpers they share.

An engine model is pure: `check(ins)` validates an instruction against the hardware's rules,
`cost(ins, prev)` gives its duration in the engine's own cycles (`prev` is the instruction before it
on the same queue, or None), `stall(ins, prev)` the cycles it must wait after `prev` ends for
`prev`'s result (a read after write on the same engine waits for the pipeline to commit),
`execute(ins)` computes its values with numpy, and `flops(ins)` counts its floating-point
operations. Dispatch is by op name to `check_<op>`, `cost_<op>`, `exec_<op>` methods (tinygrad's
`_exec_<packet>` pattern). The SimPy run loop lives once, in `trnsim.core.plan`, and calls none of
these while the simulation runs except `execute`.
"""

from __future__ import annotations

import numpy as np

from trnsim.config import CoreConfig
from trnsim.errors import SimError
from trnsim.isa import Engine, Instr
from trnsim.memory.buffer import Ref


class EngineModel:
    """Base of the four compute-engine models. Subclasses set `engine` and list the ops they run
    in `OPS` (others are rejected, even if a method for them is inherited); tests check `OPS`
    against the ISA's engine table (`Instr.ENGINE`, `Instr.ENGINES`)."""

    engine: Engine = Engine.VECTOR
    OPS: tuple[str, ...] = ()

    def __init__(self, core: CoreConfig):
        self.core = core

    @property
    def clock_hz(self) -> int:
        return getattr(self.core, self.engine.label).clock_hz

    def _method(self, prefix: str, ins: Instr):
        fn = getattr(self, f"{prefix}_{ins.OP}", None) if ins.OP in self.OPS else None
        if fn is None:
            raise SimError(f"{ins.label}: not supported on the {self.engine.label} engine")
        return fn

    def check(self, ins: Instr) -> None:
        """Raise SimError naming the instruction if the hardware would reject it."""
        self._method("check", ins)(ins)

    def cost(self, ins: Instr, prev: Instr | None) -> float:
        """Duration in this engine's cycles."""
        return self._method("cost", ins)(ins, prev)

    def stall(self, ins: Instr, prev: Instr | None) -> float:
        """Cycles `ins` waits after `prev` ends before it may start: the engine's
        `commit_latency_cycles` when `ins` reads what `prev` wrote, else 0 (engines whose
        config has no commit latency never wait)."""
        latency = getattr(getattr(self.core, self.engine.label), "commit_latency_cycles", 0)
        return latency if latency and prev is not None and reads_after_write(ins, prev) else 0

    def execute(self, ins: Instr) -> None:
        """Compute the instruction's values into its destination(s)."""
        self._method("exec", ins)(ins)

    def flops(self, ins: Instr) -> int:
        """Floating-point operations performed (for FLOP/s reports); 0 when not counted."""
        fn = getattr(self, f"flops_{ins.OP}", None)
        return fn(ins) if fn else 0


class BarrierOps:
    """core_barrier on a compute engine (isa.md 8.6): the engine's part is only to stop; the
    crossing itself (its latency, the wait for the peer) is the run loop's (`core.link`)."""

    def check_core_barrier(self, ins: Instr) -> None:
        if not self.core.core_barrier:
            raise SimError(
                f"{ins.label}: core_barrier is not supported on {self.core.version}; expected a "
                f"chip with NC-v3 or later cores (trn2, trn3)"
            )
        check_memory(ins, "data", ins.data, ("hbm",))

    def cost_core_barrier(self, ins: Instr, prev: Instr | None) -> float:
        return 0

    def exec_core_barrier(self, ins: Instr) -> None:
        return None


# outputs of an instruction; every other operand is read
WRITTEN = ("dst", "reduce_dst")


def reads_after_write(ins: Instr, prev: Instr) -> bool:
    """Whether `ins` reads an element that `prev` writes (conservatively: a read view and a
    written view of one buffer whose index intervals overlap in every dim)."""
    written = [getattr(prev, n, None) for n in WRITTEN]
    written = [w for w in written if isinstance(w, Ref)]
    if not written:
        return False
    for f in ins.op_fields():
        r = getattr(ins, f.name)
        if f.name in WRITTEN or not isinstance(r, Ref):
            continue
        for w in written:
            if w.buf is r.buf and all(
                a0 < b1 and b0 < a1 for (a0, a1, _), (b0, b1, _) in zip(r.ranges, w.ranges)
            ):
                return True
    return False


# ----------------------------------------------------------------------------------------------
# shared checks


def check_memory(ins: Instr, name: str, ref, allowed: tuple[str, ...]) -> None:
    """The operand `name` must live in one of `allowed` memories."""
    if isinstance(ref, Ref) and ref.memory not in allowed:
        raise SimError(
            f"{ins.label}: {name} '{ref}' is in {ref.memory.upper()}, expected "
            f"{' or '.join(m.upper() for m in allowed)}"
        )


def check_partition_start(ins: Instr, name: str, ref: Ref, core: CoreConfig) -> None:
    """Partition-start rule (isa.md section 4): an access of n partitions starts at a multiple of
    the least of `core.partition_start_steps` that is >= n (with steps 32, 64, 128: n <= 32 at 0,
    32, 64 or 96; 32 < n <= 64 at 0 or 64; 64 < n at 0). Also n <= the memory's partitions."""
    n, s = ref.partitions, ref.p_start
    partitions = core.psum.partitions if ref.memory == "psum" else core.sbuf.partitions
    if n > partitions:
        raise SimError(f"{ins.label}: {name} '{ref}' spans {n} partitions, more than {partitions}")
    steps = core.partition_start_steps
    step = next(x for x in steps if x >= n)  # the config keeps partitions <= steps[-1]
    if s % step:
        allowed = ", ".join(str(x) for x in range(0, steps[-1], step))
        raise SimError(
            f"{ins.label}: {name} '{ref}' spans {n} partitions starting at "
            f"partition {s}; it must start at {allowed}"
        )


def check_same_partitions(ins: Instr, a: str, ra: Ref, b: str, rb: Ref) -> None:
    if ra.partitions != rb.partitions:
        raise SimError(
            f"{ins.label}: {a} '{ra}' has {ra.partitions} partitions but {b} '{rb}' "
            f"has {rb.partitions}"
        )


def check_same_free(ins: Instr, a: str, ra: Ref, b: str, rb: Ref) -> None:
    if ra.free_size != rb.free_size:
        raise SimError(
            f"{ins.label}: {a} '{ra}' has {ra.free_size} elements per partition but "
            f"{b} '{rb}' has {rb.free_size}"
        )


def per_partition(values: np.ndarray, partitions: int) -> np.ndarray:
    """View values as [partitions, elements per partition]."""
    return values.reshape(partitions, -1)
