"""The bundled data-parallel trace (traces/ddp_allreduce.yaml) run end to end with `trnsim run
--system trn2-48xl --check`: every collective equal to numpy's result, the weights identical on
every rank after the step, the all_reduce that runs alone timed exactly as the collectives
engine times it alone, the one beside the matmul overlapped by it, the same times in timing
mode, and a timeline with a process per chip that nests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from trnsim.cli import main
from trnsim.collectives import World
from trnsim.config import load_system
from trnsim.report.lanes import violations

TRACE = Path(__file__).resolve().parents[2] / "traces" / "ddp_allreduce.yaml"
RANKS = (0, 4, 8, 12)


def run(*args) -> str:
    result = CliRunner().invoke(main, ["run", str(TRACE), "--system", "trn2-48xl", *map(str, args)])
    assert result.exit_code == 0, (result.stderr, result.exception)
    return result.stdout


def test_ddp_allreduce(tmp_path):
    s = json.loads(run("--check", "--json", "--out-dir", tmp_path / "o", "--perfetto",
                       tmp_path / "t.json"))  # fmt: skip
    assert s["ranks"] == list(RANKS) and list(s["chips"]) == ["0", "1", "2", "3"]
    rows = s["collectives"]
    assert [(r["op"], r["seq"], r["algorithm"]) for r in rows] == [
        ("broadcast", 0, "direct"),
        ("broadcast", 1, "direct"),
        ("all_reduce", 2, "rdh"),
        ("all_reduce", 3, "rdh"),
    ]
    assert len(s["check"]) == 4 and all(c["ok"] for c in s["check"].values())
    # values: the step leaves every rank with the same weights (rank 0's, updated by the mean)
    for name in ("w1", "w2", "g1", "g2"):
        first = np.load(tmp_path / "o" / "rank0" / f"{name}.npy")
        for r in RANKS[1:]:
            np.testing.assert_array_equal(
                np.load(tmp_path / "o" / f"rank{r}" / f"{name}.npy"), first
            )
    # times: g1's all_reduce runs alone (the compute stream waits for it): the engine's own time
    alone = World.from_config(load_system("trn2-48xl")).collective(
        "all_reduce", RANKS, 1024 * 1024 * 2, "bfloat16"
    )
    g2, g1 = rows[2], rows[3]
    assert g1["time_ns"] * 1000 == alone.time_ps and g2["time_ns"] >= g1["time_ns"]
    assert g1["busbw_bytes_per_s"] == alone.busbw and g1["links"] == 8
    comm = s["communication"]
    for r in RANKS:
        v = comm["ranks"][str(r)]
        assert v["overlapped_ns"] > 0.5 * g2["time_ns"]  # g2's all_reduce beside g1's matmul
        assert abs(v["exposed_ns"] + v["overlapped_ns"] - v["collective_ns"]) < 1e-6
    # timing mode: the same times (they do not depend on values)
    t = json.loads(run("--json", "--mode", "timing"))
    assert [r["time_ns"] for r in t["collectives"]] == [r["time_ns"] for r in rows]
    assert t["total_time_ns"] == s["total_time_ns"]
    trace = json.loads((tmp_path / "t.json").read_text())
    assert violations(trace) == []
    procs = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert procs == {"chip 0 (trn2)", "chip 1 (trn2)", "chip 2 (trn2)", "chip 3 (trn2)", "host"}
    rows_ = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"core0 cc comm0", "core0 tensor", "core1 tensor", "core0 dma q0"} <= rows_
