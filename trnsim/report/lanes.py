"""Display lanes: a timeline row whose slices overlap, drawn as several rows that each nest.

The Chrome trace format wants the complete events ("X") of one thread to nest: each either ends
before the next starts or contains it. Instructions on an engine run in order, but a DMA queue
keeps several transfers in flight, and a DMA engine serves several transfers at once; on one
thread their slices overlap without nesting and Perfetto draws them stacked as if one called
the other. So a row becomes lanes (`assign`), and `violations` checks a written trace.

(A display lane is a row of the viewer, not a DMA queue: `trnsim.dma.lanes.Lane` is a queue.)
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

PS_PER_US = 1_000_000


def assign(intervals: Iterable[tuple[int, int]]) -> list[int]:
    """The lane (0, 1, ...) of each (start, end) interval, in input order: taken in order of
    start (then end, then input order), each goes to the lowest-numbered lane whose last
    interval ended by its start. Greedy interval partitioning: a new lane opens only when every
    open lane is busy at that start, so there are as few lanes as the most intervals in flight
    at one time, and a lane's intervals never overlap. (An instant, start == end, goes before
    the intervals that start with it, so they can follow it on its lane.)"""
    spans = list(intervals)
    lanes = [0] * len(spans)
    busy: list[tuple[int, int]] = []  # (end, lane) of the lanes in use
    free: list[int] = []  # lanes whose interval has ended
    opened = 0
    for i in sorted(range(len(spans)), key=spans.__getitem__):
        start, end = spans[i]
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, opened = opened, opened + 1
        lanes[i] = lane
        heapq.heappush(busy, (end, lane))
    return lanes


def violations(trace, ticks_per_us: int = PS_PER_US) -> list[tuple[dict, dict]]:
    """The pairs (outer, inner) of complete events of one (pid, tid) in `trace` (a Chrome
    trace dict or its event list) that overlap without nesting, by thread and then time.
    Times are compared in whole ticks (trnsim's picoseconds): `ts + dur` in floating point is
    not exactly the end that was written, and back-to-back slices would seem to overlap."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    rows: dict[tuple, list[tuple[int, int, dict]]] = {}
    for e in events:
        if e.get("ph") == "X":
            start = round(e["ts"] * ticks_per_us)
            end = start + round(e["dur"] * ticks_per_us)
            rows.setdefault((e["pid"], e["tid"]), []).append((start, end, e))
    out = []
    for key in sorted(rows):
        around: list[tuple[int, dict]] = []  # (end, event) of the slices open here, innermost last
        for start, end, e in sorted(rows[key], key=lambda s: (s[0], -s[1])):
            while around and around[-1][0] <= start:
                around.pop()
            if around and end > around[-1][0]:
                out.append((around[-1][1], e))
            else:
                around.append((end, e))
    return out
