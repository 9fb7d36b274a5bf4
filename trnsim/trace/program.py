"""A loaded trace as plain data: tensors, kernels, the host schedule. Built by `trace.load`
(or by code, through `trnsim.api`), consumed by the runtime. Nothing here simulates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trnsim.dtypes import DType
from trnsim.isa import Instr


@dataclass
class TensorSpec:
    """A device (HBM) or host tensor. `init`: None (zeros), 'zeros', 'ones', 'random', 'normal',
    'arange', or ('file', path). `view` names the tensor whose memory this one shares; a
    strided view (`strides` given) reads it at `offset` elements (of its own dtype) from its
    start with those strides (in elements), as a torch tensor reads its storage."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    init: Any = None
    on: str = "hbm"  # hbm | host
    view: str | None = None
    line: int = 0
    strides: tuple[int, ...] | None = None
    offset: int = 0


@dataclass
class TileSpec:
    """An on-chip buffer of a low-level kernel: SBUF or PSUM, first dim = partitions."""

    name: str
    memory: str  # sbuf | psum
    shape: tuple[int, ...]
    dtype: DType
    init: Any = None
    line: int = 0


@dataclass
class CoreProgram:
    """What one physical NeuronCore runs for a low-level kernel: its tiles and instructions."""

    tiles: dict[str, TileSpec] = field(default_factory=dict)
    instructions: list[Instr] = field(default_factory=list)
    # per instruction, the op (row of the per-op report) a lowering emitted it for; () when
    # the program was written by hand
    op_of: tuple[int, ...] = ()


@dataclass
class OpSpec:
    """One high-level op (`matmul: {a: x, b: w, out: h}`): its name and arguments as written."""

    op: str
    args: dict[str, Any]
    line: int = 0


@dataclass
class EstimateSpec:
    """An op known only by its roofline estimate (a recording's op the kernel library does not
    lower): its FLOPs, HBM bytes and the dtype whose peak bounds it; `time_ps` what it took on
    the recorded chip; `writes`: tensor -> ('file', path) of the values it left there."""

    op: str
    flops: int
    bytes: int
    dtype: str = "float32"
    time_ps: int | None = None
    writes: dict[str, Any] = field(default_factory=dict)


@dataclass
class KernelSpec:
    """A named kernel: low-level (`per_core` lists, one per physical core of the logical core),
    high-level (`ops`; `cores`: at most this many physical cores share them) or an estimate."""

    name: str
    per_core: list[CoreProgram] = field(default_factory=list)
    ops: list[OpSpec] = field(default_factory=list)
    line: int = 0
    estimate: EstimateSpec | None = None
    cores: int | None = None
    writes: dict[str, Any] = field(default_factory=dict)  # beside ops: values they leave

    @property
    def low_level(self) -> bool:
        return bool(self.per_core)


@dataclass
class Step:
    """One step of a stream: kind is copy | launch | record | wait | synchronize."""

    kind: str
    arg: Any = None  # copy: (src, dst) names; launch: kernel; record/wait: event name
    line: int = 0
    stream: str | None = None  # issued on this other stream (by this stream's host thread)


@dataclass
class StreamSpec:
    name: str
    core: int  # logical NeuronCore
    steps: list[Step] = field(default_factory=list)
    line: int = 0


@dataclass
class Program:
    """Everything a trace describes."""

    name: str = ""
    chip: str = "trn2"
    seed: int = 0
    mode: str = "functional"  # functional | timing
    lnc: int | None = None
    outputs: list[str] = field(default_factory=list)
    tensors: dict[str, TensorSpec] = field(default_factory=dict)
    kernels: dict[str, KernelSpec] = field(default_factory=dict)
    streams: list[StreamSpec] = field(default_factory=list)
    timing: list[tuple[str, str]] = field(default_factory=list)
    source: str = "<program>"
    # top-level key -> its line (chip, lnc, mode), for errors
    lines: dict[str, int] = field(default_factory=dict, compare=False)
