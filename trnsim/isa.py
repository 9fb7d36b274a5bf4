"""The low-level instruction set as data: one frozen dataclass per instruction.

Field metadata says how the trace loader parses each field (`kind`) and whether it is required.
Operand fields hold an `Ap` (an access pattern as written in the trace: a tile or tensor name plus
optional slices); `core.resolve` replaces them with bound memory references before simulation.
Semantics follow `../shared/reference/isa.md`; TRACE_FORMAT.md gives the field names.
"""

from __future__ import annotations

import enum
import operator
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, NamedTuple


class Engine(enum.IntEnum):
    """The queues an instruction can go to. The value is the stable tie-break order."""

    TENSOR = 0
    VECTOR = 1
    SCALAR = 2
    GPSIMD = 3
    DMA = 4

    @property
    def label(self) -> str:
        return self.name.lower()


class Ap(NamedTuple):
    """An operand as written: `name` or `name[a:b, c:d]`. `index` holds one entry per indexed
    dim: an int (numpy-style, drops the dim) or a (start, stop, step) triple of optional ints.
    `bcast` holds the broadcast dims, `*n` in the text (`m[0:128, 0:8, *64]`): (k, n) inserts
    a dim of n elements read with stride 0 (the same element n times, isa.md 4: an access
    pattern's steps may be 0) after the first k entries of `index`; the memory touched is
    the index's alone. A tuple, so that hashing it (the simulator memoises per distinct
    operand) runs in C. `text` is the operand as a trace wrote it; one built in code (the kernel
    library's) leaves it empty and is written out from its index when shown (a third of
    lowering time went into texts that were never shown)."""

    name: str
    index: tuple[Any, ...] = ()
    text: str = ""
    bcast: tuple[tuple[int, int], ...] = ()

    def __str__(self) -> str:
        if self.text or not (self.index or self.bcast):
            return self.text or self.name
        items = list(map(_index_text, self.index))
        for k, n in reversed(self.bcast):  # in the order written: k never decreases
            items.insert(k, f"*{n}")
        return f"{self.name}[{', '.join(items)}]"


def _index_text(item) -> str:
    """One entry of an Ap's index as Python writes it: `3`, `0:128`, `::2`."""
    if isinstance(item, int):
        return str(item)
    start, stop, step = item
    start = "" if start is None else start
    stop = "" if stop is None else stop
    return f"{start}:{stop}" + (f":{step}" if step not in (None, 1) else "")


def f(kind: str, required: bool = False, default: Any = None, choices: tuple = (), access=True):
    """An instruction field. kinds: ap, ap_or_num, num, int, bool, str, choice, axes, cores.
    `access`: whether an `ap` field's memory is read or written (the race check, the profile's
    bytes); a barrier's `data` only names the tensor it guards."""
    meta = {"kind": kind, "required": required, "choices": choices, "access": access}
    return field(default=default, metadata=meta)


ACT_FUNCS = (
    "identity",
    "copy",
    "exp",
    "log",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "gelu_tanh",
    "silu",
    "square",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "sin",
    "cos",
    "abs",
    "sign",
    "softplus",
    "erf",
    "arctan",
    "mish",
    "gelu_dx",
    "silu_dx",
)
ARITH_ALU = ("add", "subtract", "multiply", "divide", "max", "min", "pow")
COMPARE_ALU = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
ALU_OPS = ARITH_ALU + COMPARE_ALU
REDUCE_OPS = ("add", "max", "min", "multiply")


@dataclass(frozen=True)
class Instr:
    """Fields every instruction has. `index` is its position in the kernel's list (0-based)."""

    OP: ClassVar[str] = ""
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    ENGINES: ClassVar[tuple[Engine, ...]] = ()  # other engines `engine:` may choose

    index: int = 0
    line: int = 0
    engine: Engine = Engine.VECTOR
    wait: tuple[tuple[str, int], ...] = ()
    signal: tuple[tuple[str, int], ...] = ()

    @property
    def label(self) -> str:
        """How errors name this instruction: `instruction 3 (matmul)`."""
        return f"instruction {self.index} ({self.OP})"

    @classmethod
    def op_fields(cls) -> tuple:
        """The op-specific fields (those with a `kind`), in declaration order."""
        found = _OP_FIELDS.get(cls)
        if found is None:
            found = _OP_FIELDS[cls] = tuple(x for x in fields(cls) if "kind" in x.metadata)
        return found

    @classmethod
    def op_getter(cls):
        """A fast function instr -> tuple of its op-specific field values (for memo keys)."""
        get = _GETTERS.get(cls)
        if get is None:
            names = [x.name for x in cls.op_fields()]
            one = operator.attrgetter(*names)
            get = _GETTERS[cls] = one if len(names) > 1 else (lambda ins: (one(ins),))
        return get


_OP_FIELDS: dict[type, tuple] = {}
_GETTERS: dict[type, object] = {}


@dataclass(frozen=True)
class DmaCopy(Instr):
    OP = "dma_copy"
    ENGINE = Engine.DMA
    src: Any = f("ap", True)
    dst: Any = f("ap", True)
    queue: int = f("int", default=0)
    transpose: bool = f("bool", default=False)
    # a gather: src read in flat order as rows of R = dst.size / indices.size elements; dst's
    # i-th block of R is row indices[i] (integers in SBUF, read when the copy runs)
    indices: Any = f("ap")


@dataclass(frozen=True)
class Matmul(Instr):
    OP = "matmul"
    ENGINE = Engine.TENSOR
    stationary: Any = f("ap", True)
    moving: Any = f("ap", True)
    dst: Any = f("ap", True)
    accumulate: bool = f("bool", default=False)


@dataclass(frozen=True)
class Transpose(Instr):
    OP = "transpose"
    ENGINE = Engine.TENSOR
    src: Any = f("ap", True)
    dst: Any = f("ap", True)


@dataclass(frozen=True)
class Activation(Instr):
    OP = "activation"
    ENGINE = Engine.SCALAR
    func: str = f("choice", True, choices=ACT_FUNCS)
    src: Any = f("ap", True)
    dst: Any = f("ap", True)
    scale: Any = f("ap_or_num", default=1.0)
    bias: Any = f("ap_or_num", default=0.0)
    reduce: str | None = f("choice", choices=("add", "max"))
    reduce_dst: Any = f("ap")


@dataclass(frozen=True)
class TensorTensor(Instr):
    OP = "tensor_tensor"
    ENGINE = Engine.VECTOR
    ENGINES = (Engine.GPSIMD,)
    alu: str = f("choice", True, choices=ALU_OPS)
    src0: Any = f("ap", True)
    src1: Any = f("ap", True)
    dst: Any = f("ap", True)


@dataclass(frozen=True)
class TensorScalar(Instr):
    OP = "tensor_scalar"
    ENGINE = Engine.VECTOR
    ENGINES = (Engine.SCALAR, Engine.GPSIMD)
    src: Any = f("ap", True)
    dst: Any = f("ap", True)
    op0: str = f("choice", True, choices=ALU_OPS)
    operand0: Any = f("ap_or_num", True)
    op1: str | None = f("choice", choices=ALU_OPS)
    operand1: Any = f("ap_or_num")
    reverse0: bool = f("bool", default=False)
    reverse1: bool = f("bool", default=False)


@dataclass(frozen=True)
class ScalarTensorTensor(Instr):
    """dst = (data op0 operand0) op1 operand1: a per-partition scalar (or a number) then a
    second tensor, in one pass (NKI's `scalar_tensor_tensor`), e.g. (x - mean) * weight."""

    OP = "scalar_tensor_tensor"
    ENGINE = Engine.VECTOR
    ENGINES = (Engine.GPSIMD,)
    data: Any = f("ap", True)
    op0: str = f("choice", True, choices=ALU_OPS)
    operand0: Any = f("ap_or_num", True)
    op1: str = f("choice", True, choices=ALU_OPS)
    operand1: Any = f("ap", True)
    dst: Any = f("ap", True)
    reverse0: bool = f("bool", default=False)
    reverse1: bool = f("bool", default=False)


@dataclass(frozen=True)
class TensorReduce(Instr):
    OP = "tensor_reduce"
    ENGINE = Engine.VECTOR
    alu: str = f("choice", True, choices=REDUCE_OPS)
    src: Any = f("ap", True)
    dst: Any = f("ap", True)
    axis: Any = f("axes")  # None = the last free axis; an int or a list of free axes


@dataclass(frozen=True)
class BnStats(Instr):
    OP = "bn_stats"
    ENGINE = Engine.VECTOR
    src: Any = f("ap", True)
    dst: Any = f("ap", True)


@dataclass(frozen=True)
class BnAggr(Instr):
    OP = "bn_aggr"
    ENGINE = Engine.VECTOR
    src: Any = f("ap", True)
    dst: Any = f("ap", True)


@dataclass(frozen=True)
class TensorCopy(Instr):
    OP = "tensor_copy"
    ENGINE = Engine.VECTOR
    ENGINES = (Engine.SCALAR, Engine.GPSIMD)
    src: Any = f("ap", True)
    dst: Any = f("ap", True)


@dataclass(frozen=True)
class Memset(Instr):
    OP = "memset"
    ENGINE = Engine.VECTOR
    ENGINES = (Engine.GPSIMD,)
    dst: Any = f("ap", True)
    value: float = f("num", default=0.0)


@dataclass(frozen=True)
class Iota(Instr):
    OP = "iota"
    ENGINE = Engine.GPSIMD
    dst: Any = f("ap", True)
    start: float = f("num", default=0)
    step: float = f("num", default=1)
    partition_step: float = f("num", default=0)


@dataclass(frozen=True)
class Select(Instr):
    OP = "select"
    ENGINE = Engine.VECTOR
    predicate: Any = f("ap", True)
    on_true: Any = f("ap", True)
    on_false: Any = f("ap_or_num", True)
    dst: Any = f("ap", True)


@dataclass(frozen=True)
class AffineSelect(Instr):
    """dst = on_true where cmp(start + p*partition_step + i*step, 0) else on_false (a number)."""

    OP = "affine_select"
    ENGINE = Engine.GPSIMD
    on_true: Any = f("ap", True)
    dst: Any = f("ap", True)
    on_false: float = f("num", default=-3.4028234663852886e38)
    cmp: str = f("choice", default="greater_equal", choices=COMPARE_ALU)
    start: float = f("num", default=0)
    step: float = f("num", default=1)
    partition_step: float = f("num", default=0)


@dataclass(frozen=True)
class CoreBarrier(Instr):
    """Both physical cores of an LNC 2 logical core signal each other's semaphore, then wait
    for the other's (isa.md 8.6): the chosen engine of each core blocks until both reached
    their nth barrier. `data` names the shared HBM tensor the cores meet over; it is not
    accessed. NC-v3 and later only."""

    OP = "core_barrier"
    ENGINE = Engine.GPSIMD
    ENGINES = (Engine.VECTOR, Engine.SCALAR)
    data: Any = f("ap", True, access=False)
    cores: tuple = f("cores", default=(0, 1))


INSTRUCTIONS: dict[str, type[Instr]] = {
    cls.OP: cls
    for cls in (
        DmaCopy,
        Matmul,
        Transpose,
        Activation,
        TensorTensor,
        TensorScalar,
        ScalarTensorTensor,
        TensorReduce,
        BnStats,
        BnAggr,
        TensorCopy,
        Memset,
        Iota,
        Select,
        AffineSelect,
        CoreBarrier,
    )
}

COMMON_KEYS = ("op", "engine", "wait", "signal")
