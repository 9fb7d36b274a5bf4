"""The recorder: typed spans, its write methods and their rules, and that nothing outside
trnsim/report writes its fields."""

import ast
from pathlib import Path

import pytest

import trnsim
from trnsim.report.recorder import MEMORIES, HbmSample, Recorder, Span


def test_span_is_a_typed_record():
    assert Span._fields == (
        "core",
        "track",
        "op",
        "start_ps",
        "end_ps",
        "bytes",
        "flops",
        "index",
        "kernel",
        "dtype",
    )
    s = Span(1, "q3", "dma_copy", 100, 350, 4096, 0, 7, "k", "bfloat16")
    assert (s.core, s.track, s.start_ps, s.end_ps, s.bytes, s.index) == (1, "q3", 100, 350, 4096, 7)
    assert s.duration_ps == 250


def test_span_from_fields_defaults_counts_to_zero():
    rec = Recorder()
    rec.span(0, "host", "copy", 5, 10, 64, kernel="copy a->b", dtype="float32")
    assert rec.spans == [Span(0, "host", "copy", 5, 10, 64, 0, 0, "copy a->b", "float32")]


def test_spans_are_in_timeline_order_and_recorded_in_add_order():
    rec = Recorder()
    late = Span(0, "tensor", "matmul", 50, 60, 0, 0, 1, "k", "bf16")
    q = Span(0, "q0", "dma_copy", 0, 80, 64, 0, 0, "k", "bf16")
    vec = Span(0, "vector", "tensor_copy", 0, 10, 0, 0, 2, "k", "bf16")
    other_core = Span(1, "gpsimd", "iota", 0, 10, 0, 0, 0, "k", "bf16")
    for s in (late, other_core, q, vec):
        rec.add_span(s)
    assert rec.recorded == [late, other_core, q, vec]
    assert rec.span_count == 4
    # start, then core, then track (as a string), then instruction index
    assert rec.spans == [q, vec, other_core, late]
    first = Span(0, "scalar", "activation", -1, 0, 0, 0, 3, "k", "bf16")
    rec.add_span(first)
    assert rec.spans[0] == first and len(rec.spans) == 5  # re-sorted after more spans


def test_hbm_traffic_adds_up():
    rec = Recorder()
    rec.hbm_traffic(read=100, written=0)
    rec.hbm_traffic(read=28, written=64)
    assert (rec.hbm_bytes_read, rec.hbm_bytes_written) == (128, 64)


def test_hbm_sample_at_the_same_instant_replaces_the_stacks_last():
    rec = Recorder()
    rec.hbm_sample(10, 0, 1e9)
    rec.hbm_sample(10, 1, 2e9)
    rec.hbm_sample(10, 0, 3e9)  # stack 0 again at ps 10: replaces its sample in place
    rec.hbm_sample(20, 0, 0.0)
    rec.hbm_sample(20, 1, 5e9)
    rec.hbm_sample(20, 1, 4e9)
    assert rec.hbm_samples == [
        HbmSample(10, 0, 3e9),
        HbmSample(10, 1, 2e9),
        HbmSample(20, 0, 0.0),
        HbmSample(20, 1, 4e9),
    ]
    assert rec.hbm_samples[1].bytes_per_s == 2e9 and rec.hbm_samples[2].ps == 20


def test_events_keep_their_last_time():
    rec = Recorder()
    rec.event("start", 5)
    rec.event("end", 90)
    rec.event("start", 40)
    assert rec.events == {"start": 40, "end": 90}


def test_peaks_are_high_water_marks():
    rec = Recorder()
    assert rec.peaks == {"sbuf": 0, "psum": 0, "hbm": 0}
    rec.peak("sbuf", 4096)
    rec.peak("sbuf", 1024)
    rec.peak("hbm", 10)
    assert rec.peaks == {"sbuf": 4096, "psum": 0, "hbm": 10}
    with pytest.raises(ValueError, match="memory 'dram'"):
        rec.peak("dram", 1)


FIELDS = {
    "hbm_samples",
    "hbm_bytes_read",
    "hbm_bytes_written",
    "events",
    "peaks",
    "add_span",
    "_spans",
    "_sorted",
    "_last_sample",
    "estimates",
}


def _writes(tree: ast.AST):
    """Attribute names assigned to, or assigned into (x.a[k] = ...), anywhere in `tree`."""
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            if isinstance(t, ast.Subscript):
                t = t.value
            if isinstance(t, ast.Attribute):
                yield t.attr, node.lineno


def test_only_the_recorder_writes_its_fields():
    assert set(MEMORIES) == set(Recorder().peaks)
    root = Path(trnsim.__file__).parent
    bad = [
        f"{path.relative_to(root)}:{line} writes .{attr}"
        for path in sorted(root.rglob("*.py"))
        if path.parent.name != "report"
        for attr, line in _writes(ast.parse(path.read_text()))
        if attr in FIELDS
    ]
    assert bad == []
