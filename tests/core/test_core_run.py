"""A NeuronCore's queues: exact timelines of small programs, peak matmul rates, deadlocks."""

import math

import numpy as np
import pytest

from trnsim.api import Trace
from trnsim.config import load_chip
from trnsim.errors import DeadlockError, SimError
from trnsim.units import cycles_to_ps

# exact timelines without the PE array's warm-up (its own tests switch it on)
TRN2 = load_chip("trn2", ["core.tensor.warmup=false"])
TRN2_WARM = load_chip("trn2")
TE, SE, VE = (TRN2.core.tensor.clock_hz, TRN2.core.scalar.clock_hz, TRN2.core.vector.clock_hz)


def spans(result):
    return [(s.track, s.op, s.start_ps, s.end_ps) for s in result.device.recorder.spans]


def gemm_kernel(t, name="k"):
    k = t.kernel(name)
    k.tile("x", "sbuf", [128, 128], "bfloat16", init="normal")
    k.tile("w", "sbuf", [128, 512], "bfloat16", init="normal")
    k.tile("acc", "psum", [128, 512], "float32")
    k.tile("o", "sbuf", [128, 512], "bfloat16")
    return k


def test_semaphore_serializes_two_engines_exactly():
    t = Trace()
    k = gemm_kernel(t)
    k.matmul(stationary="x", moving="w", dst="acc", signal={"mm": 1})
    k.activation(func="relu", src="acc", dst="o", wait={"mm": 1})
    r = t.run(TRN2)
    (t0, op0, s0, e0), (t1, op1, s1, e1) = spans(r)
    # matmul, cold: max(512, MM_INIT 64) + LoadStationary 32 = 544 TensorE cycles
    assert (t0, op0, e0 - s0) == ("tensor", "matmul", cycles_to_ps(544, TE))
    # activation starts the instant the matmul signals: max(64, 512) + 100 overhead cycles
    assert (t1, op1, s1, e1 - s1) == ("scalar", "activation", e0, cycles_to_ps(612, SE))
    # and it computed relu(x^T w) rounded to bf16
    x = r.tile("k", "x").astype(np.float32)
    w = r.tile("k", "w").astype(np.float32)
    ref = np.maximum(x.T @ w, 0)
    np.testing.assert_allclose(r.tile("k", "o").astype(np.float32), ref, rtol=1e-2, atol=1e-2)


def test_independent_instructions_overlap():
    t = Trace()
    k = gemm_kernel(t)
    k.tile("v", "sbuf", [128, 512], "float32", init="ones")
    k.matmul(stationary="x", moving="w", dst="acc")
    k.tensor_scalar(src="v", dst="v", op0="add", operand0=1.0)
    r = t.run(TRN2)
    (_, _, s0, e0), (_, _, s1, e1) = sorted(spans(r))
    assert s0 == s1 == r.device.recorder.spans[0].start_ps  # both start at launch
    assert r.summary["device_time_ns"] * 1000 == max(e0, e1) - s0  # overlap, not sum


def test_in_order_queue_is_back_to_back():
    t = Trace()
    k = gemm_kernel(t)
    for _ in range(3):
        k.matmul(stationary="x", moving="w", dst="acc")
    r = t.run(TRN2)
    ss = spans(r)
    assert [e - s for _, _, s, e in ss] == [cycles_to_ps(544, TE)] + [cycles_to_ps(512, TE)] * 2
    assert ss[1][2] == ss[0][3] and ss[2][2] == ss[1][3]


def peak_trace(dt, stationary, moving, n=1000):
    t = Trace()
    k = t.kernel("k")
    k.tile("x", "sbuf", stationary, dt, init="normal")
    k.tile("w", "sbuf", moving, dt, init="normal")
    k.tile("acc", "psum", [128, 512], "float32")
    for _ in range(n):
        k.matmul(stationary="x", moving="w", dst="acc")
    return t


def test_thousand_bf16_matmuls_reach_peak():
    # 1000 x 512 cycles at 2.4 GHz = 213.33 us, plus one cold LoadStationary of 32 cycles
    r = peak_trace("bfloat16", [128, 128], [128, 512]).run(TRN2, mode="timing")
    device_ps = r.summary["device_time_ns"] * 1000
    assert device_ps == cycles_to_ps(544, TE) + 999 * cycles_to_ps(512, TE)
    assert r.summary["peak_fraction"] >= 0.95
    assert r.summary["flops"] == 1000 * 2 * 128 * 128 * 512


def test_warm_up_costs_a_quarter_of_the_ramp():
    # From cold the array runs at a = 50% and ramps linearly to full over T = 3 us of busy
    # time: in those T it does (a + (1 - a) / 2) T = 0.75 T of work, so a burst longer than
    # the ramp takes (1 - 0.75) T = 750 ns more than at full speed (each instruction is
    # rounded up to whole ps: at most 1 ps more each)
    t = TRN2_WARM.core.tensor
    a, ramp = t.warmup_start_rate, t.warmup_time * 1e12
    extra = (1 - (a + (1 - a) / 2)) * ramp
    r = peak_trace("bfloat16", [128, 128], [128, 512]).run(TRN2_WARM, mode="timing")
    device_ps = r.summary["device_time_ns"] * 1000
    full = cycles_to_ps(544, TE) + 999 * cycles_to_ps(512, TE)
    assert full + extra <= device_ps <= full + extra + 1000
    # the first matmul, from cold, takes x with the work of the ramp's first x ps equal to
    # its own: a x + (1 - a) x^2 / (2 T) = d
    assert r.device.recorder.spans[0].duration_ps == pytest.approx(
        cold_ps(cycles_to_ps(544, TE)), abs=1
    )


def cold_ps(d: int) -> float:
    """ps a cold PE array takes for d ps of full-speed work (shorter than the ramp)."""
    t = TRN2_WARM.core.tensor
    a, ramp = t.warmup_start_rate, t.warmup_time * 1e12
    c = (1 - a) / (2 * ramp)
    return (-a + math.sqrt(a * a + 4 * c * d)) / (2 * c)


def test_warm_up_cools_down_while_idle():
    # two bursts of one matmul, the second after an idle gap longer than the ramp: both start
    # cold, so both take the same time; back to back, the second is faster
    def burst(gap_waits):
        t = Trace()
        k = t.kernel("k")
        k.tile("x", "sbuf", [128, 128], "bfloat16")
        k.tile("w", "sbuf", [128, 512], "bfloat16")
        k.tile("acc", "psum", [128, 512], "float32")
        k.tile("v", "sbuf", [128, 16384], "float32")
        k.matmul(stationary="x", moving="w", dst="acc")
        if gap_waits:  # VectorE busy for 16384 cycles at 0.96 GHz = 17 us, then the matmul
            k.tensor_scalar(src="v", dst="v", op0="add", operand0=1.0, signal={"g": 1})
        k.matmul(stationary="x", moving="w", dst="acc", wait={"g": 1} if gap_waits else {})
        spans = [s for s in t.run(TRN2_WARM, mode="timing").device.recorder.spans]
        return [s.duration_ps for s in spans if s.track == "tensor"]

    # (the second reuses the stationary: 512 cycles, no LoadStationary)
    d1, d2 = cycles_to_ps(544, TE), cycles_to_ps(512, TE)
    first, again = burst(True)
    assert first == pytest.approx(cold_ps(d1), abs=1)
    assert again == pytest.approx(cold_ps(d2), abs=1)
    first, second = burst(False)
    assert second < cold_ps(d2) - 10_000


def test_fp32_takes_four_times_as_long():
    bf = peak_trace("bfloat16", [128, 128], [128, 512]).run(TRN2, mode="timing").summary
    fp = peak_trace("float32", [128, 128], [128, 512]).run(TRN2, mode="timing").summary
    assert fp["device_time_ns"] == pytest.approx(4 * bf["device_time_ns"], rel=1e-3)
    assert fp["peak_fraction"] >= 0.95  # against the fp32 peak


def test_fp8_double_row_doubles_the_flop_rate():
    bf = peak_trace("bfloat16", [128, 128], [128, 512]).run(TRN2, mode="timing").summary
    f8 = peak_trace("float8_e4m3", [128, 2, 128], [128, 2, 512]).run(TRN2, mode="timing").summary
    assert f8["flops_per_s"] == pytest.approx(2 * bf["flops_per_s"], rel=1e-9)
    assert f8["peak_fraction"] >= 0.95


def test_deadlock_names_stuck_engines_and_semaphores():
    t = Trace()
    k = gemm_kernel(t)
    # tensor waits for 'a', which scalar signals only after waiting for 'b' from tensor
    k.matmul(stationary="x", moving="w", dst="acc", wait={"a": 1}, signal={"b": 1})
    k.activation(func="relu", src="acc", dst="o", wait={"b": 1}, signal={"a": 1})
    with pytest.raises(DeadlockError) as e:
        t.run(TRN2)
    msg = str(e.value)
    assert "core0.tensor in kernel k waits for semaphore 'a' >= 1 (it is 0)" in msg
    assert "core0.scalar in kernel k waits for semaphore 'b' >= 1 (it is 0)" in msg


def test_sbuf_overflow_is_an_error():
    t = Trace()
    k = t.kernel("big")
    k.tile("a", "sbuf", [128, 60000], "float32")  # 240,000 B per partition > 224 KiB
    k.memset(dst="a[:, 0:8]", value=0.0)
    with pytest.raises(
        SimError, match="SBUF overflow: tiles need 240000 bytes per partition but SBUF has 229376"
    ):
        t.run(TRN2)
    # ... and fits when SBUF is made larger
    t.run(load_chip("trn2", ["core.sbuf.partition_bytes=448KiB"]), mode="timing")


def test_trn1_vector_and_gpsimd_share_the_sbuf_port():
    trn1 = load_chip("trn1")
    t = Trace()
    k = t.kernel("k")
    k.tile("a", "sbuf", [128, 512], "float32")
    k.tile("b", "sbuf", [128, 512], "float32")
    k.memset(dst="a", value=1.0)
    k.iota(dst="b")
    r = t.run(trn1)
    (_, _, s0, e0), (_, _, s1, e1) = sorted(spans(r), key=lambda x: x[2])
    assert s1 == e0  # GpSimd waited for Vector to release the SBUF port
    r2 = t.run(TRN2)
    (_, _, s0, _), (_, _, s1, _) = spans(r2)
    assert s0 == s1  # on Trn2 they run side by side


def test_a_relaunched_kernel_starts_from_fresh_tiles_and_semaphores():
    # the second launch reuses the first one's bound instructions, but its tile starts again
    # from its init values and its semaphores from 0
    t = Trace()
    t.tensor("y", [128, 4], "float32")
    k = t.kernel("inc")
    k.tile("a", "sbuf", [128, 4], "float32", init="arange")
    k.tensor_scalar(src="a", dst="a", op0="add", operand0=1.0, signal={"ok": 1})
    k.dma_copy(src="a", dst="y", wait={"ok": 1})
    t.stream("s", 0, [("launch", "inc"), ("launch", "inc")])
    r = t.run(TRN2)
    np.testing.assert_array_equal(
        r.tensor("y"), np.arange(512, dtype=np.float32).reshape(128, 4) + 1
    )
    spans = [s for s in r.device.recorder.spans if s.track == "vector"]
    assert len(spans) == 2 and spans[0].duration_ps == spans[1].duration_ps


def test_read_after_write_on_one_engine_waits_for_the_commit():
    # a -> b, then b -> c reads what the first wrote: it starts commit_latency_cycles after the
    # first ends (ScalarE: 200 cycles, not busy time); a -> d after it does not wait
    t = Trace()
    k = t.kernel("k")
    for name in "abcd":
        k.tile(name, "sbuf", [128, 512], "float32", init="zeros")
    k.activation(func="copy", src="a", dst="b")
    k.activation(func="copy", src="b", dst="c")
    k.activation(func="copy", src="a", dst="d")
    (_, _, s0, e0), (_, _, s1, e1), (_, _, s2, e2) = spans(t.run(TRN2, mode="timing"))
    commit = cycles_to_ps(TRN2.core.scalar.commit_latency_cycles, SE)
    assert (s0, e0 - s0) == (s0, cycles_to_ps(512, SE))
    assert s1 == e0 + commit and e1 - s1 == cycles_to_ps(512, SE)
    assert s2 == e1
