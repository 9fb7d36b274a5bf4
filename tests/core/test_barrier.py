"""core_barrier: the two physical cores of an LNC 2 logical core meet (isa.md 8.6). Exact
timelines from the config's `core.barrier_latency` L: a core reaching barrier n at t goes on at
max(t, t_peer + L); nth barrier meets nth; values unchanged; a barrier the other core never
reaches is a deadlock naming it; the wrong chip, lnc or operands are one-line errors."""

import re

import numpy as np
import pytest

from trnsim.config import load_chip
from trnsim.errors import DeadlockError, SimError, TraceError
from trnsim.runtime.session import run_program
from trnsim.trace import loads
from trnsim.units import seconds_to_ps

TRN2 = load_chip("trn2")
L = seconds_to_ps(TRN2.core.barrier_latency)

HEAD = """
trnsim: 1
chip: trn2
lnc: 2
tensors:
  x: {shape: [128, 64], dtype: float32, init: arange}
  y: {shape: [128, 64], dtype: float32}
kernels:
  k:
    tiles:
      t: {memory: sbuf, shape: [128, 64], dtype: float32}
      u: {memory: sbuf, shape: [128, 2048], dtype: float32}
    per_core:
"""


def run(core0: str, core1: str, cfg=TRN2, mode="functional"):
    text = HEAD + "      - " + core0.strip().replace("\n", "\n        ") + "\n"
    text += "      - " + core1.strip().replace("\n", "\n        ") + "\n"
    return run_program(loads(text, "b.yaml"), cfg, mode)


def spans(r, core, track):
    """(op, start, end) on one track, times from the launch's start."""
    t0 = r.device.recorder.launches[0].start_ps
    return [(s.op, s.start_ps - t0, s.end_ps - t0) for s in r.device.recorder.spans
            if s.core == core and s.track == track]  # fmt: skip


BUSY = "- {op: memset, dst: u, value: 1, engine: gpsimd}"


@pytest.mark.parametrize("late", [0, 1])
def test_the_later_core_goes_on_at_once_the_earlier_one_latency_after_it_arrives(late):
    # the late core first runs a memset of D ps (D > L), then both meet; each then memsets t
    after = "- {op: memset, dst: t, value: 2, engine: gpsimd}"
    bar = "- {op: core_barrier, data: y}"
    progs = [f"- {bar[2:]}\n{after}", f"{BUSY}\n{bar}\n{after}"]
    r = run(*(progs if late else progs[::-1]))
    (_, _, d), bar_late, next_late = spans(r, late, "gpsimd")
    (_, s_early, e_early), next_early = spans(r, 1 - late, "gpsimd")
    assert d > L
    # late: arrives at D, the early core's signal (sent at 0) arrived at L < D: no wait
    assert bar_late == ("core_barrier", d, d) and next_late[1] == d
    # early: arrives at 0, waits for the late core's signal: D + L; its span is the crossing
    assert (s_early, e_early) == (d, d + L) and next_early[1] == d + L


def test_cores_arriving_together_both_wait_the_latency():
    bar = "- {op: core_barrier, data: y, engine: vector}"
    r = run(bar, bar)
    assert spans(r, 0, "vector") == spans(r, 1, "vector") == [("core_barrier", 0, L)]
    assert r.summary["device_time_ns"] * 1000 == L


def test_the_nth_barrier_meets_the_nth_whatever_the_engines():
    # core 0: barriers on vector (1st) and scalar (2nd); core 1: gpsimd (1st, after D of
    # work) and vector (2nd, after the 1st: same queue order)
    c0 = """
- {op: core_barrier, data: y, engine: vector}
- {op: core_barrier, data: y, engine: scalar}
"""
    c1 = f"""
{BUSY}
- {{op: core_barrier, data: y, signal: {{one: 1}}}}
- {{op: core_barrier, data: y, engine: vector, wait: {{one: 1}}}}
"""
    r = run(c0, c1)
    (_, _, d), first1 = spans(r, 1, "gpsimd")
    assert spans(r, 0, "vector") == [("core_barrier", d, d + L)]  # met core 1's 1st at D
    assert first1 == ("core_barrier", d, d)
    # the 2nd: core 0's scalar arrived at 0; core 1's vector at D (its semaphore wait)
    assert spans(r, 0, "scalar") == [("core_barrier", d, d + L)]
    assert spans(r, 1, "vector") == [("core_barrier", d, d)]


def test_values_cross_the_barrier_through_hbm():
    # core 0 stores x to y, then meets core 1, which then loads y
    c0 = """
- {op: dma_copy, src: x, dst: t, signal: {ld: 1}}
- {op: dma_copy, src: t, dst: y, wait: {ld: 1}, signal: {st: 1}}
- {op: core_barrier, data: y, wait: {st: 1}}
"""
    c1 = """
- {op: core_barrier, data: y, signal: {met: 1}}
- {op: dma_copy, src: y, dst: t, wait: {met: 1}}
"""
    r = run(c0, c1)
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    np.testing.assert_array_equal(r.tile("k", "t", core=1), x)
    store = [s for s in r.device.recorder.spans if s.core == 0 and s.track == "q0"][-1]
    load = [s for s in r.device.recorder.spans if s.core == 1 and s.track == "q0"][0]
    assert load.start_ps >= store.end_ps + L  # the load starts after the crossing
    assert run(c0, c1, mode="timing").summary["device_time_ns"] == r.summary["device_time_ns"]


def test_a_barrier_the_other_core_never_reaches_is_a_deadlock_naming_it():
    two = "- {op: core_barrier, data: y}\n- {op: core_barrier, data: y, engine: vector}"
    with pytest.raises(DeadlockError) as e:
        run(two, "- {op: core_barrier, data: y}")
    msg = str(e.value)
    assert "b.yaml:15: core0.vector in kernel k waits for core1 to reach core_barrier 2 " in msg
    assert "(it reached 1) at instruction 1 (core_barrier)" in msg and "\n" not in msg


def test_a_kernel_with_one_core_program_leaves_its_barrier_waiting():
    text = HEAD.replace("    per_core:\n", "    per_core:\n      - - {op: core_barrier, data: y}\n")
    with pytest.raises(DeadlockError, match="core0.gpsimd in kernel k waits for core1 to reach"):
        run_program(loads(text, "b.yaml"), TRN2)


SHORT = """
trnsim: 1
lnc: {lnc}
tensors:
  y: {{shape: [128, 64], dtype: float32}}
tiles:
  t: {{memory: sbuf, shape: [128, 64], dtype: float32}}
instructions:
  - {{op: core_barrier, {fields}}}
"""


@pytest.mark.parametrize(
    "chip,lnc,fields,match",
    [
        (
            "trn1",
            1,
            "data: y",
            "b.yaml:9: kernel main, core 0: instruction 0 (core_barrier): "
            "core_barrier is not supported on NC-v2; expected a chip with NC-v3 or later",
        ),
        (
            "trn2",
            1,
            "data: y",
            "b.yaml:9: kernel main, core 0: instruction 0 (core_barrier): "
            "core_barrier needs the two physical cores of an LNC 2 logical core, and this one "
            "runs at lnc 1; expected lnc: 2",
        ),
        ("trn3", 2, "data: t", r"b.yaml:9: .*: data 't' is in SBUF, expected HBM"),
    ],
)
def test_wrong_chip_lnc_or_data_is_a_one_line_error_with_the_line(chip, lnc, fields, match):
    prog = loads(SHORT.format(lnc=lnc, fields=fields), "b.yaml")
    with pytest.raises(SimError, match=re.escape(match) if chip != "trn3" else match) as e:
        run_program(prog, load_chip(chip))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "fields,match",
    [
        ("data: y, cores: [0, 2]", r"b.yaml:9: .*cores: got \[0, 2\]; expected \[0, 1\]"),
        ("data: y, cores: 1", r"b.yaml:9: .*cores: got 1; expected \[0, 1\]"),
        (
            "data: y, engine: tensor",
            r"b.yaml:9: .*core_barrier cannot run on engine 'tensor'; expected one of gpsimd, vector, scalar",
        ),
        ("cores: [0, 1]", r"b.yaml:9: .*core_barrier is missing its field 'data'"),
        ("data: z", r"b.yaml:9: .*data: unknown tile or tensor 'z'"),
    ],
)
def test_bad_fields_are_trace_errors_with_the_line(fields, match):
    with pytest.raises(TraceError, match=match):
        loads(SHORT.format(lnc=2, fields=fields), "b.yaml")


def test_cores_1_0_is_the_same_pair():
    prog = loads(SHORT.format(lnc=2, fields="data: y, cores: [1, 0]"), "b.yaml")
    assert prog.kernels["main"].per_core[0].instructions[0].cores == (0, 1)
