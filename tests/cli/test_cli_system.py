"""`trnsim run --system` and `validate --system` through click's CliRunner: the system summary
(text and JSON), --system over the trace's system:, --set on the system and its chip, --check of
collectives, --out-dir per rank, --profile and --perfetto per chip, and the one-line errors
(--chip with a system, an unknown system, a deadlock, ranks out of order, a collective on one
chip)."""

from __future__ import annotations

import csv
import json
import textwrap

import numpy as np

from tests.cli.test_cli_run import assert_one_line_error, invoke, ok
from trnsim.report.lanes import violations

TRACE = """\
trnsim: 1
name: pair
system: trn2-48xl
tensors:
  g: {shape: [256, 256], dtype: float32, init: normal}
streams:
  - {name: a, rank: 0, do: [{collective: {op: all_reduce, group: [0, 4], tensor: g}}]}
  - {name: b, rank: 4, do: [{collective: {op: all_reduce, group: [0, 4], tensor: g}}]}
"""


def write(tmp_path, text=TRACE, name="t.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_run_text(tmp_path):
    out = ok("run", write(tmp_path)).stdout
    lines = out.splitlines()
    assert lines[0] == "trace 'pair' on trn2-48xl (trn2 chips, functional), ranks 0, 4"
    assert any(ln.startswith("line 7 all_reduce g #0 ") and " 256 KiB " in ln for ln in lines)
    assert any(ln.startswith("chip 1 ") for ln in lines) and "communication " in out
    assert lines[-1].startswith("model           trnsim ")


def test_run_json_and_system_over_the_traces(tmp_path):
    s = json.loads(ok("run", write(tmp_path), "--json").stdout)
    assert (s["system"], s["chip"], s["ranks"], list(s["chips"])) == (
        "trn2-48xl", "trn2", [0, 4], ["0", "1"])  # fmt: skip
    (row,) = s["collectives"]
    assert (row["op"], row["bytes"], row["ranks"], row["links"]) == ("all_reduce", 262144, 2, 2)
    assert row["busiest_link"] in ("c0+x", "c1-x")
    one = json.loads(ok("run", write(tmp_path), "--json", "--system", "trn1-32xl").stdout)
    assert (one["system"], one["chip"], list(one["chips"])) == ("trn1-32xl", "trn1", ["0", "2"])
    set_ = json.loads(
        ok("run", write(tmp_path), "--json", "--set", "topology.link.bandwidth=64GB/s").stdout
    )
    assert set_["collectives"][0]["time_ns"] > row["time_ns"]  # a slower link


def test_check_out_dir_profile_and_perfetto(tmp_path):
    t = write(tmp_path)
    out = ok("run", t, "--check", "--out-dir", tmp_path / "o", "--profile", tmp_path / "p.csv",
             "--perfetto", tmp_path / "p.json").stdout  # fmt: skip
    assert "check           t.yaml:7 all_reduce g #0: max abs err" in out and " ok" in out
    g0, g4 = (np.load(tmp_path / "o" / f"rank{r}" / "g.npy") for r in (0, 4))
    np.testing.assert_array_equal(g0, g4)
    with open(tmp_path / "p.csv") as fh:
        assert next(csv.reader(fh))[:2] == ["chip", "core"]
    trace = json.loads((tmp_path / "p.json").read_text())
    assert violations(trace) == []
    procs = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert procs == {"chip 0 (trn2)", "chip 1 (trn2)", "host"}
    ccs = [e for e in trace["traceEvents"] if e.get("cat") == "collective"]
    assert sorted(e["pid"] for e in ccs) == [0, 1] and trace["otherData"]["system"] == "trn2-48xl"


def test_validate(tmp_path):
    out = ok("validate", write(tmp_path)).stdout
    assert out.endswith("t.yaml: ok on trn2-48xl: kernels 0, instructions 0, streams 2\n")


def test_errors(tmp_path):
    t = write(tmp_path)
    assert_one_line_error(
        invoke("run", t, "--chip", "trn3"),
        "error: --chip trn3 with a system (trn2-48xl): the system's chip runs; expected "
        "--set chip=trn3 to change it",
    )
    bad = write(tmp_path, TRACE.replace("system: trn2-48xl", "system: trn2-99xl"), "b.yaml")
    assert_one_line_error(invoke("run", bad), f"error: {bad}:3: system: ")
    dead = write(tmp_path, TRACE.replace("- {name: b, rank: 4, do: [{collective: {op: "
                 "all_reduce, group: [0, 4], tensor: g}}]}", "- {name: b, rank: 4, do: []}"),
                 "d.yaml")  # fmt: skip
    for cmd in ("run", "validate"):
        assert_one_line_error(
            invoke(cmd, dead),
            f"error: deadlock: {dead}:7 collective all_reduce #0 on group (0, 4): ranks (4) "
            f"never reach it; ranks (0) wait at it (streams a)",
        )
    assert_one_line_error(
        invoke("run", dead, "--no-race-check"),
        "error: deadlock: nothing can run but work is pending: collective all_reduce #0 on "
        "group (0, 4): ranks (4) never reached it; ranks (0) wait for them (streams a)",
    )
    order = write(tmp_path, TRACE.replace("rank: 4, do: [{collective: {op: all_reduce",
                  "rank: 4, do: [{collective: {op: all_gather"), "o.yaml")  # fmt: skip
    assert_one_line_error(
        invoke("run", order, "--no-race-check"),
        "error: collective #0 on group (0, 4): rank 4 issued all_gather of 262144 bytes of "
        "float32 but rank 0 issued all_reduce",
    )
    one = write(tmp_path, TRACE.replace("system: trn2-48xl\n", ""), "one.yaml")
    assert_one_line_error(
        invoke("run", one),
        f"error: {one}:6: streams[0].rank: a rank needs a system of chips; expected system: "
        f"NAME in the trace, or trnsim run --system NAME (or core: on one chip)",
    )


def test_compare_says_to_sweep_a_system(tmp_path):
    t = write(tmp_path)
    assert_one_line_error(
        invoke("compare", t, "--chip", "trn2"),
        f"error: {t}:3: system: trn2-48xl: compare runs a trace on one chip per column, not on "
        f"a system of chips; expected trnsim sweep {t} --grid KEY=V1,V2",
    )
    assert_one_line_error(
        invoke("compare", t, "--chip", "trn2", "--system", "trn2-48xl"),
        f"error: compare --system trn2-48xl: compare runs a trace on one chip per column; "
        f"expected trnsim sweep {t} --system trn2-48xl --grid KEY=V1,V2",
    )
