"""The timeline of a run on a system of chips as Chrome trace JSON (ui.perfetto.dev opens it).

A process per chip ("chip 1 (trn2)", pid = the chip's index), and in it, per physical core, a
row per engine, DMA queue and DMA engine as one chip's trace has them (`perfetto`; rows named
"core5 tensor", "core5 dma q3", "core5 dma engine 2") and a row per CC stream of the core's
rank ("core5 cc grads"), one slice per collective from when the rank posted it to when it was
complete (its op, algorithm, group size, bytes, sequence number in the args); HBM bandwidth per
stack as counters of the chip's process; and one "host" process with a row per host thread of
every chip. Rows whose slices overlap are dealt onto lanes ("core5 dma q3 #2"), as on one chip
(`lanes.assign`), so every thread's slices nest. A run on one chip is written by `perfetto`,
unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

from trnsim.report.files import replacing
from trnsim.report.lanes import assign
from trnsim.report.perfetto import _host_events, _meta, _moves, _span
from trnsim.report.recorder import Recorder
from trnsim.report.tracks import (
    LANE_STRIDE,
    display_name,
    dma_engine_id,
    lane_id,
    lane_name,
    lane_sort_index,
    track_id,
)

__all__ = ["system_trace", "write_system_trace", "CORE_STRIDE", "CC_ID_BASE"]

CORE_STRIDE = 10_000_000
"""Thread ids of physical core N of a chip are N x CORE_STRIDE + a row's lane id (`tracks`)."""
CC_ID_BASE = 2_000
"""A core's CC streams are rows CC_ID_BASE, CC_ID_BASE + 1, ... (after its DMA engines)."""


def _tid(core: int, row: int, lane: int = 0) -> int:
    return core * CORE_STRIDE + lane_id(row, lane)


def _collective(c, pid: int, row: int) -> dict:
    return {
        "ph": "X",
        "name": c.op,
        "cat": "collective",
        "pid": pid,
        "tid": row,
        "ts": c.start_ps / 1e6,
        "dur": (c.end_ps - c.start_ps) / 1e6,
        "args": {
            "label": c.label,
            "rank": c.rank,
            "algorithm": c.algorithm,
            "ranks": c.ranks,
            "bytes": c.nbytes,
            "dtype": c.dtype,
            "seq": c.seq,
        },
    }


def _chip(rec: Recorder, pid: int, chip: str) -> list[dict]:
    """The events of one chip's process."""
    rows: dict[tuple[int, int], str] = {}  # (core, row id) -> its name
    events: list[dict] = []
    keys: list[tuple[int, int]] = []  # (core, row) of each event, in order
    times: list[tuple[int, int]] = []
    for s in rec.spans:
        row = track_id(s.track)
        rows[(s.core, row)] = display_name(s.track)
        events.append(_span(s, 0))
        keys.append((s.core, row))
        times.append((s.start_ps, s.end_ps))
    per_engine = [m for m in rec.dma_moves for _ in m.engines]  # `_moves`' order
    for m, e in zip(per_engine, _moves(rec)):
        row = e["tid"]
        rows[(m.core, row)] = f"dma engine {row - dma_engine_id(0)}"
        events.append(e)
        keys.append((m.core, row))
        times.append((m.start_ps, m.end_ps))
    cc: dict[tuple[int, str], int] = {}
    for c in rec.collectives:
        row = cc.setdefault((c.core, c.stream), CC_ID_BASE + len([k for k in cc if k[0] == c.core]))
        rows[(c.core, row)] = f"cc {c.stream}"
        events.append(_collective(c, pid, row))
        keys.append((c.core, row))
        times.append((c.start_ps, c.end_ps))
    if not events and not rec.hbm_samples:
        return []
    lanes: dict[tuple[int, int], int] = {}
    by_row: dict[tuple[int, int], list[int]] = {}
    for i, k in enumerate(keys):
        by_row.setdefault(k, []).append(i)
    for k, which in by_row.items():
        got = assign([times[i] for i in which])
        for i, lane in zip(which, got):
            events[i]["pid"], events[i]["tid"] = pid, _tid(k[0], k[1], lane)
        lanes[k] = max(got) + 1
    out = [
        _meta("process_name", pid, 0, {"name": f"chip {pid} ({chip})"}),
        _meta("process_sort_index", pid, 0, {"sort_index": pid}),
    ]
    for (core, row), name in sorted(rows.items()):
        for lane in range(lanes[(core, row)]):
            tid = _tid(core, row, lane)
            label = lane_name(f"core{core} {name}", lane)
            out.append(_meta("thread_name", pid, tid, {"name": label}))
            sort = core * CORE_STRIDE * LANE_STRIDE + lane_sort_index(row, lane)
            out.append(_meta("thread_sort_index", pid, tid, {"sort_index": sort}))
    out += events
    out += [
        {
            "ph": "C",
            "name": f"HBM stack{h.stack} GB/s",
            "pid": pid,
            "ts": h.ps / 1e6,
            "args": {"GB/s": h.bytes_per_s / 1e9},
        }
        for h in rec.hbm_samples
    ]
    return out


def system_trace(recorders: dict[int, Recorder], chip: str = "") -> dict:
    """The trace of a system's chips (`recorders`: chip index -> its recorder) as a dict in the
    Chrome trace event format."""
    events: list[dict] = []
    for c, rec in sorted(recorders.items()):
        events += _chip(rec, c, chip)
    host = Recorder()
    for _, rec in sorted(recorders.items()):
        host.host_calls.extend(rec.host_calls)
    host.host_calls.sort(key=lambda h: (h.start_ps, h.end_ps))
    events += _host_events(host)
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_system_trace(
    recorders: dict[int, Recorder],
    path: str | Path,
    system: str = "",
    chip: str = "",
    meta: dict | None = None,
) -> None:
    """Write `system_trace` as JSON; `meta` (provenance) goes into `otherData` with the system's
    and the chip's names. The file appears whole or not at all."""
    trace = system_trace(recorders, chip)
    trace["otherData"] = {"system": system, "chip": chip, **(meta or {})}
    text = json.dumps(trace, separators=(",", ":"))
    with replacing(path) as fh:
        fh.write(text)
