"""A trace's `collective: {op: all_to_allv, counts: ...}` on a system: each rank's received
values equal numpy's (rank j gets the counts[i][j] elements each rank i sends it, packed in
group order; the rest of its out untouched), its time the collectives engine's for the same
counts alone (timing with bytes only, no tensors, too), --check, and the one-line errors at the
key (counts' shape, a tensor too small for the rank's row or column, bytes:, counts beside
another op, ranks whose counts differ)."""

from __future__ import annotations

import numpy as np
import pytest

from trnsim.collectives import World
from trnsim.config import load_system
from trnsim.errors import TrnsimError
from trnsim.runtime.system_run import run_on_system
from trnsim.trace import loads

GROUP = (0, 4, 8)  # chips 0, 1, 2 of trn2-48xl
COUNTS = [[3, 40, 5], [0, 7, 100], [64, 1, 0]]


def trace(step: str = "tensor: s, out: r", counts=COUNTS, extra: str = "", n_out: int = 200):
    do = f"{{collective: {{op: all_to_allv, group: {list(GROUP)}, counts: {counts}, {step}}}}}"
    streams = "\n".join(f"  - {{name: s{r}, rank: {r}, do: [{do}]}}" for r in GROUP)
    return loads(
        f"trnsim: 1\nsystem: trn2-48xl\nseed: 3\n{extra}tensors:\n"
        f"  s: {{shape: [160], dtype: float32, init: normal}}\n"
        f"  r: {{shape: [{n_out}], dtype: float32, init: ones}}\nstreams:\n{streams}\n",
        source="v.yaml",
    )


def test_values_equal_numpy():
    res = run_on_system(trace(), load_system("trn2-48xl"), check=True)
    sent = {r: res.tensor("s", r).copy() for r in GROUP}  # all_to_allv leaves s as it was
    for j, r in enumerate(GROUP):
        got = res.tensor("r", r)
        parts = [sent[g][sum(COUNTS[i][:j]) : sum(COUNTS[i][: j + 1])]
                 for i, g in enumerate(GROUP)]  # fmt: skip
        want = np.concatenate(parts)
        np.testing.assert_array_equal(got[: want.size], want)
        np.testing.assert_array_equal(got[want.size :], 1.0)  # beyond its column: untouched
    ((label, check),) = res.summary["check"].items()
    assert label == "v.yaml:8 all_to_allv s #0" and check["ok"] and check["max_abs_err"] == 0


def test_time_is_the_engines():
    system = load_system("trn2-48xl")
    res = run_on_system(trace("dtype: float32"), system, mode="timing")
    (row,) = res.summary["collectives"]
    alone = World.from_config(system).collective("all_to_allv", GROUP, 0, "float32", counts=COUNTS)
    assert row["time_ns"] * 1000 == alone.time_ps and row["algorithm"] == "direct"
    assert row["bytes"] == max(sum(r) for r in COUNTS) * 4  # the largest row, the engine's size
    # with tensors, in timing mode: the same
    res = run_on_system(trace(), system, mode="timing")
    assert res.summary["collectives"][0]["time_ns"] == row["time_ns"]


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (
            {"counts": [[1, 2], [3, 4]]},
            "v.yaml:8: streams[0].do[0].collective.counts: 2 rows for "
            "a group of 3; expected a square matrix of element counts",
        ),
        (
            {"counts": [[1, 2, 3], [3, 4], [1, 1, 1]]},
            "v.yaml:8: streams[0].do[0].collective."
            "counts[1]: row 1 has 2 counts; expected 3 counts >= 0",
        ),
        ({"counts": [[0, 0, 0]] * 3}, "collective.counts: every count is 0"),
        (
            {"step": "bytes: 64"},
            "collective.bytes: bytes: beside all_to_allv; expected counts: alone",
        ),
        ({"step": "tensor: s"}, "v.yaml:8: streams[0].do[0].collective: missing key 'out'"),
        (
            {"n_out": 100},
            "v.yaml:10: streams[2].do[0].collective.out: rank 8 receives 105 "
            "elements (counts column 2) but tensor r holds 100; expected a tensor of at least 105",
        ),
    ],
)
def test_errors(kwargs, error):
    with pytest.raises(TrnsimError) as e:
        run_on_system(trace(**kwargs), load_system("trn2-48xl"), mode="timing")
    assert error in str(e.value) and "\n" not in str(e.value)


def test_counts_beside_another_op_and_ranks_that_differ():
    with pytest.raises(TrnsimError, match=r"collective.counts: all_to_all takes no counts; "
                       r"expected counts: only beside all_to_allv"):  # fmt: skip
        loads("trnsim: 1\nstreams:\n  - {name: a, do: [{collective: {op: all_to_all, bytes: 64, "
              "counts: [[1]]}}]}\n", source="v.yaml")  # fmt: skip
    t = trace("dtype: float32")
    t.streams[2].steps[0].arg.counts = ((3, 40, 5), (0, 7, 100), (64, 2, 0))
    with pytest.raises(
        TrnsimError,
        match=r"collective #0 on group \(0, 4, 8\): rank 8 issued "
        r"all_to_allv of 428 bytes of float32 counts \[\[3, 40, 5\], \[0, 7, "
        r"100\], \[64, 2, 0\]\] but rank 0 issued all_to_allv of 428 bytes of "
        r"float32 counts \[\[3, 40, 5\], \[0, 7, 100\], \[64, 1, 0\]\]",
    ):
        run_on_system(t, load_system("trn2-48xl"), mode="timing")
