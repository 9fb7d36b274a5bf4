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
        r"^error: t\.yaml:3: lnc: 2 is not supported on trn1; expected one of 1$",
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
        r"^error: t\.yaml:4: tensors\.x: cannot allocate x: 372\.5 GiB requested",
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
    "ops: valid, but not supported yet": (
        OPS,
        [],
        2,
        r"^error: t\.yaml:7: kernel mlp: high-level ops \(gelu, matmul\) are not yet supported",
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
    assert json.loads(res.stdout)["check"] == {}
    assert one_line(res.stderr).startswith("note: --check has nothing to compare")


def test_the_trace_format_ships_in_docs_and_is_linked():
    root = Path(__file__).parents[2]
    readme = (root / "README.md").read_text()
    assert "(docs/trace_format.md)" in readme and "../shared" not in readme
    assert "## High-level kernels" in (root / "docs" / "trace_format.md").read_text()
    res = CliRunner().invoke(main, ["run", "--help"])
    assert "docs/trace_format.md" in res.output
