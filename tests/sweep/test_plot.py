"""trnsim.sweep.plot: which points make which line, where values with units go, and the README's
table and figure (docs/sweep_hbm.csv is what the README's sweep command writes)."""

from __future__ import annotations

import csv
import shlex
from pathlib import Path

import pytest

from trnsim.errors import TrnsimError
from trnsim.sweep import run_sweep, table
from trnsim.sweep.plot import _positions, figure, plot

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
STREAM = str(ROOT / "traces" / "weight_stream.yaml")


@pytest.fixture(scope="module")
def sweep_csv(tmp_path_factory):
    out = tmp_path_factory.mktemp("plot") / "t.csv"
    run_sweep(
        [STREAM],
        ["trn1", "trn2"],
        ["hbm.bandwidth=2TB/s,0.5TB/s,1TB/s,8XB/s", "param.tiles=2,4"],
        mode="timing",
        out=out,
    )
    return out


def lines(fig) -> dict:
    ax = fig.axes[0]
    return {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.get_lines()}


def test_a_line_per_hue_and_per_other_varying_key(sweep_csv):
    _, rows = table.read(sweep_csv)
    fig = figure(sweep_csv, "hbm.bandwidth", "device_time_ns", hue="chip")
    got = lines(fig)
    # chip is the hue; param.tiles varies too, so it splits the lines; 8XB/s failed: left out
    assert sorted(got) == [
        "chip=trn1, param.tiles=2",
        "chip=trn1, param.tiles=4",
        "chip=trn2, param.tiles=2",
        "chip=trn2, param.tiles=4",
    ]
    xs, ys = got["chip=trn2, param.tiles=4"]
    assert xs == [0.5e12, 1e12, 2e12]  # placed by size, in order
    want = {
        r["hbm.bandwidth"]: r["device_time_ns"]
        for r in rows
        if (r["chip"], r["param.tiles"]) == ("trn2", "4") and not r["error"]
    }
    assert ys == [want["0.5TB/s"], want["1TB/s"], want["2TB/s"]]
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.5TB/s", "1TB/s", "2TB/s"]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("hbm.bandwidth", "device_time_ns")
    assert ax.get_title() == "device_time_ns against hbm.bandwidth: weight_stream.yaml"


def test_one_varying_key_labels_lines_by_value(tmp_path):
    out = tmp_path / "t.csv"
    run_sweep([STREAM], ["trn1", "trn2"], ["param.tiles=2,4"], mode="timing", out=out)
    fig = figure(out, "param.tiles", "flops")
    assert lines(fig) == {
        "trn1": ([2, 4], [2 * 8 * 512 * 512 * t for t in (2, 4)]),
        "trn2": ([2, 4], [2 * 8 * 512 * 512 * t for t in (2, 4)]),
    }
    target = plot(out, "param.tiles", "flops", out=tmp_path / "f.svg", title="flops")
    assert target.read_text().count("<svg") == 1


def test_positions():
    assert _positions(["2TB/s", "500GB/s"]) == (
        {"2TB/s": 2e12, "500GB/s": 5e11},
        {2e12: "2TB/s", 5e11: "500GB/s"},
    )
    assert _positions(["448KiB", "224KiB"])[0] == {"448KiB": 458752, "224KiB": 229376}
    assert _positions([3, 1.5]) == ({3: 3, 1.5: 1.5}, None)
    assert _positions(["b", "a", "b"]) == ({"b": 0.0, "a": 1.0}, {0.0: "b", 1.0: "a"})
    # two spellings of one size cannot share a place: in order of appearance instead
    assert _positions(["1TB/s", "1000GB/s"])[1] == {0.0: "1TB/s", 1.0: "1000GB/s"}


def test_plot_errors(sweep_csv, tmp_path):
    with pytest.raises(TrnsimError, match=r"--hue chipp: no such column \(did you mean 'chip'"):
        figure(sweep_csv, "hbm.bandwidth", "flops", hue="chipp")
    failed = tmp_path / "failed.csv"
    run_sweep([STREAM], ["trn2"], ["hbm.bandwidth=8XB/s"], mode="timing", out=failed)
    with pytest.raises(
        TrnsimError, match="no row has a value of flops and hbm.bandwidth without an error"
    ):
        figure(failed, "hbm.bandwidth", "flops")
    with pytest.raises(TrnsimError, match="cannot read the table"):
        figure(tmp_path / "missing.csv", "a", "b")


# -- the README's sweep ---------------------------------------------------------------------------


def readme_command(name: str) -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.startswith(f"trnsim {name} "))
    return shlex.split(line)


def test_the_readme_table_is_what_its_command_writes(tmp_path, monkeypatch):
    """docs/sweep_hbm.csv (and the README's excerpt) are current. When the model changes on
    purpose, regenerate them from the repository root: delete docs/sweep_hbm.csv, run the
    README's sweep command with --out docs/sweep_hbm.csv and its plot command with --out
    docs/sweep_hbm.png, and update the README's excerpt."""
    from click.testing import CliRunner

    from trnsim.cli import main

    (tmp_path / "traces").symlink_to(ROOT / "traces", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    words = readme_command("sweep")
    result = CliRunner().invoke(main, words[1:])
    assert result.exit_code == 0, result.output
    out = words[words.index("--out") + 1]
    fresh = list(csv.DictReader(open(out, encoding="utf-8")))
    docs = list(csv.DictReader(open(ROOT / "docs" / "sweep_hbm.csv", encoding="utf-8")))
    skip = ("trnsim_version", "trace_hash")  # a release or a comment in the trace changes them
    assert [{k: v for k, v in r.items() if k not in skip} for r in docs] == [
        {k: v for k, v in r.items() if k not in skip} for r in fresh
    ]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for r in fresh:  # the excerpt's rows
        if r["hbm.bandwidth"] in ("0.5TB/s", "2TB/s"):
            assert (
                f"| {r['chip']} | {r['hbm.bandwidth']} | {r['device_time_ns']} | "
                f"{r['hbm_bandwidth_bytes_per_s']} | {r['tensor_util_max']} | "
                f"{r['peak_fraction']} | |"
            ) in readme
    assert readme_command("plot")[2] == "docs/sweep_hbm.csv"
    assert (ROOT / "docs" / "sweep_hbm.png").stat().st_size < 100_000
