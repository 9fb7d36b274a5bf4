"""The recorder: what a run observed, and the only writer of it.

Engines' queue loops, DMA transfers and host copies add spans; the DMA adds each transfer's data
phase on its engines (`DmaMove`), HBM byte counts and bandwidth samples; the device API adds event
times, memory high-water marks and the calls of its host threads (`HostCall`). Everyone else (the
summary, the Perfetto and profile writers, tests) only reads. Times are integer picoseconds.

A span is one instruction, one DMA transfer or one host copy on one track (`tracks`). Recording
spans sits on the simulator's hot path, so a `Span` is a NamedTuple and `Recorder.add_span` is
the bound `append` of the recorder's list: a hot loop takes `add = rec.add_span` once and calls
`add(Span(...))` per instruction.

A launch replayed from an earlier identical one (`trnsim.runtime.reuse`) is not copied span by
span: `replay` inserts its recorded `Timeline` with a time shift, and the readers either see the
spans, moves and samples materialised in recording order (`recorded`, `spans`, `dma_moves`,
`hbm_samples`), or walk `segments()` and aggregate each distinct timeline once (the summary).
"""

from __future__ import annotations

from operator import attrgetter
from typing import NamedTuple

MEMORIES = ("sbuf", "psum", "hbm")  # the memories with a recorded high-water mark
_TIMELINE_ORDER = attrgetter("start_ps", "core", "track", "index")


class Span(NamedTuple):
    """One instruction's (or transfer's, or host copy's) execution on a track."""

    core: int
    track: str  # see `tracks`: "tensor", ..., "q<N>" for a DMA queue, "host"
    op: str
    start_ps: int
    end_ps: int
    bytes: int
    flops: int
    index: int  # instruction index in its kernel (0 for a host copy)
    kernel: str  # for a host copy: "copy <src>-><dst>"
    dtype: str

    @property
    def duration_ps(self) -> int:
        return self.end_ps - self.start_ps


class DmaMove(NamedTuple):
    """One DMA transfer's data phase: on each of `engines` (the core's DMA engine numbers) from
    `start_ps` to `end_ps` (the pieces of a transfer move in lockstep). `overhead_ps` is the
    time its setup cost its queue beyond the bytes (max(0, setup - data at full rate)): what a
    small transfer costs for being a transfer."""

    core: int
    queue: int
    engines: tuple[int, ...]
    start_ps: int
    end_ps: int
    overhead_ps: int
    index: int
    kernel: str


class HostCall(NamedTuple):
    """One device-API call on a simulated host thread: what it did, from when to when (ps)."""

    thread: str
    op: str
    start_ps: int
    end_ps: int
    detail: str


class LaunchWindow(NamedTuple):
    """One kernel launch on physical cores `cores`: from when they started its queues to when
    the last queue finished (ps)."""

    kernel: str
    cores: tuple[int, ...]
    start_ps: int
    end_ps: int


class EstimateSpan(NamedTuple):
    """An op replayed by its roofline estimate (a trace's `estimate:` kernel): it held logical
    core `core`'s first physical core from `start_ps` to `end_ps`; its FLOPs and HBM bytes are
    the estimate's, not measured."""

    kernel: str
    op: str
    core: int
    start_ps: int
    end_ps: int
    flops: int
    bytes: int
    dtype: str


class CollectiveSpan(NamedTuple):
    """One rank's part of a collective (a system's CC stream item): stream `stream` of rank
    `rank` (on physical core `core`, its logical core's first) posted it at `start_ps`; it was
    complete on every rank of its group of `ranks` at `end_ps`. `seq`: the rank's count of
    collectives on that group before it; `nbytes` each rank's buffer (`World.post`'s size);
    `label` names the call (a trace's file, line and op)."""

    core: int
    stream: str
    rank: int
    op: str
    algorithm: str
    ranks: int
    nbytes: int
    dtype: str
    seq: int
    start_ps: int
    end_ps: int
    label: str


class HbmSample(NamedTuple):
    """From `ps` on, HBM stack `stack` moves `bytes_per_s` (until its next sample)."""

    ps: int
    stack: int
    bytes_per_s: float


class Timeline:
    """What one launch recorded, at the times it ran from `origin_ps`: replayed elsewhere by a
    shift. `cache` holds what readers derived from it (aggregates do not depend on a shift)."""

    __slots__ = ("spans", "moves", "samples", "read", "written", "origin_ps", "cache")

    def __init__(self, spans, moves, samples, read: int, written: int, origin_ps: int):
        self.spans: list[Span] = spans
        self.moves: list[DmaMove] = moves
        self.samples: list[HbmSample] = samples
        self.read, self.written, self.origin_ps = read, written, origin_ps
        self.cache: dict = {}


class _Block(NamedTuple):
    """A replayed timeline inserted at positions (spans, moves, samples) of the live lists."""

    at: tuple[int, int, int]
    timeline: Timeline
    shift: int
    launch: int  # its index in `Recorder.launches`


def _shifted(items: list, d: int, kind: type) -> list:
    """`items` (spans, moves or samples) moved `d` ps later."""
    if not d:
        return items
    if kind is Span:
        return [
            Span(c, t, o, a + d, b + d, n, f, i, k, dt) for c, t, o, a, b, n, f, i, k, dt in items
        ]
    if kind is DmaMove:
        return [DmaMove(c, q, e, a + d, b + d, o, i, k) for c, q, e, a, b, o, i, k in items]
    return [HbmSample(p + d, s, r) for p, s, r in items]


class Recorder:
    """Spans, HBM traffic and bandwidth samples, event times and memory high-water marks.

    Read `spans`, `dma_moves`, `hbm_samples`, `events`, `peaks`, `host_calls`, `launches`,
    `hbm_bytes_read` and `hbm_bytes_written`; write only through the methods."""

    def __init__(self):
        self._spans: list[Span] = []
        self._sorted: list[Span] | None = None
        self.add_span = self._spans.append  # add_span(span: Span) -> None
        self._moves: list[DmaMove] = []
        self.dma_move = self._moves.append  # dma_move(move: DmaMove) -> None
        self._samples: list[HbmSample] = []
        self._blocks: list[_Block] = []  # replayed timelines, in insertion order
        self._replayed_ps = -1  # the latest replayed HBM sample
        self._flat: dict[str, tuple] = {}  # materialised lists: name -> (sizes, list)
        self._last_sample: dict[int, int] = {}  # stack -> index of its last sample
        self.hbm_bytes_read = 0
        self.hbm_bytes_written = 0
        self.events: dict[str, int] = {}  # event name -> ps it was last recorded at
        self.peaks: dict[str, int] = dict.fromkeys(MEMORIES, 0)  # memory -> bytes
        self.host_calls: list[HostCall] = []  # appended by the runtime's host threads
        self.launches: list[LaunchWindow] = []  # in the order they ended
        self.estimates: list[EstimateSpan] = []  # estimated ops, in the order they ended
        self.collectives: list[CollectiveSpan] = []  # a system's collectives, as they ended
        # (kernel, core) -> its core program, for kernels whose tiles were placed by liveness
        # (`tile_track`)
        self.tile_programs: dict[tuple[str, int], object] = {}

    # -- writing -------------------------------------------------------------------------------

    def span(
        self,
        core: int,
        track: str,
        op: str,
        start_ps: int,
        end_ps: int,
        nbytes: int = 0,
        flops: int = 0,
        index: int = 0,
        kernel: str = "",
        dtype: str = "",
    ) -> None:
        """Add a span from its fields (`add_span` takes a ready `Span`, for hot loops)."""
        self._spans.append(
            Span(core, track, op, start_ps, end_ps, nbytes, flops, index, kernel, dtype)
        )

    def launch(self, kernel: str, cores: tuple[int, ...], start_ps: int, end_ps: int) -> None:
        """A launch of `kernel` ran on `cores` from `start_ps` to `end_ps`."""
        self.launches.append(LaunchWindow(kernel, tuple(cores), start_ps, end_ps))

    def tiles(self, kernel: str, core: int, program) -> None:
        """`kernel`'s tiles on `core` (its `CoreProgram`) were placed by liveness."""
        self.tile_programs.setdefault((kernel, core), program)

    def estimate(self, span: EstimateSpan) -> None:
        """An estimated op ran (`EstimateSpan`)."""
        self.estimates.append(span)

    def collective(self, span: CollectiveSpan) -> None:
        """A rank's part of a collective completed (`CollectiveSpan`)."""
        self.collectives.append(span)

    def hbm_traffic(self, read: int, written: int) -> None:
        """Count bytes read from and written to HBM."""
        self.hbm_bytes_read += read
        self.hbm_bytes_written += written

    def hbm_sample(self, ps: int, stack: int, bytes_per_s: float) -> None:
        """Stack `stack` moves `bytes_per_s` from `ps` on. A second sample of a stack at the same
        ps replaces the first (one instant, one rate)."""
        i = self._last_sample.get(stack, -1)
        sample = HbmSample(ps, stack, bytes_per_s)
        if i >= 0 and self._samples[i].ps == ps:
            self._samples[i] = sample
        else:
            self._last_sample[stack] = len(self._samples)
            self._samples.append(sample)

    def event(self, name: str, ps: int) -> None:
        """Event `name` was recorded at `ps` (a later record of the same name replaces it)."""
        self.events[name] = ps

    def peak(self, memory: str, nbytes: int) -> None:
        """`nbytes` of `memory` ("sbuf", "psum" or "hbm") were in use: raise its high-water mark
        to that."""
        if memory not in self.peaks:
            raise ValueError(f"memory '{memory}': expected one of {', '.join(MEMORIES)}")
        self.peaks[memory] = max(self.peaks[memory], nbytes)

    def mark(self) -> tuple[int, int, int, int, int]:
        """Where the live lists and HBM counters are now (for `capture`)."""
        return (len(self._spans), len(self._moves), len(self._samples), self.hbm_bytes_read,
                self.hbm_bytes_written)  # fmt: skip

    def capture(self, mark: tuple, origin_ps: int) -> Timeline:
        """What was recorded since `mark`, as a Timeline starting at `origin_ps`. Only for a
        launch that ran alone on the chip (nothing else recorded meanwhile)."""
        s, m, h, r, w = mark
        return Timeline(self._spans[s:], self._moves[m:], self._samples[h:],
                        self.hbm_bytes_read - r, self.hbm_bytes_written - w, origin_ps)  # fmt: skip

    def last_sample_ps(self) -> int:
        """The time of the latest HBM sample (-1 for none): a replay must start after it."""
        live = (self._samples[i].ps for i in self._last_sample.values())
        return max(live, default=self._replayed_ps)

    def replay(self, timeline: Timeline, start_ps: int) -> None:
        """Record `timeline` again, as if it had run from `start_ps` (the launch's window is
        recorded by `launch`, next)."""
        at = (len(self._spans), len(self._moves), len(self._samples))
        self._blocks.append(_Block(at, timeline, start_ps - timeline.origin_ps, len(self.launches)))
        self.hbm_traffic(timeline.read, timeline.written)
        if timeline.samples:
            self._replayed_ps = timeline.samples[-1].ps + start_ps - timeline.origin_ps
            self._last_sample.clear()  # later samples are later than the replayed ones

    # -- reading -------------------------------------------------------------------------------

    @property
    def span_count(self) -> int:
        return len(self._spans) + sum(len(b.timeline.spans) for b in self._blocks)

    def segments(self, name: str = "spans"):
        """(a run of live items or a Timeline, shift, launch index or None), in recording
        order, for `name` "spans" or "moves": each replayed timeline whole, with the shift to
        its times and the index of its launch in `launches`."""
        pos = 0 if name == "spans" else 1
        live = self._spans if pos == 0 else self._moves
        start = 0
        for b in self._blocks:
            if b.at[pos] > start:
                yield live[start : b.at[pos]], 0, None
            yield b.timeline, b.shift, b.launch
            start = b.at[pos]
        if start < len(live) or not self._blocks:
            yield (live[start:] if start else live), 0, None

    def _materialised(self, name: str, live: list, pos: int, kind: type) -> list:
        """`live` with the replayed timelines' items (field `name`) inserted where they were."""
        if not self._blocks:
            return live
        sizes = (len(live), len(self._blocks))
        cached = self._flat.get(name)
        if cached is not None and cached[0] == sizes:
            return cached[1]
        out, start = [], 0
        for b in self._blocks:
            out += live[start : b.at[pos]]
            out += _shifted(getattr(b.timeline, name), b.shift, kind)
            start = b.at[pos]
        out += live[start:]
        self._flat[name] = (sizes, out)
        return out

    @property
    def recorded(self) -> list[Span]:
        """The spans in the order they were added (cheaper than `spans` when order is moot).
        Do not modify the list."""
        return self._materialised("spans", self._spans, 0, Span)

    @property
    def dma_moves(self) -> list[DmaMove]:
        """The DMA data phases in the order they ended. Do not modify the list."""
        return self._materialised("moves", self._moves, 1, DmaMove)

    @property
    def hbm_samples(self) -> list[HbmSample]:
        """The HBM bandwidth samples in time order. Do not modify the list."""
        return self._materialised("samples", self._samples, 2, HbmSample)

    @property
    def spans(self) -> list[Span]:
        """Spans in a stable order: by start time, then core, track and instruction index.
        Sorted once per set of spans (the timeline and profile writers both read it)."""
        if self._sorted is None or len(self._sorted) != self.span_count:
            self._sorted = sorted(self.recorded, key=_TIMELINE_ORDER)
        return self._sorted
