"""Bad inputs of issue 9's "wrong answers", "errors with their line" and "reports" sections, one
row each: the exit code, one line on stderr (no traceback), and the file:line where the input
has a line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from trnsim.cli import main

TILE = "a: {memory: sbuf, shape: [128, 64], dtype: float32}"
BASIC = f"""trnsim: 1
tiles:
  {TILE}
instructions:
  - {{op: memset, dst: a}}
"""

OPS = """trnsim: 1
tensors:
  x: {shape: [128, 64], dtype: float32}
  w: {shape: [64, 64], dtype: float32}
  h: {shape: [128, 64], dtype: float32}
kernels:
  mlp:
    ops:
      - matmul: {a: x, b: w, out: h}
      - gelu: {x: h, out: h}
"""

ROWS = {
    # name: (trace text, extra args, exit code, regex the one line must match)
    "lnc the chip does not support": (
        "trnsim: 1\nchip: trn1\nlnc: 2\n" + BASIC.split("\n", 1)[1],
        [],
        2,
        r"^error: t\.yaml:3: lnc 2 is not supported on trn1; expected one of 1$",
    ),
    "a stream on a core the chip does not have": (
        "trnsim: 1\nchip: trn1\nkernels:\n  k:\n    tiles:\n      "
        + TILE
        + "\n    instructions:\n      - {op: memset, dst: a}\n"
        + "streams:\n  - name: s\n    core: 2\n    do:\n      - {launch: k}\n",
        [],
        2,
        r"^error: t\.yaml:10: streams\.s\.core: 2 does not exist; expected a logical core 0\.\.1 "
        r"\(trn1 at lnc 1\)$",
    ),
    "unknown chip: in the trace": (
        "trnsim: 1\nchip: trn9\n" + BASIC.split("\n", 1)[1],
        [],
        2,
        r"^error: t\.yaml:2: chip: unknown chip 'trn9'",
    ),
    "HBM allocation failure": (
        "trnsim: 1\nmode: timing\ntensors:\n  x: {shape: [100000, 1000000], dtype: float32}\n"
        + BASIC.split("\n", 1)[1],
        [],
        2,
        r"^error: t\.yaml:4: tensors\.x: out of device memory .*: cannot allocate x: 372\.5 GiB "
        r"requested, 96 GiB free, largest free block 24 GiB",
    ),
    "functional-mode memory limit": (
        "trnsim: 1\ntensors:\n  x: {shape: [50000, 100000], dtype: float32}\n"
        + BASIC.split("\n", 1)[1],
        [],
        2,
        r"^error: t\.yaml:3: tensors\.x: .*functional-mode limit.*run with --mode timing",
    ),
    "SBUF overflow": (
        "trnsim: 1\ntiles:\n  a: {memory: sbuf, shape: [128, 40000], dtype: float32}\n"
        "  b: {memory: sbuf, shape: [128, 40000], dtype: float32}\ninstructions:\n"
        "  - {op: memset, dst: a}\n",
        [],
        2,
        r"^error: t\.yaml:4: kernel main, core 0: SBUF overflow: .* tile b is the first",
    ),
    "PSUM overflow": (
        "trnsim: 1\ntiles:\n  a: {memory: psum, shape: [128, 6000], dtype: float32}\n"
        "instructions:\n  - {op: memset, dst: a}\n",
        [],
        2,
        r"^error: t\.yaml:3: kernel main, core 0: PSUM overflow: .* tile a is the first",
    ),
    "deadlock found by the simulation": (
        f"trnsim: 1\ntiles:\n  {TILE}\n  b: {{memory: sbuf, shape: [128, 64], dtype: float32}}\n"
        "instructions:\n  - {op: memset, dst: a, wait: {s: 1}, signal: {t: 1}}\n"
        "  - {op: memset, dst: b, engine: gpsimd, wait: {t: 1}, signal: {s: 1}}\n",
        ["--no-race-check"],
        2,
        r"^error: deadlock: .*t\.yaml:6: core0\.vector in kernel main waits for semaphore 's' "
        r">= 1 \(it is 0\) at instruction 0 \(memset\); t\.yaml:7: core0\.gpsimd",
    ),
    "deadlock found before running": (
        f"trnsim: 1\ntiles:\n  {TILE}\n  b: {{memory: sbuf, shape: [128, 64], dtype: float32}}\n"
        "instructions:\n  - {op: memset, dst: a, wait: {s: 1}, signal: {t: 1}}\n"
        "  - {op: memset, dst: b, engine: gpsimd, wait: {t: 1}, signal: {s: 1}}\n",
        [],
        2,
        r"^error: deadlock: t\.yaml:7 kernel main queue core0\.gpsimd instruction 1 \(memset\) "
        r"waits for semaphore 't' >= 1, which can reach only 0; t\.yaml:6 ",
    ),
    "an engine waiting for its own later signal": (
        f"trnsim: 1\ntiles:\n  {TILE}\ninstructions:\n"
        "  - {op: memset, dst: a, wait: {s: 1}}\n  - {op: memset, dst: a, signal: {s: 1}}\n",
        [],
        2,
        r"^error: deadlock: t\.yaml:5 kernel main queue core0\.vector instruction 0 \(memset\) "
        r"waits for semaphore 's' >= 1 that only its own later instructions signal",
    ),
    "streams waiting for each other's later record": (
        f"trnsim: 1\nkernels:\n  k:\n    tiles: {{{TILE}}}\n    instructions: "
        "[{op: memset, dst: a}]\nstreams:\n"
        "  - {name: s0, do: [wait: e1, launch: k, record: e0]}\n"
        "  - {name: s1, do: [wait: e0, record: e1]}\n",
        [],
        2,
        r"^error: deadlock: t\.yaml:7 stream s0 waits for event 'e1', which only stream s1 "
        r"records, after a wait that cannot be met \(a cycle of waits\); t\.yaml:8 stream s1",
    ),
    "a race (a dropped wait)": (
        f"trnsim: 1\ntiles:\n  {TILE}\n  b: {{memory: sbuf, shape: [128, 64], dtype: float32}}\n"
        "instructions:\n  - {op: memset, dst: a, signal: {s: 1}}\n"
        "  - {op: tensor_copy, src: a, dst: b, engine: gpsimd}\n",
        [],
        2,
        r"^error: race: t\.yaml:6 kernel main queue vector instruction 0 \(memset\) and t\.yaml:7 "
        r"kernel main queue gpsimd instruction 1 \(tensor_copy\) both access a / a \(tile a\)",
    ),
    "ops: an unknown op": (
        OPS.replace("gelu:", "gelux:"),
        [],
        2,
        r"^error: t\.yaml:10: kernels\.mlp\.ops\[1\]: unknown op 'gelux' \(did you mean 'gelu'\?\)",
    ),
    "ops: an operand that is no tensor name": (
        OPS.replace("b: w,", "b: [w],"),
        [],
        2,
        r"^error: t\.yaml:9: kernels\.mlp\.ops\[0\]\.matmul\.b: matmul: b: got a list; expected a tensor name$",
    ),
    "ops: an unknown argument": (
        OPS.replace("b: w,", "c: w,"),
        [],
        2,
        r"^error: t\.yaml:9: kernels\.mlp\.ops\[0\]\.matmul: matmul: unknown argument 'c'",
    ),
    "ops: a missing argument": (
        OPS.replace("gelu: {x: h, out: h}", "gelu: {x: h}"),
        [],
        2,
        r"^error: t\.yaml:10: kernels\.mlp\.ops\[1\]\.gelu: gelu: missing argument 'out'",
    ),
    "ops: valid, but a case the kernel library does not lower": (
        OPS.replace("gelu: {x: h, out: h}", "softmax: {x: h, out: h, dim: 0}"),
        [],
        2,
        r"^error: t\.yaml:10: softmax: dim 0; only the last dim \(-1\) is lowered yet",
    ),
}


def one_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize("row", sorted(ROWS))
def test_bad_input(row, command, tmp_path):
    text, args, code, pattern = ROWS[row]
    if command == "validate" and args == ["--no-race-check"]:  # validate always checks
        args, pattern = [], r"^error: deadlock: t\.yaml:\d+ kernel main queue core0\."
    if command == "validate" and row == "functional-mode memory limit":
        code = 0  # validate checks shapes only: it allocates no values
    (tmp_path / "t.yaml").write_text(text)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        res = CliRunner().invoke(main, [command, "t.yaml", *args])
    assert res.exit_code == code, res.output
    if code == 0:
        assert "ok on trn2" in res.stdout
        return
    assert re.search(pattern, one_line(res.stderr)), res.stderr
    assert res.stdout == ""


def test_check_says_it_has_nothing_to_compare():
    res = CliRunner().invoke(main, ["run", "traces/softmax_rows.yaml", "--check", "--json"])
    assert res.exit_code == 0
    s = json.loads(res.stdout)
    assert s["check"] == {}
    assert s["check_note"] == "the trace has no high-level ops (ops:) to compare"
    res = CliRunner().invoke(main, ["run", "traces/softmax_rows.yaml", "--check"])
    assert "check           nothing to compare: the trace has no high-level ops" in res.stdout


def test_the_trace_format_ships_in_docs_and_is_linked():
    root = Path(__file__).parents[2]
    readme = (root / "README.md").read_text()
    assert "(docs/trace_format.md)" in readme and "../shared" not in readme
    assert "## High-level kernels" in (root / "docs" / "trace_format.md").read_text()
    res = CliRunner().invoke(main, ["run", "--help"])
    assert "docs/trace_format.md" in res.output


# -- reports -----------------------------------------------------------------------------------


def run_json(*args) -> dict:
    res = CliRunner().invoke(main, ["run", *map(str, args), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_top_instructions_show_busy_time_not_a_sum_of_overlapping_transfers():
    s = run_json("traces/gemm_double_buffered.yaml")
    for r in s["top_instructions"]:
        assert "total_ns" not in r
        assert r["busy_ns"] <= s["device_time_ns"] + 1e-9
        assert r["busy_ns"] <= r["count"] * r["mean_ns"] + 1e-6
    # some DMA group overlaps itself: its busy time is below count x mean
    assert any(r["busy_ns"] < r["count"] * r["mean_ns"] - 1e-6 for r in s["top_instructions"])
    res = CliRunner().invoke(main, ["run", "traces/gemm_double_buffered.yaml"])
    head = next(x for x in res.stdout.splitlines() if x.startswith("top instructions"))
    assert head.split()[-3:] == ["count", "busy", "mean"]


def test_no_peak_fraction_without_flops():
    s = run_json("traces/softmax_rows.yaml")
    assert s["flops"] == 0 and s["peak_fraction"] is None
    out = CliRunner().invoke(main, ["run", "traces/softmax_rows.yaml"]).stdout
    compute = next(x for x in out.splitlines() if x.startswith("compute"))
    assert "peak" not in compute
    assert run_json("traces/gemm_double_buffered.yaml")["peak_fraction"] > 0


def test_the_physical_cores_of_each_logical_core_are_named_under_lnc_2():
    s = run_json("traces/two_streams.yaml")
    assert s["lnc"] == 2
    assert s["logical_cores"] == {"0": ["core0", "core1"], "1": ["core2", "core3"]}
    out = CliRunner().invoke(main, ["run", "traces/two_streams.yaml"]).stdout
    assert "lnc 2: a stream's core: 0 runs on core0, core1; core: 1 runs on core2, core3" in out
    assert (
        "cores "
        not in CliRunner().invoke(main, ["run", "traces/two_streams.yaml", "--chip", "trn1"]).stdout
    )  # lnc 1: nothing to explain


def test_every_report_carries_the_version_and_the_config_hash(tmp_path):
    from trnsim import __version__

    base = run_json("traces/softmax_rows.yaml")
    other = run_json("traces/softmax_rows.yaml", "--set", "hbm.bandwidth=4TB/s")
    assert base["trnsim_version"] == other["trnsim_version"] == __version__
    assert re.fullmatch(r"[0-9a-f]{12}", base["config_hash"])
    assert base["config_hash"] != other["config_hash"]
    assert (
        run_json("traces/softmax_rows.yaml", "--chip", "trn2")["config_hash"] == base["config_hash"]
    )
    p, c = tmp_path / "t.json", tmp_path / "p.csv"
    res = CliRunner().invoke(
        main, ["run", "traces/softmax_rows.yaml", "--perfetto", str(p), "--profile", str(c)]
    )
    assert res.exit_code == 0, res.output
    assert f"config {base['config_hash']}" in res.stdout
    meta = json.loads(p.read_text())["otherData"]
    assert meta == {
        "chip": "trn2",
        "trnsim_version": __version__,
        "config_hash": base["config_hash"],
    }
    head, row = c.read_text().splitlines()[:2]
    assert head.endswith(",trnsim_version,config_hash")
    assert row.endswith(f",{__version__},{base['config_hash']}")


def compare(*args):
    return CliRunner().invoke(main, ["compare", *map(str, args)])


def test_compare_gives_a_column_that_cannot_run_its_reason(tmp_path):
    (tmp_path / "t.yaml").write_text(ROWS["lnc the chip does not support"][0])
    res = compare(tmp_path / "t.yaml", "--chip", "trn1", "--chip", "trn2")
    assert res.exit_code == 0, res.output
    assert re.search(
        r"^trn1 did not run: .*t\.yaml:3: lnc 2 is not supported on trn1", res.stdout, re.M
    )
    data = json.loads(
        compare(tmp_path / "t.yaml", "--chip", "trn1", "--chip", "trn2", "--json").stdout
    )
    assert "lnc 2 is not supported" in data["trn1"]["error"] and "total_time_ns" in data["trn2"]
    res = compare(tmp_path / "t.yaml", "--chip", "trn1")  # nothing ran: an error
    assert res.exit_code == 2 and one_line(res.stderr).startswith("error: trn1: ")


def test_compare_columns_carry_their_own_overrides_and_distinct_labels(tmp_path):
    mine = tmp_path / "mychip.yaml"
    mine.write_text("base: trn2\nhbm:\n  bandwidth: 4TB/s\n")
    args = ["traces/weight_stream.yaml", "--mode", "timing", "--json"]
    data = json.loads(
        compare(
            *args,
            "--chip",
            "trn2",
            "--chip",
            "trn2,hbm.bandwidth=0.5TB/s",
            "--chip",
            mine,
            "--chip",
            "trn2",
        ).stdout
    )
    assert list(data) == ["trn2", "trn2 hbm.bandwidth=0.5TB/s", "mychip", "trn2 #2"]
    assert data["trn2"]["config_hash"] == data["trn2 #2"]["config_hash"]
    assert len({d["config_hash"] for d in data.values()}) == 3
    assert data["trn2 hbm.bandwidth=0.5TB/s"]["device_time_ns"] > data["trn2"]["device_time_ns"]
