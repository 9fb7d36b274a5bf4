"""Help and what the CLI prints: bare `trnsim` is the help, the command lists show whole
summaries, `run --help` names the default chip and the format doc, and every printed message
has its control characters escaped."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from trnsim.cli import main
from trnsim.cli.app import clean
from trnsim.trace.program import Program


def invoke(*args):
    return CliRunner().invoke(main, list(args), terminal_width=80)


def test_bare_trnsim_prints_the_help_and_succeeds():
    bare, helped = invoke(), invoke("--help")
    assert (bare.exit_code, helped.exit_code) == (0, 0)
    assert bare.stdout == helped.stdout
    assert "Commands:" in bare.stdout


def _command_lines(help_text: str) -> list[str]:
    return help_text.split("Commands:\n", 1)[1].splitlines()


@pytest.mark.parametrize("group", [main, main.commands["configs"]])
def test_the_command_lists_show_whole_one_line_summaries(group):
    prefix = [] if group is main else ["configs"]
    lines = _command_lines(invoke(*prefix, "--help").stdout)
    assert len(lines) == len(group.commands)  # one line each: none wraps
    for line, (name, cmd) in zip(lines, sorted(group.commands.items()), strict=True):
        assert line.split() == [name, *cmd.short_help.split()]
        assert not line.endswith("...") and len(line) <= 80


def test_run_help_names_the_default_chip_and_the_trace_format():
    text = " ".join(invoke("run", "--help").stdout.split())
    assert f"Default: the trace's `chip:`, or {Program.chip} for a trace without one." in text
    assert Program.chip == "trn2"
    assert "docs/trace_format.md" in text


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("plain text, 'quoted' and \\ kept", "plain text, 'quoted' and \\ kept"),
        ("x\x1b[31my", "x\\x1b[31my"),
        ("a\u202eb\u2066c\u200fd", "a\\u202eb\\u2066c\\u200fd"),
        ("tab\tcr\rbell\x07", "tab\\tcr\\rbell\\x07"),
        ("two\nlines", "two\nlines"),
        ("µs, 2×, ü", "µs, 2×, ü"),
    ],
)
def test_clean_escapes_control_and_bidi_characters(raw, shown):
    assert clean(raw) == shown


def test_an_error_keeps_one_line_and_escapes_what_split_would_take_for_spaces(tmp_path):
    (tmp_path / "t.yaml").write_text(
        'trnsim: 1\ntensors:\n  "a\\x1fb\\tc": {shape: [2], dtype: f32}\n'
    )
    r = invoke("run", str(tmp_path / "t.yaml"))
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "tensors.a\\x1fb\\tc:" in r.stderr, r.stderr


def test_a_usage_error_quoting_a_value_escapes_it():
    r = invoke("run", "t.yaml", "--mode", "x\x1b[31m")
    assert r.exit_code == 2
    assert "'x\\x1b[31m' is not one of" in r.stderr and "\x1b" not in r.stderr
