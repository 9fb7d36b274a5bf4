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
    # placed by the kernel library by liveness (`memory.onchip.place_live`): the byte offset in
    # each partition, and the op steps [first, last] the tile lives over (tiles of disjoint
    # steps may share bytes); None: placed one after another, live for the whole launch
    offset: int | None = None
    live: tuple[int, int] | None = None


@dataclass
class CoreProgram:
    """What one physical NeuronCore runs for a low-level kernel: its tiles and instructions."""

    tiles: dict[str, TileSpec] = field(default_factory=dict)
    instructions: list[Instr] = field(default_factory=list)
    # per instruction, the op (row of the per-op report) a lowering emitted it for; () when
    # the program was written by hand
    op_of: tuple[int, ...] = ()
    # per op row, the plan its lowering chose where the op has several (`KernelBuilder.
    # plan`: layer_norm's `norm_wide`, ...); the per-op report shows it
    plans: dict[int, str] = field(default_factory=dict)


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
class CollectiveSpec:
    """A stream's `collective:` step (docs/trace_extensions.md, "Collectives"): `op` on the
    ranks of `group` (None: every rank of the system), over each rank's own copy of `tensor`
    (the result in `out`, or in place when None) or, without a tensor, `nbytes` of `dtype`
    (timing only). `nbytes` is the size the collectives engine takes (`World.post`): each
    rank's whole vector of an all_reduce, the output of an all_gather, the input of a
    reduce_scatter; None when it depends on the group's size (an out-of-place all_gather
    without `out`, resolved when the trace is placed on a system). `root` (broadcast) and
    `pairs` (permute) are ranks; `counts` (all_to_allv) element counts between them."""

    op: str
    group: tuple[int, ...] | None = None
    tensor: str | None = None
    out: str | None = None
    nbytes: int | None = None
    dtype: DType | None = None
    reduce_op: str = "sum"
    algorithm: str | None = None  # None: chosen by size (the system's `collectives:`)
    root: int | None = None
    pairs: tuple[tuple[int, int], ...] = ()
    line: int = 0
    # all_to_allv: counts[i][j] elements from the group's i-th rank to its j-th
    counts: tuple[tuple[int, ...], ...] = ()
    source: str | None = None  # the file it was written in, when not the program's (rank files)


@dataclass
class Step:
    """One step of a stream: kind is copy | launch | record | wait | synchronize |
    collective."""

    kind: str
    # copy: (src, dst) names; launch: kernel; record/wait: event name; collective: its spec
    arg: Any = None
    line: int = 0
    stream: str | None = None  # issued on this other stream (by this stream's host thread)


@dataclass
class StreamSpec:
    """A stream: its steps, on logical core `core` of chip 0, or on rank `rank` of a system
    (`rank:`; None when the trace does not say). Once placed on a system
    (`trnsim.trace.ranks.place`), `rank` is set for every stream and `core` is its rank's
    logical core on its chip."""

    name: str
    core: int  # logical NeuronCore
    steps: list[Step] = field(default_factory=list)
    line: int = 0
    rank: int | None = None
    lines: dict[str, int] = field(default_factory=dict, compare=False)  # core, rank: their lines


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
    system: str | None = None  # `system:` (a name or a path): run on that system's chips
    rank: int | None = None  # `rank:`: the trace is this rank's program (each stream on it)
    # set by `trnsim.trace.ranks.place`: the system's ranks (streams and groups then hold
    # ranks, and each rank has its own copy of every tensor); None for a single chip
    ranks: int | None = None
    # top-level key -> its line (chip, lnc, mode, system), for errors
    lines: dict[str, int] = field(default_factory=dict, compare=False)
