"""`trnsim run` with a trace per rank: the one-line errors naming the file (a missing or
duplicate rank, a file given twice, files without a system, files that disagree on a tensor, a
mode or the system), a rank of a group without a file, ranks issuing a group's collectives in
different orders, a collective some rank never reaches (both before running), and a file's
rank: against its streams'."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.cli.test_cli_run import assert_one_line_error, invoke

FOLDER = Path(__file__).resolve().parents[2] / "traces" / "ranks"


@pytest.fixture
def files(tmp_path) -> dict[int, Path]:
    out = {}
    for r in (0, 4, 8, 12):
        out[r] = tmp_path / f"rank{r}.yaml"
        shutil.copy(FOLDER / f"rank{r}.yaml", out[r])
    return out


def edit(path: Path, old: str, new: str, name: str) -> Path:
    text = path.read_text()
    assert old in text
    out = path.with_name(name)
    out.write_text(text.replace(old, new))
    return out


def test_rank_errors(files):
    f0, f4, f8, f12 = files.values()
    dup = edit(f4, "rank: 4", "rank: 0", "dup.yaml")
    assert_one_line_error(invoke("run", f0, dup, f8, f12),
                          f"error: {dup}:5: rank: rank 0 is also {f0}'s; expected one file per "
                          f"rank\n")  # fmt: skip
    none = edit(f4, "rank: 4\n", "", "none.yaml")
    assert_one_line_error(invoke("run", f0, none), f"error: {none}:1: rank: missing: a run of "
                          f"several trace files takes each as one rank's program; expected "
                          f"rank: R at the top of the file")  # fmt: skip
    assert_one_line_error(invoke("run", f0, f4, f0), f"error: {f0}:1: trace: the file is given "
                          f"twice")  # fmt: skip
    stream = edit(f4, "  - name: main\n", "  - name: main\n    rank: 8\n", "stream.yaml")
    assert_one_line_error(invoke("run", f0, stream), f"error: {stream}:15: streams[0].rank: "
                          f"rank 8, but the trace is rank 4's (rank: 4 at line 5); expected no "
                          f"rank: in the stream, or rank: 4\n")  # fmt: skip


def test_files_that_disagree(files):
    f0, f4, f8, f12 = files.values()
    shape = edit(f8, "x: {shape: [512, 512]", "x: {shape: [256, 512]", "shape.yaml")
    assert_one_line_error(invoke("run", f0, f4, shape, f12), f"error: {shape}:8: tensors.x: "
                          f"[256, 512] bfloat16 init 'normal', but {f0} (line 18) declares x as "
                          f"[512, 512] bfloat16 init 'normal'; expected one shape")  # fmt: skip
    mode = edit(f8, "mode: functional", "mode: timing", "mode.yaml")
    assert_one_line_error(invoke("run", f0, f4, mode, f12), f"error: {mode}:6: mode: timing, "
                          f"but {f0} has mode: functional; expected one mode")  # fmt: skip
    other = edit(f8, "system: trn2-48xl", "system: trn2-ultraserver", "other.yaml")
    assert_one_line_error(invoke("run", f0, f4, other, f12), f"error: {other}:4: system: "
                          f"trn2-ultraserver, but {f0} names trn2-48xl")  # fmt: skip
    # --system over the files' system: (and over a disagreement between them)
    assert invoke("run", f0, f4, other, f12, "--system", "trn2-48xl", "-q").exit_code == 0
    bare = [edit(f, "system: trn2-48xl\n", "", f"bare{i}.yaml") for i, f in enumerate((f0, f4))]
    assert_one_line_error(invoke("run", *bare), "error: 2 trace files: a trace per rank runs on "
                          "a system of chips; expected --system NAME")  # fmt: skip


def test_collectives_across_files(files):
    f0, f4, f8, f12 = files.values()
    assert_one_line_error(invoke("run", f0, f4, f8), f"error: {f0}:27: collective broadcast on "
                          f"group (0, 4, 8, 12): ranks (12) have no trace file (files are given "
                          f"for ranks (0, 4, 8)); expected a file with rank: R")  # fmt: skip
    gather = edit(f8, "op: all_reduce", "op: all_gather", "gather.yaml")
    for cmd in ("run", "validate"):
        assert_one_line_error(invoke(cmd, f0, f4, gather, f12), f"error: {gather}:19: "
                              f"collective #1 on group (0, 4, 8, 12): rank 8 issues all_gather "
                              f"of 524288 bytes of bfloat16 but rank 0 issues all_reduce of "
                              f"524288 bytes of bfloat16 (sum) ({f0}:29); expected the ranks of "
                              f"a group to issue its collectives in the same order\n")  # fmt: skip
    never = edit(f8, "      - collective: {op: all_reduce, group: [0, 4, 8, 12], tensor: y}\n",
                 "", "never.yaml")  # fmt: skip
    assert_one_line_error(invoke("run", f0, f4, never, f12), f"error: deadlock: {f0}:29: "
                          f"collective all_reduce #1 on group (0, 4, 8, 12): ranks (8) never "
                          f"reach it (never.yaml issues 1 on the group); ranks (0, 4, 12) wait "
                          f"at it; expected every rank of the group to issue it\n")  # fmt: skip
