"""Bad inputs of issue 9's "files, pipes and paths" and "bombs and limits" sections, one row each,
run as a user would, in a fresh `trnsim` process: the exit code, exactly one line on stderr (no
traceback, no internal error), the file:line where the input has a line, and no file written
beside the inputs. The bombs run under a 1.5 GB address-space limit (RLIMIT_AS), so a regression
fails by memory, not by a timer; each is refused in well under a second."""

from __future__ import annotations

import csv
import io
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

from trnsim.cli import main

ROOT = Path(__file__).resolve().parents[2]
MEMORY_LIMIT = 1_500_000_000  # bytes of address space for the bomb rows

TILE = "a: {memory: sbuf, shape: [128, 64], dtype: float32}"
BASIC = f"tiles:\n  {TILE}\ninstructions:\n  - {{op: memset, dst: a}}\n"


def tensor(init: str, dtype: str = "float32", shape: str = "[2, 3]") -> str:
    """A trace whose tensor x (line 3) takes `init`."""
    return f"trnsim: 1\ntensors:\n  x: {{shape: {shape}, dtype: {dtype}, init: {init}}}\n" + BASIC


def laughs(levels: int = 9) -> str:
    """A "billion laughs" list: level k holds 9 aliases of level k - 1 (9**9 items)."""
    out = ["&l0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    out += [f"&l{k} [{', '.join([f'*l{k - 1}'] * 9)}]" for k in range(1, levels)]
    return "[" + ", ".join(out) + "]"


def nested_repeats(levels: int = 4) -> str:
    """Repeat blocks whose bodies alias the block before (block k: 10**(2k+1) instructions),
    lines 5 to 8."""
    lines = [f"trnsim: 1\ntiles:\n  {TILE}\ninstructions:"]
    lines.append("  - &r0 {repeat: 10, instructions: [{op: memset, dst: a}]}")
    for k in range(1, levels):
        body = ", ".join([f"*r{k - 1}"] * 10)
        lines.append(f"  - &r{k} {{repeat: 10, instructions: [{body}]}}")
    return "\n".join(lines) + "\n"


def three_kernels(count: int = 2_000_000) -> str:
    kernel = (
        f"    tiles: {{{TILE}}}\n"
        f"    instructions: [{{repeat: {count}, instructions: [{{op: memset, dst: a}}]}}]\n"
    )
    return "trnsim: 1\nkernels:\n" + "".join(f"  k{i}:\n{kernel}" for i in range(3))


def loop(expression: str) -> str:
    """A repeat block with `as: k` whose memset's dst holds `{expression}` (line 7)."""
    return (
        f"trnsim: 1\ntiles:\n  {TILE}\ninstructions:\n  - repeat: 2\n    as: k\n"
        f'    instructions: [{{op: memset, dst: "a[{{{expression}}}:1, :]"}}]\n'
    )


def write_files(folder: Path) -> None:
    """The files the rows name: .npy files inside and outside the trace's folder `folder`, a
    symlink leaving it, configs that are not configs."""
    outside = folder.parent
    np.save(outside / "x.npy", np.zeros((2, 3), np.float32))
    np.save(folder / "x.npy", np.zeros((2, 3), np.float32))
    (folder / "link.npy").symlink_to(outside / "x.npy")
    np.save(folder / "bf16.npy", np.arange(6, dtype=ml_dtypes.bfloat16).reshape(2, 3))
    np.save(folder / "fp8.npy", np.arange(6, dtype=ml_dtypes.float8_e4m3).reshape(2, 3))
    np.save(folder / "e5m2.npy", np.arange(6, dtype=ml_dtypes.float8_e5m2).reshape(2, 3))  # <f1
    (folder / "text.npy").write_text("1 2 3\n4 5 6\n")
    np.save(folder / "nan.npy", np.array([[1, 2, np.nan], [4, 5, 6]], np.float32))
    np.save(folder / "big.npy", np.array([[1, 2, 3], [4, 5, 300]], np.int64))
    (folder / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\nsecret:x:1:1::/:/bin/sh\n")
    (folder / "binary.yaml").write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00secret")
    (folder / "list.yaml").write_text("- secret\n- 2\n")
    (folder / "based.yaml").write_text("base: list.yaml\n")


NOT_A_CONFIG = r"not a chip config \(expected a YAML mapping of config keys\)$"
OUTSIDE = r"is outside the trace's folder .*; expected a \.npy file inside the trace's folder"
LIMIT = (
    r"; expected at most 5000000 instructions from its low-level kernels and repeat: blocks "
    r"\(raise the limit with --max-instructions N\)$"
)

ROWS = {
    # name: (trace text, extra args, exit code, regex the one line of stderr must match)
    "init file in the parent folder": (
        tensor("{file: ../x.npy}"),
        [],
        2,
        rf"^error: t\.yaml:3: tensors\.x\.init\.file: '\.\./x\.npy' {OUTSIDE}",
    ),
    "init file by an absolute path elsewhere": (
        tensor("{file: ABS/x.npy}"),
        [],
        2,
        rf"^error: t\.yaml:3: tensors\.x\.init\.file: '/.*/x\.npy' {OUTSIDE}",
    ),
    "init file through a symlink leaving the folder": (
        tensor("{file: link.npy}"),
        [],
        2,
        rf"^error: t\.yaml:3: tensors\.x\.init\.file: 'link\.npy' {OUTSIDE}",
    ),
    "init file outside, allowed": (tensor("{file: ../x.npy}"), ["--allow-outside-files"], 0, ""),
    "bf16 array saved with ml_dtypes (|V2)": (tensor("{file: bf16.npy}", "bfloat16"), [], 0, ""),
    "fp8 array saved with ml_dtypes (|V1)": (tensor("{file: fp8.npy}", "fp8"), [], 0, ""),
    "bf16 array into a float32 tensor": (
        tensor("{file: bf16.npy}"),
        [],
        2,
        r"^error: t\.yaml:3: tensors\.x\.init\.file: '.*bf16\.npy': holds raw 2-byte records "
        r"\(how numpy saves ml_dtypes bfloat16\), which cannot be read as float32; expected "
        r"the tensor declared bfloat16, or a file of numbers$",
    ),
    "a text file as .npy": (
        tensor("{file: text.npy}"),
        [],
        2,
        r"^error: t\.yaml:3: tensors\.x\.init\.file: '.*text\.npy': not a \.npy file \(it does "
        r"not start with numpy's header: a text file\?\); expected a \.npy file saved by "
        r"numpy\.save$",
    ),
    "NaN into an integer tensor": (
        tensor("{file: nan.npy}", "int32"),
        [],
        2,
        r"^error: t\.yaml:3: .*nan\.npy': holds nan at element 2, which int32 cannot hold; "
        r"expected finite values for an integer tensor$",
    ),
    "a value out of an integer tensor's range": (
        tensor("{file: big.npy}", "int8"),
        [],
        2,
        r"^error: t\.yaml:3: .*big\.npy': holds 300 at element 5, outside int8's range; "
        r"expected values from -128 to 127$",
    ),
    "chip: naming a file that is no config": (
        "trnsim: 1\nchip: ./passwd\n" + BASIC,
        [],
        2,
        rf"^error: t\.yaml:2: chip: .*passwd: {NOT_A_CONFIG}",
    ),
    "--chip naming a binary file": (
        "trnsim: 1\n" + BASIC,
        ["--chip", "binary.yaml"],
        2,
        r"^error: binary\.yaml: not a chip config \(not UTF-8 text; expected a YAML mapping",
    ),
    "--chip naming a YAML list": (
        "trnsim: 1\n" + BASIC,
        ["--chip", "list.yaml"],
        2,
        rf"^error: list\.yaml: {NOT_A_CONFIG}",
    ),
    "a config whose base: is a YAML list": (
        "trnsim: 1\n" + BASIC,
        ["--chip", "based.yaml"],
        2,
        rf"^error: based\.yaml:1: base: list\.yaml: {NOT_A_CONFIG}",
    ),
    "--set a bandwidth beyond the float range": (
        "trnsim: 1\n" + BASIC,
        ["--set", "hbm.bandwidth=1e400TB/s"],
        2,
        r"^error: --set hbm\.bandwidth=1e400TB/s: hbm\.bandwidth: expected a bandwidth within "
        r"the float range",
    ),
    "--set a time beyond 2**53 ps": (
        "trnsim: 1\n" + BASIC,
        ["--set", "host_link.launch_overhead=1e30s"],
        2,
        r"^error: --set host_link\.launch_overhead=1e30s: host_link\.launch_overhead: expected "
        r"a time of at most 9007s",
    ),
    "{2**k} in a loop": (
        loop("2**k"),
        [],
        2,
        r"^error: t\.yaml:7: instructions\[0\]\.instructions\[0\]\.dst: cannot evaluate \*\* in "
        r"\{2\*\*k\}; expected an integer expression of k with \+, -, \*, //, % and parentheses",
    ),
    "a 2,000-term product in a loop": (
        loop("*".join(["k"] * 2000)),
        [],
        2,
        r"^error: t\.yaml:7: instructions\[0\]\.instructions\[0\]\.dst: \{k\*k.*\.\.\.\} is too "
        r"long \(3999 characters, at most 1000\); expected",
    ),
    # bombs: refused while reading or before expanding, under MEMORY_LIMIT
    "alias bomb in signal:": (
        f"trnsim: 1\ntiles:\n  {TILE}\ninstructions:\n  - op: memset\n    dst: a\n"
        f"    signal: {laughs()}\n",
        [],
        2,
        r"^error: t\.yaml:7: syntax: aliases expand the document by more than 10000000 nodes",
    ),
    "alias bomb in value:": (
        f"trnsim: 1\ntiles:\n  {TILE}\ninstructions:\n  - {{op: memset, dst: a, value: "
        f"{laughs()}}}\n",
        [],
        2,
        r"^error: t\.yaml:5: syntax: aliases expand the document by more than 10000000 nodes",
    ),
    "aliased nested repeat bodies": (
        nested_repeats(),
        [],
        2,
        r"^error: t\.yaml:8: instructions\[3\]\.repeat: repeat: 10 of a body of 1000000 "
        rf"instructions brings the trace to 10101010 instructions{LIMIT}",
    ),
    "three kernels of repeat: 2000000": (
        three_kernels(),
        [],
        2,
        r"^error: t\.yaml:11: kernels\.k2\.instructions\[0\]\.repeat: repeat: 2000000 of a body "
        rf"of 1 instructions brings the trace to 6000000 instructions{LIMIT}",
    ),
}
BOMBS = {"alias bomb in signal:", "alias bomb in value:"} | {
    "aliased nested repeat bodies",
    "three kernels of repeat: 2000000",
}


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def trnsim(args: list[str], cwd: Path, bomb: bool) -> subprocess.CompletedProcess:
    """`trnsim ARGS` in a fresh process (the bombs under MEMORY_LIMIT)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", "from trnsim.cli import entry; entry()", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_memory if bomb else None,
    )


@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize("row", list(ROWS))
def test_bad_input(row, command, tmp_path):
    text, args, code, pattern = ROWS[row]
    folder = tmp_path / "trace"
    folder.mkdir()
    write_files(folder)
    (folder / "t.yaml").write_text(text.replace("ABS/", f"{tmp_path}/"))
    before = sorted(tmp_path.rglob("*"))
    res = trnsim([command, "t.yaml", *args], folder, row in BOMBS)
    assert sorted(tmp_path.rglob("*")) == before  # nothing written beside the inputs
    assert res.returncode == code, res.stderr
    if code == 0:
        assert res.stderr == ""
        return
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert "secret" not in lines[0]  # a file that is no config is never echoed


def test_bf16_and_fp8_files_load_their_values(tmp_path):
    """The |V2 and |V1 records of ml_dtypes arrays (and float8_e5m2's `<f1`, which numpy writes
    but cannot read) are read as the declared types: the saved outputs (as float32) hold the
    files' values."""
    write_files(tmp_path)
    text = (
        "trnsim: 1\ntensors:\n"
        "  b: {shape: [2, 3], dtype: bfloat16, init: {file: bf16.npy}}\n"
        "  f: {shape: [2, 3], dtype: fp8, init: {file: fp8.npy}}\n"
        "  e: {shape: [2, 3], dtype: float8_e5m2, init: {file: e5m2.npy}}\n" + BASIC
    )
    (tmp_path / "t.yaml").write_text(text)
    res = trnsim(["run", "t.yaml", "--out-dir", "out", "-q"], tmp_path, False)
    assert res.returncode == 0, res.stderr
    want = np.arange(6, dtype=np.float32).reshape(2, 3)
    for name in ("b", "f", "e"):
        np.testing.assert_array_equal(np.load(tmp_path / "out" / f"{name}.npy"), want)


def test_compare_and_sweep_take_the_files_options(tmp_path, monkeypatch):
    """`compare` and `sweep` load traces as `run` does: files outside the folder only with
    --allow-outside-files (the sweep carries the option, and the file, to its workers), and
    --max-instructions limits the trace (a sweep row's error)."""
    folder = tmp_path / "trace"
    folder.mkdir()
    write_files(folder)
    two = tensor("{file: ../x.npy}") + "  - {op: memset, dst: a}\n"  # instructions on lines 7, 8
    (folder / "t.yaml").write_text(two)
    monkeypatch.chdir(folder)
    res = CliRunner().invoke(main, ["compare", "t.yaml", "--chip", "trn2"])
    assert res.exit_code == 2
    assert re.search(rf"^error: t\.yaml:3: .*'\.\./x\.npy' {OUTSIDE}", res.stderr)
    res = CliRunner().invoke(main, ["compare", "t.yaml", "--chip", "trn2", "--allow-outside-files"])
    assert res.exit_code == 0 and "total time" in res.stdout
    errors = []
    for extra in ([], ["--allow-outside-files"], ["--allow-outside-files", "--max-instructions=1"]):
        res = CliRunner().invoke(main, ["sweep", "t.yaml", "--chip", "trn2", "-q", *extra])
        (row,) = csv.DictReader(io.StringIO(res.stdout))
        errors.append(row["error"])
    assert re.search(rf"^t\.yaml:3: .*{OUTSIDE}", errors[0])
    assert errors[1] == ""
    assert errors[2] == (
        "t.yaml:8: instructions[1]: this instruction brings the trace to 2 instructions; "
        "expected at most 1 instructions from its low-level kernels and repeat: blocks (raise "
        "the limit with --max-instructions N)"
    )
