"""`trnsim ranks replicate` (trnsim.trace.replicate; docs/distributed.md, "Many ranks from a
few"): rank files for more ranks from recorded ones, replayed by `trnsim run --system`, and its
one-line errors naming the file and key."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from trnsim.cli import main


def _rank_file(tmp, rank: int, group, op="all_reduce", prefix=True) -> str:
    p = f"r{rank}_" if prefix else ""
    doc = {"trnsim": 1, "name": f"job_rank{rank}", "system": "trn2-48xl", "rank": rank,
           "mode": "timing",
           "tensors": {f"{p}x": {"shape": [256, 256], "dtype": "bfloat16"},
                       f"{p}y": {"shape": [256, 256], "dtype": "bfloat16"}},
           "kernels": {"mm": {"ops": [{"matmul": {"a": f"{p}x", "b": f"{p}x", "out": f"{p}y"}}]}},
           "streams": [{"name": "main", "do": [
               {"record": "start"}, {"launch": "mm"},
               {"collective": {"op": op, "group": group, "tensor": f"{p}y"}},
               {"record": "done"}]}],
           "timing": [{"from": "start", "to": "done"}]}  # fmt: skip
    path = tmp / f"job_rank{rank}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_replicate_then_run_times_every_rank(tmp_path):
    files = [_rank_file(tmp_path, r, [0, 1]) for r in (0, 1)]
    r = _cli("ranks", "replicate", *files, "--ranks", "0-7", "-o", tmp_path / "out")
    assert r.exit_code == 0, r.output
    written = sorted((tmp_path / "out").glob("*.yaml"))
    assert len(written) == 8
    doc = yaml.safe_load((tmp_path / "out" / "job_rank5.yaml").read_text())
    assert doc["rank"] == 5 and doc["name"] == "job_rank5"
    assert set(doc["tensors"]) == {"r5_x", "r5_y"}
    (step,) = [s for s in doc["streams"][0]["do"] if "collective" in s]
    assert step["collective"]["group"] == list(range(8)) and step["collective"]["tensor"] == "r5_y"
    r = _cli("run", "--system", "trn2-48xl", *written, "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    (c,) = got["collectives"]
    assert c["ranks"] == 8 and c["bytes"] == 256 * 256 * 2
    assert len(got["timings"]) == 8


def test_replicate_errors_name_the_file_and_key(tmp_path):
    a = _rank_file(tmp_path, 0, [0, 1])
    r = _cli("ranks", "replicate", a, "--ranks", "0-3", "-o", tmp_path / "o1")
    assert r.exit_code != 0
    assert "job_rank0.yaml: streams[0].do[2].collective.group: [0, 1] names rank(s) [1], which " \
        "have no file given" in r.output  # fmt: skip
    files = [_rank_file(tmp_path, r, [0], prefix=False) for r in (0, 1)]
    r = _cli("ranks", "replicate", *files, "--ranks", "0-3", "-o", tmp_path / "o2")
    assert "group: [0] is part of the recorded ranks [0, 1]" in r.output
    files = [_rank_file(tmp_path, r, [0, 1], op="all_gather") for r in (0, 1)]
    r = _cli("ranks", "replicate", *files, "--ranks", "0-3", "-o", tmp_path / "o3")
    assert "collective.op: all_gather's per-rank sizes depend on the group's size" in r.output
    files = [_rank_file(tmp_path, r, [0, 1]) for r in (0, 1)]
    r = _cli("ranks", "replicate", *files, "--ranks", "0-2", "-o", tmp_path / "o4")
    assert "3 ranks is not a multiple of the 2 recorded ranks [0, 1]" in r.output
    r = _cli("ranks", "replicate", *files, "--ranks", "4-1", "-o", tmp_path / "o5")
    assert "--ranks 4-1: '4-1' is not a rank or a range" in r.output
    assert not any((tmp_path / f"o{i}").exists() for i in range(1, 6))
    r = _cli("ranks", "replicate", "--help")
    assert r.exit_code == 0 and "mod |W|" in r.output


def _timing_file(tmp, rank: int) -> str:
    """A timing recording's rank file (no r<R>_ names): three kernels, an all_reduce."""
    t = {"shape": [256, 256], "dtype": "bfloat16"}
    doc = {"trnsim": 1, "name": f"job_rank{rank}", "system": "trn2-48xl", "rank": rank,
           "mode": "timing", "tensors": {"x": t, "w": t, "y": t, "z": t},
           "kernels": {"mm": {"ops": [{"matmul": {"a": "x", "b": "w", "out": "y"}}]},
                       "sm": {"ops": [{"softmax": {"x": "y", "dim": -1, "out": "z"}}]},
                       "mm2": {"ops": [{"matmul": {"a": "z", "b": "w", "out": "x"}}]}},
           "streams": [{"name": "main", "do": [
               {"record": "start"}, {"launch": "mm"}, {"launch": "sm"},
               {"collective": {"op": "all_reduce", "group": [0, 1], "bytes": 1 << 20,
                               "dtype": "float32"}},
               {"launch": "mm2"}, {"record": "done"}]}],
           "timing": [{"from": "start", "to": "done"}]}  # fmt: skip
    path = tmp / f"job_rank{rank}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def test_replay_lowers_each_kernel_once_with_the_same_report(tmp_path, monkeypatch):
    """The 8 replicas' kernels (the same ops on the same tensors) are lowered once, not per
    rank (`session.SHARE_LOWERINGS`), and the report is the one of lowering each on its own,
    to the byte."""
    from trnsim.runtime import session

    files = [_timing_file(tmp_path, r) for r in (0, 1)]
    r = _cli("ranks", "replicate", *files, "--ranks", "0-7", "-o", tmp_path / "out")
    assert r.exit_code == 0, r.output
    written = sorted((tmp_path / "out").glob("*.yaml"))
    calls = []
    lower_cores = session.lower_cores
    monkeypatch.setattr(session, "lower_cores", lambda *a: calls.append(1) or lower_cores(*a))
    reports = {}
    for share in (True, False):
        monkeypatch.setattr(session, "SHARE_LOWERINGS", share)
        calls.clear()
        r = _cli("run", "--system", "trn2-48xl", *written, "--json")
        assert r.exit_code == 0, r.output
        reports[share] = (r.stdout, len(calls))
    assert reports[True][1] == 3 and reports[False][1] == 24
    assert reports[True][0] == reports[False][0]
    got = json.loads(reports[True][0])
    assert len(got["timings"]) == 8 and got["collectives"][0]["ranks"] == 8


def _mesh_file(tmp, rank: int, world: int, steps: list) -> str:
    """A rank file recorded at `world` ranks (a virtual world's: `world_size:`), timing."""
    t = {"shape": [256, 256], "dtype": "bfloat16"}
    doc = {"trnsim": 1, "name": f"mesh_rank{rank}", "system": "trn2-48xl", "rank": rank,
           "world_size": world, "mode": "timing", "tensors": {"x": t, "y": t},
           "kernels": {"mm": {"ops": [{"matmul": {"a": "x", "b": "x", "out": "y"}}]}},
           "streams": [{"name": "main", "do": [{"record": "start"}, {"launch": "mm"},
                                               *steps, {"record": "done"}]}],
           "timing": [{"from": "start", "to": "done"}]}  # fmt: skip
    path = tmp / f"mesh_rank{rank}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def _coll(op, group, **kw):
    return {"collective": {"op": op, "group": group, "bytes": 1 << 16, "dtype": "bfloat16", **kw}}


def test_a_recording_at_the_target_size_replicates_every_collective_by_mesh_groups(tmp_path):
    """Rank 0's file of an 8-rank virtual world (a 4 x 2 mesh: dp groups every 2nd rank, tp
    groups of 2) written for ranks 0-7: each copy's groups are its own rank's groups of the same
    mesh dimension (rank 5: dp [1, 3, 5, 7], tp [4, 5]), a broadcast's root the rank at the same
    place; all_gather and reduce_scatter keep their (the target's) sizes; the replay runs."""
    f = _mesh_file(tmp_path, 0, 8, [
        _coll("all_gather", [0, 2, 4, 6]), _coll("reduce_scatter", [0, 2, 4, 6]),
        _coll("all_reduce", [0, 1]), _coll("broadcast", [0, 1], root=1),
        _coll("all_reduce", list(range(8)))])  # fmt: skip
    r = _cli("ranks", "replicate", f, "--ranks", "0-7", "-o", tmp_path / "out")
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load((tmp_path / "out" / "mesh_rank5.yaml").read_text())
    got = [s["collective"] for s in doc["streams"][0]["do"] if "collective" in s]
    assert [c["group"] for c in got] == [[1, 3, 5, 7], [1, 3, 5, 7], [4, 5], [4, 5],
                                         list(range(8))]  # fmt: skip
    assert got[3]["root"] == 5 and got[0]["bytes"] == 1 << 16
    assert doc["rank"] == 5 and doc["world_size"] == 8
    written = sorted((tmp_path / "out").glob("*.yaml"))
    r = _cli("run", "--system", "trn2-48xl", *written, "--json")
    assert r.exit_code == 0, r.output
    ops = sorted((c["op"], c["ranks"]) for c in json.loads(r.stdout)["collectives"])
    # a row per group
    rows = {("all_gather", 4): 2, ("all_reduce", 2): 4, ("all_reduce", 8): 1,
            ("broadcast", 2): 4, ("reduce_scatter", 4): 2}  # fmt: skip
    assert ops == [k for k, n in sorted(rows.items()) for _ in range(n)]


def test_a_recording_at_another_size_keeps_the_refusals(tmp_path):
    """world_size 8 replicated to 16 ranks: the sizes are not the target's, so all_gather is
    refused as for a real recording; a group that is no mesh dimension's is refused at 8."""
    f = _mesh_file(tmp_path, 0, 8, [_coll("all_gather", [0, 2, 4, 6])])
    r = _cli("ranks", "replicate", f, "--ranks", "0-15", "-o", tmp_path / "o1")
    assert "collective.op: all_gather's per-rank sizes depend on the group's size" in r.output
    f = _mesh_file(tmp_path, 0, 8, [_coll("all_reduce", [0, 1, 3])])
    r = _cli("ranks", "replicate", f, "--ranks", "0-7", "-o", tmp_path / "o2")
    assert "streams[0].do[2].collective.group: [0, 1, 3] is not a group of rank 0 in a mesh " \
        "of the recorded 8 ranks" in r.output  # fmt: skip
    assert not any((tmp_path / f"o{i}").exists() for i in (1, 2))


def test_a_json_recording_replicates_to_json_files(tmp_path):
    """A .json rank file (trnsim.torch.record("x.json")) gives .json copies (JSON is written
    and read several times faster than YAML: 64 ranks' files), the same documents."""
    f = _mesh_file(tmp_path, 0, 4, [_coll("all_gather", [0, 1, 2, 3])])
    src = tmp_path / "mesh_rank0.json"
    src.write_text(json.dumps(yaml.safe_load(open(f).read())))
    for path, out in ((f, "y"), (src, "j")):
        r = _cli("ranks", "replicate", path, "--ranks", "0-3", "-o", tmp_path / out)
        assert r.exit_code == 0, r.output
    written = sorted((tmp_path / "j").iterdir())
    assert [p.name for p in written] == [f"mesh_rank{r}.json" for r in range(4)]
    for r in range(4):
        want = yaml.safe_load((tmp_path / "y" / f"mesh_rank{r}.yaml").read_text())
        assert json.loads((tmp_path / "j" / f"mesh_rank{r}.json").read_text()) == want
    r = _cli("run", "--system", "trn2-48xl", *written, "--json")
    assert r.exit_code == 0, r.output
