"""The benchmarks' generated traces (small versions of them) are race- and deadlock-free: `trnsim
run` now checks before simulating, so a benchmark trace the check refused would stop it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from trnsim.trace import load, loads
from trnsim.trace.races import find_races

BENCH = Path(__file__).parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_gemm  # noqa: E402
import bench_load  # noqa: E402
import bench_run  # noqa: E402
import bench_sim  # noqa: E402


def test_bench_load_ring_is_race_free():
    assert find_races(loads(json.dumps(bench_load.document(64)), "big.json")) == []


@pytest.mark.parametrize("use_repeat", [False, True])
def test_bench_run_trace_is_race_free(tmp_path, use_repeat):
    path = tmp_path / "t.yaml"
    if use_repeat and not bench_run.repeat_supported():
        pytest.skip("no repeat: support")
    bench_run.write_trace(path, 300, use_repeat)
    assert find_races(load(path)) == []


@pytest.mark.parametrize("mode", ["functional", "timing"])
def test_bench_gemm_is_race_free(mode):
    assert find_races(bench_gemm.gemm(256, mode).program()) == []


@pytest.mark.parametrize("make", ["pipeline", "back_to_back"])
def test_bench_sim_traces_are_race_free(make):
    assert find_races(getattr(bench_sim, make)(200, 64).program()) == []


def test_bench_races_streams_trace_is_race_free():
    import bench_races

    doc = bench_races.streams_document(200)
    assert find_races(loads(json.dumps(doc), "streams.json")) == []
