"""Bombs refused before any work: each runs `trnsim` in a child process whose address space is
capped (RLIMIT_AS), so that a regression fails the test (a MemoryError, a kill) instead of
exhausting the CI machine."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from tests.e2e.fuzzing import REPO

CAP = 3 << 30  # address space of the child: trnsim's imports need ~1 GiB of it


def trnsim(*args: str, stdin=None, cap: int = CAP, timeout: float = 120):
    """`python cli.py ARGS` under an address-space cap: (exit code, stdout, stderr)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    p = subprocess.run(
        [sys.executable, "cli.py", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        stdin=stdin,
        timeout=timeout,
        preexec_fn=limit,
    )
    return p.returncode, p.stdout, p.stderr


BOMB = """\
trnsim: 1
name: bomb
chip: trn2
mode: timing
tensors:
  x: {shape: [1000000000000, 1000000000000], dtype: float32}
  y: {shape: [1000000000000, 1000000000000], dtype: float32}
ops:
  - relu: {x: x, out: y}
"""


@pytest.mark.parametrize("args", [("run",), ("validate",), ("run", "--no-race-check")])
def test_an_op_on_a_tensor_larger_than_hbm_is_refused_before_it_is_lowered(tmp_path, args):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    code, out, err = trnsim(*args, str(path), timeout=60)
    assert code == 2, err[-2000:]
    assert err.startswith(f"error: {path}:6: tensors.x: out of device memory"), err[-2000:]
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_read_no_further_than_the_cap(device):
    code, out, err = trnsim("run", device, "--max-trace-bytes", "100000")
    assert code == 2
    assert err == (
        f"error: {device}:1: trace: the file goes on past the 97.66 KiB a trace may have; "
        "expected a trace file (--max-trace-bytes raises the limit)\n"
    )


def test_the_default_cap_holds_a_device_within_the_address_space():
    code, out, err = trnsim("validate", "/dev/zero")
    assert code == 2 and "goes on past the 1 GiB a trace may have" in err, err[-2000:]


def test_a_pipe_that_never_ends_is_read_no_further_than_the_cap():
    yes = subprocess.Popen(["yes", "x: 1"], stdout=subprocess.PIPE)
    try:
        code, out, err = trnsim("validate", "/dev/stdin", "--max-trace-bytes", "4096",
                                stdin=yes.stdout)  # fmt: skip
    finally:
        yes.kill()
        yes.wait()
        yes.stdout.close()
    assert code == 2 and "goes on past the 4 KiB a trace may have" in err, err


def test_a_regular_file_beyond_the_cap_is_refused_by_its_size(tmp_path):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as f:
        f.truncate(5 << 30)  # a sparse 5 GiB file: reading it would exceed the cap
    code, out, err = trnsim("run", str(path))
    assert code == 2
    assert err == (
        f"error: {path}:1: trace: the file is 5 GiB, more than the 1 GiB a trace may have; "
        "expected a trace file (--max-trace-bytes raises the limit)\n"
    )
