"""The race check's limits: it stops at the first race (or, with --allow-races, lists the first
REPORTED and counts the others up to COUNTED), and compares stream steps by the memory they
touch, not pairwise."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from trnsim.trace import loads
from trnsim.trace.races import COUNTED, REPORTED, RaceError, check_races, find_races

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import counting_matmul  # noqa: E402


def _racy_matmul():
    """The counting matmul with every load's buffer-reuse wait dropped: a race per reuse."""
    doc = counting_matmul.document(mt=2, nt=4, kt=16)
    for ins in doc["instructions"]:
        if ins["op"] == "dma_copy" and "tensor" in ins.get("wait", {}):
            del ins["wait"]["tensor"]
    return loads(json.dumps(doc), "racy.json")


def test_without_allow_the_check_stops_at_the_first_race():
    program = _racy_matmul()
    races = find_races(program, limit=1)
    assert len(races) == 1 and not races.complete
    with pytest.raises(RaceError, match=r"^race: .*--allow-races to run anyway \(it lists"):
        check_races(program)


def test_with_allow_it_lists_the_first_and_counts_the_rest():
    program = _racy_matmul()
    every = find_races(program)
    assert every.complete and len(every) > REPORTED + 1
    lines = check_races(program, allow=True)
    assert len(lines) == REPORTED + 1
    assert lines[:REPORTED] == [f"warning: {r.message}" for r in every[:REPORTED]]
    others = len(every) - REPORTED
    want = f"{others}" if others <= COUNTED else f"more than {COUNTED}"
    assert lines[-1] == f"warning: and {want} other races"


def test_a_count_past_the_limit_says_more_than(monkeypatch):
    import trnsim.trace.races as races_mod

    monkeypatch.setattr(races_mod, "COUNTED", 3)
    lines = check_races(_racy_matmul(), allow=True)
    assert lines[-1] == "warning: and more than 3 other races"


def _streams(n: int, slices: list[str]) -> str:
    """n streams, stream i launching a one-instruction kernel that stores into y[slices[i]]."""
    kernels = {
        f"k{i}": {
            "tiles": {"t": {"memory": "sbuf", "shape": [128, 8], "dtype": "float32"}},
            "instructions": [{"op": "dma_copy", "queue": 0, "src": "t", "dst": f"y[{s}]"}],
        }
        for i, s in enumerate(slices)
    }
    doc = {
        "trnsim": 1,
        "chip": "trn2",
        "mode": "timing",
        "tensors": {"y": {"shape": [128, 8 * n], "dtype": "float32"}},
        "kernels": kernels,
        "streams": [{"name": f"s{i}", "core": 0, "do": [{"launch": f"k{i}"}]} for i in range(n)],
    }
    return yaml.safe_dump(doc)


def test_streams_writing_disjoint_slices_do_not_race_and_overlapping_ones_do():
    n = 50
    disjoint = [f":, {8 * i}:{8 * i + 8}" for i in range(n)]
    assert find_races(loads(_streams(n, disjoint), "d.yaml")) == []
    shifted = disjoint[:]
    shifted[37] = ":, 100:108"  # meets stream 12's 96:104 and stream 13's 104:112
    races = find_races(loads(_streams(n, shifted), "o.yaml"))
    assert [(r.first.split("(stream ")[1], r.second.split("(stream ")[1]) for r in races] == [
        ("s12)", "s37)"),
        ("s13)", "s37)"),
    ]


def test_streams_ordered_by_an_event_do_not_race():
    text = _streams(2, [":, 0:8", ":, 0:8"])
    doc = yaml.safe_load(text)
    doc["streams"][0]["do"].append({"record": "e"})
    doc["streams"][1]["do"].insert(0, {"wait": "e"})
    assert find_races(loads(yaml.safe_dump(doc), "e.yaml")) == []
    assert len(find_races(loads(text, "u.yaml"))) == 1
