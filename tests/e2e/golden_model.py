"""The model by hand (docs/model.md) for the golden-figure tests: each golden's chip config,
the cost formulas of the engines and the DMA with every hardware number read from the config,
and the checks the tests share (test_golden_figures.py says how exact each must be)."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest

from trnsim.config import ChipConfig, load_chip

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
CHIPS = {name: load_chip(name) for name in ("trn1", "trn2", "trn3")}
PS = 10**12  # picoseconds per second
ENGINE_TRACKS = ("tensor", "vector", "scalar", "gpsimd")


def goldens(stem: str) -> list[str]:
    """The golden names of a bundled trace: `<stem>` (its own chip) and `<stem>@<chip>`."""
    return sorted(p.stem for p in GOLDEN.glob("*.json") if p.stem.partition("@")[0] == stem)


def golden(name: str) -> tuple[dict, ChipConfig]:
    """(the golden report, the config of the chip it ran on)."""
    g = json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))
    return g, CHIPS[g["chip"]]


def by_name(stem: str):
    return pytest.mark.parametrize("name", goldens(stem))


# -- the model, by hand (docs/model.md) ---------------------------------------------------------


def cycles_ps(cycles, hz) -> int:
    """An engine's cycles at its clock, in ps rounded up: ceil(cycles * 1e12 / clock_hz)."""
    return math.ceil(Fraction(cycles) * PS / Fraction(hz))


def seconds_ps(seconds) -> int:
    """A config duration (transfer_setup, latency, launch_overhead) in whole ps."""
    return round(Fraction(seconds) * PS)


def setup_ps(cfg, engines: int = 16) -> int:
    """S(k): a DMA transfer's setup on its queue, for one touching k engines:
    transfer_setup + (k - 1) x engine_stagger (a queue sets up one transfer at a time)."""
    d = cfg.core.dma
    return seconds_ps(d.transfer_setup) + (engines - 1) * seconds_ps(d.engine_stagger)


def latency_ps(cfg, store: bool = False) -> int:
    """From a transfer's data end to its completion (semaphore signal)."""
    d = cfg.core.dma
    return seconds_ps(d.store_completion_latency if store else d.load_completion_latency)


def matmul_cycles(cfg, m: int, n: int, cold: bool, new_stationary: bool = True) -> int:
    """TensorE, bf16: max(min(64, M), N), at least MM_INIT_LATENCY (a floor), + LoadStationary
    when it starts the queue or waits on a semaphore with a stationary that differs from the
    previous one's."""
    t = cfg.core.tensor
    cycles = max(max(min(t.stationary_min_cycles, m), n), t.mm_init_latency_cycles)
    if cold and new_stationary:
        cycles += t.load_stationary_cycles
    return cycles


def warm(cfg) -> bool:
    """Whether the chip's PE array warms up (docs/model.md: trn2, trn3)."""
    t = cfg.core.tensor
    return t.warmup and t.warmup_start_rate < 1


def cold_ps(cfg, work_ps: int) -> float:
    """A matmul of `work_ps` at full speed on a cold PE array: the array's speed rises linearly
    from a = warmup_start_rate to 1 over T = warmup_time of busy time, so x ps of it do
    a x + (1 - a) x^2 / (2 T) of work; solved for the work (shorter than the ramp)."""
    if not warm(cfg):
        return work_ps
    t = cfg.core.tensor
    a, ramp = t.warmup_start_rate, seconds_ps(t.warmup_time)
    c = (1 - a) / (2 * ramp)
    assert work_ps < (a + (1 - a) / 2) * ramp
    return (-a + math.sqrt(a * a + 4 * c * work_ps)) / (2 * c)


def tensor_busy(cfg, full_ps: int, n: int):
    """TensorE's busy time for `full_ps` at full speed: exact without warm-up; else between
    full_ps and full_ps / warmup_start_rate (the speed is at least that), up to n ps of
    rounding (a (low, high) pair for `assert_engines`)."""
    if not warm(cfg):
        return full_ps
    return (full_ps, full_ps / cfg.core.tensor.warmup_start_rate + n)


def act_cycles(cfg, n: int, waits: bool, reduce: bool = False) -> int:
    """ScalarE activation: max(MIN_II, N), + the fixed overhead when it waits on a semaphore,
    + the reduction's cycles with `reduce`."""
    s = cfg.core.scalar
    return (
        max(s.min_ii_cycles, n)
        + (s.fixed_overhead_cycles if waits else 0)
        + (s.reduce_cycles if reduce else 0)
    )


def vector_cycles(cfg, n: int, waits: bool) -> int:
    """VectorE fp32 tensor_scalar / tensor_reduce (no fast mode for fp32): max(MIN_II, N),
    + the fixed overhead when it waits on a semaphore."""
    v = cfg.core.vector
    return max(v.min_ii_cycles, n) + (v.fixed_overhead_cycles if waits else 0)


def copy_work_ps(cfg, rows: int, row_bytes: int, store: bool = False) -> Fraction:
    """The busiest DMA engine's work (in ps at its full rate) for a copy of `rows` whole SBUF
    partitions of `row_bytes` contiguous bytes: partitions are spread evenly over the engines
    (rows / engines each), one descriptor per partition row (<= max_descriptor_bytes):
    descriptors x descriptor_cost + bytes / engine_bandwidth (store_bandwidth into HBM)."""
    d = cfg.core.dma
    assert rows % d.engines == 0 and row_bytes <= d.max_descriptor_bytes
    per_engine = rows // d.engines
    bw = d.store_bandwidth if store else d.engine_bandwidth
    return per_engine * Fraction(d.descriptor_cost) * PS + Fraction(
        per_engine * row_bytes
    ) * PS / Fraction(bw)


def queue_ends(issues, setup: int, data) -> list:
    """When each transfer of one DMA queue ends its data: setups one at a time from its issue
    on, data in order once set up, each data phase taking `data`."""
    setup_free = data_free = 0
    ends = []
    for t in issues:
        setup_free = max(t, setup_free) + setup
        data_free = max(setup_free, data_free) + data
        ends.append(data_free)
    return ends


def peak_per_core(cfg) -> int:
    """bf16 FLOP/s of one core: rows x cols MACs x 2 FLOPs per cycle at the PE clock."""
    t = cfg.core.tensor
    return 2 * t.rows * t.cols * t.clock_hz


def near(got_ns: float, want_ps, completions: int = 1) -> None:
    """A time the fluid model computes: at most `completions` ps over the exact value (each
    completion on the path is rounded up to a whole ps), never a ps under it."""
    got_ps = round(got_ns * 1000)
    assert want_ps - 1 < got_ps < want_ps + completions, (got_ns, float(want_ps) / 1000)


def ratio(x):
    return pytest.approx(x, rel=1e-12, abs=0)


def assert_engines(g: dict, busy: dict[str, tuple], device_ps: int) -> None:
    """The engine rows: busy ps (exact, or a (low, high) pair) and instruction counts of the
    listed tracks, 0 for the others of the same cores; utilization = busy / device time."""
    cores = {track.split(".")[0] for track in busy}
    assert set(g["engines"]) == {f"{c}.{e}" for c in cores for e in ENGINE_TRACKS}
    for track, row in g["engines"].items():
        ps, n = busy.get(track, (0, 0))
        got = round(row["busy_ns"] * 1000)
        if isinstance(ps, tuple):
            assert ps[0] - 1 < got < ps[1] and row["instructions"] == n, (track, got, ps)
        else:
            assert (row["busy_ns"], row["instructions"]) == (ps / 1000, n), track
        assert row["utilization"] == ratio(got / device_ps), track


def assert_flops(g: dict, cfg, flops: int, device_ps, compute_cores: int = 1, fp32: int = 0):
    """FLOPs (`fp32` of them on fp32 operands, the others bf16), FLOP/s over the device time,
    and the fraction of the computing cores' peak (none without FLOPs)."""
    seconds = Fraction(device_ps) / PS
    assert g["flops"] == flops
    by = {"bfloat16": flops - fp32, "float32": fp32}
    assert g["flops_by_dtype"] == {k: v for k, v in by.items() if v}
    assert g["flops_per_s"] == ratio(flops / seconds)
    if not flops:
        assert g["peak_fraction"] is None
        return
    at_peak = Fraction(flops - fp32) / peak_per_core(cfg) + Fraction(fp32) / (
        peak_per_core(cfg) * Fraction(cfg.core.tensor.fp32_rate))  # fmt: skip
    assert g["peak_fraction"] == ratio(at_peak / (seconds * compute_cores))
