"""Where `trnsim.torch.record` and the profiler's exports write: a path that cannot be written (a
folder, under a file, an unwritable place) is a one-line TrnsimError naming it before any work
(record: on entering the block, before the program runs); a write that fails at the end (a full
disk, /dev/full) says so, and a recording is kept to be saved elsewhere."""

from __future__ import annotations

import os
import stat
import tempfile

import pytest

torch = pytest.importorskip("torch")

import trnsim.torch  # noqa: E402,F401
from trnsim.errors import TrnsimError  # noqa: E402
from trnsim.report.files import OutputError  # noqa: E402
from trnsim.torch import profiler_export  # noqa: E402
from trnsim.trace import load  # noqa: E402

FULL = "/dev/full"
NO_SPACE = os.strerror(28)  # ENOSPC

needs_full = pytest.mark.skipif(
    not (os.path.exists(FULL) and stat.S_ISCHR(os.stat(FULL).st_mode)),
    reason="no /dev/full character device here",
)


def _unwritable_folder() -> str | None:
    """A folder in which this process cannot create a file (root ignores permission bits, so
    /sys, where even root cannot), or None."""
    try:
        fd, name = tempfile.mkstemp(dir="/sys")
    except OSError:
        return "/sys"
    os.close(fd)
    os.unlink(name)
    return None


READ_ONLY = _unwritable_folder()


def _bad_paths(tmp_path):
    """(path, what the error says) for each place no file can be written."""
    (tmp_path / "afile").write_text("not a folder\n")
    (tmp_path / "adir").mkdir()
    rows = [
        (tmp_path / "adir", "is a folder; expected a file name"),
        (tmp_path / "afile" / "r.yaml", "is not a folder"),
    ]
    if READ_ONLY:
        rows.append((f"{READ_ONLY}/r.yaml", f"cannot write in {READ_ONLY}"))
    return rows


def _work():
    x = torch.ones(8, 8).to("neuron")
    return (x @ x).cpu()


# -- record -------------------------------------------------------------------------------------


def test_record_checks_its_path_before_the_block_runs(tmp_path):
    for path, says in _bad_paths(tmp_path):
        ran = []
        with pytest.raises(TrnsimError) as e:
            with trnsim.torch.record(path):
                ran.append(_work())
        assert ran == []
        assert str(e.value).startswith(f"trnsim.torch.record {path}: ") and says in str(e.value)
        assert not trnsim.torch.state.get().listeners  # nobody left listening


def test_record_with_values_checks_the_values_folder(tmp_path):
    (tmp_path / "r_values").write_text("a file where the values folder goes\n")
    with pytest.raises(TrnsimError, match="r_values: is a file; expected a folder"):
        with trnsim.torch.record(tmp_path / "r.yaml", values=True):
            _work()


def test_record_makes_missing_folders(tmp_path):
    path = tmp_path / "new" / "sub" / "r.yaml"
    with trnsim.torch.record(path):
        _work()
    assert load(path).tensors


@needs_full
def test_a_recording_that_cannot_be_written_is_kept(tmp_path):
    with pytest.raises(OutputError) as e:
        with trnsim.torch.record(FULL) as rec:
            _work()
    assert str(e.value).startswith(f"trnsim.torch.record {FULL}: {NO_SPACE}; ")
    assert "rec.save(path)" in str(e.value)
    assert stat.S_ISCHR(os.stat(FULL).st_mode)
    rec.save(tmp_path / "r.yaml")
    assert load(tmp_path / "r.yaml").tensors
    assert rec.path == tmp_path / "r.yaml"


def test_save_before_the_block_ends_is_refused(tmp_path):
    rec = trnsim.torch.record(tmp_path / "r.yaml")
    with pytest.raises(RuntimeError, match="block ended"):
        rec.save(tmp_path / "other.yaml")
    with rec:
        with pytest.raises(RuntimeError, match="block ended"):
            rec.save(tmp_path / "other.yaml")
        _work()
    assert not (tmp_path / "other.yaml").exists()


# -- the profiler's exports ----------------------------------------------------------------------


def _profile():
    with torch.neuron.profiler.profile() as prof:
        _work()
    return prof


def test_export_chrome_trace_checks_its_path_first(tmp_path, monkeypatch):
    prof = _profile()
    monkeypatch.setattr(profiler_export, "chrome_trace", lambda p: pytest.fail("built"))
    rows = [*_bad_paths(tmp_path), (tmp_path / "nodir" / "p.json", "folder")]
    for path, says in rows:
        with pytest.raises(TrnsimError) as e:
            prof.export_chrome_trace(path)
        assert str(e.value).startswith(f"export_chrome_trace {path}: ") and says in str(e.value)


@needs_full
def test_export_chrome_trace_on_a_full_disk(tmp_path):
    prof = _profile()
    with pytest.raises(OutputError, match=f"^export_chrome_trace {FULL}: {NO_SPACE}$"):
        prof.export_chrome_trace(FULL)
    assert stat.S_ISCHR(os.stat(FULL).st_mode)
    prof.export_chrome_trace(tmp_path / "p.json")  # the profile is still there
    assert (tmp_path / "p.json").stat().st_size > 0


def test_export_parquet_checks_its_folder_first(tmp_path):
    (tmp_path / "afile").write_text("not a folder\n")
    with pytest.raises(TrnsimError, match="export_parquet .*afile: is a file; expected a folder"):
        _profile().export_parquet(tmp_path / "afile")
