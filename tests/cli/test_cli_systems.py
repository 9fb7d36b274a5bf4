"""The `trnsim systems` commands through click's CliRunner: list, show, --json, --set, and the
one-line errors (exit 2)."""

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from trnsim.cli import main
from trnsim.config import list_systems


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_systems_list():
    result = run("systems", "list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list_systems()
    by_name = {line.split()[0]: line for line in lines}
    assert by_name["trn2-48xl"].split()[1:6] == ["16", "x", "trn2", "torus", "4x4"]
    assert "64 ranks at lnc 2" in by_name["trn2-48xl"]
    assert "torus 4x4x4" in by_name["trn2-ultraserver"]
    assert "4 nodes (EFA)" in by_name["trn2-48xl-x4"] and "256 ranks" in by_name["trn2-48xl-x4"]
    assert "switch 16/64 " in by_name["trn3-ultraserver"]
    assert "32 ranks at lnc 1" in by_name["trn1-32xl"]
    assert "trn2.48xlarge: 16 Trainium2 chips" in by_name["trn2-48xl"]


def test_systems_show_readable():
    result = run("systems", "show", "trn2-ultraserver")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith("trn2-ultraserver: Trn2 UltraServer")
    for text in (
        "topology.link",
        "topology.z_link",
        "256 GB/s",
        "128 GB/s",
        "1.5 us",
        "15 us",
        "1 MB",
        "56 MB",
        "chip.cc",
        "64 KiB",
        "derived",
    ):
        assert text in out, text
    derived = out.split("\nderived\n")[1]
    assert "64 (1 x 64 per node), 256 ranks (4 per chip of 4 logical cores at lnc 2)" in derived
    assert "1.28 TB/s per chip per direction (4 X/Y x 256 GB/s + 2 Z x 128 GB/s)" in derived
    assert "4.096 TB/s per direction across one node" in derived
    assert "25 GB/s per chip, 6.25 GB/s per rank, 1.6 TB/s per node" in derived


def test_systems_show_switch():
    out = run("systems", "show", "trn3-ultraserver").stdout
    assert "topology.levels.server" in out and "topology.levels.rack" in out
    assert "topology.link" not in out
    assert "server 256 GB/s + rack 320 GB/s" in out


def test_systems_show_json():
    result = run("systems", "show", "trn2-48xl", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["name"], data["chips"], data["ranks"], data["nodes"]) == ("trn2-48xl", 16, 64, 1)
    assert data["topology"] == {
        "kind": "torus",
        "dims": [4, 4],
        "link": {"bandwidth": 256e9, "latency": 1.5e-6},
    }
    assert data["chip"]["name"] == "trn2" and data["chip"]["cc"]["reduce_rate"] == 0.5
    assert data["derived"]["bisection_bandwidth"]["node"] == 2048e9
    assert data["derived"]["efa"]["rank"] == 6.25e9
    levels = json.loads(run("systems", "show", "trn3-ultraserver", "--json").stdout)
    assert levels["topology"]["levels"]["rack"]["bandwidth"] == 320e9


def test_systems_show_set():
    result = run(
        "systems",
        "show",
        "trn2-48xl",
        "--json",
        "--set",
        "nodes=4",
        "--set",
        "lnc=1",
        "--set",
        "chip.hbm.bandwidth=4TB/s",
        "--set",
        "topology.link.bandwidth=128GB/s",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["chips"], data["ranks"], data["lnc"]) == (64, 512, 1)
    assert data["chip"]["hbm"]["bandwidth"] == 4e12 and data["chip"]["lnc"] == 1
    assert data["topology"]["link"]["bandwidth"] == 128e9
    assert data["derived"]["bisection_bandwidth"]["system"] == 2 * 16 * 25e9
    result = run("systems", "show", "trn3-ultraserver", "--set", "topology.levels.rack.chips=32")
    assert result.exit_code == 0, result.output
    assert "switch" in result.stdout and "32 (1 x 32 per node)" in result.stdout


def test_systems_show_a_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("base: trn2-48xl\nname: mine\ndescription: two instances\nnodes: 2\n")
    result = run("systems", "show", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("mine: two instances")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["trn2-48xl", "--set", "topology.link.bandwidth=300Gb/s"],
            "error: --set topology.link.bandwidth=300Gb/s: topology.link.bandwidth: expected a "
            "bandwidth like '2.9TB/s' (B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s, TiB/s, "
            "B/ns), got '300Gb/s'\n",
        ),
        (
            ["trn2-48xl", "--set", "nonsense"],
            "error: --set nonsense: expected key.path=value, e.g. topology.link.bandwidth=200GB/s\n",
        ),
        (
            ["trn2-48xl", "--set", "nodes=0"],
            "error: --set nodes=0: nodes: must be greater than 0, got 0\n",
        ),
        (
            ["trn2-48xl", "--set", "topology.lnk.bandwidth=1GB/s"],
            "error: --set topology.lnk.bandwidth=1GB/s: unknown key 'topology.lnk.bandwidth'; "
            "did you mean 'topology.link.bandwidth'?\n",
        ),
        (
            ["trn2-48xl", "--set", "ranks_per_chip=3"],
            "error: --set ranks_per_chip=3: ranks_per_chip: ranks_per_chip (3) must divide the "
            "chip's logical cores (4 = chip.cores 8 / lnc 2)\n",
        ),
        (
            ["trn2-48xl", "--set", "chip=trn7"],
            "error: --set chip=trn7: unknown chip 'trn7'; did you mean 'trn3'? available: trn1, "
            "trn2, trn3 (or a path to a YAML file)\n",
        ),
        (
            ["trn2-48xm"],
            "error: unknown system 'trn2-48xm'; did you mean 'trn2-48xl'? available: "
            f"{', '.join(list_systems())} (or a path to a YAML file)\n",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message):
    result = run("systems", "show", *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == message
    assert "Traceback" not in result.output


def test_a_bad_file_names_its_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("base: trn2-48xl\ntopology:\n  link:\n    bandwidth: 300GB/s\n")
    result = run("systems", "show", str(path))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {path}:4: topology.link.bandwidth: 4 X and Y links")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("command", [["systems"], ["systems", "list"], ["systems", "show"]])
def test_help_has_an_example(command):
    result = run(*command, "--help")
    assert result.exit_code == 0
    assert "Example" in result.stdout
    assert "systems" in run("--help").stdout


# ---------------------------------------------------------------------------------------------
# docs/systems.md: its examples run, its table lists the bundled systems

DOC = (Path(__file__).resolve().parents[2] / "docs" / "systems.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


def test_the_docs_commands_run():
    commands = [
        shlex.split(line)
        for tag, body in FENCE.findall(DOC)
        if tag == "sh"
        for line in body.splitlines()
        if line.startswith("trnsim ")
    ]
    assert len(commands) >= 3
    for words in commands:
        result = run(*words[1:])
        assert result.exit_code == 0, (words, result.output)


def test_the_docs_python_example_prints_what_it_says():
    (code,) = [body for tag, body in FENCE.findall(DOC) if tag == "python"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/systems.md", "exec"), {})
    said = code.strip().splitlines()[-1].split("#")[1].strip()
    assert out.getvalue().strip() == said


def test_the_docs_table_lists_the_bundled_systems():
    table = DOC.split("## Bundled systems")[1].split("\n## ")[0]
    assert re.findall(r"^\| `([\w-]+)` \|", table, re.M) == list_systems()
