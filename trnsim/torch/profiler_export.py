"""What a `torch.neuron.profiler.profile` writes: per-op totals (`key_averages`), one Chrome
trace (host ops, flow arrows to their launches, each NeuronCore's launches, engines, DMA queues
and engines, HBM counters; tracks named, and overlapping slices dealt onto display lanes, as
`trnsim.report.perfetto` does), and Neuron Explorer's tables as Parquet (Instruction, DmaPacket,
DmaPacketAggregated, Summary).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trnsim.errors import TrnsimError
from trnsim.report.files import replacing, replacing_path
from trnsim.report.perfetto import HBM_PID, HOST_PID, _laned
from trnsim.report.tracks import (
    HOST,
    display_name,
    dma_engine_id,
    dma_queue,
    dma_track,
    is_dma,
    lane_id,
    lane_name,
    lane_sort_index,
    track_id,
)

LAUNCH_TID = 90  # each core's row of launches (one span per op), above its engines
_US = 1e6  # ps per microsecond


@dataclass
class OpAverage:
    """One aten op's totals over the profile (times in ps; `*_time_*` in us, as torch's)."""

    key: str
    input_shapes: list | None = None  # when grouped by input shape
    count: int = 0
    host_ps: int = 0
    device_ps: int = 0
    modelled: int = 0
    estimated: int = 0

    @property
    def cpu_time_total(self) -> float:
        return self.host_ps / _US

    @property
    def device_time_total(self) -> float:
        return self.device_ps / _US

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total / self.count

    @property
    def device_time(self) -> float:
        return self.device_time_total / self.count


_SORT = {
    "count": "count", "calls": "count",
    "cpu_time_total": "host_ps", "self_cpu_time_total": "host_ps", "host_time_total": "host_ps",
    "device_time_total": "device_ps", "self_device_time_total": "device_ps",
    "cuda_time_total": "device_ps", "self_cuda_time_total": "device_ps",
}  # fmt: skip


_ROW = "{:<36} {:>6} {:>12} {:>11} {:>13} {:>11} {:>9} {:>9}"


class KeyAverages(list):
    """`OpAverage` rows, one per aten op name, in the order the ops first ran."""

    def table(self, sort_by: str | None = None, row_limit: int = 100) -> str:
        """The rows as a text table, largest `sort_by` first (torch's names: "count",
        "cpu_time_total", "device_time_total", "cuda_time_total", their "self_" forms)."""
        rows = list(self)
        if sort_by is not None:
            if sort_by not in _SORT:
                raise ValueError(f"sort_by={sort_by!r}: expected one of {', '.join(_SORT)}")
            rows.sort(key=lambda r: -getattr(r, _SORT[sort_by]))
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        head = _ROW.format("Name", "Calls", "Host total", "Host avg", "Device total",
                           "Device avg", "Modelled", "Estimated")  # fmt: skip
        rule = "-" * len(head)
        lines = [rule, head, rule]
        for r in rows:
            n = r.count
            lines.append(_ROW.format(r.key[:36], n, _us(r.host_ps), _us(r.host_ps / n),
                                     _us(r.device_ps), _us(r.device_ps / n), r.modelled,
                                     r.estimated))  # fmt: skip
            if r.input_shapes is not None:
                lines[-1] += f"  {r.input_shapes}"
        lines += [rule, f"Host time total: {_us(sum(r.host_ps for r in self))}; device time "
                        f"total: {_us(sum(r.device_ps for r in self))} (simulated)"]  # fmt: skip
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _us(ps: float) -> str:
    return f"{ps / _US:.3f}us"


def key_averages(events, group_by_input_shape: bool = False) -> KeyAverages:
    """Totals per op name (and input shapes, if asked): calls, host and device time summed
    over the op spans."""
    rows: dict = {}
    for ev in events:
        shapes = ev.shapes if group_by_input_shape else None
        k = ev.name, repr(shapes)
        r = rows.get(k)
        if r is None:
            r = rows[k] = OpAverage(ev.name, shapes)
        r.count += 1
        r.host_ps += ev.host_ps
        r.device_ps += ev.device_ps
        if ev.launched:
            r.modelled += ev.modelled
            r.estimated += not ev.modelled
    return KeyAverages(rows.values())


# -- placing an op's instructions at its launch ---------------------------------------------------


def placed(prof, ev):
    """(spans, DMA moves, HBM samples) of a detailed op's simulation, moved to its launch's
    device start and its physical cores."""
    d = prof.details.get(ev.key)
    if not ev.detailed or d is None or ev.start_ps is None:
        return [], [], []
    t, cores = ev.start_ps, ev.cores

    def core(c):
        i = c - d.core0
        return cores[i] if 0 <= i < len(cores) else None

    spans = [s._replace(core=core(s.core), start_ps=s.start_ps + t, end_ps=s.end_ps + t)
             for s in d.spans if core(s.core) is not None]  # fmt: skip
    moves = [m._replace(core=core(m.core), start_ps=m.start_ps + t, end_ps=m.end_ps + t)
             for m in d.moves if core(m.core) is not None]  # fmt: skip
    hbm = [h._replace(ps=h.ps + t) for h in d.hbm]
    return spans, moves, hbm


def _timed_by(ev) -> str:
    if not ev.launched:
        return "nothing launched"
    return "kernel library (modelled)" if ev.modelled else "roofline (estimated)"


# -- the Chrome trace -----------------------------------------------------------------------------


def _meta(name: str, pid: int, tid: int, args: dict) -> dict:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


class _Trace:
    """The events in the making, with what dealing rows onto lanes needs: each complete event's
    (start, end) in ps (exact, where its "ts" and "dur" are floating-point us), and the events
    that must follow a slice onto its lane (a flow's ends bind to the slice around them on their
    own thread)."""

    def __init__(self):
        self.out: list[dict] = []
        self.times: list[tuple[int, int]] = []  # of the complete events, in order
        self.ties: list[tuple[dict, dict]] = []  # (event, the slice whose thread it takes)

    def x(self, name, cat, pid, tid, start_ps, end_ps, args) -> dict:
        e = {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": start_ps / _US,
             "dur": (end_ps - start_ps) / _US, "args": args}  # fmt: skip
        self.out.append(e)
        self.times.append((start_ps, end_ps))
        return e

    def on(self, slice_: dict, event: dict) -> None:
        """Add `event` on the thread of `slice_`, wherever its lane turns out to be."""
        self.out.append({**event, "pid": slice_["pid"], "tid": slice_["tid"]})
        self.ties.append((self.out[-1], slice_))

    def laned(self) -> dict[tuple[int, int], int]:
        """Deal each row's slices onto its display lanes (as `trnsim run --perfetto` does), so
        that every thread's slices nest; the number of lanes of each (pid, row)."""
        lanes = _laned([e for e in self.out if e["ph"] == "X"], self.times)
        for e, s in self.ties:
            e["tid"] = s["tid"]
        return lanes


def _host_op(trace: _Trace, ev) -> dict:
    args = {"op_id": ev.id, "overload": ev.overload, "timed by": _timed_by(ev),
            "device_us": ev.device_ps / _US}  # fmt: skip
    if ev.shapes is not None:
        args["Input Dims"], args["Input type"] = ev.shapes, ev.dtypes
    if ev.stack is not None:
        args["Call stack"] = "\n".join(ev.stack)
    return trace.x(ev.name, "aten", HOST_PID, 0, ev.host_start, ev.host_end, args)


def _launch(trace: _Trace, prof, ev, host: dict, seen: set) -> None:
    """The op's launch on each of its cores, the flow arrow to it from its `host` op's slice,
    and its instructions."""
    how = "instructions shown" if ev.detailed else "summarised" if ev.summarised else "one span"
    args = {"op_id": ev.id, "timed by": _timed_by(ev), "instructions": how}
    launches = [trace.x(ev.name, "launch", c, LAUNCH_TID, ev.start_ps, ev.end_ps, args)
                for c in ev.cores]  # fmt: skip
    # the arrow's ends in the middle of the two slices: a viewer binds each to the slice
    # around it, and back-to-back slices share their boundaries
    flow = {"name": "launch", "cat": "launch", "id": ev.id}
    trace.on(host, {**flow, "ph": "s", "ts": (ev.host_start + ev.host_end) / 2 / _US})
    trace.on(launches[0], {**flow, "ph": "f", "bp": "e", "ts": (ev.start_ps + ev.end_ps) / 2 / _US})
    if ev.summarised and ev.key not in seen:
        seen.add(ev.key)
        note = (
            f"summarised: later launches of this {ev.name} signature show one span each "
            f"(after {prof.detail_launches} in detail, or past max_events={prof.max_events})"
        )
        trace.on(launches[0], {"ph": "i", "s": "t", "name": note, "ts": ev.start_ps / _US})
    spans, moves, hbm = placed(prof, ev)
    for s in spans:
        trace.x(s.op, s.kernel, s.core, track_id(s.track), s.start_ps, s.end_ps,
                {"op_id": ev.id, "index": s.index, "dtype": s.dtype, "bytes": s.bytes,
                 "flops": s.flops})  # fmt: skip
    for m in moves:
        for e in m.engines:
            trace.x("data", m.kernel, m.core, dma_engine_id(e), m.start_ps, m.end_ps,
                    {"op_id": ev.id, "index": m.index, "queue": dma_track(m.queue)})  # fmt: skip
    for h in hbm:
        trace.out.append({"ph": "C", "name": f"stack{h.stack} GB/s", "pid": HBM_PID,
                          "ts": h.ps / _US, "args": {"GB/s": h.bytes_per_s / 1e9}})  # fmt: skip


def _threads(events: list[dict], lanes: dict[tuple[int, int], int], chip: str) -> list[dict]:
    """Names and order of the processes and threads the events use: each row's lanes ("dma q3",
    "dma q3 #2", ...) sorted together, the launches above the engines."""
    out = [_meta("process_name", HOST_PID, 0, {"name": "host"}),
           _meta("process_sort_index", HOST_PID, 0, {"sort_index": -1})]  # fmt: skip
    lanes = {(HOST_PID, 0): 1, **lanes}  # the host's thread named even without ops
    for core in sorted({p for p, _ in lanes if p != HOST_PID}):
        out.append(_meta("process_name", core, 0, {"name": f"{chip} core{core}".strip()}))
        out.append(_meta("process_sort_index", core, 0, {"sort_index": core}))
    for (pid, row), n in sorted(lanes.items(), key=lambda r: (r[0][0] != HOST_PID, r[0])):
        name = "aten ops" if pid == HOST_PID else _row_name(row)
        for lane in range(n):
            tid = lane_id(row, lane)
            out.append(_meta("thread_name", pid, tid, {"name": lane_name(name, lane)}))
            # the launches' row sorts first, as if its id were -1
            order = lane_sort_index(-1 if row == LAUNCH_TID else row, lane)
            out.append(_meta("thread_sort_index", pid, tid, {"sort_index": order}))
    if any(e["ph"] == "C" for e in events):
        out.append(_meta("process_name", HBM_PID, 0, {"name": "HBM"}))
    return out


def _row_name(tid: int) -> str:
    if tid == LAUNCH_TID:
        return "launches (aten ops)"
    if tid >= dma_engine_id(0):
        return f"dma engine {tid - dma_engine_id(0)}"
    names = {track_id(t): t for t in ("tensor", "vector", "scalar", "gpsimd", HOST)}
    return display_name(names.get(tid) or dma_track(tid - track_id(dma_track(0))))


def chrome_trace(prof) -> dict:
    """The profile as a dict in the Chrome trace event format."""
    trace = _Trace()
    seen: set = set()
    ops = prof.finished()
    for ev in ops:
        host = _host_op(trace, ev)
        if ev.launched and ev.start_ps is not None:
            _launch(trace, prof, ev, host, seen)
    lanes = trace.laned()
    summarised: dict[str, int] = {}
    for ev in ops:
        if ev.summarised:
            summarised[ev.name] = summarised.get(ev.name, 0) + 1
    other = {"chip": prof.chip_name, "detail_launches": prof.detail_launches,
             "max_events": prof.max_events,
             "summarised_launches": sum(summarised.values()), "summarised_ops": summarised,
             "note": "instructions come from the op's one timing-only simulation on a scratch "
                     "chip, placed at each launch's start; after detail_launches launches of "
                     "one op signature (or past max_events in all), each launch is one "
                     "span"}  # fmt: skip
    return {"traceEvents": _threads(trace.out, lanes, prof.chip_name) + trace.out,
            "displayTimeUnit": "ns", "otherData": other}  # fmt: skip


def write_trace(prof, path) -> None:
    text = json.dumps(chrome_trace(prof), separators=(",", ":"))
    with replacing(path) as fh:
        fh.write(text)


# -- Neuron Explorer's tables ---------------------------------------------------------------------


def tables(prof) -> dict[str, dict[str, list]]:
    """Instruction, DmaPacket, DmaPacketAggregated and Summary, as columns."""
    ins = {c: [] for c in ("op_id", "aten_op", "core", "engine", "index", "opcode", "dtype",
                           "start_ns", "end_ns", "duration_ns", "bytes", "flops")}  # fmt: skip
    dma = {c: [] for c in ("op_id", "aten_op", "core", "queue", "index", "kernel", "start_ns",
                           "end_ns", "duration_ns", "bytes")}  # fmt: skip
    agg: dict[tuple, list] = {}
    for ev in prof.finished():
        for s in placed(prof, ev)[0]:
            if is_dma(s.track):
                row = (ev.id, ev.name, s.core, dma_queue(s.track), s.index, s.kernel,
                       s.start_ps / 1e3, s.end_ps / 1e3, s.duration_ps / 1e3, s.bytes)  # fmt: skip
                for c, v in zip(dma, row):
                    dma[c].append(v)
                a = agg.setdefault((ev.name, s.core, dma_queue(s.track)), [0, 0, 0])
                a[0], a[1], a[2] = a[0] + 1, a[1] + s.bytes, a[2] + s.duration_ps
            elif s.track != HOST:
                row = (ev.id, ev.name, s.core, s.track, s.index, s.op, s.dtype, s.start_ps / 1e3,
                       s.end_ps / 1e3, s.duration_ps / 1e3, s.bytes, s.flops)  # fmt: skip
                for c, v in zip(ins, row):
                    ins[c].append(v)
    keys = sorted(agg)
    aggregated = {
        "aten_op": [k[0] for k in keys], "core": [k[1] for k in keys],
        "queue": [k[2] for k in keys], "packets": [agg[k][0] for k in keys],
        "bytes": [agg[k][1] for k in keys], "duration_ns": [agg[k][2] / 1e3 for k in keys],
    }  # fmt: skip
    avg = key_averages(prof.finished())
    summary = {
        "aten_op": [r.key for r in avg], "calls": [r.count for r in avg],
        "host_time_total_us": [r.cpu_time_total for r in avg],
        "host_time_avg_us": [r.cpu_time for r in avg],
        "device_time_total_us": [r.device_time_total for r in avg],
        "device_time_avg_us": [r.device_time for r in avg],
        "modelled": [r.modelled for r in avg], "estimated": [r.estimated for r in avg],
    }  # fmt: skip
    return {"Instruction": ins, "DmaPacket": dma, "DmaPacketAggregated": aggregated,
            "Summary": summary}  # fmt: skip


def write_parquet(prof, directory) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise TrnsimError(
            f"{directory}: export_parquet needs pyarrow (pip install pyarrow, or the parquet "
            f"extra: pip install 'trnsim[parquet]')"
        ) from None
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for name, cols in tables(prof).items():
        with replacing_path(out / f"{name}.parquet") as tmp:
            pq.write_table(pa.table(cols), tmp)
