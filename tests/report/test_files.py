"""Output files appear whole or not at all (`report.files.replacing`), and the checks the CLI runs
on output paths before simulating."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from trnsim.errors import TrnsimError
from trnsim.report import files, profile
from trnsim.report.files import check_distinct, check_file, check_folder, replacing


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "p.csv"
    target.write_text("old\n")
    with pytest.raises(KeyboardInterrupt), replacing(target) as fh:
        fh.write("half a ")
        raise KeyboardInterrupt
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["p.csv"]


def test_a_complete_write_replaces_the_file_with_the_umask_mode(tmp_path):
    target = tmp_path / "p.csv"
    target.write_text("old\n")
    with replacing(target) as fh:
        fh.write("new\n")
    assert target.read_text() == "new\n"
    assert os.listdir(tmp_path) == ["p.csv"]
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


def test_a_symlink_is_written_through(tmp_path):
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to("real.json")
    with replacing(tmp_path / "link.json") as fh:
        fh.write("new")
    assert (tmp_path / "link.json").is_symlink()
    assert (tmp_path / "real.json").read_text() == "new"


def test_a_device_is_written_in_place_not_replaced():
    with replacing("/dev/null") as fh:
        fh.write("discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


class _Rows:
    """Profile rows whose iteration is interrupted after `n`, as by Ctrl-C while writing."""

    def __init__(self, n: int):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield (0, "core0.q0", "main", i, "dma_copy", "float32", 0.0, 1.0, 1.0, 4, 0)
        raise KeyboardInterrupt


def test_an_interrupted_profile_leaves_no_truncated_csv(tmp_path, monkeypatch):
    target = tmp_path / "p.csv"
    target.write_text("the previous profile\n")
    monkeypatch.setattr(profile, "rows", lambda rec: _Rows(10_000))
    with pytest.raises(KeyboardInterrupt):
        profile.write_profile(None, target)
    assert target.read_text() == "the previous profile\n"
    assert os.listdir(tmp_path) == ["p.csv"]
    monkeypatch.setattr(profile, "rows", lambda rec: [])
    profile.write_profile(None, target)
    assert target.read_text().splitlines() == [",".join(profile.COLUMNS)]


@pytest.mark.parametrize(
    "make, check, message",
    [
        (lambda d: (d / "x").mkdir(), check_file, "--perfetto {d}/x: is a folder; expected a file name"),
        (lambda d: None, check_file, "--perfetto {d}/no/x: folder {d}/no does not exist"),
        (lambda d: (d / "f").write_text(""), check_file, "--perfetto {d}/f/x: {d}/f is not a folder"),
        (lambda d: (d / "x").write_text(""), check_folder, "--perfetto {d}/x: is a file; expected a folder"),
        (lambda d: None, check_folder, "--perfetto {d}/no/x: folder {d}/no does not exist"),
    ],
)  # fmt: skip
def test_output_path_checks(tmp_path, make, check, message):
    make(tmp_path)
    path = message.split(":")[0].split(" ", 1)[1].format(d=tmp_path)
    with pytest.raises(TrnsimError) as e:
        check("--perfetto", path)
    assert str(e.value) == message.format(d=tmp_path)
    assert sorted(os.listdir(tmp_path)) in ([], ["f"], ["x"])  # the probe left nothing


def test_good_output_paths_pass_and_leave_nothing(tmp_path):
    check_file("--perfetto", tmp_path / "t.json")
    check_file("--perfetto", "/dev/null")
    check_folder("--out-dir", tmp_path / "out")
    check_folder("--out-dir", tmp_path)
    assert os.listdir(tmp_path) == []


def test_outputs_distinct_from_each_other_and_from_inputs(tmp_path):
    trace = tmp_path / "t.yaml"
    trace.write_text("")
    check_distinct([("--perfetto", tmp_path / "a"), ("--profile", None)], [trace])
    with pytest.raises(TrnsimError, match=r"^--profile .*/a: --perfetto names the same file"):
        check_distinct([("--perfetto", tmp_path / "a"), ("--profile", tmp_path / "x/../a")], [])
    with pytest.raises(TrnsimError, match=r"^--perfetto .*t.yaml: is an input of this run;"):
        check_distinct([("--perfetto", trace)], [trace])
    (tmp_path / "link.yaml").symlink_to(trace)
    with pytest.raises(TrnsimError, match=r"link.yaml: is an input of this run \(.*t.yaml\);"):
        check_distinct([("--perfetto", tmp_path / "link.yaml")], [trace])
    check_distinct([("--perfetto", "/dev/null"), ("--profile", "/dev/null")], [])  # a sink


def test_every_writer_goes_through_replacing():
    """Every module of trnsim that writes a file uses `files.replacing` (the sweep's workers lay
    out private copies of init files in a folder of their own, and nothing else)."""
    root = Path(files.__file__).parents[1]
    writes = re.compile(
        r"write_text\(|write_bytes\(|open\([^)]*[\"'][wax]b?[\"']|np\.save\(|savefig\(|write_table\("
    )
    found = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if writes.search(p.read_text()) and "replacing" not in p.read_text()
    )
    assert found == ["sweep/bundle.py"]
