"""Building one core's instruction program in code, with its synchronisation derived.

A lowering says what each instruction reads and writes; the builder adds the semaphore waits
and signals that order it, so no lowering writes a semaphore by hand:

- Every tile has two counting semaphores, `w.<tile>` (writes completed) and `r.<tile>` (reads
  completed). An instruction that reads a tile waits until every earlier write to it is done
  (read after write); one that writes a tile waits until every earlier read is done (write
  after read). A write over a region written but not yet read is allowed only on the same
  compute engine (a matmul accumulating into PSUM) or by an instruction that also reads the
  tile; anything else is a bug of the lowering, refused here. So is a read of a tile region
  outside everything written to the tile before it (a stage emitted before the one that
  computes what it reads). Every access signals its counter when it completes.
- Counting is sound because of those rules: a later write to a tile cannot complete before the
  reads that precede it, so a reader waiting for `w.t >= n` is released by the first n writes
  and by nothing later (and the same for writers waiting on `r.t`).
- A wait is left out when order already guarantees it: an earlier instruction on the same queue
  waited for as much (queues issue in order), or every write (read) still to wait for runs on
  the same compute engine, which runs its instructions one after another.
- HBM tensors are ordered between ops, not inside one: `barrier()` marks each op's start, and
  the ops that touch a tensor (or a view of it: one memory) are its generations. Every access
  of generation g waits for all the accesses (reads and writes) of generation g - 1, and
  counts itself in the other of two alternating sets of counters (`w.<t>.<g % 2>`,
  `r.<t>.<g % 2>`): an op's own accesses never add to the counts it waits for (so an op that
  reads and writes a tensor in place cannot let its own early stores stand for the earlier
  op's), and generation g + 1, which waits for all of g, cannot complete before g's waits are
  met. Generations are thus ordered one after another, and the race check (docs/races.md) sees
  every count met exactly. Inside an op the lowering's dataflow orders its HBM accesses (a
  block is loaded, computed, then stored; blocks are disjoint), which lets the loads of one
  block overlap the stores of another.
- Each op step (`begin`) has tiles of its own; the program's tiles are placed by liveness and
  its semaphores recycled where the core has too few (`liveness`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from trnsim.config import CoreConfig
from trnsim.dtypes import DType
from trnsim.isa import Ap, Engine, Instr
from trnsim.kernels.layout import core_rows
from trnsim.kernels.liveness import finish
from trnsim.trace.instructions import new_instruction
from trnsim.trace.program import CoreProgram, TensorSpec, TileSpec

__all__ = ["KernelBuilder", "ap", "Region"]

_DMA = Engine.DMA

Region = tuple[tuple[int, int], ...]
"""Per dim (start, stop) of the elements an operand touches (steps ignored: a superset)."""


def ap(name: str, *index: int | slice) -> Ap:
    """The operand `name[index]` built from Python ints and slices: ap("x", slice(0, 128)).
    Its text is written out only when shown (`Ap.__str__`)."""
    return Ap(
        name,
        tuple([(i.start, i.stop, i.step) if i.__class__ is slice else int(i) for i in index]),
    )


def region(a: Ap, shape: tuple[int, ...]) -> Region:
    """The region operand `a` touches in a buffer of `shape`."""
    out = []
    for d, n in enumerate(shape):
        item = a.index[d] if d < len(a.index) else (None, None, None)
        if isinstance(item, int):
            i = item + n if item < 0 else item
            out.append((i, i + 1))
            continue
        start, stop, _ = item
        start = 0 if start is None else (start + n if start < 0 else start)
        stop = n if stop is None else (stop + n if stop < 0 else stop)
        out.append((start, stop))
    return tuple(out)


def _sem(t: _Tensor, kind: str, name: str, part: int) -> str:
    """Tensor `name`'s semaphore counting accesses `kind` ("r", "w") of set `part`."""
    sem = t.sems.get((kind, part))
    if sem is None:
        sem = t.sems[(kind, part)] = f"{kind}.{name}.{part}"
    return sem


def _overlap(a: Region, b: Region) -> bool:
    return all(s0 < e1 and s1 < e0 for (s0, e0), (s1, e1) in zip(a, b))


class _Unread(list):
    """The operands one queue wrote to a tile since it was last read; their regions, made when
    another queue's write is first checked against them (most tiles are read before that), and
    the box around those regions: a write is checked against the box before each region."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.shape = shape
        self.regions: list[Region] = []
        self.box: Region | None = None

    def overlap(self, mine: Region) -> bool:
        """Does `mine` overlap one of the regions?"""
        if len(self.regions) < len(self):
            new = [region(a, self.shape) for a in self[len(self.regions) :]]
            box = self.box or new[0]
            for r in new:
                box = tuple((min(s0, s1), max(e0, e1)) for (s0, e0), (s1, e1) in zip(box, r))
            self.box = box
            self.regions.extend(new)
        return _overlap(mine, self.box) and any(_overlap(mine, r) for r in self.regions)


@dataclass
class _Buffer:
    """What the builder knows of one tile: its accesses so far, each by queue."""

    shape: tuple[int, ...]
    sems: tuple[str, str] = ("", "")  # its semaphores: reads "r.<tile>", writes "w.<tile>"
    writes: int = 0  # how many so far
    reads: int = 0
    last_write: dict[Any, int] = field(default_factory=dict)  # queue -> count after its last one
    last_read: dict[Any, int] = field(default_factory=dict)
    unread: dict[Any, _Unread] = field(default_factory=dict)  # queue -> its writes since the
    # last read
    first: int = -1  # the op step (`KernelBuilder.row`) it was made in
    last: int = -1  # the op step of its last access
    box: Region | None = None  # the box around every region written so far (`_check_read`)


@dataclass
class _Tensor:
    """An HBM tensor's accesses, counted per generation (the ops that touched it, in order) in
    two alternating sets of semaphores: generation g signals `w.<t>.<g % 2>` and `r.<t>.<g %
    2>` and waits for the other set's totals as they were when g began (module doc)."""

    gen: int = 0
    op: int = -1  # the op that touched it last
    writes: list[int] = field(default_factory=lambda: [0, 0])  # per set
    reads: list[int] = field(default_factory=lambda: [0, 0])
    last_write: list[dict] = field(default_factory=lambda: [{}, {}])
    last_read: list[dict] = field(default_factory=lambda: [{}, {}])
    floor_w: int = 0  # the other set's totals when this generation began
    floor_r: int = 0
    sems: dict = field(default_factory=dict)  # (kind, set) -> "<kind>.<tensor>.<set>"
    first: int = -1  # the op steps (`KernelBuilder.row`) of its first and last generation
    last: int = -1


class KernelBuilder:
    """One physical core's program: tiles, instructions, and their semaphores (module doc)."""

    def __init__(self, tensors: dict[str, TensorSpec], prefix: str = ""):
        self.tensors = tensors
        self.prefix = prefix
        self.tiles: dict[str, TileSpec] = {}
        self.instructions: list[Instr] = []
        self._bufs: dict[str, _Buffer] = {}  # tiles
        self._tensors: dict[str, _Tensor] = {}  # a view shares its base's: one memory
        for n in tensors:
            base = n
            while tensors[base].view is not None and tensors[base].view in tensors:
                base = tensors[base].view
            self._tensors[n] = self._tensors.setdefault(base, _Tensor())
        self._op = 0
        self._waited: dict[Any, dict[str, int]] = defaultdict(dict)  # queue -> sem -> value
        self._dma: dict[int, tuple[str, int]] = {}  # DMA queue number -> its key (`_dma_queue`)
        self._names: dict[str, int] = defaultdict(int)
        self.scratch: dict[str, str] = {}  # a lowering's own key -> tile name (reused buffers)
        self._free_psum: list[str] = []  # PSUM tiles released by ops that ended
        self._banks: dict[str, int] = {}  # tile -> its columns a bank (`banked`)
        self.bank_of: dict[str, str] = {}  # a bank's buffer name -> its tile
        self.part = (0, 1)  # this program is physical core part[0] of part[1] (`share`)
        self.row = -1  # the op row (`lower`'s runs of ops) the instructions emitted now belong to
        self._rows: list[int] = []  # per instruction, its `row`
        self.plans: dict[int, str] = {}  # op row -> the plan its lowering chose (`plan`)
        self.check_reads = True  # refuse a read of a tile region nothing wrote (`_check_read`)
        self.searching = True  # the list schedule's descents run (`schedule.Scheduled`); off in
        # a trial that only ranks plans (`norms._variant`)

    # -- buffers -------------------------------------------------------------------------------

    def tile(self, base: str, memory: str, shape: tuple[int, ...], dtype: DType) -> str:
        """A new tile (its name unique in this program: `base`, `base_1`, ...)."""
        while True:  # never a tensor's name: a tile of that name would hide the tensor
            n = self._names[base]
            self._names[base] += 1
            name = f"{self.prefix}{base}" + (f"_{n}" if n else "")
            if name not in self.tensors and name not in self.tiles:
                break
        self.tiles[name] = TileSpec(name, memory, tuple(shape), dtype)
        self._bufs[name] = _Buffer(tuple(shape), (f"r.{name}", f"w.{name}"))
        self._bufs[name].first = self._bufs[name].last = self.row
        return name

    def scratch_tile(self, key: str, base: str, shape, dtype: DType) -> str:
        """The SBUF tile a lowering names `key` (its kind and buffer slot) for `shape` and
        `dtype`: made (named after `base`) on first use, then the same tile for every later op
        that asks for it, so rotating buffers are shared across ops instead of piling up."""
        full = f"{key}:{dtype.name}:{shape}"
        name = self.scratch.get(full)
        if name is None:
            name = self.scratch[full] = self.tile(base, "sbuf", shape, dtype)
        return name

    def psum(self, base: str, shape: tuple[int, ...], dtype: DType) -> str:
        """A PSUM tile of at least `shape` (callers address it by slices): one an earlier op
        released, when one of that dtype is large enough, else a new one. PSUM is 16 KiB a
        partition: tiles that lived only for an op are reused by the next ops instead of piling
        up (the accesses of the old and the new use are ordered like any others)."""
        for i, name in enumerate(self._free_psum):
            t = self.tiles[name]
            if t.dtype == dtype and all(a >= b for a, b in zip(t.shape, shape)):
                del self._free_psum[i]
                return name
        return self.tile(base, "psum", shape, dtype)

    def banked(self, name: str, cols: int) -> None:
        """Order PSUM tile `name`'s accesses bank by bank (`cols` columns each), not as one
        tile: each bank's writes and reads counted apart, so a copy out of one bank waits only
        for the matmuls into it (a norm's last block: its copies start while TensorE fills the
        tile's other banks)."""
        if name in self._banks:
            return
        self._banks[name] = cols
        buf = self._bufs[name]
        for k in range(-(-buf.shape[-1] // cols)):
            sub = f"{name}.bank{k}"
            self.bank_of[sub] = name
            self._bufs[sub] = _Buffer(buf.shape, (f"r.{sub}", f"w.{sub}"))
            self._bufs[sub].first = self._bufs[sub].last = self.row

    def split_banks(self, aps: list[Ap], touch: bool = False) -> list[Ap]:
        """`aps` with each operand of a `banked` tile as one per bank it touches (its index
        kept); `touch`: the tile's last access now (`_Buffer.last`)."""
        if not self._banks or not any(a.name in self._banks for a in aps):
            return aps
        out = []
        for a in aps:
            cols = self._banks.get(a.name)
            if cols is None:
                out.append(a)
                continue
            buf = self._bufs[a.name]
            if touch:
                buf.last = self.row
            lo, hi = region(a, buf.shape)[-1]
            out.extend(
                Ap(f"{a.name}.bank{k}", a.index) for k in range(lo // cols, (hi - 1) // cols + 1)
            )
        return out

    def release(self, *names: str) -> None:
        """PSUM tiles of an op that ended, for `psum` to hand to the next ops."""
        self._free_psum.extend(n for n in names if self.tiles[n].memory == "psum")

    def begin(self, row: int) -> None:
        """The start of op step `row` (an op, or a fused run of them): the instructions emitted
        from now on belong to it, and its tiles are its own: scratch tiles (`scratch_tile`,
        `scratch`) and released PSUM tiles are no longer handed out by name, so each op's tiles
        live only over the ops that use them and `program` places them by liveness."""
        self.row = row
        self.scratch.clear()
        self._free_psum.clear()

    def plan(self, name: str) -> None:
        """Name the plan the current op row is lowered with, for an op lowered more ways than
        one (the per-op report's `plan`, so a user can tell why two shapes differ in time)."""
        self.plans[self.row] = name

    def share(self, shape: tuple[int, ...]) -> tuple[int, int] | None:
        """The flattened rows of an op's output of `shape` this core computes (`layout.
        core_rows`), or None when one core computes them all."""
        return None if self.part[1] == 1 else core_rows(tuple(shape), self.part)

    def barrier(self) -> None:
        """An op boundary: later accesses to a tensor wait for the accesses of everything
        emitted so far (module doc)."""
        self._op += 1

    # -- instructions --------------------------------------------------------------------------

    def emit(self, cls: type[Instr], reads: list[Ap], writes: list[Ap], **fields) -> Instr:
        """Append instruction `cls(**fields)` reading `reads` and writing `writes` (its operand
        fields among `fields`), with the waits that order it and the signals it gives."""
        engine = fields.pop("engine", cls.ENGINE)
        queue: Any = self._dma_queue(fields.get("queue", 0)) if engine is _DMA else engine
        seen = self._waited[queue]  # what earlier instructions of this queue waited for
        if self._banks:
            reads, writes = self.split_banks(reads, True), self.split_banks(writes, True)
        waits: dict[str, int] = {}
        bufs, need = self._bufs, self._need
        for a in reads:
            buf = bufs.get(a.name)
            if buf is None:
                self._floor(waits, seen, queue, a.name)
            else:
                if self.check_reads:
                    self._check_read(cls, a, buf)
                need(waits, seen, queue, buf.sems[1], buf.writes, buf.last_write)
        for a in writes:
            buf = bufs.get(a.name)
            if buf is None:
                self._floor(waits, seen, queue, a.name)
                continue
            need(waits, seen, queue, buf.sems[0], buf.reads, buf.last_read)
            if buf.unread and not any(x.name == a.name for x in reads):  # else its read waited
                self._check_unread(cls, a, buf, queue)
        signals: dict[str, int] = {}
        for a in reads:
            sem = self._count(a, "r", queue)
            signals[sem] = signals.get(sem, 0) + 1
        for a in writes:
            sem = self._count(a, "w", queue)
            signals[sem] = signals.get(sem, 0) + 1
        seen.update(waits)  # each wait is above what the queue waited for (`_need`)
        fields["index"] = len(self.instructions)
        fields["engine"] = engine
        fields["wait"] = tuple(waits.items())
        fields["signal"] = tuple(signals.items())
        ins = new_instruction(cls, fields)
        self.instructions.append(ins)
        self._rows.append(self.row)
        return ins

    def _dma_queue(self, n: int) -> tuple[str, int]:
        """DMA queue `n` as the builder keys it, one object per queue."""
        queue = self._dma.get(n)
        if queue is None:
            queue = self._dma[n] = ("dma", n)
        return queue

    def _check_unread(self, cls: type[Instr], a: Ap, buf: _Buffer, queue: Any) -> None:
        """Refuse a write `a` over a region another queue wrote and nothing read yet (a compute
        engine may write over its own: it runs in order; a DMA queue may not)."""
        mine = None
        for q, written in buf.unread.items():
            if q is queue and queue.__class__ is Engine:
                continue
            if mine is None:
                mine = region(a, buf.shape)
            if written.overlap(mine):
                raise AssertionError(
                    f"lowering bug: {cls.OP} writes {a} over a write not yet read "
                    "from another queue (order it with a read first)"
                )

    @staticmethod
    def _check_read(cls: type[Instr], a: Ap, buf: _Buffer) -> None:
        """Refuse a read `a` of a tile region nothing wrote before it (outside the box around
        every region written so far): it would read what the memory held, a lowering's order
        bug (a stage emitted before the one that computes what it reads: rows of fp32 10^6 in
        `norm_ragged` once read their rstd so and gave the bias alone)."""
        if buf.box is None or not _overlap(region(a, buf.shape), buf.box):
            raise AssertionError(f"lowering bug: {cls.OP} reads {a}, which nothing wrote before it")

    def _floor(self, waits: dict, seen: dict, queue: Any, name: str) -> None:
        """A tensor access waits for every access of the tensor's previous generation (its
        writes and its reads, so generations are ordered one after another)."""
        t = self._tensors[name]
        if t.op != self._op:  # the first access of this op: a new generation
            t.gen, t.op = t.gen + 1, self._op
            if t.first < 0:
                t.first = self.row
            t.last = self.row
            prev = (t.gen - 1) % 2
            t.floor_w, t.floor_r = t.writes[prev], t.reads[prev]
        prev = (t.gen - 1) % 2
        self._need(waits, seen, queue, _sem(t, "w", name, prev), t.floor_w, t.last_write[prev])
        self._need(waits, seen, queue, _sem(t, "r", name, prev), t.floor_r, t.last_read[prev])

    def _count(self, a: Ap, kind: str, queue: Any) -> str:
        """Count access `kind` ("r" or "w") of operand `a` by `queue`; the semaphore it
        signals."""
        buf = self._bufs.get(a.name)
        if buf is None:
            t = self._tensors[a.name]
            cur = t.gen % 2
            counts, last = (t.reads, t.last_read) if kind == "r" else (t.writes, t.last_write)
            counts[cur] += 1
            last[cur][queue] = counts[cur]
            return _sem(t, kind, a.name, cur)
        if kind == "r":
            buf.reads += 1
            buf.last_read[queue] = buf.reads
            buf.unread.clear()
            buf.last = self.row
            return buf.sems[0]
        buf.writes += 1
        buf.last_write[queue] = buf.writes
        buf.last = self.row
        mine = region(a, buf.shape)
        box = buf.box
        buf.box = (
            mine
            if box is None
            else tuple((min(s0, s1), max(e0, e1)) for (s0, e0), (s1, e1) in zip(box, mine))
        )
        written = buf.unread.get(queue)
        if written is None:
            written = buf.unread[queue] = _Unread(buf.shape)
        written.append(a)
        return buf.sems[1]

    def _need(self, waits: dict, seen: dict, queue: Any, sem: str, n: int, last: dict) -> None:
        """Wait for `sem >= n` (the first n accesses counted by `sem`; `last`: each queue's
        count after its last access; `seen`: what the queue waited for before) unless order
        already gives it."""
        done = seen.get(sem, 0)
        if sem in waits and waits[sem] > done:
            done = waits[sem]
        if n <= done:
            return
        if queue.__class__ is Engine and all(c <= done for q, c in last.items() if q is not queue):
            return  # what is left to wait for ran on this compute engine, one after another
        waits[sem] = n

    def program(self, core: CoreConfig | None = None) -> CoreProgram:
        """The program built; its `op_of` tags each instruction with the op row it was emitted
        for (the per-op report aggregates the instructions' spans by it). Given the `core`,
        the tiles of a program of several op steps are placed by liveness and their
        semaphores recycled (`liveness.finish`)."""
        if core is not None:
            finish(self, core)
        return CoreProgram(
            dict(self.tiles), list(self.instructions), tuple(self._rows), dict(self.plans)
        )
