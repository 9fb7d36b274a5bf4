"""The Chrome trace of a hand-built recorder: processes, threads (ids, names, order from
`tracks`), one complete event per span, overlapping slices on display lanes, HBM counters; and
the profile rows of the same spans."""

import csv

from trnsim.report.lanes import violations
from trnsim.report.perfetto import HBM_PID, HOST_PID, chrome_trace
from trnsim.report.profile import COLUMNS, rows, write_profile
from trnsim.report.recorder import DmaMove, HostCall, Recorder, Span
from trnsim.report.tracks import LANE_STRIDE, lane_of


def recorder() -> Recorder:
    rec = Recorder()
    rec.add_span(Span(0, "q10", "dma_copy", 3_000, 5_000, 4096, 0, 2, "k", "bfloat16"))
    rec.add_span(Span(1, "vector", "tensor_copy", 1_000, 2_000, 0, 0, 0, "k", "float32"))
    rec.add_span(Span(0, "tensor", "matmul", 0, 2_500, 0, 500, 1, "k", "bfloat16"))
    rec.add_span(Span(0, "q2", "dma_copy", 0, 1_500, 64, 0, 0, "k", "bfloat16"))
    rec.span(0, "host", "copy", 6_000, 9_000, 128, kernel="copy h->x", dtype="float32")
    return rec


def meta(trace, name):
    return [(e["pid"], e["tid"], e["args"]) for e in trace["traceEvents"] if e["name"] == name]


def test_processes_and_threads():
    t = chrome_trace(recorder(), "trn2")
    assert meta(t, "process_name") == [
        (0, 0, {"name": "trn2 core0"}),
        (1, 0, {"name": "trn2 core1"}),
    ]
    assert meta(t, "thread_name") == [
        (0, 0, {"name": "tensor"}),
        (0, 99, {"name": "host copies"}),
        (0, 102, {"name": "dma q2"}),
        (0, 110, {"name": "dma q10"}),
        (1, 1, {"name": "vector"}),
    ]
    # each row's lanes (here one each) sort together, rows in id order
    assert meta(t, "thread_sort_index") == [
        (0, 0, {"sort_index": 0}),
        (0, 99, {"sort_index": 99 * LANE_STRIDE}),
        (0, 102, {"sort_index": 102 * LANE_STRIDE}),
        (0, 110, {"sort_index": 110 * LANE_STRIDE}),
        (1, 1, {"sort_index": LANE_STRIDE}),
    ]


def test_one_complete_event_per_span_in_timeline_order():
    xs = [e for e in chrome_trace(recorder())["traceEvents"] if e["ph"] == "X"]
    assert [(e["pid"], e["tid"], e["name"], e["ts"], e["dur"]) for e in xs] == [
        (0, 102, "dma_copy", 0.0, 0.0015),
        (0, 0, "matmul", 0.0, 0.0025),
        (1, 1, "tensor_copy", 0.001, 0.001),
        (0, 110, "dma_copy", 0.003, 0.002),
        (0, 99, "copy", 0.006, 0.003),
    ]
    assert xs[1]["cat"] == "k" and xs[1]["args"] == {
        "kernel": "k",
        "index": 1,
        "dtype": "bfloat16",
        "bytes": 0,
        "flops": 500,
    }


def test_hbm_counters():
    rec = recorder()
    assert not any(e["pid"] == HBM_PID for e in chrome_trace(rec)["traceEvents"])
    rec.hbm_sample(0, 1, 2e9)
    rec.hbm_sample(1_500, 1, 0.0)
    hbm = [e for e in chrome_trace(rec)["traceEvents"] if e["pid"] == HBM_PID]
    assert hbm == [
        {"ph": "M", "name": "process_name", "pid": HBM_PID, "tid": 0, "args": {"name": "HBM"}},
        {"ph": "C", "name": "stack1 GB/s", "pid": HBM_PID, "ts": 0.0, "args": {"GB/s": 2.0}},
        {"ph": "C", "name": "stack1 GB/s", "pid": HBM_PID, "ts": 0.0015, "args": {"GB/s": 0.0}},
    ]


def test_profile_rows(tmp_path):
    rec = recorder()
    assert rows(rec)[:2] == [
        (0, "q2", "k", 0, "dma_copy", "bfloat16", 0.0, 1.5, 1.5, 64, 0),
        (0, "tensor", "k", 1, "matmul", "bfloat16", 0.0, 2.5, 2.5, 0, 500),
    ]
    path = tmp_path / "p.csv"
    write_profile(rec, path)
    with path.open() as fh:
        table = list(csv.reader(fh))
    assert table[0] == list(COLUMNS)
    assert table[-1] == [
        "0",
        "host",
        "copy h->x",
        "0",
        "copy",
        "float32",
        "6.0",
        "9.0",
        "3.0",
        "128",
        "0",
    ]


def test_dma_engine_rows():
    """Each DMA engine that moved data has its own row below the queues (thread id 1000 + E,
    named as Neuron Explorer's DMA rows), with one event per transfer's data phase on it."""
    rec = recorder()
    rec.dma_move(DmaMove(0, 2, (0, 15), 500, 1_500, 0, 0, "k"))
    t = chrome_trace(rec, "trn2")
    rows = [(p, tid, a["name"]) for p, tid, a in meta(t, "thread_name") if tid >= 1000]
    assert rows == [(0, 1000, "dma engine 0"), (0, 1015, "dma engine 15")]
    data = [e for e in t["traceEvents"] if e["ph"] == "X" and e["tid"] >= 1000]
    assert [(e["tid"], e["ts"], e["dur"], e["args"]["queue"]) for e in data] == [
        (1000, 0.0005, 0.001, "q2"),
        (1015, 0.0005, 0.001, "q2"),
    ]


def test_overlapping_slices_go_on_lanes_that_nest():
    """Three transfers in flight on q2 (two from 1 ns), two data phases sharing DMA engine 0,
    two calls of one host thread that overlap (none do in a run): each row becomes as many
    threads as it has slices in flight, named and sorted together; every thread nests."""
    rec = recorder()
    rec.add_span(Span(0, "q2", "dma_copy", 1_000, 4_000, 64, 0, 1, "k", "bfloat16"))
    rec.add_span(Span(0, "q2", "dma_copy", 1_000, 2_000, 64, 0, 2, "k", "bfloat16"))
    rec.add_span(Span(0, "q2", "dma_copy", 2_000, 3_000, 64, 0, 3, "k", "bfloat16"))
    rec.dma_move(DmaMove(0, 2, (0,), 500, 1_500, 0, 0, "k"))
    rec.dma_move(DmaMove(0, 3, (0,), 1_000, 2_000, 0, 0, "k"))
    rec.host_calls.append(HostCall("main", "launch", 0, 2_000, ""))
    rec.host_calls.append(HostCall("main", "copy", 1_000, 3_000, ""))
    t = chrome_trace(rec, "trn2")
    assert violations(t) == []
    q2, e0 = 102, 1000
    assert [
        (p, tid, a["name"]) for p, tid, a in meta(t, "thread_name") if lane_of(tid)[0] == q2
    ] == [
        (0, q2, "dma q2"),
        (0, q2 + LANE_STRIDE, "dma q2 #2"),
        (0, q2 + 2 * LANE_STRIDE, "dma q2 #3"),
    ]
    sort = {(p, tid): a["sort_index"] for p, tid, a in meta(t, "thread_sort_index")}
    rows = sorted((v, tid) for (p, tid), v in sort.items() if p == 0)
    assert [tid for _, tid in rows] == [
        0,
        99,
        q2,
        q2 + LANE_STRIDE,
        q2 + 2 * LANE_STRIDE,
        110,
        e0,
        e0 + LANE_STRIDE,
    ]
    xs = [
        e
        for e in t["traceEvents"]
        if e["ph"] == "X" and e["pid"] == 0 and lane_of(e["tid"])[0] == q2
    ]
    # at 1 ns lane 0 is busy (index 0 until 1.5 ns): of the two that start then, the shorter
    # (index 2) takes lane 1, index 1 lane 2; index 3 at 2 ns finds lane 0 free
    assert [(e["args"]["index"], e["tid"]) for e in xs] == [
        (0, q2),
        (1, q2 + 2 * LANE_STRIDE),
        (2, q2 + LANE_STRIDE),
        (3, q2),
    ]
    host = [
        (e["name"], e["tid"]) for e in t["traceEvents"] if e["ph"] == "X" and e["pid"] == HOST_PID
    ]
    assert host == [("launch", 0), ("copy", LANE_STRIDE)]
    assert ("main #2", LANE_STRIDE) in [(a["name"], tid) for p, tid, a in meta(t, "thread_name")
                                        if p == HOST_PID]  # fmt: skip
