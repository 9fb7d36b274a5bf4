"""What a `torch.neuron.profiler.profile` writes: per-op totals (`key_averages`), one Chrome
trace (host ops, flow arrows to their launches, each NeuronCore's launches, engines, DMA queues
and engines, HBM counters; tracks named as `trnsim.report.perfetto` names them), and Neuron
Explorer's tables as Parquet (Instruction, DmaPacket, DmaPacketAggregated, Summary).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trnsim.errors import TrnsimError
from trnsim.report.files import replacing, replacing_path
from trnsim.report.perfetto import HBM_PID, HOST_PID
from trnsim.report.tracks import HOST, display_name, dma_engine_id, dma_queue, is_dma, track_id

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


def _x(name, cat, pid, tid, start_ps, end_ps, args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": start_ps / _US,
            "dur": (end_ps - start_ps) / _US, "args": args}  # fmt: skip


def _host_op(ev) -> dict:
    args = {"op_id": ev.id, "overload": ev.overload, "timed by": _timed_by(ev),
            "device_us": ev.device_ps / _US}  # fmt: skip
    if ev.shapes is not None:
        args["Input Dims"], args["Input type"] = ev.shapes, ev.dtypes
    if ev.stack is not None:
        args["Call stack"] = "\n".join(ev.stack)
    return _x(ev.name, "aten", HOST_PID, 0, ev.host_start, ev.host_end, args)


def _launch(prof, ev, seen: set) -> list[dict]:
    """The op's launch on each of its cores, the flow arrow to it, and its instructions."""
    out = []
    how = "instructions shown" if ev.detailed else "summarised" if ev.summarised else "one span"
    args = {"op_id": ev.id, "timed by": _timed_by(ev), "instructions": how}
    for c in ev.cores:
        out.append(_x(ev.name, "launch", c, LAUNCH_TID, ev.start_ps, ev.end_ps, args))
    # the arrow's ends in the middle of the two slices: a viewer binds each to the slice
    # around it, and back-to-back slices share their boundaries
    flow = {"name": "launch", "cat": "launch", "id": ev.id}
    host_ts = (ev.host_start + ev.host_end) / 2 / _US
    out.append({**flow, "ph": "s", "pid": HOST_PID, "tid": 0, "ts": host_ts})
    out.append({**flow, "ph": "f", "bp": "e", "pid": ev.cores[0], "tid": LAUNCH_TID,
                "ts": (ev.start_ps + ev.end_ps) / 2 / _US})  # fmt: skip
    if ev.summarised and ev.key not in seen:
        seen.add(ev.key)
        out.append({"ph": "i", "s": "t", "name": f"summarised: later launches of this {ev.name} "
                    f"signature show one span each (after {prof.detail_launches} in detail, "
                    f"or past max_events={prof.max_events})",
                    "pid": ev.cores[0], "tid": LAUNCH_TID, "ts": ev.start_ps / _US})  # fmt: skip
    spans, moves, hbm = placed(prof, ev)
    for s in spans:
        out.append(_x(s.op, s.kernel, s.core, track_id(s.track), s.start_ps, s.end_ps,
                      {"op_id": ev.id, "index": s.index, "dtype": s.dtype, "bytes": s.bytes,
                       "flops": s.flops}))  # fmt: skip
    for m in moves:
        for e in m.engines:
            out.append(_x("data", m.kernel, m.core, dma_engine_id(e), m.start_ps, m.end_ps,
                          {"op_id": ev.id, "index": m.index, "queue": f"q{m.queue}"}))  # fmt: skip
    for h in hbm:
        out.append({"ph": "C", "name": f"stack{h.stack} GB/s", "pid": HBM_PID, "ts": h.ps / _US,
                    "args": {"GB/s": h.bytes_per_s / 1e9}})  # fmt: skip
    return out


def _threads(events: list[dict], chip: str) -> list[dict]:
    """Names and order of the processes and threads the events use."""
    out = [_meta("process_name", HOST_PID, 0, {"name": "host"}),
           _meta("process_sort_index", HOST_PID, 0, {"sort_index": -1}),
           _meta("thread_name", HOST_PID, 0, {"name": "aten ops"})]  # fmt: skip
    rows = sorted({(e["pid"], e["tid"]) for e in events if e["ph"] == "X" and e["pid"] < HBM_PID
                   and e["pid"] != HOST_PID})  # fmt: skip
    for core in sorted({p for p, _ in rows}):
        out.append(_meta("process_name", core, 0, {"name": f"{chip} core{core}".strip()}))
        out.append(_meta("process_sort_index", core, 0, {"sort_index": core}))
    for core, tid in rows:
        out.append(_meta("thread_name", core, tid, {"name": _row_name(tid)}))
        out.append(_meta("thread_sort_index", core, tid,
                         {"sort_index": -1 if tid == LAUNCH_TID else tid}))  # fmt: skip
    if any(e["ph"] == "C" for e in events):
        out.append(_meta("process_name", HBM_PID, 0, {"name": "HBM"}))
    return out


def _row_name(tid: int) -> str:
    if tid == LAUNCH_TID:
        return "launches (aten ops)"
    if tid >= dma_engine_id(0):
        return f"dma engine {tid - dma_engine_id(0)}"
    names = {track_id(t): t for t in ("tensor", "vector", "scalar", "gpsimd", HOST)}
    return display_name(names.get(tid) or f"q{tid - track_id('q0')}")


def chrome_trace(prof) -> dict:
    """The profile as a dict in the Chrome trace event format."""
    events: list[dict] = []
    seen: set = set()
    ops = prof.finished()
    for ev in ops:
        events.append(_host_op(ev))
        if ev.launched and ev.start_ps is not None:
            events += _launch(prof, ev, seen)
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
    return {"traceEvents": _threads(events, prof.chip_name) + events,
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
