"""Planning a launch: one core's part of a low-level kernel turned into per-queue lists of
`Issue`s before the clock starts.

Tiles are placed and initialised, operands bound and checked, costs computed, each distinct
instruction once (the memo), so that the run loop (`trnsim.core.run`) only waits on semaphores,
executes, advances time and records. A kernel launched again reuses its plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import simpy

from trnsim.config import ChipConfig
from trnsim.dma.system import DmaSystem
from trnsim.engines.base import WRITTEN, EngineModel
from trnsim.engines.gpsimd import GpSimdEngine
from trnsim.engines.scalar import ScalarEngine
from trnsim.engines.tensor import TensorEngine
from trnsim.engines.vector import VectorEngine
from trnsim.errors import SimError
from trnsim.isa import Ap, CoreBarrier, Engine, Instr
from trnsim.memory.buffer import Buffer, Ref, bind
from trnsim.memory.init import initial_values
from trnsim.memory.onchip import in_use, place_tiles
from trnsim.report.tracks import dma_track, engine_track
from trnsim.sync import Semaphores
from trnsim.trace.instructions import with_fields
from trnsim.trace.program import CoreProgram
from trnsim.units import cycles_to_ps

ENGINE_MODELS: dict[Engine, type[EngineModel]] = {
    Engine.TENSOR: TensorEngine,
    Engine.VECTOR: VectorEngine,
    Engine.SCALAR: ScalarEngine,
    Engine.GPSIMD: GpSimdEngine,
}


@dataclass(slots=True)
class Issue:
    """One instruction, bound and costed, as its queue runs it."""

    ins: Instr  # bound; shared by identical instructions, so its own index may differ
    index: int  # this instruction's position in its kernel
    dur: int  # ps
    waits: tuple[tuple[int, int], ...]
    signals: tuple[tuple[int, int], ...]
    op: str
    run: object  # callable(ins) computing values, or None in timing-only mode
    flops: int
    nbytes: int
    dtype: str
    port: object = None  # a shared SBUF/PSUM port (simpy.Resource) this instruction holds
    stall: int = 0  # ps it waits after the previous instruction's end for that one's result
    line: int = 0  # the instruction's trace line (deadlock reports)
    barrier: int = -1  # a core_barrier: its number among the launch's barriers (`core.link`)


@dataclass
class Launch:
    """One core's share of a kernel launch, ready to run."""

    kernel: str
    core: int
    queues: dict[str, list[Issue]]  # track -> issues ("tensor", ..., "q3")
    sems: Semaphores
    tiles: dict[str, Buffer]
    # track -> (sem, value, Issue) while a queue waits on a semaphore
    blocked: dict[str, tuple | None] = field(default_factory=dict)
    source: str = ""  # the trace file (deadlock reports)
    barriers: int = 0  # core_barrier instructions
    first_barrier: int = 0  # the number of its first one on the core's link (`CoreLink.begin`)

    def tile_bytes(self, memory: str) -> int:
        """The most bytes of `memory` (sbuf or psum) this launch's tiles hold at once (tiles
        placed by liveness share bytes: `onchip.in_use`), for high-water marks."""
        return in_use(self.tiles.values(), memory)


class Planner:
    """Builds the launches of one physical NeuronCore (`index`) and remembers them by program,
    so a kernel launched many times is bound, checked and costed once."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        cfg: ChipConfig,
        dma: DmaSystem,
        functional: bool,
        paired: bool = False,
    ):
        self.env, self.index, self.cfg, self.dma, self.functional = env, index, cfg, dma, functional
        self.paired = paired  # one of the two cores of an LNC 2 logical core (core_barrier)
        self.models = {e: cls(cfg.core) for e, cls in ENGINE_MODELS.items()}
        c = cfg.core
        self._plans: dict[int, tuple] = {}  # id(program) -> (program, tensors, first launch)
        self.sbuf_port = simpy.Resource(env, 1) if c.vector_gpsimd_share_sbuf else None
        self.psum_port = simpy.Resource(env, 1) if c.vector_scalar_share_psum else None

    def prepare(
        self,
        kernel: str,
        prog: CoreProgram,
        tensors: dict[str, Buffer],
        rng: np.random.Generator,
        source: str = "",
    ) -> Launch:
        """Place tiles, bind operands, check every instruction and compute its cost.

        A SimError is raised here, and only here, as `<source>:<line>: kernel <k>, core <i>:
        <problem>`, naming the trace file (when `source` is given) and the line of the
        instruction at fault (the `line` the error carries, when it is about one)."""
        cached = self._plans.get(id(prog))
        if (
            cached is not None
            and cached[0] is prog
            and len(cached[1]) == len(tensors)
            and all(a is b for a, b in zip(cached[1], tensors.values()))
        ):
            launch = self._relaunch(cached[2], prog, rng)
            launch.source = source
            return launch
        try:
            launch = self._prepare(kernel, prog, tensors, rng)
        except SimError as e:
            where = f"{source}:{e.line}: " if source and e.line else f"{source}: " if source else ""
            raise SimError(f"{where}kernel {kernel}, core {self.index}: {e}") from None
        launch.source = source
        self._plans[id(prog)] = (prog, list(tensors.values()), launch)
        return launch

    def _relaunch(self, plan: Launch, prog: CoreProgram, rng: np.random.Generator) -> Launch:
        """Launch an already prepared kernel again: same tiles and bound instructions (tiles
        get fresh initial values), fresh semaphores. A kernel launched 7 times is bound, checked
        and costed once."""
        if self.functional:
            for t in prog.tiles.values():
                plan.tiles[t.name].array[...] = initial_values(
                    t.init, t.shape, t.dtype, rng, f"tile {t.name}"
                )
        sems = Semaphores(self.env, plan.sems.names)
        launch = Launch(plan.kernel, self.index, plan.queues, sems, plan.tiles)
        launch.barriers = plan.barriers
        return launch

    def _prepare(
        self, kernel: str, prog: CoreProgram, tensors: dict[str, Buffer], rng: np.random.Generator
    ) -> Launch:
        specs = list(prog.tiles.values())
        try:
            offsets, _, _ = place_tiles(
                [
                    (t.name, t.memory, t.shape[0], math.prod(t.shape[1:]) * t.dtype.itemsize)
                    for t in specs
                ],
                self.cfg.core,
                {t.name: t.offset for t in specs if t.offset is not None},
            )
        except SimError as e:  # at the line of the tile that does not fit
            if not e.line and getattr(e, "tile", None) in prog.tiles:
                e.line = prog.tiles[e.tile].line
            raise
        tiles = {}
        for t in specs:
            arr = (
                initial_values(t.init, t.shape, t.dtype, rng, f"tile {t.name}")
                if self.functional
                else None
            )
            tiles[t.name] = Buffer(
                t.name, t.memory, t.shape, t.dtype, arr, offsets[t.name], self.index, t.live
            )
        names: dict[str, int] = {}
        for ins in prog.instructions:
            for s, _ in ins.wait + ins.signal:
                names.setdefault(s, len(names))
        if len(names) > self.cfg.core.semaphores:
            raise SimError(f"uses {len(names)} semaphores; a core has {self.cfg.core.semaphores}")
        sems = Semaphores(self.env, list(names))
        queues: dict[str, list[Issue]] = {}
        # Kernels repeat the same instruction on the same operands many times: bind and check
        # each distinct one once, and cost each distinct (instruction, waits?, previous) once.
        bound_memo: dict[tuple, tuple] = {}  # op fields -> (id, bound, track, static fields)
        refs: dict[Ap, Ref] = {}  # operand -> its Ref (`_bind`)
        cost_memo: dict[tuple, tuple[int, int]] = {}  # -> (duration, stall) in ps
        prev: dict[Engine, tuple] = {}  # engine -> (id, bound instruction) of the last one
        dma = Engine.DMA
        getters: dict[type, object] = {}
        barriers = 0
        for raw in prog.instructions:
            cls = raw.__class__
            get = getters.get(cls)
            if get is None:
                get = getters[cls] = cls.op_getter()
            key = (cls, raw.engine, *get(raw))
            entry = bound_memo.get(key)
            if entry is None:
                try:
                    entry = (len(bound_memo), *self._build(raw, tiles, tensors, refs))
                except SimError as e:  # about this instruction: carry its line to prepare
                    raise SimError(str(e), line=raw.line) from None
                bound_memo[key] = entry
            kid, ins, track, issue_args = entry
            engine = raw.engine
            barrier = -1
            if engine is dma:  # the Issue carries its index: `ins` stays shared
                dur = stall = 0
            elif cls is CoreBarrier:  # takes no engine time: the crossing is the link's
                dur = stall = 0
                barrier, barriers = barriers, barriers + 1
            else:
                before = prev.get(engine)
                ckey = (kid, not raw.wait, before[0] if before else -1)
                costs = cost_memo.get(ckey)
                if costs is None:
                    costs = cost_memo[ckey] = self._cost(ins, raw, before)
                dur, stall = costs
                prev[engine] = (kid, ins)
            waits = tuple([(names[s], v) for s, v in raw.wait]) if raw.wait else ()
            signals = tuple([(names[s], n) for s, n in raw.signal]) if raw.signal else ()
            queues.setdefault(track, []).append(
                Issue(ins, raw.index, dur, waits, signals, *issue_args, stall, raw.line, barrier)
            )
        launch = Launch(kernel, self.index, queues, sems, tiles)
        launch.barriers = barriers
        return launch

    def _cost(self, ins: Instr, raw: Instr, before: tuple | None) -> tuple[int, int]:
        """(duration, stall) in ps of bound `ins` (with `raw`'s waits) after `before`."""
        model = self.models[ins.engine]
        timed = ins if bool(ins.wait) == bool(raw.wait) else replace(ins, wait=raw.wait)
        prev = before[1] if before else None
        cycles = model.cost(timed, prev)
        stall = model.stall(timed, prev)
        return (
            cycles_to_ps(cycles, model.clock_hz),
            cycles_to_ps(stall, model.clock_hz) if stall else 0,
        )

    def _build(self, raw: Instr, tiles: dict[str, Buffer], tensors: dict[str, Buffer], refs):
        """Bind and check one distinct instruction: (bound, track, the Issue's static fields)."""
        ins = self._bind(raw, tiles, tensors, refs)
        if ins.engine == Engine.DMA:
            self.dma.check(ins, self.index)
            return ins, dma_track(ins.queue), (ins.OP, None, 0, 0, ins.dst.dtype.name, None)
        model = self.models[ins.engine]
        model.check(ins)
        if ins.OP == CoreBarrier.OP and not self.paired:
            raise SimError(
                f"{ins.label}: core_barrier needs the two physical cores of an LNC 2 logical "
                "core, and this one runs at lnc 1; expected lnc: 2"
            )
        run = model.execute if self.functional and ins.OP != CoreBarrier.OP else None
        return (
            ins,
            engine_track(ins.engine),
            (ins.OP, run, model.flops(ins), _bytes(ins), _dtype(ins), self._port(ins)),
        )

    def _bind(
        self, ins: Instr, tiles: dict[str, Buffer], tensors: dict[str, Buffer], refs: dict
    ) -> Instr:
        """`ins` with its operands bound; `refs` (operand -> Ref, for one launch) shares one Ref
        between the instructions that name the same operand (most of a kernel's operands recur:
        a tile's slice read by many matmuls), so each is bound and checked once."""
        changes = {}
        for fld in ins.op_fields():
            v = getattr(ins, fld.name)
            if isinstance(v, Ap):
                ref = refs.get(v)
                if ref is None:
                    buf = tiles.get(v.name) or tensors.get(v.name)
                    if buf is None:
                        raise SimError(f"{ins.label}: {fld.name} '{v}' names no tile or tensor")
                    ref = refs[v] = bind(v, buf, (ins, fld.name))
                if v.bcast:
                    _check_broadcast(ins, fld.name, v)
                changes[fld.name] = ref
        return with_fields(ins, changes) if changes else ins

    def _port(self, ins: Instr):
        """The shared memory port this instruction must hold, on cores that share one."""
        if ins.engine in (Engine.VECTOR, Engine.GPSIMD) and self.sbuf_port is not None:
            if any(r.memory == "sbuf" for r in _refs(ins)):
                return self.sbuf_port
        if ins.engine in (Engine.VECTOR, Engine.SCALAR) and self.psum_port is not None:
            if any(r.memory == "psum" for r in _refs(ins)):
                return self.psum_port
        return None


def _check_broadcast(ins: Instr, name: str, v: Ap) -> None:
    """A broadcast (stride-0) dim only in an operand a VectorE, ScalarE or GpSimd instruction
    reads: the same elements written n times, or a transfer's or a matmul's, are not modelled."""
    if name in WRITTEN or ins.engine in (Engine.TENSOR, Engine.DMA):
        role = "a written operand" if name in WRITTEN else f"a {ins.engine.label} operand"
        raise SimError(
            f"{ins.label}: {name} '{v}' has a broadcast dim (*n), which {role} may not have; "
            "expected one only in an input of a vector, scalar or gpsimd instruction"
        )


def _refs(ins: Instr) -> list[Ref]:
    """The operands `ins` reads or writes (not a barrier's `data`, which it only names)."""
    return [
        getattr(ins, f.name)
        for f in ins.op_fields()
        if f.metadata["access"] and isinstance(getattr(ins, f.name), Ref)
    ]


def _bytes(ins: Instr) -> int:
    """Bytes an instruction reads and writes on-chip (for the profile table)."""
    return sum(r.nbytes for r in _refs(ins))


def _dtype(ins: Instr) -> str:
    """The dtype a profile row shows: a matmul's stationary, else the source's, else the
    destination's (FLOP/s are compared with the peak of a matmul's input dtype)."""
    r = getattr(ins, "stationary", None) or getattr(ins, "src", None) or getattr(ins, "dst", None)
    return r.dtype.name if isinstance(r, Ref) else ""
