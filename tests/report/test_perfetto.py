"""The Chrome trace of a hand-built recorder: processes, threads (ids, names, order from
`tracks`), one complete event per span, HBM counters; and the profile rows of the same spans."""

import csv

from trnsim.report.perfetto import HBM_PID, chrome_trace
from trnsim.report.profile import COLUMNS, rows, write_profile
from trnsim.report.recorder import DmaMove, Recorder, Span


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
    assert [(p, tid) for p, tid, a in meta(t, "thread_sort_index") if a == {"sort_index": tid}] == [
        (0, 0),
        (0, 99),
        (0, 102),
        (0, 110),
        (1, 1),
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
