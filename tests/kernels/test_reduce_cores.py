"""A reduction of all of x at LNC 2 (`kernels.reduce.Reduce.everything`): the blocks alternate
between the two cores, the second core's partial crosses to the first through out at a
`core_barrier`. Values against numpy, which reductions split, the race check, and the timeline
of the meeting derived from the config's barrier latency."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.test_ops import _run_cores
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.isa import CoreBarrier, DmaCopy
from trnsim.kernels import lower_cores
from trnsim.kernels.reference import tolerance
from trnsim.runtime.session import run_program
from trnsim.trace.program import KernelSpec, OpSpec, Program, Step, StreamSpec, TensorSpec
from trnsim.trace.races import find_races
from trnsim.units import seconds_to_ps

REF = {"sum": np.sum, "mean": np.mean, "amax": np.max, "amin": np.min}


def _barriers(prog) -> int:
    return sum(isinstance(i, CoreBarrier) for i in prog.instructions)


def _loads_of_x(prog) -> int:
    return sum(isinstance(i, DmaCopy) and i.src.name == "x" for i in prog.instructions)


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize(
    "shape,dt,out_dt",
    [
        ((300, 700), "float32", "float32"),
        ((2, 130, 600), "bfloat16", "float32"),
        ((1024, 2048), "float32", "float32"),
    ],
)
def test_both_cores_reduce_half_and_meet_at_a_barrier(op, shape, dt, out_dt):
    t = {"x": (shape, dt, "normal"), "o": ((), out_dt, None)}
    r, progs = _run_cores(t, [(op, {"x": "x", "out": "o", "dim": None})], 2)
    assert [_barriers(p) for p in progs] == [1, 1]
    n0, n1 = (_loads_of_x(p) for p in progs)
    assert n0 >= 1 and n1 >= 1 and abs(n0 - n1) <= 1  # the blocks alternate
    x = r.tensor("x").astype(np.float64)
    want = REF[op](x)
    rtol, atol = tolerance(out_dt)
    np.testing.assert_allclose(float(r.tensor("o")), want, rtol=rtol,
                               atol=atol * max(1.0, np.abs(x).max()))  # fmt: skip
    assert find_races(r.program) == []


@pytest.mark.parametrize("op", ["amax", "amin"])
def test_max_and_min_into_bf16_split_too_and_are_exact(op):
    # rounding to bf16 keeps the order: max(a, bf16(b)) rounds to bf16(max(a, b))
    t = {"x": ((1024, 2048), "float32", "normal"), "o": ((), "bfloat16", None)}
    r, progs = _run_cores(t, [(op, {"x": "x", "out": "o", "dim": None})], 2)
    assert [_barriers(p) for p in progs] == [1, 1]
    want = REF[op](r.tensor("x")).astype(dtype("bfloat16").np)
    assert r.tensor("o") == want


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_a_sum_into_bf16_stays_on_the_first_core(op):
    # the partial would be rounded to bf16 on its way: one core does it all, as before
    t = {"x": ((1024, 2048), "float32", "normal"), "o": ((), "bfloat16", None)}
    r, progs = _run_cores(t, [(op, {"x": "x", "out": "o", "dim": None})], 2)
    assert [_barriers(p) for p in progs] == [0, 0] and progs[1].instructions == []
    want = REF[op](r.tensor("x").astype(np.float64))
    assert abs(float(r.tensor("o")) - want) <= 2**-7 * max(1.0, abs(want)) + 0.05


def test_one_block_stays_on_one_core():
    t = {"x": ((128, 64), "float32", "normal"), "o": ((), "float32", None)}
    _, progs = _run_cores(t, [("sum", {"x": "x", "out": "o", "dim": None})], 2)
    assert [_barriers(p) for p in progs] == [0, 0] and progs[1].instructions == []


def _timed(shape, cores: int):
    cfg = load_chip("trn2")
    specs = {
        "x": TensorSpec("x", shape, dtype("float32")),
        "o": TensorSpec("o", (), dtype("float32")),
    }
    progs = lower_cores([OpSpec("sum", {"x": "x", "out": "o", "dim": None})], specs, cfg, cores)
    prog = Program("t", "trn2", 0, "timing", cores, [], specs,
                   {"k": KernelSpec("k", per_core=progs)},
                   [StreamSpec("s", 0, [Step("launch", "k")])])  # fmt: skip
    return run_program(prog, cfg), cfg


def test_the_meeting_costs_the_barrier_latency_after_the_second_core_stores_its_partial():
    r, cfg = _timed((1024, 2048), 2)
    lat = seconds_to_ps(cfg.core.barrier_latency)
    spans = r.device.recorder.spans
    bar = {s.core: s for s in spans if s.op == "core_barrier"}
    stores = [s for s in spans if s.core == 1 and s.track.startswith("q") and s.track != "q0"]
    # core 0 reached its barrier at the launch (nothing before it): it waits for core 1, which
    # reaches its barrier when its partial's store completes (t1), and goes on at t1 + L; core
    # 1 goes on at once (core 0's signal arrived long before)
    t1 = bar[1].start_ps
    assert bar[1].end_ps == t1 and t1 >= max(s.end_ps for s in stores)
    assert (bar[0].start_ps, bar[0].end_ps) == (t1, t1 + lat)
    load = [s for s in spans if s.core == 0 and s.start_ps >= t1 and s.track == "q0"]
    assert load and load[0].start_ps >= t1 + lat  # core 0 reads the partial after the crossing


def test_two_cores_take_well_under_the_time_of_one_on_a_large_x():
    # 32 MiB of fp32 to read: the loads dominate; each core reads half (through one HBM stack
    # the pair shares: 60% of one core's time, not 50%), then a ~µs meeting
    one = _timed((4096, 2048), 1)[0].summary["device_time_ns"]
    two = _timed((4096, 2048), 2)[0].summary["device_time_ns"]
    assert 0.5 * one < two < 0.65 * one


def test_a_chip_without_core_barrier_keeps_it_on_one_core():
    cfg = load_chip("trn2", ["core.core_barrier=false"])
    specs = {"x": TensorSpec("x", (1024, 2048), dtype("float32")),
             "o": TensorSpec("o", (), dtype("float32"))}  # fmt: skip
    progs = lower_cores([OpSpec("sum", {"x": "x", "out": "o", "dim": None})], specs, cfg, 2)
    assert [_barriers(p) for p in progs] == [0, 0] and progs[1].instructions == []


@pytest.mark.parametrize("op,dt", [("sum", "float32"), ("amax", "bfloat16"), ("mean", "float32")])
def test_one_long_row_is_shared_by_both_cores(op, dt):
    """A 1-D tensor (or [1, n]) too long for a partition, reduced over its only dim, is
    everything reduced: both cores load half its blocks and meet (it went to one core as a
    row in pieces, 47% of its bound at 16 MiB); a bf16 sum stays on one core (its partial
    would be rounded on its way)."""
    n = 3 * 2**18 + 5  # not a multiple of 128
    t = {"x": ((n,), dt, "normal"), "o": ((), "float32" if op != "amax" else dt, None)}
    r, progs = _run_cores(t, [(op, {"x": "x", "out": "o", "dim": 0})], 2)
    assert [_barriers(p) for p in progs] == [1, 1]
    n0, n1 = (_loads_of_x(p) for p in progs)
    assert n0 >= 6 and abs(n0 - n1) <= 1, (n0, n1)
    x = r.tensor("x").astype(np.float64)
    rtol, atol = tolerance("float32")
    np.testing.assert_allclose(float(r.tensor("o")), REF[op](x), rtol=rtol,
                               atol=atol * max(1.0, np.abs(x).max()))  # fmt: skip


def test_a_bf16_sum_of_one_long_row_stays_on_one_core():
    t = {"x": ((2**20,), "bfloat16", "normal"), "o": ((), "bfloat16", None)}
    _, progs = _run_cores(t, [("sum", {"x": "x", "out": "o", "dim": 0})], 2)
    assert [_barriers(p) for p in progs] == [0, 0]


@pytest.mark.parametrize("shape", [(4194304,), (2049, 2047), (7, 599186)])
def test_16_mib_of_fp32_reduced_whole_reach_72_percent_of_the_dma_bound(shape):
    """Everything reduced, 16 MiB of fp32 at LNC 2: 16 blocks a core or more, each reduced on
    VectorE or ScalarE, whichever is free first (four blocks a core loaded at once, then
    reduced on VectorE alone: 57% of the bound; 75-77% now, the loads' last blocks and the
    meeting after them the rest)."""
    from tests.kernels.test_op_report import run_ops

    r, _ = run_ops({"x": (shape, "float32"), "out": ((1,), "float32")},
                   [("sum", {"x": "x", "out": "out", "dim": None})], lnc=2)  # fmt: skip
    (row,) = r.summary["ops"]
    assert row["dma_bound_ns"] >= 0.72 * row["time_ns"], (row["time_ns"], row["dma_bound_ns"])
