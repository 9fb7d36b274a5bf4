"""torch.neuron.profiler: the ops it records (host time, the launch's device span), its totals,
the one Chrome trace (host ops, flows to each core's launches, instructions, DMA, HBM), the
Parquet tables, the summarising of repeated launches, and that profiling changes nothing."""

import json
import sys

import pytest

torch = pytest.importorskip("torch")

import trnsim.torch  # noqa: E402,F401
from trnsim.errors import TrnsimError  # noqa: E402
from trnsim.report.tracks import dma_engine_id, lane_of, track_id  # noqa: E402
from trnsim.torch import state  # noqa: E402
from trnsim.torch.profiler_export import LAUNCH_TID  # noqa: E402
from trnsim.torch.timing import timer  # noqa: E402
from trnsim.units import seconds_to_ps  # noqa: E402

HOST_PID = 9_999


def _row(e) -> int:
    """The row of an event's thread (a row's slices may be dealt onto several lanes)."""
    return lane_of(e["tid"])[0]


def _inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(128, 256, generator=g).to("neuron"),
            torch.randn(256, 64, generator=g).to("neuron"))  # fmt: skip


def _step(x, w):
    """Three lowered ops (mm, relu, sum) and one the library does not lower (cumsum)."""
    y = torch.relu(x @ w)
    return y.sum(0), torch.cumsum(y, 0)


def _profiled(n=3, **kw):
    x, w = _inputs()
    torch.neuron.synchronize()
    with torch.neuron.profiler.profile(**kw) as prof:
        for _ in range(n):
            out = _step(x, w)
    torch.neuron.synchronize()
    return prof, out


def _launch_ps() -> int:
    return seconds_to_ps(state.get().cfg.host_link.launch_overhead)


def test_ops_recorded_with_host_time_and_the_launch_device_span():
    prof, _ = _profiled(2, record_shapes=True)
    names = [ev.name for ev in prof.events()]
    assert names == ["aten::mm", "aten::relu", "aten::sum", "aten::cumsum"] * 2
    t = timer()
    for ev in prof.events():
        assert ev.host_ps == _launch_ps()  # each op is one launch call on the host
        measured = t.measure.memo[ev.key].duration_ps  # the measured duration
        assert ev.device_ps == measured == ev.measured_ps
        assert ev.start_ps >= ev.host_end  # the work starts after its launch call
    mm = prof.events()[0]
    assert mm.shapes == [[128, 256], [256, 64]] and mm.dtypes == ["float32", "float32"]
    assert [ev.modelled for ev in prof.events()[:4]] == [True, True, True, False]
    # record_shapes off: no shapes
    prof2, _ = _profiled(1)
    assert prof2.events()[0].shapes is None


def test_with_stack_names_the_caller():
    prof, _ = _profiled(1, with_stack=True)
    assert any("test_profiler.py" in f and "_step" in f for f in prof.events()[0].stack)
    assert not any("trnsim/torch/" in f for f in prof.events()[0].stack)


def test_key_averages_totals_are_the_sums_of_the_op_spans():
    n = 3
    prof, _ = _profiled(n)
    t = timer()
    avg = {r.key: r for r in prof.key_averages()}
    assert set(avg) == {"aten::mm", "aten::relu", "aten::sum", "aten::cumsum"}
    for ev in prof.events()[:4]:
        r = avg[ev.name]
        assert r.count == n
        assert (
            r.device_ps == n * t.measure.memo[ev.key].duration_ps
        )  # n launches of the measured duration
        assert r.host_ps == n * _launch_ps()
        assert (r.modelled, r.estimated) == ((n, 0) if ev.modelled else (0, n))
    trace = json.loads(json.dumps(_trace(prof)))
    launches = [e for e in trace["traceEvents"] if e["ph"] == "X" and _row(e) == LAUNCH_TID]
    first_core = {ev.id: ev.cores[0] for ev in prof.events()}
    for name, r in avg.items():
        spans = [e["dur"] for e in launches
                 if e["name"] == name and e["pid"] == first_core[e["args"]["op_id"]]]  # fmt: skip
        assert sum(spans) == pytest.approx(r.device_time_total)
    table = prof.key_averages().table(sort_by="device_time_total", row_limit=2)
    rows = [line.split()[0] for line in table.splitlines() if line.startswith("aten::")]
    by_device = sorted(avg.values(), key=lambda r: -r.device_ps)
    assert rows == [r.key for r in by_device[:2]]
    with pytest.raises(ValueError, match="sort_by='nope': expected one of"):
        prof.key_averages().table(sort_by="nope")


def _trace(prof):
    from trnsim.torch.profiler_export import chrome_trace

    return chrome_trace(prof)


def test_chrome_trace_has_host_ops_device_tracks_and_flows(tmp_path):
    prof, _ = _profiled(2)
    path = tmp_path / "prof.json"
    prof.export_chrome_trace(path)
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    host = [e for e in events if e["ph"] == "X" and e["pid"] == HOST_PID]
    assert [e["name"] for e in host] == [ev.name for ev in prof.events()]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}  # fmt: skip
    cores = prof.events()[0].cores
    assert threads[(cores[0], LAUNCH_TID)] == "launches (aten ops)"
    assert threads[(cores[0], track_id("tensor"))] == "tensor"  # mm's matmul
    assert any(name.startswith("dma q") for name in threads.values())
    assert any(tid >= dma_engine_id(0) for _, tid in threads)
    assert any(e["ph"] == "C" and e["pid"] == 10_000 for e in events)  # HBM counters
    # one flow per launched op: from its host op to its launch on its first core
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert set(starts) == set(ends) == {ev.id for ev in prof.events()}
    for ev in prof.events():
        s, f = starts[ev.id], ends[ev.id]
        assert (s["pid"], _row(s), f["pid"], _row(f)) == (HOST_PID, 0, ev.cores[0], LAUNCH_TID)
        assert s["ts"] == (ev.host_start + ev.host_end) / 2e6  # inside the host op's slice
        assert f["ts"] == (ev.start_ps + ev.end_ps) / 2e6  # inside the launch's slice
    # instructions lie inside their launch; the estimated op is one labelled span
    launch = {(e["args"]["op_id"], e["pid"]): e for e in events
              if e["ph"] == "X" and _row(e) == LAUNCH_TID}  # fmt: skip
    for e in events:
        if e["ph"] == "X" and e["pid"] < HOST_PID and _row(e) != LAUNCH_TID:
            la = launch[(e["args"]["op_id"], e["pid"])]
            assert la["ts"] - 1e-9 <= e["ts"] and e["ts"] + e["dur"] <= la["ts"] + la["dur"] + 1e-6
    cumsum = prof.events()[3]
    assert launch[(cumsum.id, cumsum.cores[0])]["args"]["timed by"] == "roofline (estimated)"
    assert not [e for e in events if e["ph"] == "X" and _row(e) != LAUNCH_TID
                and e["args"].get("op_id") == cumsum.id and e["pid"] != HOST_PID]  # fmt: skip


def test_repeated_launches_are_summarised():
    n, keep = 5, 2
    prof, _ = _profiled(n, detail_launches=keep)
    mm = [ev for ev in prof.events() if ev.name == "aten::mm"]
    assert [ev.detailed for ev in mm] == [True] * keep + [False] * (n - keep)
    assert [ev.summarised for ev in mm] == [False] * keep + [True] * (n - keep)
    trace = _trace(prof)
    events = trace["traceEvents"]
    detail = prof.details[mm[0].key]
    per_launch = sum(1 for s in detail.spans if s.core - detail.core0 < len(mm[0].cores))
    for ev in mm:
        ins = [e for e in events if e["ph"] == "X" and _row(e) != LAUNCH_TID
               and e["pid"] != HOST_PID and e["args"].get("op_id") == ev.id
               and _row(e) < dma_engine_id(0)]  # fmt: skip
        assert len(ins) == (per_launch if ev.detailed else 0)
    lowered = sum(1 for ev in prof.events()[:4] if ev.modelled)  # mm, relu, sum
    assert trace["otherData"]["summarised_launches"] == lowered * (n - keep)
    assert trace["otherData"]["summarised_ops"]["aten::mm"] == n - keep
    notes = [e for e in events if e["ph"] == "i"]
    assert len(notes) == lowered and all("summarised" in e["name"] for e in notes)


def test_parquet_tables(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    prof, _ = _profiled(2, detail_launches=1)
    prof.export_parquet(tmp_path / "pq")
    tables = {n: pq.read_table(tmp_path / "pq" / f"{n}.parquet") for n in
              ("Instruction", "DmaPacket", "DmaPacketAggregated", "Summary")}  # fmt: skip
    ins = dma = 0
    for ev in prof.events():
        d = prof.details.get(ev.key)
        if ev.detailed:
            spans = [s for s in d.spans if s.core - d.core0 < len(ev.cores)]
            dma += sum(1 for s in spans if s.track.startswith("q"))
            ins += sum(1 for s in spans if not s.track.startswith("q"))
    assert ins > 0 and dma > 0
    assert tables["Instruction"].num_rows == ins
    assert tables["DmaPacket"].num_rows == dma
    assert {"aten_op", "core", "engine", "opcode", "start_ns", "duration_ns"} <= set(
        tables["Instruction"].column_names
    )
    agg = tables["DmaPacketAggregated"].to_pydict()
    assert sum(agg["packets"]) == dma
    assert sum(agg["bytes"]) == sum(tables["DmaPacket"].to_pydict()["bytes"])
    summary = tables["Summary"].to_pydict()
    assert summary["aten_op"] == ["aten::mm", "aten::relu", "aten::sum", "aten::cumsum"]
    assert summary["calls"] == [2, 2, 2, 2]
    avg = {r.key: r for r in prof.key_averages()}
    assert summary["device_time_total_us"] == [avg[k].device_time_total for k in summary["aten_op"]]


def test_parquet_without_pyarrow_is_a_clear_error(tmp_path, monkeypatch):
    prof, _ = _profiled(1)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed
    with pytest.raises(TrnsimError, match=r"pip install pyarrow.*trnsim\[parquet\]"):
        prof.export_parquet(tmp_path)


def _timed_run():
    """Host and device time of one synchronised step, and its values."""
    x, w = _inputs()
    torch.neuron.synchronize()
    dev = state.get().devices[0]
    h0, d0 = dev.host_time_ps, dev.env.now
    out = _step(x, w)
    torch.neuron.synchronize()
    return dev.host_time_ps - h0, dev.env.now - d0, [o.cpu() for o in out]


def test_profiling_changes_neither_values_nor_timing():
    _timed_run()  # every signature measured
    host, device, values = _timed_run()
    with torch.neuron.profiler.profile(record_shapes=True, with_stack=True) as prof:
        phost, pdevice, pvalues = _timed_run()
    assert (phost, pdevice) == (host, device)
    assert all(torch.equal(a, b) for a, b in zip(values, pvalues))
    assert len(prof.events()) > 4
    a, b = _step(*_inputs())
    assert torch.allclose(a.cpu(), values[0]) and torch.allclose(b.cpu(), values[1])


def test_max_events_summarises_every_launch_past_it():
    prof, _ = _profiled(2, max_events=0)
    assert not any(ev.detailed for ev in prof.events())
    assert [ev.summarised for ev in prof.events()[:4]] == [True, True, True, False]
    assert _trace(prof)["otherData"]["summarised_launches"] == 6


def test_the_docs_example_runs(tmp_path, monkeypatch, capsys):
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "torch.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Profiling") :]
    (code,) = re.findall(r"^```py\n(.*?)^```$", section[: section.index("\n## ")], re.M | re.S)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/torch.md", "exec"), {})
    out = capsys.readouterr().out
    host_us = 5 * _launch_ps() / 1e6  # 5 launches, each a host launch call
    assert re.search(rf"^aten::mm +5 +{host_us:.3f}us", out, re.M)
    assert json.loads((tmp_path / "prof.json").read_text())["traceEvents"]
    if _has_pyarrow():
        assert (tmp_path / "prof_tables" / "Summary.parquet").exists()


def _has_pyarrow() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def test_a_copy_to_the_host_has_its_device_span():
    x, _ = _inputs()
    torch.neuron.synchronize()
    with torch.neuron.profiler.profile() as prof:
        x.cpu()
    (ev,) = prof.events()
    link = state.get().cfg.host_link
    assert ev.name == "aten::copy_" and ev.launched and not ev.modelled
    assert ev.device_ps == seconds_to_ps(link.latency + x.numel() * 4 / link.bandwidth)
    copy_call = seconds_to_ps(link.copy_overhead)
    assert ev.host_ps == copy_call + ev.device_ps  # the copy call, then the wait for the copy


def test_key_averages_grouped_by_input_shape():
    x, w = _inputs()
    with torch.neuron.profiler.profile(record_shapes=True) as prof:
        x @ w
        x[:64] @ w
        x @ w
    torch.neuron.synchronize()
    rows = prof.key_averages(group_by_input_shape=True)
    got = {(r.key, str(r.input_shapes)): r.count for r in rows}
    assert got == {("aten::mm", "[[128, 256], [256, 64]]"): 2,
                   ("aten::mm", "[[64, 256], [256, 64]]"): 1}  # fmt: skip
    assert "[[64, 256], [256, 64]]" in rows.table()
    assert [r.count for r in prof.key_averages()] == [3]
