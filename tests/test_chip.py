"""Kernels that move data: DMA timing at kernel level, double-buffering, several cores.

Each expected figure is derived by hand in the test from the chip config's numbers.
"""

import numpy as np
import pytest

from trnsim.api import Trace
from trnsim.config import load_chip
from trnsim.errors import SimError
from trnsim.units import seconds_to_ps

TRN2, TRN3 = load_chip("trn2"), load_chip("trn3")


def test_one_32k_transfer_on_one_engine():
    # [8, 2048] bf16 = 32 KiB; 8 partitions -> exactly one DMA engine (each serves 128/16 = 8).
    # Each partition's row is 4 KiB contiguous on both sides: 8 descriptors.
    # time = transfer_setup (one engine: no stagger) + 8 x descriptor_cost + 32768 B /
    # engine_bandwidth + load_completion_latency
    d = TRN2.core.dma
    t = Trace()
    t.tensor("x", [8, 2048], "bfloat16", init="normal")
    k = t.kernel("load")
    k.tile("x_t", "sbuf", [8, 2048], "bfloat16")
    k.dma_copy(src="x", dst="x_t")
    r = t.run(TRN2)
    (span,) = r.device.recorder.spans
    data = 8 * d.descriptor_cost + 32768 / d.engine_bandwidth
    expect = (
        seconds_to_ps(d.transfer_setup) + data * 1e12 + seconds_to_ps(d.load_completion_latency)
    )
    assert span.track == "q0" and abs(span.duration_ps - expect) <= 1
    np.testing.assert_array_equal(r.tile("load", "x_t"), r.tensor("x"))
    assert r.summary["hbm"]["bytes_read"] == 32768
    assert r.summary["dma"]["core0.q0"] == {
        "busy_ns": span.duration_ps / 1000,
        "bytes": 32768,
        "transfers": 1,
        "bandwidth_bytes_per_s": 32768 / (span.duration_ps * 1e-12),
        "setup_overhead_ns": 0.0,  # the data (1.4 us) outlasts the setup (615 ns)
    }


def pipelined_gemm(tiles: int, matmuls_per_tile: int, buffers: int) -> Trace:
    """Load w tile i (128 x 512 bf16) by DMA, multiply it `matmuls_per_tile` times.

    With 2 buffers the load of tile i+1 overlaps the matmuls of tile i; a buffer is reloaded
    only after the matmuls reading it have finished (semaphore `free<b>`)."""
    t = Trace(mode="timing")
    t.tensor("w", [128, 512 * tiles], "bfloat16")
    k = t.kernel("gemm")
    k.tile("x_t", "sbuf", [128, 128], "bfloat16")
    k.tile("acc", "psum", [128, 512], "float32")
    for b in range(buffers):
        k.tile(f"w{b}", "sbuf", [128, 512], "bfloat16")
    for i in range(tiles):
        b, use = i % buffers, i // buffers  # buffer b is used for the use-th time
        k.dma_copy(
            src=f"w[:, {512 * i}:{512 * (i + 1)}]",
            dst=f"w{b}",
            queue=b,
            signal={f"ld{b}": 1},
            **({"wait": {f"free{b}": use}} if use else {}),
        )
        for j in range(matmuls_per_tile):
            last = j == matmuls_per_tile - 1
            k.matmul(
                stationary="x_t",
                moving=f"w{b}",
                dst="acc",
                accumulate=True,
                **({"wait": {f"ld{b}": use + 1}} if j == 0 else {}),
                **({"signal": {f"free{b}": 1}} if last else {}),
            )
    return t


def busy(r, track):
    return sum(s.duration_ps for s in r.device.recorder.spans if s.track == track)


def test_double_buffering_overlaps_dma_and_compute():
    tiles, per_tile = 8, 16
    double = pipelined_gemm(tiles, per_tile, buffers=2).run(TRN2)
    single = pipelined_gemm(tiles, per_tile, buffers=1).run(TRN2)
    dma_ps = sum(busy(double, f"q{q}") for q in range(2))  # every load's submit-to-done time
    compute_ps = busy(double, "tensor")  # 8 x 16 matmuls of 512 cycles
    total = double.summary["device_time_ns"] * 1000
    spans = double.device.recorder.spans
    loads = [s for s in spans if s.track.startswith("q")]
    mms = [s for s in spans if s.track == "tensor"]
    # the timeline shows a load running while matmuls run
    assert any(
        ld.start_ps < mm.end_ps and mm.start_ps < ld.end_ps for ld in loads[1:] for mm in mms
    )
    # compute-bound here: about max(DMA, compute) plus the first load, far below their sum
    first_load = loads[0].duration_ps
    assert compute_ps > dma_ps / 2
    assert total <= max(dma_ps, compute_ps) + first_load + 0.05 * compute_ps
    assert total < 0.8 * (dma_ps + compute_ps)
    # with one buffer every load waits for the previous tile's matmuls: about the sum
    single_total = single.summary["device_time_ns"] * 1000
    assert single_total >= 0.95 * (busy(single, "q0") + busy(single, "tensor"))


def stream_kernel(t: Trace, name: str, tensor: str, loads: int, queues: int = 4):
    k = t.kernel(name)
    for q in range(queues):
        k.tile(f"b{q}", "sbuf", [128, 8192], "bfloat16")
    for i in range(loads):
        k.dma_copy(
            src=f"{tensor}[:, {8192 * i}:{8192 * (i + 1)}]", dst=f"b{i % queues}", queue=i % queues
        )
    return k


@pytest.mark.parametrize("cfg", [TRN2, TRN3], ids=["trn2", "trn3"])
def test_all_cores_streaming_are_capped_by_hbm(cfg):
    # one core alone: min(16 engines x engine_bandwidth, one stack's share) ...
    loads = 24
    per_core = 16 * cfg.core.dma.engine_bandwidth
    stack = cfg.hbm.bandwidth / cfg.hbm.stacks
    t = Trace(mode="timing", lnc=1)
    t.tensor("w0", [128, 8192 * loads], "bfloat16")
    stream_kernel(t, "k0", "w0", loads)
    one = t.run(cfg).summary["hbm"]["bandwidth_bytes_per_s"]
    # the first transfers pay the fixed latency before any byte moves
    assert one == pytest.approx(min(per_core, stack), rel=0.06)
    # ... all cores at once: min(all engines, chip HBM bandwidth), within 5%
    t = Trace(mode="timing", lnc=1)
    for c in range(cfg.cores):
        t.tensor(f"w{c}", [128, 8192 * loads], "bfloat16")
        stream_kernel(t, f"k{c}", f"w{c}", loads)
        t.stream(f"s{c}", core=c, steps=[("launch", f"k{c}")])
    r = t.run(cfg)
    expect = min(cfg.cores * per_core, cfg.hbm.bandwidth)
    # the host launches kernels one launch cost apart, so look at the chip's total HBM rate
    # while all cores stream: the highest sum over stacks of the bandwidth counter track
    now: dict[int, float] = {}
    best = 0.0
    for _ps, stack, rate in sorted(r.device.recorder.hbm_samples, key=lambda x: x[0]):
        now[stack] = rate
        best = max(best, sum(now.values()))
    assert best == pytest.approx(expect, rel=0.05)
    assert best <= cfg.hbm.bandwidth * (1 + 1e-9)
    assert r.summary["hbm"]["bytes_read"] == cfg.cores * loads * 128 * 8192 * 2


def test_lnc2_runs_one_program_per_physical_core():
    t = Trace()
    t.tensor("x", [256, 512], "float32", init="normal")
    t.tensor("y", [256, 512], "float32")
    k = t.kernel("spmd", cores=2)
    for c in range(2):  # each physical core doubles its half of x
        k.tile("a", "sbuf", [128, 512], "float32", core=c)
        rows = f"{128 * c}:{128 * (c + 1)}"
        k.dma_copy(src=f"x[{rows}, :]", dst="a", signal={"ld": 1}, core=c)
        k.tensor_scalar(
            src="a", dst="a", op0="multiply", operand0=2.0, wait={"ld": 1}, signal={"ok": 1}, core=c
        )
        k.dma_copy(src="a", dst=f"y[{rows}, :]", wait={"ok": 1}, core=c)
    r = t.run(TRN2)
    assert {s.core for s in r.device.recorder.spans} == {0, 1}
    np.testing.assert_array_equal(r.tensor("y"), 2 * r.tensor("x"))


def test_a_70b_model_is_declared_and_simulated_in_timing_mode():
    """Llama-70B's weights: 80 layers x 7 projections (1,711,276,032 B per layer) plus the
    embedding and LM head (2 x 128256 x 8192 x 2 B) = 139.0 GB of bf16 — more than a Trn2's
    96 GiB of HBM, so they fit only on a what-if chip with 48 GiB stacks; in timing mode no
    tensor gets a backing store, so this runs on a small machine."""
    shapes = {
        "wq": (8192, 8192),
        "wk": (8192, 1024),
        "wv": (8192, 1024),
        "wo": (8192, 8192),
        "w_gate": (8192, 28672),
        "w_up": (8192, 28672),
        "w_down": (28672, 8192),
    }

    def model() -> Trace:
        t = Trace("llama70b", mode="timing")
        for layer in range(80):
            for name, shape in shapes.items():
                t.tensor(f"l{layer}_{name}", shape, "bfloat16")
        t.tensor("embed", (128256, 8192), "bfloat16")
        t.tensor("lm_head", (8192, 128256), "bfloat16")
        k = t.kernel("first_tile")
        k.tile("w", "sbuf", [128, 2048], "bfloat16")
        k.dma_copy(src="l0_wq[0:128, 0:2048]", dst="w")
        return t

    total = 80 * 1_711_276_032 + 2 * 128256 * 8192 * 2
    big = load_chip("trn2", ["hbm.stack_capacity=48GiB"])
    r = model().run(big)
    assert r.device.chip.hbm.used >= total
    assert all(b.array is None for b in r.tensors.values())
    assert r.summary["hbm"]["bytes_read"] == 128 * 2048 * 2
    with pytest.raises(SimError, match="cannot allocate .* requested, .* free, largest free"):
        model().run(TRN2)
