"""The run summary: a JSON-ready dict (the keys TRACE_FORMAT.md promises) and its text table."""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from operator import attrgetter
from typing import NamedTuple

from trnsim.config import ChipConfig, peak_flops_per_core
from trnsim.isa import Engine
from trnsim.report.provenance import provenance
from trnsim.report.recorder import Recorder, Span
from trnsim.report.tracks import ENGINE_TRACKS, dma_queue, dma_track, engine_track, is_dma

# C-level field getters: summaries read every span of runs with millions of them
_INSTRUCTION = attrgetter("kernel", "op", "core", "track")
_START, _END, _BYTES = attrgetter("start_ps"), attrgetter("end_ps"), attrgetter("bytes")


class QueueStats(NamedTuple):
    """One DMA queue's transfers: `busy_ps` is the union of their [submit, end] intervals
    (transfers of a queue overlap while later ones are set up)."""

    busy_ps: int
    bytes: int
    transfers: int


def dma_queue_stats(spans: Iterable[Span]) -> dict[tuple[int, int], QueueStats]:
    """(core, queue) -> the queue's statistics, from the spans of DMA-queue tracks, in
    (core, queue) order."""
    spans = list(spans)
    return _queue_stats(spans, {t for t in {s.track for s in spans} if is_dma(t)})


def _queue_stats(spans: list[Span], dma_tracks: set[str]) -> dict:
    """`dma_queue_stats` of the spans on `dma_tracks` (all the DMA tracks among them)."""
    per_queue: dict[tuple[int, str], list[Span]] = defaultdict(list)
    if dma_tracks:
        for s in spans:
            if s.track in dma_tracks:
                per_queue[(s.core, s.track)].append(s)
    out = {}
    for (core, track), q in per_queue.items():
        busy, end = 0, -1
        for a, b in sorted(zip(map(_START, q), map(_END, q))):
            if b > end:
                busy += b - max(a, end)
                end = b
        out[(core, dma_queue(track))] = QueueStats(busy, sum(map(_BYTES, q)), len(q))
    return dict(sorted(out.items()))


class _Totals(NamedTuple):
    """What the summary adds up over spans: first start, last end (None when there are none);
    (kernel, op, core, track) -> [ps, count]; the same key -> the time covered by its spans,
    off engine tracks (where spans may overlap); FLOPs by dtype; (core, queue) -> QueueStats."""

    first: int | None
    last: int | None
    by_instr: dict
    unions: dict
    flops: dict
    queues: dict


def _aggregate(spans: list[Span]) -> _Totals:
    """The totals of one run of spans."""
    by_instr: dict[tuple, list] = defaultdict(lambda: [0, 0])
    intervals: dict[tuple, list] = defaultdict(list)
    flops_by_dtype: dict[str, int] = defaultdict(int)
    for s in spans:
        key = _INSTRUCTION(s)
        t = by_instr[key]
        t[0] += s.end_ps - s.start_ps
        t[1] += 1
        if s.track in ENGINE_TRACKS:
            if s.flops:
                flops_by_dtype[s.dtype] += s.flops
        else:
            intervals[key].append((s.start_ps, s.end_ps))
    dma_tracks = {track for *_, track in by_instr if is_dma(track)}
    return _Totals(
        min(map(_START, spans), default=None),
        max(map(_END, spans), default=None),
        by_instr,
        {k: _union(v) for k, v in intervals.items()},
        flops_by_dtype,
        _queue_stats(spans, dma_tracks),
    )


def _totals(rec: Recorder) -> tuple:
    """`_aggregate` of all the recorder's spans, each replayed timeline aggregated once: the
    segments of a run occupy disjoint windows of time (a timeline is replayed only on an idle
    chip), so their unions add up. Keys come in the order their first span was recorded."""
    first, last = None, None
    by_instr: dict[tuple, list] = defaultdict(lambda: [0, 0])
    unions: dict[tuple, int] = defaultdict(int)
    flops: dict[str, int] = defaultdict(int)
    queues: dict[tuple, list] = defaultdict(lambda: [0, 0, 0])
    for seg, shift, _launch in rec.segments():
        if isinstance(seg, list):
            t = _aggregate(seg)
        else:
            t = seg.cache.get("totals") or seg.cache.setdefault("totals", _aggregate(seg.spans))
        if t.first is not None:
            first = t.first + shift if first is None else min(first, t.first + shift)
            last = t.last + shift if last is None else max(last, t.last + shift)
        for k, (ps, n) in t.by_instr.items():
            v = by_instr[k]
            v[0] += ps
            v[1] += n
        for k, ps in t.unions.items():
            unions[k] += ps
        for k, f in t.flops.items():
            flops[k] += f
        for k, st in t.queues.items():
            q = queues[k]
            q[0], q[1], q[2] = q[0] + st.busy_ps, q[1] + st.bytes, q[2] + st.transfers
    for e in rec.estimates:  # estimated ops (recorded runs) take device time too
        first = e.start_ps if first is None else min(first, e.start_ps)
        last = e.end_ps if last is None else max(last, e.end_ps)
    stats = {k: QueueStats(*v) for k, v in sorted(queues.items())}
    return first or 0, last or 0, by_instr, unions, flops, stats


def summarize(
    rec: Recorder,
    cfg: ChipConfig,
    total_ps: int,
    *,
    trace: str,
    mode: str,
    timing=(),
    top: int = 10,
    lnc: int = 1,
    ops: dict | None = None,
) -> dict:
    """Summarise a run.

    `total_time_ns` is the whole simulated time, host launch overheads included;
    `device_time_ns` runs from the start of the first span (instruction, DMA transfer or host
    copy) to the end of the last. Engine utilization, achieved FLOP/s and `peak_fraction` are
    measured over the device time, so a kernel's efficiency does not depend on the host's
    launch cost. DMA queues' figures are `dma_queue_stats`; `logical_cores` is `_logical`.
    `ops` (kernel -> (its op rows, per physical core of the launch its instructions' row
    tags)) adds the per-op rows (`op_times`) under the key `ops`.
    """
    first, last, by_instr, unions, flops_by_dtype, queues = _totals(rec)
    device_ps = last - first
    busy: dict[tuple[int, str], list] = defaultdict(lambda: [0, 0])  # (core, engine track)
    for (_k, _op, core, track), (ps, n) in by_instr.items():
        if track in ENGINE_TRACKS:
            b = busy[(core, track)]
            b[0] += ps
            b[1] += n
    seconds = device_ps * 1e-12
    flops = sum(flops_by_dtype.values())
    moved = rec.hbm_bytes_read + rec.hbm_bytes_written
    out = {
        "trace": trace,
        "chip": cfg.name,
        "mode": mode,
        **provenance(cfg),
        "lnc": lnc,
        "logical_cores": _logical(by_instr, lnc),
        "total_time_ns": total_ps / 1000,
        "device_time_ns": device_ps / 1000,
        "engines": _engines(busy, device_ps),
        "dma": _dma(queues, _overheads(rec)),
        "hbm": {
            "bytes_read": rec.hbm_bytes_read,
            "bytes_written": rec.hbm_bytes_written,
            "bandwidth_bytes_per_s": moved / seconds if seconds else 0.0,
        },
        "flops": flops,
        "flops_per_s": flops / seconds if seconds else 0.0,
        "peak_fraction": _peak_fraction(cfg, flops_by_dtype, busy, seconds),
        "flops_by_dtype": dict(sorted(flops_by_dtype.items())),
        "memory": {
            "sbuf_peak_bytes": rec.peaks["sbuf"],
            "psum_peak_bytes": rec.peaks["psum"],
            "hbm_peak_bytes": rec.peaks["hbm"],
        },
        "timings": {
            f"{a}->{b}": {"ns": (rec.events[b] - rec.events[a]) / 1000}
            for a, b in timing
            if a in rec.events and b in rec.events
        },
        "top_instructions": _top(by_instr, unions, top),
    }
    if ops:
        out["ops"] = op_times(rec, ops)
    if rec.estimates:
        out["estimated"] = estimated(rec.estimates)
    return out


def estimated(spans) -> dict:
    """The estimated ops' totals (not simulated: their FLOPs and bytes are the roofline's, not
    counted in `flops` and `hbm`) and, per op, launches and time."""
    per_op: dict[str, dict] = {}
    for e in spans:
        o = per_op.setdefault(e.op, {"launches": 0, "time_ns": 0.0, "flops": 0, "bytes": 0})
        o["launches"] += 1
        o["time_ns"] += (e.end_ps - e.start_ps) / 1000
        o["flops"] += e.flops
        o["bytes"] += e.bytes
    return {
        "launches": len(spans),
        "time_ns": sum(e.end_ps - e.start_ps for e in spans) / 1000,
        "flops": sum(e.flops for e in spans),
        "bytes": sum(e.bytes for e in spans),
        "ops": dict(sorted(per_op.items())),
    }


def op_times(rec: Recorder, ops: dict) -> list[dict]:
    """A row per op of each kernel that ran: its `rows` entry (op, shapes, dtypes, bounds)
    with `launches`, `time_ns` (per launch, the mean of its span: from its first instruction's
    start to its last one's end on the launch's cores) and `fraction` (roofline / time)."""
    windows: dict[tuple, list] = defaultdict(list)  # (kernel, core) -> (start, launch, position)
    for n, w in enumerate(rec.launches):
        if w.kernel in ops:
            for pos, core in enumerate(w.cores):
                windows[(w.kernel, core)].append((w.start_ps, n, pos))
    starts = {}
    for key, ws in windows.items():
        ws.sort()
        starts[key] = [w[0] for w in ws]
    spans: dict[tuple, list] = {}  # (kernel, row, launch) -> [start, end]
    for seg, shift, n in rec.segments():
        if isinstance(seg, list):
            _row_spans(seg, windows, starts, ops, spans)
            continue
        key = ("ops", id(ops))  # a timeline is one launch: its rows, once
        if key not in seg.cache:
            cores = rec.launches[n].cores
            one = {(k, c): [(0, 0, pos)] for k in ops for pos, c in enumerate(cores)}
            seg.cache[key] = _row_spans(seg.spans, one, {}, ops, {})
        for (kernel, row, _), (a, b) in seg.cache[key].items():
            spans[(kernel, row, n)] = [a + shift, b + shift]
    per_row: dict[tuple, list] = defaultdict(list)  # (kernel, row) -> span ps per launch
    for (kernel, row, _n), (a, b) in sorted(spans.items()):
        per_row[(kernel, row)].append(b - a)
    out = []
    for kernel, (rows, _tags) in ops.items():
        for i, row in enumerate(rows):
            times = per_row.get((kernel, i))
            if not times:
                continue
            ns = sum(times) / len(times) / 1000
            out.append(
                {
                    "kernel": kernel,
                    "index": i,
                    **row,
                    "launches": len(times),
                    "time_ns": ns,
                    "fraction": row["roofline_ns"] / ns if ns else 0.0,
                }
            )
    return out


def _row_spans(spans: list, windows: dict, starts: dict, ops: dict, out: dict) -> dict:
    """Into `out`: (kernel, row, launch) -> [first start, last end] of the row's spans, each
    span in the launch of its (kernel, core) window that started last before it."""
    for s in spans:
        key = (s.kernel, s.core)
        ws = windows.get(key)
        if ws is None:
            continue
        _, n, pos = ws[0] if len(ws) == 1 else ws[bisect_right(starts[key], s.start_ps) - 1]
        tags = ops[s.kernel][1][pos]
        if s.index >= len(tags):
            continue
        k = (s.kernel, tags[s.index], n)
        t = out.get(k)
        if t is None:
            out[k] = [s.start_ps, s.end_ps]
        else:
            t[0], t[1] = min(t[0], s.start_ps), max(t[1], s.end_ps)
    return out


def _logical(by_instr: dict, lnc: int) -> dict[str, list[str]]:
    """Each logical core that ran something (a stream's `core:`) -> the physical cores it is
    made of (`lnc` of them): tracks name physical cores."""
    used = sorted({core // lnc for _k, _op, core, _t in by_instr})
    return {str(lc): [f"core{p}" for p in range(lc * lnc, (lc + 1) * lnc)] for lc in used}


def _top(by_instr: dict, unions: dict, top: int) -> list[dict]:
    """The `top` (kernel, op, core, track) groups by busy time: the time at least one of their
    spans ran (engine spans never overlap: their sum), with their count and mean duration."""
    busy = {k: unions.get(k, v[0]) for k, v in by_instr.items()}
    rows = sorted(by_instr.items(), key=lambda kv: (-busy[kv[0]], kv[0]))[:top]
    return [
        {
            "kernel": k,
            "op": op,
            "track": f"core{c}.{tr}",
            "count": v[1],
            "busy_ns": busy[(k, op, c, tr)] / 1000,
            "mean_ns": v[0] / v[1] / 1000,
        }
        for (k, op, c, tr), v in rows
    ]


def _union(intervals: list[tuple[int, int]]) -> int:
    """The time covered by at least one of `intervals` (overlapping transfers count once)."""
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _engines(busy: dict[tuple[int, str], list], device_ps: int) -> dict:
    """Every engine of every core that ran an engine instruction, idle engines included."""
    engines = {}
    for core in sorted({c for c, _ in busy}):
        for track in ENGINE_TRACKS:
            b_ps, n = busy.get((core, track), (0, 0))
            engines[f"core{core}.{track}"] = {
                "busy_ns": b_ps / 1000,
                "utilization": b_ps / device_ps if device_ps else 0.0,
                "instructions": n,
            }
    return engines


def _overheads(rec: Recorder) -> dict[tuple[int, int], int]:
    """(core, queue) -> ps its transfers' setup cost beyond their bytes (`DmaMove`)."""
    out: dict[tuple[int, int], int] = defaultdict(int)
    for seg, _shift, _launch in rec.segments("moves"):
        if not isinstance(seg, list):
            if "overheads" not in seg.cache:
                seg.cache["overheads"] = _move_overheads(seg.moves)
            seg = seg.cache["overheads"]
        else:
            seg = _move_overheads(seg)
        for k, ps in seg.items():
            out[k] += ps
    return out


def _move_overheads(moves: list) -> dict[tuple[int, int], int]:
    out: dict[tuple[int, int], int] = defaultdict(int)
    for m in moves:
        if m.overhead_ps:
            out[(m.core, m.queue)] += m.overhead_ps
    return out


def _dma(stats: dict[tuple[int, int], QueueStats], overheads: dict) -> dict:
    """Per queue; `setup_overhead_ns` is the time its small transfers cost beyond their bytes:
    per transfer, how much longer its setup took than its data at full rate. A queue whose
    overhead is a large part of its busy time is limited by its transfer count, not bandwidth."""
    return {
        f"core{core}.{dma_track(queue)}": {
            "busy_ns": st.busy_ps / 1000,
            "bytes": st.bytes,
            "transfers": st.transfers,
            "bandwidth_bytes_per_s": st.bytes / (st.busy_ps * 1e-12) if st.busy_ps else 0.0,
            "setup_overhead_ns": overheads.get((core, queue), 0) / 1000,
        }
        for (core, queue), st in stats.items()
    }


def _peak_fraction(
    cfg: ChipConfig, flops_by_dtype: dict[str, int], busy: dict, seconds: float
) -> float | None:
    """The time the used dtypes' FLOPs would need at peak, over the time the cores that ran
    matmuls had; None for a run without FLOPs (there is no peak to compare with)."""
    if not any(flops_by_dtype.values()):
        return None
    at_peak_s = sum(
        f / peak_flops_per_core(cfg, dt) for dt, f in flops_by_dtype.items() if _has_peak(cfg, dt)
    )
    tensor = engine_track(Engine.TENSOR)
    compute_cores = len({c for (c, track), b in busy.items() if track == tensor and b[1]})
    return at_peak_s / (seconds * compute_cores) if seconds and compute_cores else 0.0


def _has_peak(cfg: ChipConfig, dt: str) -> bool:
    try:
        return peak_flops_per_core(cfg, dt) > 0
    except ValueError:
        return False
