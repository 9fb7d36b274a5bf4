"""A write the machine refuses (a full disk: /dev/full, or a file past RLIMIT_FSIZE) is the
user's condition, not a bug of trnsim: one line naming the option (or standard output) and the
OS's words, exit 2, no temporary file left, and no device or link given as an output removed.
Run as a user runs them (`python cli.py ...` in a folder of their own)."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from trnsim.report.files import OutputError, replacing_path

ROOT = Path(__file__).resolve().parents[2]
CLI = str(ROOT / "cli.py")
GEMM = (ROOT / "traces" / "gemm_double_buffered.yaml").read_text()
FULL = "/dev/full"
NO_SPACE = os.strerror(errno.ENOSPC)
TOO_LARGE = os.strerror(errno.EFBIG)

needs_full = pytest.mark.skipif(
    not (os.path.exists(FULL) and stat.S_ISCHR(os.stat(FULL).st_mode)),
    reason="no /dev/full character device here",
)


def _limit_file_size(size: int):
    """A preexec_fn: files past `size` bytes are refused (EFBIG; Python ignores SIGXFSZ)."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def _env() -> dict:
    """This checkout's trnsim (not an installed one), stdout buffered as in a user's shell."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONUNBUFFERED")}
    return {**env, "PYTHONPATH": str(ROOT)}


def _run(args, cwd: Path, stdout=subprocess.PIPE, limit: int | None = None):
    return subprocess.run(
        [sys.executable, CLI, *args],
        cwd=cwd,
        env=_env(),
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=None if limit is None else _limit_file_size(limit),
    )


def _to_full(args, cwd: Path):
    """The command with its stdout on /dev/full."""
    with open(FULL, "w") as out:
        return _run(args, cwd, stdout=out)


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "t.yaml").write_text(GEMM)
    return tmp_path


# -- output files ----------------------------------------------------------------------------------


@needs_full
def test_perfetto_on_a_full_device(folder):
    r = _run(["run", "t.yaml", "-q", "--perfetto", FULL], folder)
    assert (r.returncode, r.stderr) == (2, f"error: --perfetto {FULL}: {NO_SPACE}\n")
    assert stat.S_ISCHR(os.stat(FULL).st_mode)


@needs_full
@pytest.mark.parametrize("name", ["p.csv", "p.parquet"])
def test_profile_through_a_link_to_a_full_device(folder, name):
    """pyarrow removes the path it failed to write: it is never given the output's own."""
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    (folder / name).symlink_to(FULL)
    r = _run(["run", "t.yaml", "-q", "--profile", name], folder)
    assert (r.returncode, r.stderr) == (2, f"error: --profile {name}: {NO_SPACE}\n")
    assert (folder / name).is_symlink() and stat.S_ISCHR(os.stat(FULL).st_mode)
    assert sorted(os.listdir(folder)) == sorted(["t.yaml", name])


def test_a_file_past_the_size_limit_leaves_the_old_one_and_no_temporary(folder):
    (folder / "t.json").write_text("the previous timeline\n")
    r = _run(["run", "t.yaml", "-q", "--perfetto", "t.json"], folder, limit=4096)
    assert (r.returncode, r.stderr) == (2, f"error: --perfetto t.json: {TOO_LARGE}\n")
    assert (folder / "t.json").read_text() == "the previous timeline\n"
    assert sorted(os.listdir(folder)) == ["t.json", "t.yaml"]


def test_a_file_of_out_dir_past_the_size_limit(folder):
    r = _run(["run", "t.yaml", "-q", "--out-dir", "out"], folder, limit=4096)
    assert r.returncode == 2
    assert r.stderr.startswith("error: --out-dir out: out/") and r.stderr.endswith(
        f".npy: {TOO_LARGE}\n"
    ), r.stderr
    assert os.listdir(folder / "out") == []


# -- standard output -------------------------------------------------------------------------------


@needs_full
@pytest.mark.parametrize(
    "args",
    [
        ["run", "t.yaml", "--json"],
        ["run", "t.yaml"],
        ["run", "t.yaml", "-q", "--json", "--perfetto", "t.json"],
        ["configs", "list"],
        ["--help"],
        ["--version"],
        ["run", "--help"],
    ],
    ids=" ".join,
)
def test_a_full_stdout(folder, args):
    r = _to_full(args, folder)
    assert (r.returncode, r.stderr) == (2, f"error: standard output: {NO_SPACE}\n")


@needs_full
@pytest.mark.parametrize("code, status, stderr", [(0, 2, f"error: standard output: {NO_SPACE}\n"),
                                                  (3, 3, "")])  # fmt: skip
def test_the_flush_at_exit(code, status, stderr):
    """What is still buffered when the program ends (`app._exit`): a refused flush is an error
    of a run that succeeded; a run that failed keeps its status and its one line."""
    body = f"from trnsim.cli.app import _exit\nprint('out', end='')\n_exit({code})\n"
    with open(FULL, "w") as out:
        r = subprocess.run(
            [sys.executable, "-c", body], env=_env(), stdout=out, stderr=subprocess.PIPE, text=True
        )
    assert (r.returncode, r.stderr) == (status, stderr)


# -- replacing_path on a device or FIFO --------------------------------------------------------


def test_a_writer_that_removes_its_failed_path_never_gets_the_fifo(tmp_path):
    """A writer given a path removes it when its write fails (pyarrow does): for a device or a
    FIFO it writes a temporary file, not the target, which stays."""
    fifo = tmp_path / "p.parquet"
    os.mkfifo(fifo)

    def pyarrow_like(path: Path) -> None:
        try:
            raise OSError(errno.ENOSPC, NO_SPACE)
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(path)
            raise

    with pytest.raises(OutputError, match=f"p.parquet: {NO_SPACE}"):
        with replacing_path(fifo) as tmp:
            assert tmp.suffix == ".parquet"
            pyarrow_like(tmp)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert os.listdir(tmp_path) == ["p.parquet"]
