"""The timeline as Chrome trace JSON, which ui.perfetto.dev and chrome://tracing open.

One process per NeuronCore, one thread per track (engine, DMA queue, host copies; `tracks` gives
their thread ids, order and names), one complete event ("ph": "X") per span; a process "host"
with a thread per simulated host thread (the Python caller, or each stream of a trace) showing
its device-API calls and their cost; and a process "HBM" with one counter track per stack giving
its bandwidth.
Timestamps are microseconds (the format's unit) computed from integer picoseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

from trnsim.report.recorder import Recorder
from trnsim.report.tracks import display_name, track_id

HBM_PID = 10_000
HOST_PID = 9_999


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
    events += _host_events(rec)
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


def _host_events(rec: Recorder) -> list[dict]:
    """A process "host" with a thread per simulated host thread, one event per API call."""
    if not rec.host_calls:
        return []
    tids: dict[str, int] = {}
    for c in rec.host_calls:
        tids.setdefault(c.thread, len(tids))
    out: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": HOST_PID, "tid": 0, "args": {"name": "host"}},
        {"ph": "M", "name": "process_sort_index", "pid": HOST_PID, "tid": 0,
         "args": {"sort_index": -1}},
    ]  # fmt: skip
    for name, tid in tids.items():
        out.append(
            {"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": tid, "args": {"name": name}}
        )
    for c in rec.host_calls:
        out.append(
            {
                "ph": "X",
                "name": c.op,
                "cat": "host",
                "pid": HOST_PID,
                "tid": tids[c.thread],
                "ts": c.start_ps / 1e6,
                "dur": (c.end_ps - c.start_ps) / 1e6,
                "args": {"detail": c.detail},
            }
        )
    return out


def write_chrome_trace(rec: Recorder, path: str | Path, chip: str = "") -> None:
    Path(path).write_text(json.dumps(chrome_trace(rec, chip), separators=(",", ":")))
