"""The timeline as Chrome trace JSON, which ui.perfetto.dev and chrome://tracing open.

One process per NeuronCore, one row per track (engine, DMA queue, host copies; `tracks` gives
their thread ids, order and names), one complete event ("ph": "X") per span; below the queues,
one row per DMA engine that moved data (as Neuron Explorer's DMA rows), with one event per
transfer's data phase on it (`Recorder.dma_moves`); a process "host" with a row per simulated
host thread (the Python caller, or each stream of a trace) showing its device-API calls and their
cost; and a process "HBM" with one counter track per stack giving its bandwidth. A kernel whose
tiles were placed by liveness adds counter tracks of its SBUF and PSUM bytes a partition in use
to each core (`tile_track`).
The format wants one thread's slices to nest, and a queue's transfers in flight (or those
sharing a DMA engine) overlap: each row is dealt onto display lanes (`lanes.assign`; one for a
row without overlaps), threads "dma q3", "dma q3 #2", ... sorted together, each of which nests.
Lanes rather than async slices, which Perfetto groups by name per process (the copies of all
queues together): a lane stays with its queue, and every slice stays an "X" event with its args.
Timestamps are microseconds (the format's unit) computed from integer picoseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

from trnsim.report.files import replacing
from trnsim.report.lanes import assign
from trnsim.report.recorder import Recorder
from trnsim.report.tile_track import tile_counters
from trnsim.report.tracks import (
    display_name,
    dma_engine_id,
    dma_track,
    lane_id,
    lane_name,
    lane_sort_index,
    track_id,
)

HBM_PID = 10_000
HOST_PID = 9_999


def _meta(name: str, pid: int, tid: int, args: dict) -> dict:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def _threads(pid: int, row: int, name: str, lanes: int) -> list[dict]:
    """The names and sort indices of a row's `lanes` threads."""
    out = []
    for lane in range(lanes):
        tid = lane_id(row, lane)
        out.append(_meta("thread_name", pid, tid, {"name": lane_name(name, lane)}))
        out.append(_meta("thread_sort_index", pid, tid, {"sort_index": lane_sort_index(row, lane)}))
    return out


def _laned(events: list[dict], times: list[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """Move each event (its "tid" a row's id) to its lane of that row, given its (start, end)
    in ps; return the number of lanes of each (pid, row)."""
    rows: dict[tuple[int, int], list[int]] = {}
    for i, e in enumerate(events):
        rows.setdefault((e["pid"], e["tid"]), []).append(i)
    counts = {}
    for (pid, row), which in rows.items():
        lanes = assign([times[i] for i in which])
        for i, lane in zip(which, lanes):
            if lane:
                events[i]["tid"] = lane_id(row, lane)
        counts[pid, row] = max(lanes) + 1
    return counts


def _span(s, tid: int) -> dict:
    return {
        "ph": "X",
        "name": s.op,
        "cat": s.kernel,
        "pid": s.core,
        "tid": tid,
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


def _moves(rec: Recorder) -> list[dict]:
    """One event per transfer's data phase on each DMA engine it used."""
    return [
        {
            "ph": "X",
            "name": "data",
            "cat": m.kernel,
            "pid": m.core,
            "tid": dma_engine_id(e),
            "ts": m.start_ps / 1e6,
            "dur": (m.end_ps - m.start_ps) / 1e6,
            "args": {"kernel": m.kernel, "index": m.index, "queue": dma_track(m.queue)},
        }
        for m in rec.dma_moves
        for e in m.engines
    ]


def _hbm(rec: Recorder) -> list[dict]:
    """The HBM process: a counter track per stack, in GB/s."""
    if not rec.hbm_samples:
        return []
    return [_meta("process_name", HBM_PID, 0, {"name": "HBM"})] + [
        {
            "ph": "C",
            "name": f"stack{h.stack} GB/s",
            "pid": HBM_PID,
            "ts": h.ps / 1e6,
            "args": {"GB/s": h.bytes_per_s / 1e9},
        }
        for h in rec.hbm_samples
    ]


def chrome_trace(rec: Recorder, chip: str = "") -> dict:
    """The trace as a dict in the Chrome trace event format."""
    events: list[dict] = []
    tracks = sorted({(s.core, s.track) for s in rec.recorded}, key=lambda t: (t[0], track_id(t[1])))
    tids = {track: track_id(track) for _, track in tracks}
    engines = sorted({(m.core, e) for m in rec.dma_moves for e in m.engines})
    spans = [_span(s, tids[s.track]) for s in rec.spans]
    lanes = _laned(spans, [(s.start_ps, s.end_ps) for s in rec.spans])
    moves = _moves(rec)
    lanes |= _laned(moves, [(m.start_ps, m.end_ps) for m in rec.dma_moves for _ in m.engines])
    for core in sorted({c for c, _ in tracks} | {c for c, _ in engines}):
        events.append(_meta("process_name", core, 0, {"name": f"{chip} core{core}".strip()}))
        events.append(_meta("process_sort_index", core, 0, {"sort_index": core}))
    for core, track in tracks:
        events += _threads(core, tids[track], display_name(track), lanes[core, tids[track]])
    for core, e in engines:
        row = dma_engine_id(e)
        events += _threads(core, row, f"dma engine {e}", lanes[core, row])
    events += spans
    events += moves
    events += _host_events(rec)
    events += _hbm(rec)
    events += tile_counters(rec)
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def _host_events(rec: Recorder) -> list[dict]:
    """A process "host" with a thread per simulated host thread, one event per API call."""
    if not rec.host_calls:
        return []
    tids: dict[str, int] = {}
    for c in rec.host_calls:
        tids.setdefault(c.thread, len(tids))
    calls = [
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
        for c in rec.host_calls
    ]
    lanes = _laned(calls, [(c.start_ps, c.end_ps) for c in rec.host_calls])
    out: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": HOST_PID, "tid": 0, "args": {"name": "host"}},
        {"ph": "M", "name": "process_sort_index", "pid": HOST_PID, "tid": 0,
         "args": {"sort_index": -1}},
    ]  # fmt: skip
    for name, tid in tids.items():
        out += _threads(HOST_PID, tid, name, lanes[HOST_PID, tid])
    return out + calls


def write_chrome_trace(
    rec: Recorder, path: str | Path, chip: str = "", meta: dict | None = None
) -> None:
    """Write the Chrome trace JSON; `meta` (the report's provenance: trnsim version, config
    hash) goes into its `otherData`, which Perfetto shows as the trace's metadata."""
    trace = chrome_trace(rec, chip)
    if meta:
        trace["otherData"] = {"chip": chip, **meta}
    text = json.dumps(trace, separators=(",", ":"))
    with replacing(path) as fh:
        fh.write(text)
