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
from trnsim.units import fmt_bytes, fmt_flops, fmt_rate, fmt_time_ns

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


def format_summary(s: dict) -> str:
    """The summary as a readable table (what `trnsim run` prints)."""
    out = [
        f"trace {s['trace']!r} on {s['chip']} ({s['mode']})",
        f"total time      {fmt_time_ns(s['total_time_ns'])} (host launch costs included)",
        f"device time     {fmt_time_ns(s['device_time_ns'])} (first activity to last; "
        f"utilization and FLOP/s are over this)",
        "",
    ]
    if s.get("lnc", 1) > 1 and s["logical_cores"]:
        cores = [f"core: {lc} runs on {', '.join(ps)}" for lc, ps in s["logical_cores"].items()]
        out.append(f"cores           lnc {s['lnc']}: a stream's " + "; ".join(cores))
        out.append("")
    if s["engines"]:
        out.append(f"{'engine':<16}{'busy':>12}{'util':>8}{'instrs':>9}")
        for name, e in s["engines"].items():
            busy = fmt_time_ns(e["busy_ns"]) if e["instructions"] else "-"
            out.append(f"{name:<16}{busy:>12}{e['utilization']:>8.1%}{e['instructions']:>9}")
        out.append("")
    if s["dma"]:
        out.append(
            f"{'dma queue':<16}{'busy':>12}{'bytes':>12}{'xfers':>7}{'rate':>13}"
            f"{'setup over bytes':>20}"
        )
        for name, d in s["dma"].items():
            over = d["setup_overhead_ns"]
            share = f" ({over / d['busy_ns']:.0%})" if d["busy_ns"] else ""
            out.append(
                f"{name:<16}{fmt_time_ns(d['busy_ns']):>12}{fmt_bytes(d['bytes']):>12}"
                f"{d['transfers']:>7}{fmt_rate(d['bandwidth_bytes_per_s']):>13}"
                f"{fmt_time_ns(over) + share:>20}"
            )
        out.append("")
    h = s["hbm"]
    out.append(
        f"HBM             read {fmt_bytes(h['bytes_read'])}, written "
        f"{fmt_bytes(h['bytes_written'])}, {fmt_rate(h['bandwidth_bytes_per_s'])}"
    )
    peak = "" if s["peak_fraction"] is None else f", {s['peak_fraction']:.1%} of peak"
    out.append(f"compute         {s['flops']:.4g} FLOP, {fmt_flops(s['flops_per_s'])}{peak}")
    e = s.get("estimated")
    if e:
        out.append(
            f"estimated       {e['launches']} op launches, {fmt_time_ns(e['time_ns'])}, "
            f"{e['flops']:.4g} FLOP, {fmt_bytes(e['bytes'])}: roofline estimates, not simulated "
            f"(not in the figures above)"
        )
    m = s["memory"]
    out.append(
        f"memory peaks    SBUF {fmt_bytes(m['sbuf_peak_bytes'])}, PSUM "
        f"{fmt_bytes(m['psum_peak_bytes'])}, HBM {fmt_bytes(m['hbm_peak_bytes'])}"
    )
    for name, t in s["timings"].items():
        out.append(f"timing          {name}: {fmt_time_ns(t['ns'])}")
    if s.get("check_note"):
        out.append(f"check           nothing to compare: {s['check_note']}")
    for name, c in s.get("check", {}).items():
        out.append(
            f"check           {name}: max abs err {c['max_abs_err']:.3g}, "
            f"max rel err {c['max_rel_err']:.3g} {'ok' if c['ok'] else 'FAIL'}"
        )
    if s.get("ops"):
        out += ["", *_format_ops(s["ops"])]
    if s["top_instructions"]:
        out += [
            "",
            f"{'top instructions':<34}{'track':<16}{'count':>7}{'busy':>12}{'mean':>12}",
        ]
        for r in s["top_instructions"]:
            out.append(
                f"{(r['kernel'] + ':' + r['op'])[:33]:<34}{r['track']:<16}"
                f"{r['count']:>7}{fmt_time_ns(r['busy_ns']):>12}{fmt_time_ns(r['mean_ns']):>12}"
            )
        out.append("(busy: time with at least one running, overlapping transfers counted once)")
    out.append(f"model           trnsim {s['trnsim_version']}, config {s['config_hash']}")
    return "\n".join(out)


def _format_ops(rows: list[dict]) -> list[str]:
    """The per-op table: time per launch, roofline, what binds, the fraction reached."""
    out = [f"{'op':<34}{'time':>12}{'roofline':>12}  {'bound':<9}{'reached':>8}  tensors"]
    for r in rows:
        name = f"{r['kernel']}[{r['index']}] {r['op']}"
        tensors = ", ".join(
            f"{n} {'x'.join(map(str, shape))} {r['dtypes'][n]}" for n, shape in r["shapes"].items()
        )
        out.append(
            f"{name[:33]:<34}{fmt_time_ns(r['time_ns']):>12}{fmt_time_ns(r['roofline_ns']):>12}"
            f"  {r['bound']:<9}{r['fraction']:>8.1%}  {tensors}"
        )
    out.append("(time: per launch, first instruction start to last end; roofline: the largest "
               "of FLOPs / TensorE peak, bytes / DMA, bytes / HBM)")  # fmt: skip
    return out


COMPARED = (
    ("total time", lambda s: s["total_time_ns"], fmt_time_ns),
    ("device time", lambda s: s["device_time_ns"], fmt_time_ns),
    ("FLOP/s", lambda s: s["flops_per_s"], fmt_flops),
    ("peak fraction", lambda s: s["peak_fraction"], lambda v: "-" if v is None else f"{v:.1%}"),
    ("HBM bandwidth", lambda s: s["hbm"]["bandwidth_bytes_per_s"], fmt_rate),
    (
        "busiest engine",
        lambda s: max((e["utilization"] for e in s["engines"].values()), default=0.0),
        lambda v: f"{v:.1%}",
    ),
)


def format_comparison(columns: dict[str, dict]) -> str:
    """Several runs of one trace side by side (label -> summary, or {"error": why} for a
    column that could not run), with each value's ratio to the first column that ran."""
    ran = [s for s in columns.values() if "error" not in s]
    first = ran[0]
    width = max(22, *(len(label) + 2 for label in columns))
    head = f"{'':<16}" + "".join(f"{label:>{width}}" for label in columns)
    out = [f"trace {first['trace']!r}", head]
    for label, get, fmt in COMPARED:
        base = get(first)
        cells = []
        for s in columns.values():
            if "error" in s:
                cells.append(f"{'-':>{width}}")
                continue
            v = get(s)
            ratio = f" ({v / base:.2f}x)" if base and v is not None and s is not first else ""
            cells.append(f"{fmt(v) + ratio:>{width}}")
        out.append(f"{label:<16}" + "".join(cells))
    for label, s in columns.items():
        if "error" in s:
            out.append(f"{label} did not run: {s['error']}")
    return "\n".join(out)
