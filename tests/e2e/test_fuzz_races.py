"""Fuzzed race and deadlock checks: random launches (engine and DMA queues, random semaphore
waits and signals, random slices of a few tiles and a tensor) and random stream schedules,
against the brute-force reference of tests/trace/race_reference.py. The check may report a
possible race the reference does not (docs/races.md: it orders only what every interleaving
guarantees), but it never misses one; a launch or schedule is a deadlock for the check exactly
when the reference cannot finish it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.e2e.fuzzing import EXAMPLES, FUZZ, dump
from tests.trace import race_reference as ref
from tests.trace.test_races_dropped_waits import checker
from trnsim.errors import DeadlockError
from trnsim.trace import loads
from trnsim.trace.races import find_races

QUEUES = {  # an instruction on each queue, with {dst} and {src} slots
    "vector": {"op": "tensor_copy", "src": "{src}", "dst": "{dst}"},
    "scalar": {"op": "tensor_copy", "src": "{src}", "dst": "{dst}", "engine": "scalar"},
    "gpsimd": {"op": "memset", "dst": "{dst}", "engine": "gpsimd"},
    "q0": {"op": "dma_copy", "src": "{src}", "dst": "{dst}", "queue": 0},
    "q1": {"op": "dma_copy", "src": "{src}", "dst": "{dst}", "queue": 1},
}
ROWS = ["0:64", "64:128", "0:128", "32:96"]

instruction = st.fixed_dictionaries(
    {
        "queue": st.sampled_from(sorted(QUEUES)),
        "src": st.tuples(st.sampled_from("abx"), st.sampled_from(ROWS)),
        "dst": st.tuples(st.sampled_from("abx"), st.sampled_from(ROWS)),
        "wait": st.dictionaries(st.sampled_from(["s", "t"]), st.integers(1, 3), max_size=2),
        "signal": st.dictionaries(st.sampled_from(["s", "t"]), st.integers(1, 2), max_size=2),
    }
)


def launch_doc(items: list) -> str:
    """The trace of `items`, each wait cut to what its semaphore's signals can reach (the
    loader refuses a wait no count of signals meets)."""
    total: dict = {}
    for it in items:
        for s, n in it["signal"].items():
            total[s] = total.get(s, 0) + n
    out = []
    for it in items:
        it = {**it, "wait": {s: min(v, total[s]) for s, v in it["wait"].items() if s in total}}
        ins = dict(QUEUES[it["queue"]])
        src, dst = (f"{n}[{r}, :]" for n, r in (it["src"], it["dst"]))
        if it["queue"].startswith("q"):  # a DMA copy: one side in HBM
            dst = f"x[{it['dst'][1]}, :]" if it["src"][0] != "x" else dst.replace("x[", "a[")
        elif "x[" in src or "x[" in dst:  # engines read and write tiles only
            src, dst = src.replace("x[", "a["), dst.replace("x[", "b[")
        for key, val in (("src", src), ("dst", dst)):
            if key in ins:
                ins[key] = val
        if it["wait"]:
            ins["wait"] = it["wait"]
        if it["signal"]:
            ins["signal"] = it["signal"]
        out.append(ins)
    doc = {
        "trnsim": 1,
        "tensors": {"x": {"shape": [128, 64], "dtype": "float32"}},
        "tiles": {n: {"memory": "sbuf", "shape": [128, 64], "dtype": "float32"} for n in "ab"},
        "instructions": out,
    }
    return dump(doc)


def finishes(program) -> bool:
    instrs = program.kernels["main"].per_core[0].instructions
    return len(ref.reach_without(instrs, None)) == len(instrs)


@settings(FUZZ, max_examples=EXAMPLES)
@given(items=st.lists(instruction, min_size=2, max_size=7))
def test_random_launches_never_miss_a_race_the_reference_finds(items):
    try:
        program = loads(launch_doc(items), "fuzz.yaml")
    except Exception as e:  # semaphores that can never be met are refused by the loader
        assert "semaphore" in str(e), e
        return
    if not finishes(program):
        with pytest.raises(DeadlockError, match=r"fuzz.yaml:\d+ kernel main queue core0\."):
            find_races(program)
        return
    got = checker(program)[0].get("main", set())
    want = ref.launch_races(program, "main")
    assert bool(got) >= bool(want), (want, got)
    reported = {i for p in got for i in p}
    for pair in want:
        assert pair & reported, (sorted(pair), got)


step = st.one_of(
    st.tuples(st.just("launch"), st.sampled_from(["fill", "read"])),
    st.tuples(st.sampled_from(["record", "wait"]), st.sampled_from(["e", "f"])),
)


@settings(FUZZ, max_examples=max(1, EXAMPLES // 2))
@given(streams=st.lists(st.lists(step, min_size=1, max_size=4), min_size=1, max_size=3))
def test_random_stream_schedules_agree_with_the_reference(streams):
    recorded = {a for s in streams for k, a in s if k == "record"}
    doc = {
        "trnsim": 1,
        "tensors": {"x": {"shape": [128, 64], "dtype": "float32"}},
        "kernels": {
            "fill": {
                "tiles": {"t": {"memory": "sbuf", "shape": [128, 64], "dtype": "float32"}},
                "instructions": [
                    {"op": "memset", "dst": "t", "signal": {"m": 1}},
                    {"op": "dma_copy", "src": "t", "dst": "x", "queue": 0, "wait": {"m": 1}},
                ],
            },
            "read": {
                "tiles": {"t": {"memory": "sbuf", "shape": [128, 64], "dtype": "float32"}},
                "instructions": [{"op": "dma_copy", "src": "x", "dst": "t", "queue": 0}],
            },
        },
        "streams": [
            {
                "name": f"s{i}",
                "core": i % 2,
                "do": [{k: a} for k, a in s if k != "wait" or a in recorded],
            }
            for i, s in enumerate(streams)
        ],
    }
    program = loads(dump(doc), "fuzz.yaml")
    everything = {(i, j) for i, s in enumerate(program.streams) for j in range(len(s.steps))}
    if ref.stream_steps_reach(program, None) != everything:
        with pytest.raises(DeadlockError, match=r"fuzz.yaml:\d+ stream s\d waits for event"):
            find_races(program)
        return
    between = checker(program)[1]
    assert between == bool(ref.stream_races(program))
