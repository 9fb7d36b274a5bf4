"""Timeline reuse (`trnsim.runtime.reuse`): replayed launches report exactly what simulated ones
do, and launches are replayed only on an idle chip."""

from __future__ import annotations

import pytest

from trnsim.config import load_chip
from trnsim.report.perfetto import chrome_trace
from trnsim.report.profile import rows
from trnsim.runtime.session import run_program
from trnsim.trace import loads

TRACE = """
trnsim: 1
name: reuse
chip: trn2
mode: timing
tensors:
  x: {shape: [512, 1024], dtype: bfloat16}
  w: {shape: [1024, 2048], dtype: bfloat16}
  h: {shape: [512, 2048], dtype: bfloat16}
  a: {shape: [128, 64], dtype: bfloat16}
  b: {shape: [128, 64], dtype: bfloat16}
kernels:
  mlp:
    ops:
      - matmul: {a: x, b: w, out: h}
      - gelu: {x: h, out: h}
  side:
    ops:
      - add: {a: a, b: a, out: b}
streams:
  - name: main
    core: 0
    do: [MAIN]
SIDE
"""


def _run(main: list[str], side: list[str] | None, reuse: bool, monkeypatch):
    monkeypatch.setenv("TRNSIM_REUSE", "1" if reuse else "0")
    text = TRACE.replace("MAIN", ", ".join(main))
    other = f"  - name: other\n    core: 1\n    do: [{', '.join(side)}]\n" if side else ""
    r = run_program(loads(text.replace("SIDE", other)), load_chip("trn2"))
    rec = r.device.ctx.recorder
    return (r.summary, chrome_trace(rec, "trn2"), rows(rec)), r.device.ctx.reuse


@pytest.mark.parametrize(
    "main, side, replays, recordings, deny",
    [
        # one stream: the first launch is recorded, the 4 others replay it
        (["launch: mlp"] * 5, None, 4, 1, set()),
        # a second stream's launch on core 1 overlaps the first: that one is neither recorded
        # nor replayed (the chip is not idle); the second is recorded, 3 replay it
        (["launch: mlp"] * 5, ["launch: side"], 3, 1, set()),
        # the other stream waits for an event the main thread records after its 7 launch calls
        # (at ~70 us): that wakes it during the replay of launch 2 (48-86 us), which is undone
        # (the run starts over, simulating launch 2); later launches overlap its work
        (["launch: mlp"] * 7 + ["record: e"], ["wait: e", "launch: side"], 1, 1, {2}),
    ],
)
def test_reuse_changes_no_report(main, side, replays, recordings, deny, monkeypatch):
    plain, off = _run(main, side, False, monkeypatch)
    reused, state = _run(main, side, True, monkeypatch)
    assert off is None
    assert reused[0] == plain[0]  # the summary
    assert reused[1] == plain[1]  # the Perfetto trace
    assert reused[2] == plain[2]  # the profile rows
    assert (state.replays, state.recordings, state.deny) == (replays, recordings, deny)


def test_a_replayed_launch_takes_its_recorded_time(monkeypatch):
    (summary, _, _), state = _run(["launch: mlp"] * 3, None, True, monkeypatch)
    rec_launches = summary["ops"]
    assert state.replays == 2
    assert {r["launches"] for r in rec_launches} == {3}
    (one, _, _), _ = _run(["launch: mlp"], None, True, monkeypatch)
    # launches follow each other with no gap (the host enqueues ahead): 3x the device time
    assert summary["device_time_ns"] == pytest.approx(3 * one["device_time_ns"], abs=1e-3)


def test_a_pe_array_is_keyed_by_its_warmth_until_it_has_cooled_fully():
    from types import SimpleNamespace

    from trnsim.engines.warmup import Warmup
    from trnsim.runtime.reuse import _warmth

    wu = Warmup(0.5, 3_000_000)  # cools by 1 per 3 us idle
    core = SimpleNamespace(warmup=wu)
    assert _warmth(core, 0) == "cold"  # never ran
    wu.w, wu.free = 0.5, 10_000_000
    assert _warmth(core, 10_000_000) == (0.5, 0)
    assert _warmth(core, 11_000_000) == (0.5, 1_000_000)  # 1/3 cooler at its next start
    assert _warmth(core, 11_500_000) == "cold"  # 0.5 - 1.5 us / 3 us = 0: as if it never ran
    assert _warmth(core, 12_000_000, relative=True) == (0.5, -2_000_000)
    assert _warmth(SimpleNamespace(warmup=None), 5) is None
