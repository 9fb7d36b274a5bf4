"""The timeline as Chrome trace JSON, which ui.perfetto.dev and chrome://tracing open.

One process per NeuronCore, one thread (track) per engine and DMA queue, one complete event
("ph": "X") per span, and a process "HBM" with one counter track per stack giving its bandwidth.
Timestamps are microseconds (the format's unit) computed from integer picoseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

from trnsim.report.recorder import Recorder

ENGINE_TIDS = {"tensor": 0, "vector": 1, "scalar": 2, "gpsimd": 3, "host": 99}
HBM_PID = 10_000


def _tid(track: str) -> int:
    return ENGINE_TIDS[track] if track in ENGINE_TIDS else 100 + int(track[1:])


def chrome_trace(rec: Recorder, chip: str = "") -> dict:
    """The trace as a dict in the Chrome trace event format."""
    events: list[dict] = []
    tracks = sorted({(s[0], s[1]) for s in rec.spans_raw}, key=lambda t: (t[0], _tid(t[1])))
    for core in sorted({c for c, _ in tracks}):
        events.append({"ph": "M", "name": "process_name", "pid": core, "tid": 0,
                       "args": {"name": f"{chip} core{core}".strip()}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": core, "tid": 0,
                       "args": {"sort_index": core}})
    for core, track in tracks:
        name = {"host": "host copies"}.get(track, track if track in ENGINE_TIDS else f"dma {track}")
        events.append({"ph": "M", "name": "thread_name", "pid": core, "tid": _tid(track),
                       "args": {"name": name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": core, "tid": _tid(track),
                       "args": {"sort_index": _tid(track)}})
    for s in rec.spans:
        events.append({"ph": "X", "name": s.op, "cat": s.kernel, "pid": s.core,
                       "tid": _tid(s.track), "ts": s.start_ps / 1e6,
                       "dur": s.duration_ps / 1e6,
                       "args": {"kernel": s.kernel, "index": s.index, "dtype": s.dtype,
                                "bytes": s.bytes, "flops": s.flops}})
    if rec.hbm_samples:
        events.append({"ph": "M", "name": "process_name", "pid": HBM_PID, "tid": 0,
                       "args": {"name": "HBM"}})
        for ps, stack, rate in rec.hbm_samples:
            events.append({"ph": "C", "name": f"stack{stack} GB/s", "pid": HBM_PID,
                           "ts": ps / 1e6, "args": {"GB/s": rate / 1e9}})
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_chrome_trace(rec: Recorder, path: str | Path, chip: str = "") -> None:
    Path(path).write_text(json.dumps(chrome_trace(rec, chip), separators=(",", ":")))
