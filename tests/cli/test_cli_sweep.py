"""`trnsim sweep`, `trnsim plot` and `--param` through click's CliRunner."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import trnsim.cli.sweep as cli_sweep
import trnsim.sweep.execute as execute
from trnsim.cli import main
from trnsim.cli.sweep import _duration, _sweep_progress
from trnsim.sweep import estimate, run_sweep, table
from trnsim.sweep.worker import simulate

ROOT = Path(__file__).resolve().parents[2]
GEMM = str(ROOT / "traces" / "gemm_double_buffered.yaml")
STREAM = str(ROOT / "traces" / "weight_stream.yaml")
PARAMS_LINE = next(
    i
    for i, line in enumerate(Path(STREAM).read_text().splitlines(), start=1)
    if line.startswith("params:")
)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def ok(*args):
    result = invoke(*args)
    assert result.exit_code == 0, (result.exit_code, result.stderr, result.exception)
    return result


def one_line_error(result, start: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {start}"), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    return result.stderr


ARGS = [GEMM, STREAM, "--chip", "trn2", "--grid", "hbm.bandwidth=1TB/s,4XB/s", "--mode", "timing"]


def test_sweep_writes_the_table_and_says_what_it_did(tmp_path):
    out = tmp_path / "t.csv"
    result = invoke("sweep", *ARGS, "--out", out)
    assert result.exit_code == 1  # some points failed: the table is written all the same
    assert result.stdout == f"sweep: 4 points: 2 run, 2 failed; table in {out}\n"
    errors = result.stderr.splitlines()
    assert errors[0] == (
        f"  failed: {GEMM} trn2 4XB/s: --grid hbm.bandwidth=4XB/s: "
        "hbm.bandwidth: expected a bandwidth like '2.9TB/s' (B/s, KB/s, MB/s, "
        "GB/s, TB/s, KiB/s, MiB/s, GiB/s, TiB/s, B/ns), got '4XB/s'"
    )
    assert errors[2:] == [f"error: 2 of 4 points failed; see the error column of {out}"]
    want = run_sweep([GEMM, STREAM], ["trn2"], ["hbm.bandwidth=1TB/s,4XB/s"], mode="timing")
    assert out.read_text() == table.csv_lines(want.rows, want.columns)
    again = invoke("sweep", *ARGS, "--out", out, "-q")
    assert again.exit_code == 1 and again.stdout == ""
    assert again.stderr == f"error: 2 of 4 points failed; see the error column of {out}\n"
    fine = ok("sweep", *ARGS[:4], "--grid", "hbm.bandwidth=1TB/s", *ARGS[-2:], "--out", out)
    assert fine.stdout == f"sweep: 2 points: 0 run, 2 already in {out}, 0 failed; table in {out}\n"
    assert fine.stderr == ""  # none failed: exit 0, nothing on stderr


DEADLOCK = (
    "trnsim: 1\ntiles:\n  a: {memory: sbuf, shape: [128, 64], dtype: float32}\n"
    "instructions:\n  - {op: memset, dst: a, wait: {s: 1}}\n  - {op: memset, dst: a, signal: "
    "{s: 1}}\n"
)


@pytest.mark.parametrize(
    "failing, ran, why",
    [
        ("misspelt grid key", 0, "unknown key 'hbm.bandwith'"),
        ("missing trace", 0, "cannot read the file"),
        ("deadlocking trace", 2, "deadlock"),
    ],
)
def test_a_sweep_whose_every_point_failed_exits_1(tmp_path, failing, ran, why):
    trace, grid = tmp_path / "deadlock.yaml", "hbm.bandwidth=1TB/s,2TB/s"
    trace.write_text(DEADLOCK)
    if failing == "misspelt grid key":
        trace, grid = GEMM, "hbm.bandwith=1TB/s,2TB/s"
    elif failing == "missing trace":
        trace = tmp_path / "nowhere.yaml"
    result = invoke("sweep", trace, "--grid", grid, "--mode", "timing")
    assert result.exit_code == 1, (result.exit_code, result.output)
    lines = result.stdout.splitlines()  # the table, as when points succeed
    assert lines[0].startswith("trace,chip,hbm.bandwi") and len(lines) == 3
    assert result.stderr.splitlines()[0] == f"sweep: 2 points: {ran} run, 2 failed"
    assert why in result.stderr.splitlines()[1]
    assert result.stderr.splitlines()[-1] == (
        "error: 2 of 2 points failed; see the error column of the table"
    )


def test_sweep_without_out_prints_the_csv(tmp_path):
    result = ok(
        "sweep",
        GEMM,
        "--chip",
        "trn2",
        "--chip",
        "trn3",
        "--mode",
        "timing",
        "--set",
        "hbm.bandwidth=2TB/s",
    )
    want = run_sweep([GEMM], ["trn2", "trn3"], sets=["hbm.bandwidth=2TB/s"], mode="timing")
    assert result.stdout == table.csv_lines(want.rows, want.columns)
    assert result.stderr == "sweep: 2 points: 2 run, 0 failed\n"
    assert ok("sweep", GEMM, "--mode", "timing", "-q").stderr == ""


def test_sweep_params(tmp_path):
    out = tmp_path / "t.csv"
    ok(
        "sweep",
        STREAM,
        "--grid",
        "param.batch=4,16",
        "--param",
        "tiles=2",
        "--mode",
        "timing",
        "--out",
        out,
    )
    _, rows = table.read(out)
    assert [(r["param.batch"], r["set"], r["flops"]) for r in rows] == [
        ("4", "param.tiles=2", 2 * 4 * 512 * 512 * 2),
        ("16", "param.tiles=2", 2 * 16 * 512 * 512 * 2),
    ]


@pytest.mark.parametrize(
    "args, start",
    [
        (["--grid", "hbm.bandwidth"], "--grid hbm.bandwidth: expected KEY=V1,V2,..."),
        (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "--workers 2 with --scheduler"),
        (
            ["--out", "/nonexistent/dir/t.csv"],
            "--out /nonexistent/dir/t.csv: folder /nonexistent/dir does not exist",
        ),
    ],
)
def test_sweep_errors_are_one_line(args, start):
    one_line_error(invoke("sweep", GEMM, "--mode", "timing", *args), start)


def test_sweep_workers_without_dask(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    msg = one_line_error(invoke("sweep", GEMM, "--workers", "2"), "--workers 2 runs the sweep")
    assert "pip install 'trnsim[sweep]'" in msg


# -- asking before a big sweep ---------------------------------------------------------------------

BIG = [GEMM, "--chip", "trn2", "--grid", "hbm.bandwidth=1TB/s,2TB/s,3TB/s", "--mode", "timing"]


@pytest.fixture
def big(monkeypatch):
    """More than 2 points ask (BIG has 3), the first point alone is timed; the points simulated
    are counted."""
    monkeypatch.setattr(estimate, "CONFIRM_ABOVE", 2)
    monkeypatch.setattr(estimate, "ESTIMATE_POINTS", 1)
    calls = []

    def counting(*task):
        calls.append(task)
        return simulate(*task)

    monkeypatch.setattr(execute, "simulate", counting)
    return calls


def test_a_big_sweep_with_no_terminal_needs_yes_and_runs_nothing_without(tmp_path, big):
    out = tmp_path / "t.csv"
    one_line_error(
        invoke("sweep", *BIG, "--out", out),
        "sweep: 3 points to run, more than 2, and no terminal to ask whether to run them; "
        "expected --yes to run them",
    )
    assert big == [] and not out.exists()
    result = ok("sweep", *BIG, "--out", out, "--yes")
    assert len(big) == 3 and result.stderr == ""
    assert result.stdout == f"sweep: 3 points: 3 run, 0 failed; table in {out}\n"


PROMPT = (
    r"sweep: 3 points to run; the first took [0-9.e-]+ s: the rest about \d+ s on "
    r"1 process\. Run them\? \[y/N\]: "
)


def test_a_big_sweep_on_a_terminal_asks(tmp_path, big, monkeypatch):
    monkeypatch.setattr(cli_sweep, "_interactive", lambda: True)
    out = tmp_path / "t.csv"
    no = CliRunner().invoke(main, ["sweep", *BIG, "--out", str(out)], input="n\n")
    assert no.exit_code == 1, no.output
    prompt, said = no.stderr.splitlines()
    assert re.fullmatch(PROMPT + "n", prompt), prompt  # (CliRunner echoes the answer)
    assert said == f"sweep: not run (answered no); the point timed is in {out}"
    assert no.stdout == ""
    assert len(big) == 1 and len(table.read(out)[1]) == 1  # the point timed, kept
    big.clear()
    yes = CliRunner().invoke(main, ["sweep", *BIG], input="y\n")
    assert yes.exit_code == 0, yes.output
    assert re.fullmatch(PROMPT + "y", yes.stderr.splitlines()[0])
    assert len(big) == 3  # the point timed is not run again
    want = run_sweep([GEMM], ["trn2"], ["hbm.bandwidth=1TB/s,2TB/s,3TB/s"], mode="timing")
    assert yes.stdout == table.csv_lines(want.rows, want.columns)


def test_the_question_says_when_the_points_timed_failed(big, monkeypatch):
    monkeypatch.setattr(cli_sweep, "_interactive", lambda: True)
    monkeypatch.setattr(estimate, "ESTIMATE_POINTS", 2)
    args = [*BIG, "--set", "core.sbuf.partition_bytes=8KiB", "--workers", "4"]  # tiles overflow
    no = CliRunner().invoke(main, ["sweep", *args], input="\n")  # the default: no
    assert no.exit_code == 1 and len(big) == 2
    assert re.fullmatch(
        r"sweep: 3 points to run; the first 2 took [0-9.e-]+ s each, 2 of them failed: the "
        r"rest about \d+ s on 4 processes\. Run them\? \[y/N\]: ",
        no.stderr.splitlines()[0],
    ), no.stderr


def test_durations_are_said_as_estimates():
    assert [_duration(s) for s in (0.4, 89, 91, 5300, 5401, 36000)] == [
        "0 s",
        "89 s",
        "2 min",
        "88 min",
        "1 h 30 min",
        "10 h 00 min",
    ]


def test_progress_bar_on_a_terminal(capsys, monkeypatch):
    assert _sweep_progress(quiet=False) is None  # not a terminal: quiet
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert _sweep_progress(quiet=True) is None
    show = _sweep_progress(quiet=False)
    show(0, 4, 0)
    show(2, 4, 1)
    show(4, 4, 1)
    err = capsys.readouterr().err
    frames = err.split("\r")[1:]
    assert frames[0].startswith("sweep [........................] 0/4 points, 0 failed ")
    assert frames[1].startswith("sweep [############............] 2/4 points, 1 failed, ETA 0:0")
    assert frames[2].startswith("sweep [########################] 4/4 points, 1 failed ")


def test_the_eta_leaves_out_the_wait_for_an_answer(capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    bar = _sweep_progress(quiet=False)
    bar(1, 4, 0)  # the point timed; then the question, answered after 1000 s
    bar.start -= 1000
    bar.restart()
    bar(2, 4, 0)
    assert (
        capsys.readouterr()
        .err.split("\r")[-1]
        .startswith("sweep [############............] 2/4 points, 0 failed, ETA 0:00")
    )


@pytest.mark.parametrize("command", ["sweep", "plot"])
def test_help_explains_every_option_with_an_example(command):
    text = ok(command, "--help").stdout
    for option in main.commands[command].params:
        if isinstance(option, click.Option):
            assert all(name in text for name in option.opts), option.opts
            assert option.help, option.opts
    assert "Examples:" in text and f"trnsim {command} " in text.split("Examples:")[1]


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "t.csv"
    ok(
        "sweep",
        GEMM,
        "--chip",
        "trn1",
        "--chip",
        "trn2",
        "--grid",
        "hbm.bandwidth=1TB/s,2TB/s",
        "--mode",
        "timing",
        "--out",
        out,
        "-q",
    )
    result = ok("plot", out, "--x", "hbm.bandwidth", "--y", "device_time_ns", "--hue", "chip")
    png = tmp_path / "t.png"
    assert result.stdout == f"wrote {png}\n"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (770, 462)
    one_line_error(
        invoke("plot", out, "--x", "hbm.bandwith", "--y", "flops"),
        f"{out}: --x hbm.bandwith: no such column (did you mean 'hbm.bandwidth'?)",
    )
    one_line_error(
        invoke("plot", out, "--x", "hbm.bandwidth", "--y", "chip"),
        "--y chip: not a figure of the table",
    )


def test_plot_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    msg = one_line_error(
        invoke("plot", tmp_path / "t.csv", "--x", "a", "--y", "b"),
        "trnsim plot draws with matplotlib, which is not installed",
    )
    assert "pip install 'trnsim[plot]'" in msg


# -- --param on run, validate and compare ----------------------------------------------------------


def test_param_on_run_validate_and_compare():
    summary = json.loads(
        ok(
            "run", STREAM, "--param", "batch=4", "--param", "tiles=2", "--mode", "timing", "--json"
        ).stdout
    )
    assert summary["flops"] == 2 * 4 * 512 * 512 * 2
    assert ok("validate", STREAM, "--param", "tiles=4").stdout == (
        f"{STREAM}: ok on trn2: kernels 1, instructions 44, streams 1\n"
    )  # 4 + 2 x 20
    both = json.loads(
        ok(
            "compare",
            STREAM,
            "--chip",
            "trn2",
            "--chip",
            "trn3",
            "--param",
            "tiles=2",
            "--mode",
            "timing",
            "--json",
        ).stdout
    )
    assert {s["flops"] for s in both.values()} == {2 * 8 * 512 * 512 * 2}


@pytest.mark.parametrize(
    "args, start",
    [
        (
            ["--param", "bach=4"],
            f"{STREAM}:{PARAMS_LINE}: params: --param bach=4: unknown param "
            "'bach' (did you mean 'batch'?); expected one of batch, tiles",
        ),
        (["--param", "batch"], "--param batch: expected NAME=VALUE, like --param batch=64"),
        (
            ["--param", "tiles=two"],
            f"{STREAM}:{PARAMS_LINE}: params: --param tiles=two: got "
            "'two'; expected an integer, like tiles=64",
        ),
    ],
)
def test_param_errors_are_one_line(args, start):
    for command in ("run", "validate"):
        one_line_error(invoke(command, STREAM, *args), start)
    one_line_error(
        invoke("run", GEMM, "--param", "batch=4"),
        f"{GEMM}:1: params: --param batch=4: the trace declares no params",
    )
