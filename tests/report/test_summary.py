"""The summary of a hand-built recorder: DMA queue statistics derived from the spans (busy time
is the union of a queue's transfer intervals), engine utilization, FLOP/s, peaks, timings."""

import pytest

from trnsim.config import load_chip, peak_flops_per_core
from trnsim.report.recorder import DmaMove, Recorder, Span
from trnsim.report.summary import QueueStats, dma_queue_stats, summarize
from trnsim.report.text import format_summary


def dma(core, queue, start, end, nbytes, index=0):
    return Span(core, f"q{queue}", "dma_copy", start, end, nbytes, 0, index, "k", "bfloat16")


def recorder() -> Recorder:
    """Core 0: two matmuls (0-100, 100-300 ps), a copy on VectorE (50-150), DMA on queues 0, 2
    and 10, a host copy (700-1000); core 1: one transfer on queue 2. Device time 0-1000 ps."""
    rec = Recorder()
    for s in (
        Span(0, "tensor", "matmul", 0, 100, 0, 1000, 0, "k", "bfloat16"),
        Span(0, "tensor", "matmul", 100, 300, 0, 3000, 1, "k", "bfloat16"),
        Span(0, "vector", "tensor_copy", 50, 150, 0, 0, 2, "k", "float32"),
        dma(0, 0, 100, 500, 3000, 4),  # overlaps the next: together 0-500
        dma(0, 0, 0, 400, 1000, 3),
        dma(0, 0, 600, 700, 24, 5),  # after a gap: + 100
        dma(0, 10, 200, 300, 64, 6),
        dma(0, 2, 250, 260, 8, 7),
        dma(0, 2, 252, 255, 8, 8),  # inside the one before: adds no busy time
        dma(1, 2, 0, 50, 10),
    ):
        rec.add_span(s)
    rec.span(0, "host", "copy", 700, 1000, 2048, kernel="copy x->y", dtype="float32")
    rec.hbm_traffic(read=5000, written=3000)
    rec.peak("sbuf", 4096)
    rec.peak("psum", 2048)
    rec.peak("hbm", 8192)
    rec.event("a", 100)
    rec.event("b", 350)
    return rec


QUEUES = {
    (0, 0): QueueStats(busy_ps=600, bytes=4024, transfers=3),
    (0, 2): QueueStats(busy_ps=10, bytes=16, transfers=2),
    (0, 10): QueueStats(busy_ps=100, bytes=64, transfers=1),
    (1, 2): QueueStats(busy_ps=50, bytes=10, transfers=1),
}


def test_dma_queue_stats_from_spans():
    stats = dma_queue_stats(recorder().recorded)
    assert stats == QUEUES
    assert list(stats) == [(0, 0), (0, 2), (0, 10), (1, 2)]  # numeric queue order


def test_no_dma_spans_no_queues():
    rec = Recorder()
    rec.span(0, "host", "copy", 0, 10, 4)
    rec.span(0, "tensor", "matmul", 0, 10)
    assert dma_queue_stats(rec.spans) == {}


@pytest.fixture(scope="module")
def summary():
    return summarize(
        recorder(),
        load_chip("trn2"),
        2_000_000,
        trace="t",
        mode="timing",
        timing=[("a", "b"), ("a", "never")],
        top=3,
    )


def test_times_and_engines(summary):
    assert (summary["total_time_ns"], summary["device_time_ns"]) == (2000.0, 1.0)
    idle = {"busy_ns": 0.0, "utilization": 0.0, "instructions": 0}
    assert summary["engines"] == {  # core 1 ran no engine instruction: not listed
        "core0.tensor": {"busy_ns": 0.3, "utilization": 0.3, "instructions": 2},
        "core0.vector": {"busy_ns": 0.1, "utilization": 0.1, "instructions": 1},
        "core0.scalar": idle,
        "core0.gpsimd": idle,
    }


def test_dma_queues(summary):
    assert list(summary["dma"]) == ["core0.q0", "core0.q2", "core0.q10", "core1.q2"]
    assert summary["dma"]["core0.q0"] == {
        "busy_ns": 0.6,
        "bytes": 4024,
        "transfers": 3,
        "bandwidth_bytes_per_s": 4024 / 600e-12,
        "setup_overhead_ns": 0.0,
    }
    assert summary["dma"]["core0.q2"]["busy_ns"] == 0.01


def test_setup_overhead_per_queue():
    """Each transfer's data phase (`DmaMove`) carries what its setup cost beyond its bytes;
    the summary sums them per queue, and the table shows them beside the busy time."""
    rec = recorder()
    rec.dma_move(DmaMove(0, 0, (0, 1), 100, 200, 700, 0, "k"))
    rec.dma_move(DmaMove(0, 0, (0, 1), 300, 400, 500, 1, "k"))
    rec.dma_move(DmaMove(0, 2, (3,), 0, 10, 0, 2, "k"))
    s = summarize(rec, load_chip("trn2"), 2_000_000, trace="t", mode="timing")
    assert s["dma"]["core0.q0"]["setup_overhead_ns"] == 1.2
    assert s["dma"]["core0.q2"]["setup_overhead_ns"] == 0.0
    assert "setup over bytes" in format_summary(s)


def test_hbm_flops_memory_timings(summary):
    cfg = load_chip("trn2")
    assert summary["hbm"] == {
        "bytes_read": 5000,
        "bytes_written": 3000,
        "bandwidth_bytes_per_s": 8000 / 1e-9,
    }
    assert (summary["flops"], summary["flops_by_dtype"]) == (4000, {"bfloat16": 4000})
    assert summary["flops_per_s"] == 4000 / 1e-9
    # one core ran matmuls for the 1 ns of device time
    assert summary["peak_fraction"] == pytest.approx(
        4000 / peak_flops_per_core(cfg, "bfloat16") / 1e-9, rel=1e-12
    )
    assert summary["memory"] == {
        "sbuf_peak_bytes": 4096,
        "psum_peak_bytes": 2048,
        "hbm_peak_bytes": 8192,
    }
    assert summary["timings"] == {"a->b": {"ns": 0.25}}


def test_top_instructions_by_busy_time(summary):
    # the three q0 transfers overlap: busy 0.6 ns, not their 0.9 ns sum
    got = [
        {k: pytest.approx(v) if isinstance(v, float) else v for k, v in r.items()}
        for r in summary["top_instructions"]
    ]
    assert got == [
        {
            "kernel": "k",
            "op": "dma_copy",
            "track": "core0.q0",
            "count": 3,
            "busy_ns": 0.6,
            "mean_ns": 0.3,
        },
        {
            "kernel": "copy x->y",
            "op": "copy",
            "track": "core0.host",
            "count": 1,
            "busy_ns": 0.3,
            "mean_ns": 0.3,
        },
        {
            "kernel": "k",
            "op": "matmul",
            "track": "core0.tensor",
            "count": 2,
            "busy_ns": 0.3,
            "mean_ns": 0.15,
        },
    ]


def test_table_lists_queues_in_order(summary):
    rows = [ln.split()[0] for ln in format_summary(summary).splitlines() if ln.startswith("core")]
    assert rows[-4:] == ["core0.q0", "core0.q2", "core0.q10", "core1.q2"]
