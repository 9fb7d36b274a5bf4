"""The bundled traces' Perfetto timelines: every thread's slices nest (the Chrome trace
format's rule for complete events, which Perfetto relies on to draw them), each row has no more
lanes than it has slices in flight at once, and a trace gives the same bytes every time.

The small traces run in well under a second each; the Llama layer (~5 s here) is the heavy
case: before lanes, 5,803 of the 5,824 slices of its queue q0 overlapped without nesting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trnsim.config import load_chip
from trnsim.report.lanes import violations
from trnsim.report.perfetto import chrome_trace, write_chrome_trace
from trnsim.report.tracks import lane_of
from trnsim.runtime.session import run_program
from trnsim.trace import load

TRACES = Path(__file__).resolve().parents[2] / "traces"
HEAVY = "llama70b_layer_timing"
SMALL = sorted(  # on one chip (a trace naming a system: tests/e2e/test_bundled_system_trace.py)
    p.stem for p in TRACES.glob("*.yaml") if not p.stem.startswith("llama") and not load(p).system
)


def timeline(stem: str, path: Path | None = None) -> dict:
    """The trace's Chrome trace (written to `path` and read back, when given)."""
    program = load(TRACES / f"{stem}.yaml")
    rec = run_program(program, load_chip(program.chip), mode="timing").device.recorder
    if path is None:
        return chrome_trace(rec, program.chip)
    write_chrome_trace(rec, path, program.chip)
    return json.loads(path.read_text())


def test_there_are_small_traces():
    assert len(SMALL) >= 5 and "gemm_double_buffered" in SMALL


def fewest_lanes_broken(trace: dict) -> list[tuple]:
    """The rows whose top lane was opened without every lower lane busy at that time (so
    with more lanes than slices in flight): none, when lanes are dealt greedily."""
    rows: dict[tuple, dict[int, list[tuple[int, int]]]] = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            row, lane = lane_of(e["tid"])
            start = round(e["ts"] * 1e6)  # in ps, as `violations` compares them
            rows.setdefault((e["pid"], row), {}).setdefault(lane, []).append(
                (start, start + round(e["dur"] * 1e6))
            )
    broken = []
    for key, lanes in rows.items():
        assert sorted(lanes) == list(range(len(lanes))), key  # no lane left empty
        t = min(lanes[len(lanes) - 1])[0]  # when the top lane opened
        if not all(any(a <= t < b for a, b in lanes[n]) for n in range(len(lanes) - 1)):
            broken.append(key)
    return broken


@pytest.mark.parametrize("stem", SMALL)
def test_small_traces_nest_and_give_the_same_bytes(stem, tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    trace = timeline(stem, first)
    timeline(stem, second)
    assert first.read_bytes() == second.read_bytes()
    assert violations(trace) == []
    assert fewest_lanes_broken(trace) == []


def test_the_llama_layer_nests():
    trace = timeline(HEAVY)
    assert violations(trace) == []
    assert fewest_lanes_broken(trace) == []
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"dma q0", "dma q0 #2"} <= names  # its transfers in flight, on two lanes
