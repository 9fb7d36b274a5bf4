"""The bundled ops traces (traces/*_ops*.yaml) run with another DMA queue count:
`trnsim run <trace> --set core.dma.queues_per_engine=N` (the kernel library takes its queues
from the config, `kernels/queues.py`), in timing mode. At 2 every transfer is on queue 0 (loads)
or 1 (stores); at the chips' own 16 the run is the golden's, to the picosecond (for the Llama
layers, 10-30 s a run, test_bundled_traces' goldens run that already)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trnsim.cli import main

ROOT = Path(__file__).resolve().parents[2]
TRACES = sorted(p.stem for p in (ROOT / "traces").glob("*_ops*.yaml"))
POINTS = [(stem, 2) for stem in TRACES] + [
    (stem, 16) for stem in TRACES if not stem.startswith("llama70b")
]


def run(stem: str, queues: int) -> dict:
    args = ["run", str(ROOT / "traces" / f"{stem}.yaml"), "--json", "--mode", "timing"]
    args += ["--no-race-check", "--set", f"core.dma.queues_per_engine={queues}"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.stderr or result.output
    return json.loads(result.stdout)


def test_there_are_ops_traces():
    assert {"mlp_ops", "attention_ops", "llama70b_prefill_ops", "llama70b_decode_ops"} <= set(
        TRACES
    )


@pytest.mark.parametrize("stem,queues", POINTS)
def test_an_ops_trace_runs_at_a_queue_count(stem, queues):
    report = run(stem, queues)
    used = {int(key.split(".q")[1]) for key in report["dma"]}
    assert used and max(used) < queues, sorted(used)
    assert report["ops"] and all(row["time_ns"] > 0 for row in report["ops"])
    assert all(row["fraction"] <= 1 for row in report["ops"])  # never faster than the roofline
    if queues == 2:
        assert used == {0, 1}  # loads on one, stores on the other
    else:  # the chips' own count: the golden report's timeline
        golden = json.loads((ROOT / "tests" / "golden" / f"{stem}.json").read_text())
        assert report["device_time_ns"] == golden["device_time_ns"]
        assert report["dma"] == golden["dma"]
        assert [r["time_ns"] for r in report["ops"]] == [r["time_ns"] for r in golden["ops"]]
