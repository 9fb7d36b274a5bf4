"""torch.neuron.profiler's Chrome trace deals overlapping slices onto display lanes, as
`trnsim run --perfetto` does (`report.lanes`, `report.tracks`): a 1024x1024 matmul keeps
several transfers in flight on each DMA queue and shares each DMA engine between them, so
without lanes its queue slices stack as if nested calls and its engines' slices overlap."""

import json

import pytest

torch = pytest.importorskip("torch")

import trnsim.torch  # noqa: E402,F401
from trnsim.report.lanes import violations  # noqa: E402
from trnsim.report.perfetto import HOST_PID  # noqa: E402
from trnsim.report.tracks import dma_engine_id, lane_id, lane_of, track_id  # noqa: E402
from trnsim.torch.profiler_export import LAUNCH_TID  # noqa: E402


@pytest.fixture(scope="module")
def prof():
    g = torch.Generator().manual_seed(0)
    x, w = (torch.randn(1024, 1024, generator=g).to("neuron") for _ in range(2))
    torch.neuron.synchronize()
    with torch.neuron.profiler.profile(detail_launches=1) as p:  # notes on the 2nd launches
        for _ in range(2):
            torch.relu(x @ w) + x
    torch.neuron.synchronize()
    return p


def _meta(events, name) -> dict:
    return {(e["pid"], e["tid"]): e["args"] for e in events if e["ph"] == "M" and e["name"] == name}


def test_every_thread_nests_and_overlapping_transfers_get_lanes(prof, tmp_path):
    path = tmp_path / "prof.json"
    prof.export_chrome_trace(path)
    events = json.loads(path.read_text())["traceEvents"]
    assert violations(events) == []
    # the same slices on their rows (lane 0's thread) overlap without nesting: lanes were needed
    rows = [{**e, "tid": lane_of(e["tid"])[0]} for e in events if e["ph"] == "X"]
    assert violations(rows) != []
    names = {k: a["name"] for k, a in _meta(events, "thread_name").items()}
    core = prof.events()[0].cores[0]
    q0, engine0 = track_id("q0"), dma_engine_id(0)
    assert (names[core, q0], names[core, lane_id(q0, 1)]) == ("dma q0", "dma q0 #2")
    assert names[core, lane_id(engine0, 1)] == "dma engine 0 #2"
    # every slice's thread is named; each row's lanes sort together, right below it
    assert {(e["pid"], e["tid"]) for e in events if e["ph"] == "X"} <= set(names)
    order = _meta(events, "thread_sort_index")
    for p in {p for p, _ in order if p != HOST_PID}:
        tids = sorted((t for q, t in order if q == p), key=lambda t: order[p, t]["sort_index"])
        got = [lane_of(t) for t in tids]
        assert got[0] == (LAUNCH_TID, 0)  # the launches above the engines
        assert got[1:] == sorted(got[1:])  # rows in id order, each row's lanes in lane order


def test_flow_ends_and_notes_follow_their_slices_onto_lanes(prof):
    from trnsim.torch.profiler_export import chrome_trace

    events = chrome_trace(prof)["traceEvents"]
    host = {e["args"]["op_id"]: e for e in events if e["ph"] == "X" and e["pid"] == HOST_PID}
    launch = {(e["args"]["op_id"], e["pid"]): e for e in events
              if e["ph"] == "X" and lane_of(e["tid"])[0] == LAUNCH_TID}  # fmt: skip
    starts = {(e["pid"], e["ts"]): e for e in launch.values()}
    tied = [e for e in events if e["ph"] in "sfi"]
    assert {e["ph"] for e in tied} == {"s", "f", "i"}
    for e in tied:
        if e["ph"] == "i":  # the note on a signature's first summarised launch, at its start
            around = starts[e["pid"], e["ts"]]
        else:
            around = host[e["id"]] if e["ph"] == "s" else launch[e["id"], e["pid"]]
        assert (e["pid"], e["tid"]) == (around["pid"], around["tid"])


def test_two_exports_of_one_run_are_byte_identical(prof, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    prof.export_chrome_trace(a)
    prof.export_chrome_trace(b)
    assert a.read_bytes() == b.read_bytes()
