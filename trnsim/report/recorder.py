"""The recorder: what a run observed, and the only writer of it.

Engines' queue loops, DMA transfers and host copies add spans; the DMA adds each transfer's data
phase on its engines (`DmaMove`), HBM byte counts and bandwidth samples; the device API adds event
times, memory high-water marks and the calls of its host threads (`HostCall`). Everyone else (the
summary, the Perfetto and profile writers, tests) only reads. Times are integer picoseconds.

A span is one instruction, one DMA transfer or one host copy on one track (`tracks`). Recording
spans sits on the simulator's hot path, so a `Span` is a NamedTuple and `Recorder.add_span` is
the bound `append` of the recorder's list: a hot loop takes `add = rec.add_span` once and calls
`add(Span(...))` per instruction.
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


class HbmSample(NamedTuple):
    """From `ps` on, HBM stack `stack` moves `bytes_per_s` (until its next sample)."""

    ps: int
    stack: int
    bytes_per_s: float


class Recorder:
    """Spans, HBM traffic and bandwidth samples, event times and memory high-water marks.

    Read `spans`, `dma_moves`, `hbm_samples`, `events`, `peaks`, `host_calls`, `launches`,
    `hbm_bytes_read` and `hbm_bytes_written`; write only through the methods."""

    def __init__(self):
        self._spans: list[Span] = []
        self._sorted: list[Span] | None = None
        self.add_span = self._spans.append  # add_span(span: Span) -> None
        self.dma_moves: list[DmaMove] = []
        self.dma_move = self.dma_moves.append  # dma_move(move: DmaMove) -> None
        self.hbm_samples: list[HbmSample] = []
        self._last_sample: dict[int, int] = {}  # stack -> index of its last sample
        self.hbm_bytes_read = 0
        self.hbm_bytes_written = 0
        self.events: dict[str, int] = {}  # event name -> ps it was last recorded at
        self.peaks: dict[str, int] = dict.fromkeys(MEMORIES, 0)  # memory -> bytes
        self.host_calls: list[HostCall] = []  # appended by the runtime's host threads
        self.launches: list[LaunchWindow] = []  # in the order they ended
        self.estimates: list[EstimateSpan] = []  # estimated ops, in the order they ended

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

    def estimate(self, span: EstimateSpan) -> None:
        """An estimated op ran (`EstimateSpan`)."""
        self.estimates.append(span)

    def hbm_traffic(self, read: int, written: int) -> None:
        """Count bytes read from and written to HBM."""
        self.hbm_bytes_read += read
        self.hbm_bytes_written += written

    def hbm_sample(self, ps: int, stack: int, bytes_per_s: float) -> None:
        """Stack `stack` moves `bytes_per_s` from `ps` on. A second sample of a stack at the same
        ps replaces the first (one instant, one rate)."""
        i = self._last_sample.get(stack, -1)
        sample = HbmSample(ps, stack, bytes_per_s)
        if i >= 0 and self.hbm_samples[i].ps == ps:
            self.hbm_samples[i] = sample
        else:
            self._last_sample[stack] = len(self.hbm_samples)
            self.hbm_samples.append(sample)

    def event(self, name: str, ps: int) -> None:
        """Event `name` was recorded at `ps` (a later record of the same name replaces it)."""
        self.events[name] = ps

    def peak(self, memory: str, nbytes: int) -> None:
        """`nbytes` of `memory` ("sbuf", "psum" or "hbm") were in use: raise its high-water mark
        to that."""
        if memory not in self.peaks:
            raise ValueError(f"memory '{memory}': expected one of {', '.join(MEMORIES)}")
        self.peaks[memory] = max(self.peaks[memory], nbytes)

    # -- reading -------------------------------------------------------------------------------

    @property
    def span_count(self) -> int:
        return len(self._spans)

    @property
    def recorded(self) -> list[Span]:
        """The spans in the order they were added (cheaper than `spans` when order is moot).
        Do not modify the list."""
        return self._spans

    @property
    def spans(self) -> list[Span]:
        """Spans in a stable order: by start time, then core, track and instruction index.
        Sorted once per set of spans (the timeline and profile writers both read it)."""
        if self._sorted is None or len(self._sorted) != len(self._spans):
            self._sorted = sorted(self._spans, key=_TIMELINE_ORDER)
        return self._sorted
