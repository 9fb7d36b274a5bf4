"""The recorder: what happened, when. Engines and DMA queues append spans; writers read them.

A span is one instruction (or one DMA transfer) on one track. Times are integer picoseconds.
Spans are plain tuples appended to a list, because recording sits on the simulator's hot path.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Span:
    """One instruction's execution, as writers and tests see it."""

    core: int
    track: str  # "tensor", "vector", "scalar", "gpsimd", or "q<N>" for a DMA queue
    op: str
    start_ps: int
    end_ps: int
    bytes: int
    flops: int
    index: int  # instruction index in its kernel
    kernel: str
    dtype: str

    @property
    def duration_ps(self) -> int:
        return self.end_ps - self.start_ps


@dataclass
class Recorder:
    """Collects spans, HBM bandwidth samples, event times and memory high-water marks."""

    spans_raw: list[tuple] = field(default_factory=list)
    hbm_samples: list[tuple[int, int, float]] = field(default_factory=list)  # (ps, stack, B/s)
    events: dict[str, int] = field(default_factory=dict)  # event name -> ps recorded
    sbuf_peak: int = 0
    psum_peak: int = 0
    hbm_peak: int = 0
    hbm_bytes_read: int = 0
    hbm_bytes_written: int = 0
    _sorted: list[Span] | None = field(default=None, repr=False)

    def span(self, core, track, op, start, end, nbytes, flops, index, kernel, dtype) -> None:
        self.spans_raw.append((core, track, op, start, end, nbytes, flops, index, kernel, dtype))

    @property
    def spans(self) -> list[Span]:
        """Spans in a stable order: by start time, then core, track and instruction index.
        Sorted once per set of spans (the timeline and profile writers both read it)."""
        if self._sorted is None or len(self._sorted) != len(self.spans_raw):
            out = [Span(*s) for s in self.spans_raw]
            out.sort(key=lambda s: (s.start_ps, s.core, s.track, s.index))
            self._sorted = out
        return self._sorted
