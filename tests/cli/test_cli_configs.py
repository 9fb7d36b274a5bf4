"""The `trnsim configs` commands through click's CliRunner, and the repo-root cli.py shim."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from trnsim import __version__
from trnsim.cli import main


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_version():
    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout == f"trnsim, version {__version__}\n"


def test_configs_list():
    result = run("configs", "list")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert [line.split()[:4] for line in lines] == [
        ["trn1", "2", "x", "NC-v2"],
        ["trn2", "8", "x", "NC-v3"],
        ["trn3", "8", "x", "NC-v4"],
    ]
    assert "Trainium2" in lines[1]


def test_configs_show_readable():
    result = run("configs", "show", "trn2")
    assert result.exit_code == 0
    out = result.stdout
    assert out.startswith("trn2: Trainium2")
    for text in (
        "core.sbuf",
        "224 KiB",
        "2.4 GHz",
        "960 MHz",
        "2.9 TB/s",
        "615 ns",
        "23 GB/s",
        "64 cycles",
        "derived",
    ):
        assert text in out
    bf16 = next(
        line
        for line in out.splitlines()
        if line.split()[:1] == ["bfloat16"] and "TFLOP/s" in line and line.count("TFLOP/s") == 3
    )
    assert bf16.split() == [
        "bfloat16",
        "78.64",
        "TFLOP/s",
        "629.1",
        "TFLOP/s",
        "667",
        "TFLOP/s",
        "+6.0%",
    ]


def test_configs_show_json():
    result = run("configs", "show", "trn2", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["name"] == "trn2"
    assert data["core"]["sbuf"]["partition_bytes"] == 229376
    assert data["derived"]["peak_flops"]["core"]["bfloat16"] == 78.6432e12
    assert data["derived"]["peak_flops"]["chip"]["float8"] == 16 * 78.6432e12
    assert data["derived"]["peak_flops"]["published"]["bfloat16"] == 667e12


def test_configs_show_set():
    result = run(
        "configs",
        "show",
        "trn2",
        "--json",
        "--set",
        "core.sbuf.partition_bytes=448KiB",
        "--set",
        "hbm.bandwidth=4TB/s",
    )
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["core"]["sbuf"]["partition_bytes"] == 448 * 1024
    assert data["derived"]["sbuf_bytes"]["chip"] == 8 * 128 * 448 * 1024
    assert data["hbm"]["bandwidth"] == 4e12


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "core.sbuf.partition_bytes=448Kb"],
            "error: --set core.sbuf.partition_bytes=448Kb: core.sbuf.partition_bytes: expected a size "
            "like '224KiB' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got '448Kb'\n",
        ),
        (
            ["--set", "nonsense"],
            "error: --set nonsense: expected key.path=value, e.g. core.sbuf.partition_bytes=448KiB\n",
        ),
    ],
)
def test_bad_set_is_one_line_exit_2(args, message):
    result = run("configs", "show", "trn2", *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == message
    assert "Traceback" not in result.output


def test_unknown_chip_exit_2():
    result = run("configs", "show", "trn7")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: unknown chip 'trn7'")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("command", [[], ["configs"], ["configs", "list"], ["configs", "show"]])
def test_help_has_an_example(command):
    result = run(*command, "--help")
    assert result.exit_code == 0
    assert "Example" in result.stdout


def test_repo_root_shim():
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "cli.py", "configs", "list"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.splitlines()[0].startswith("trn1")
