"""Build and run traces from Python: the same kernels a trace YAML describes, made in code.

    from trnsim.api import Trace
    t = Trace("tile-gemm")
    k = t.kernel("gemm")
    k.tile("x_t", "sbuf", [128, 128], "bfloat16", init="normal")
    k.tile("w_t", "sbuf", [128, 512], "bfloat16", init="normal")
    k.tile("acc", "psum", [128, 512], "float32")
    k.matmul(stationary="x_t", moving="w_t", dst="acc")
    result = t.run("trn2")
    print(result.summary["total_time_ns"], result.tile("gemm", "acc"))

Instructions take the trace's field names (`k.matmul(...)` is `{op: matmul, ...}`) and are
validated by the same code as YAML traces, so errors read the same.
"""

from __future__ import annotations

from trnsim.config import ChipConfig, load_chip
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import INSTRUCTIONS
from trnsim.runtime.session import RunResult, run_program
from trnsim.trace import check_semaphores, parse_instruction
from trnsim.trace.program import (
    CoreProgram,
    KernelSpec,
    Program,
    Step,
    StreamSpec,
    TensorSpec,
    TileSpec,
)


def _dtype(name: str, where: str):
    try:
        return dtype(name)
    except KeyError:
        raise TraceError(f"<api>: {where}: unknown dtype {name!r}") from None


class Kernel:
    """A low-level kernel for one or more physical cores (`cores=2` for both cores of an LNC=2
    logical core; `core=` on `tile` and on each instruction picks which one, default 0)."""

    def __init__(self, trace: Trace, name: str, cores: int = 1):
        self.trace, self.name = trace, name
        self.programs = [CoreProgram() for _ in range(cores)]
        self._names: dict[int, set[str]] = {}  # per core: the operand names instructions may use

    def tile(self, name: str, memory: str, shape, dt: str, init=None, core: int = 0) -> str:
        """Declare an SBUF or PSUM tile (first dim = partitions); returns its name."""
        if memory not in ("sbuf", "psum"):
            raise TraceError(f"<api>: tile {name}: memory {memory!r}; expected sbuf or psum")
        self.programs[core].tiles[name] = TileSpec(
            name, memory, tuple(int(x) for x in shape), _dtype(dt, f"tile {name}"), init
        )
        return name

    def instr(self, op: str, core: int = 0, **fields) -> int:
        """Append one instruction (`op` plus the trace's fields); returns its index."""
        prog = self.programs[core]
        index = len(prog.instructions)
        names = self._names.get(core)
        if names is None or len(names) != len(prog.tiles) + len(self.trace.tensors):
            names = self._names[core] = set(prog.tiles) | set(self.trace.tensors)
        ins = parse_instruction(
            {"op": op, **fields}, index, f"kernels.{self.name}.instructions[{index}]", names=names
        )
        prog.instructions.append(ins)
        return index

    def __getattr__(self, op: str):
        if op in INSTRUCTIONS:
            return lambda core=0, **fields: self.instr(op, core, **fields)
        raise AttributeError(op)

    def spec(self) -> KernelSpec:
        for i, prog in enumerate(self.programs):
            check_semaphores(prog.instructions, f"kernels.{self.name}.per_core[{i}]")
        return KernelSpec(self.name, per_core=self.programs)


class Trace:
    """A program in the making: tensors, kernels, and (by default) one stream running them."""

    def __init__(
        self,
        name: str = "api",
        chip: str = "trn2",
        mode: str = "functional",
        seed: int = 0,
        lnc: int | None = None,
    ):
        self.name, self.chip, self.mode, self.seed, self.lnc = name, chip, mode, seed, lnc
        self.tensors: dict[str, TensorSpec] = {}
        self.kernels: dict[str, Kernel] = {}
        self.streams: list[StreamSpec] = []

    def tensor(self, name: str, shape, dt: str, init=None, on: str = "hbm") -> str:
        """Declare a device (HBM) or host tensor; returns its name."""
        self.tensors[name] = TensorSpec(
            name, tuple(int(x) for x in shape), _dtype(dt, f"tensor {name}"), init, on
        )
        return name

    def kernel(self, name: str = "main", cores: int = 1) -> Kernel:
        k = self.kernels[name] = Kernel(self, name, cores)
        return k

    def stream(self, name: str, core: int = 0, steps=()) -> None:
        """A stream: steps are ("launch", kernel), ("copy", (src, dst)), ("record", event),
        ("wait", event) or ("synchronize", None)."""
        self.streams.append(StreamSpec(name, core, [Step(k, a) for k, a in steps]))

    def program(self) -> Program:
        kernels = {n: k.spec() for n, k in self.kernels.items()}
        streams = self.streams or [StreamSpec("default", 0, [Step("launch", n) for n in kernels])]
        return Program(
            self.name, self.chip, self.seed, self.mode, self.lnc, [], self.tensors, kernels, streams
        )

    def run(
        self, chip: str | ChipConfig | None = None, mode: str | None = None, overrides=()
    ) -> RunResult:
        """Simulate on `chip` (a name, path or ChipConfig; default the trace's)."""
        cfg = chip if isinstance(chip, ChipConfig) else load_chip(chip or self.chip, overrides)
        return run_program(self.program(), cfg, mode)
