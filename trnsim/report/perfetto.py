"""The timeline as Chrome trace JSON, which ui.perfetto.dev and chrome://tracing open.

One process per NeuronCore, one thread per track (engine, DMA queue, host copies; `tracks` gives
their thread ids, order and names), one complete event ("ph": "X") per span, and a process "HBM"
with one counter track per stack giving its bandwidth.
Timestamps are microseconds (the format's unit) computed from integer picoseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

from trnsim.report.recorder import Recorder
from trnsim.report.tracks import display_name, track_id

HBM_PID = 10_000


def chrome_trace(rec: Recorder, chip: str = "") -> dict:
    """The trace as a dict in the Chrome trace event format."""
    events: list[dict] = []
    tracks = sorted({(s.core, s.track) for s in rec.recorded}, key=lambda t: (t[0], track_id(t[1])))
    tids = {track: track_id(track) for _, track in tracks}
    for core in sorted({c for c, _ in tracks}):
        events.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": core,
                "tid": 0,
                "args": {"name": f"{chip} core{core}".strip()},
            }
        )
        events.append(
            {
                "ph": "M",
                "name": "process_sort_index",
                "pid": core,
                "tid": 0,
                "args": {"sort_index": core},
            }
        )
    for core, track in tracks:
        events.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": core,
                "tid": tids[track],
                "args": {"name": display_name(track)},
            }
        )
        events.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": core,
                "tid": tids[track],
                "args": {"sort_index": tids[track]},
            }
        )
    for s in rec.spans:
        events.append(
            {
                "ph": "X",
                "name": s.op,
                "cat": s.kernel,
                "pid": s.core,
                "tid": tids[s.track],
                "ts": s.start_ps / 1e6,
                "dur": s.duration_ps / 1e6,
                "args": {
                    "kernel": s.kernel,
                    "index": s.index,
                    "dtype": s.dtype,
                    "bytes": s.bytes,
                    "flops": s.flops,
                },
            }
        )
    if rec.hbm_samples:
        events.append(
            {"ph": "M", "name": "process_name", "pid": HBM_PID, "tid": 0, "args": {"name": "HBM"}}
        )
        for h in rec.hbm_samples:
            events.append(
                {
                    "ph": "C",
                    "name": f"stack{h.stack} GB/s",
                    "pid": HBM_PID,
                    "ts": h.ps / 1e6,
                    "args": {"GB/s": h.bytes_per_s / 1e9},
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_chrome_trace(
    rec: Recorder, path: str | Path, chip: str = "", meta: dict | None = None
) -> None:
    """Write the Chrome trace JSON; `meta` (the report's provenance: trnsim version, config
    hash) goes into its `otherData`, which Perfetto shows as the trace's metadata."""
    trace = chrome_trace(rec, chip)
    if meta:
        trace["otherData"] = {"chip": chip, **meta}
    Path(path).write_text(json.dumps(trace, separators=(",", ":")))
