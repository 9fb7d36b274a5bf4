"""Outputs, pipes, help and messages of issue 9's "files, pipes and paths" and "help" inputs, one
row each, run as a user runs them (`python cli.py ...` in a folder of their own): the exit code,
stderr exactly one line (none for a closed pipe or help) naming the option or file, no traceback
and no internal error, and nothing written in the folder but the outputs named (every file's
bytes compared before and after: a refused `--perfetto trace.yaml` leaves the trace as it was).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = str(ROOT / "cli.py")
GEMM = (ROOT / "traces" / "gemm_double_buffered.yaml").read_text()

# a tensor initialised from y.npy and saved by --out-dir as y.npy
INIT_FILE_TRACE = """trnsim: 1
tensors:
  y: {shape: [128, 64], dtype: float32, init: {file: y.npy}}
tiles:
  a: {memory: sbuf, shape: [128, 64], dtype: float32}
instructions:
  - {op: dma_copy, src: y, dst: a, queue: 0, signal: {s: 1}}
  - {op: dma_copy, src: a, dst: y, queue: 1, wait: {s: 1}}
"""

ESC_NAME = "x\x1b[31m\u202ey"  # an ANSI colour and a right-to-left override in a name
ESC_TRACE = f"""trnsim: 1
tensors:
  "{ESC_NAME.encode("unicode_escape").decode()}": {{shape: [128, 64], dtype: float32}}
"""


def _unwritable_folder() -> str | None:
    """A folder in which this process cannot create a file (root ignores permission bits, so
    /sys, where even root cannot), or None."""
    for folder in ("/sys",):
        try:
            fd, name = tempfile.mkstemp(dir=folder)
        except OSError:
            return folder
        os.close(fd)
        os.unlink(name)
    return None


READ_ONLY = _unwritable_folder()


@dataclass
class Row:
    args: list[str]
    code: int = 2
    says: list[str] = field(default_factory=list)  # in the one stderr line
    lines: int = 1  # stderr lines
    stdout_closed: bool = False  # the reader of stdout is gone before the command writes
    python: list[str] = field(default_factory=list)  # interpreter flags
    needs: str | None = None  # a reason to skip, when the row cannot be set up here


ROWS = {
    # -- a closed pipe ends the command quietly, exit 141 as after SIGPIPE
    "configs show | head -1": Row(["configs", "show", "trn3"], 141, lines=0, stdout_closed=True),
    "run --json | head -1": Row(["run", "t.yaml", "--json"], 141, lines=0, stdout_closed=True),
    "--help | head -1": Row(["--help"], 141, lines=0, stdout_closed=True),
    "run --help | head -1": Row(["run", "--help"], 141, lines=0, stdout_closed=True),
    "bare trnsim | head -1": Row([], 141, lines=0, stdout_closed=True),
    # -- output paths, checked before simulating
    "--out-dir an existing file": Row(["run", "t.yaml", "--out-dir", "afile"], says=["--out-dir afile: is a file"]),
    "--out-dir a missing parent": Row(["run", "t.yaml", "--out-dir", "nodir/out"], says=["--out-dir nodir/out: folder nodir does not exist"]),
    "--out-dir a read-only place": Row(
        ["run", "t.yaml", "--out-dir", f"{READ_ONLY}/out"],
        says=[f"--out-dir {READ_ONLY}/out: cannot write in {READ_ONLY}"],
        needs=None if READ_ONLY else "no unwritable folder on this machine",
    ),
    "--out-dir over an init file": Row(["run", "init.yaml", "--out-dir", "."], says=["--out-dir y.npy: is an input of this run"]),
    "--perfetto a folder": Row(["run", "t.yaml", "--perfetto", "sub"], says=["--perfetto sub: is a folder"]),
    "--perfetto in a missing folder": Row(["run", "t.yaml", "--perfetto", "nodir/t.json"], says=["--perfetto nodir/t.json: folder nodir does not exist"]),
    "--perfetto the input trace": Row(["run", "t.yaml", "--perfetto", "t.yaml"], says=["--perfetto t.yaml: is an input of this run"]),
    "--perfetto an init file": Row(["run", "init.yaml", "--perfetto", "y.npy"], says=["--perfetto y.npy: is an input of this run"]),
    "--perfetto the chip config": Row(["run", "t.yaml", "--chip", "chip.yaml", "--perfetto", "chip.yaml"], says=["--perfetto chip.yaml: is an input of this run"]),
    "--profile in a missing folder": Row(["run", "t.yaml", "--profile", "nodir/p.csv"], says=["--profile nodir/p.csv: folder nodir does not exist"]),
    "--profile an unknown format": Row(["run", "t.yaml", "--profile", "p.txt"], says=["--profile p.txt: unknown profile format '.txt'"]),
    "--profile the input trace": Row(["run", "t.yaml", "--profile", "t.yaml"], says=["--profile t.yaml: unknown profile format"]),
    "--perfetto and --profile the same file": Row(
        ["run", "t.yaml", "--perfetto", "p.csv", "--profile", "p.csv"],
        says=["--profile p.csv: --perfetto names the same file"],
    ),
    "sweep --out a folder": Row(["sweep", "t.yaml", "--out", "sub"], says=["--out sub: is a folder"]),
    "sweep --out in a missing folder": Row(["sweep", "t.yaml", "--out", "nodir/s.csv"], says=["--out nodir/s.csv: folder nodir does not exist"]),
    "sweep --out the input trace": Row(["sweep", "t.yaml", "--out", "t.yaml"], says=["--out t.yaml: is an input of this run"]),
    "plot --out a folder": Row(["plot", "s.csv", "--x", "chip", "--y", "flops", "--out", "sub"], says=["--out sub: is a folder"]),
    "plot --out in a missing folder": Row(["plot", "s.csv", "--x", "chip", "--y", "flops", "--out", "nodir/p.png"], says=["--out nodir/p.png: folder nodir does not exist"]),
    "plot --out the table": Row(["plot", "s.csv", "--x", "chip", "--y", "flops", "--out", "s.csv"], says=["--out s.csv: is an input of this run"]),
    # -- names with control characters are shown escaped
    "a tensor name with ESC and U+202E": Row(["run", "esc.yaml"], says=["tensors.x\\x1b[31m\\u202ey:", "'x\\x1b[31m\\u202ey'"]),
    "a trace path with ESC and U+202E": Row(["run", "no\x1b[31m\u202e.yaml"], says=["no\\x1b[31m\\u202e.yaml"]),
    # -- help
    "bare trnsim": Row([], 0, lines=0),
    "cli.py without its dependencies": Row(
        ["configs", "list"], says=["trnsim needs its dependencies", "pip install ."], python=["-S"]
    ),
}  # fmt: skip


def _lay_out(folder: Path) -> None:
    """The user's folder: traces, an init file, a config, a sweep table, a file and a folder."""
    (folder / "t.yaml").write_text(GEMM)
    (folder / "init.yaml").write_text(INIT_FILE_TRACE)
    np.save(folder / "y.npy", np.arange(128 * 64, dtype=np.float32).reshape(128, 64))
    (folder / "esc.yaml").write_text(ESC_TRACE)
    (folder / "chip.yaml").write_text("base: trn2\n")
    (folder / "s.csv").write_text("trace,chip,flops,error\nt.yaml,trn2,1,\n")
    (folder / "afile").write_text("not a folder\n")
    (folder / "sub").mkdir()


def _listing(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder` (hidden ones too) with a hash of its bytes."""
    return {
        str(p.relative_to(folder)): "dir"
        if p.is_dir()
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
    }


def _run(row: Row, cwd: Path) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if not row.python:
        env["PYTHONPATH"] = str(ROOT)  # this checkout, not an installed trnsim
    cmd = [sys.executable, *row.python, CLI, *row.args]
    if not row.stdout_closed:
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        return r.returncode, r.stdout, r.stderr
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # before the child has even imported trnsim: its first write fails
    err = p.stderr.read().decode()
    return p.wait(timeout=120), "", err


@pytest.mark.parametrize("name", list(ROWS))
def test_bad_output(name, tmp_path):
    row = ROWS[name]
    if row.needs:
        pytest.skip(row.needs)
    _lay_out(tmp_path)
    before = _listing(tmp_path)
    code, out, err = _run(row, tmp_path)
    assert code == row.code, (code, out, err)
    assert "Traceback" not in err and "internal error" not in err, err
    assert err.count("\n") == row.lines and (not row.lines or err.endswith("\n")), err
    for text in row.says:
        assert text in err, err
    assert not any(c in err for c in "\x1b\u202e"), err  # never raw to the terminal
    if row.code:
        assert out == ""
    assert _listing(tmp_path) == before  # nothing written, nothing destroyed


def test_bare_trnsim_prints_the_help(tmp_path):
    code, out, _ = _run(Row([]), tmp_path)
    assert code == 0
    assert out.startswith("Usage: trnsim [OPTIONS] [COMMAND] [ARGS]...")
    assert "Commands:" in out and "docs/trace_format.md" in out


def test_the_outputs_named_are_written_and_nothing_else(tmp_path):
    """The row table's counterpart: good outputs are written, with no temporary file left."""
    _lay_out(tmp_path)
    before = _listing(tmp_path)
    args = ["run", "t.yaml", "-q", "--perfetto", "sub/t.json", "--profile", "p.csv"]
    code, out, err = _run(Row([*args, "--out-dir", "out"]), tmp_path)
    assert (code, out, err) == (0, "", "")
    after = _listing(tmp_path)
    assert {k: v for k, v in after.items() if k in before} == before
    assert sorted(set(after) - set(before)) == ["out", "out/y.npy", "p.csv", "sub/t.json"]
