"""Every golden report's key figures, derived by hand from the model and the chip configs.

test_bundled_traces.py holds each golden (tests/golden/<stem>.json, <stem>@<chip>.json) equal to
a fresh `trnsim run --json`, so a golden regenerated after an unintended model change would pass
there. Here the goldens' main figures are recomputed from the cost formulas of docs/model.md
(and trnsim/engines/*.py, trnsim/dma/system.py), with every hardware number read from the chip
config through `load_chip`, and the golden must agree:

- exactly: compute-engine times (each instruction's cycles, converted to ps and rounded up, as
  docs/model.md "Time" says), instruction and transfer counts, bytes, FLOPs, memory peaks;
- up to the DMA fluid model's rounding (`near`): the times of DMA transfers and host copies whose
  rates follow from the configs alone -- a transfer alone on its engines, or transfers that
  share the same engines evenly, which the fluid model serves work-conservingly. The model
  rounds each completion up to a whole ps, so a path through k completions may end up to k ps
  later than the exact sum; likewise a lone matmul from a cold PE array (the warm-up's closed
  form, rounded up to the ps);
- within bounds, each with its reason: times that depend on how concurrent transfers share the
  engines over time (gemm_double_buffered's device time), on how warm the PE array is after
  gaps (TensorE busy time on trn2/trn3: between full speed and warmup_start_rate of it), or
  that no closed formula gives (the Llama layer's time, HBM-bound);
- ratios (utilization, FLOP/s, peak fraction, bandwidth) to 1e-12 relative: they are quotients of
  the figures above, and only the float evaluation order may differ.
"""

from __future__ import annotations

import math
from fractions import Fraction

from tests.e2e.golden_model import (
    GOLDEN,
    PS,
    act_cycles,
    assert_engines,
    assert_flops,
    by_name,
    cold_ps,
    copy_work_ps,
    cycles_ps,
    golden,
    latency_ps,
    matmul_cycles,
    near,
    queue_ends,
    ratio,
    seconds_ps,
    setup_ps,
    tensor_busy,
    vector_cycles,
    warm,
)


def test_every_golden_has_its_figures_derived():
    """A golden of a new trace needs its hand derivation here."""
    stems = {p.stem.partition("@")[0] for p in GOLDEN.glob("*.json")}
    assert stems == {
        "matmul_gelu",
        "softmax_rows",
        "gemm_double_buffered",
        "two_streams",
        "llama70b_layer_timing",
        "weight_stream",
        "mlp_ops",
        "attention_ops",
        "llama70b_prefill_ops",
        "llama70b_prefill_one_kernel",
        "llama70b_decode_ops",
        "ddp_allreduce",  # on a system: test_golden_figures_system.py
    }


# -- matmul_gelu: one matmul, GELU on its result ------------------------------------------------


@by_name("matmul_gelu")
def test_matmul_gelu(name):
    g, cfg = golden(name)
    m, k, n = 128, 128, 512  # x_t [K, M], w_t [K, N] bf16; acc [M, N] fp32 in PSUM
    # the matmul starts TensorE's queue: LoadStationary is exposed; from a cold PE array
    full = cycles_ps(matmul_cycles(cfg, m, n, cold=True), cfg.core.tensor.clock_hz)
    mm = math.ceil(cold_ps(cfg, full))  # (the model rounds up to the ps: at most 1 ps off)
    # GELU over N = 512 elements per partition, waiting on the matmul's semaphore
    gelu = cycles_ps(act_cycles(cfg, n, waits=True), cfg.core.scalar.clock_hz)
    device = round(g["device_time_ns"] * 1000)
    assert abs(device - (mm + gelu)) <= 1  # GELU starts when the matmul signals
    assert g["total_time_ns"] == (seconds_ps(cfg.host_link.launch_overhead) + device) / 1000
    assert_engines(g, {"core0.tensor": ((mm - 1, mm + 1), 1), "core0.scalar": (gelu, 1)}, device)
    assert_flops(g, cfg, 2 * m * k * n, device)
    assert g["memory"] == {
        "sbuf_peak_bytes": 128 * (m + n + n) * 2,  # x_t, w_t, o_t in bf16
        "psum_peak_bytes": 128 * n * 4,
        "hbm_peak_bytes": 0,
    }
    assert g["dma"] == {} and g["timings"] == {}
    assert (g["hbm"]["bytes_read"], g["hbm"]["bytes_written"]) == (0, 0)


# -- softmax_rows: VectorE and ScalarE through semaphores -----------------------------------------


@by_name("softmax_rows")
def test_softmax_rows(name):
    g, cfg = golden(name)
    n = 512  # x [128, 512] fp32; m, neg_m, s, r are [128, 1]
    vclk, sclk = cfg.core.vector.clock_hz, cfg.core.scalar.clock_hz
    row_max = cycles_ps(vector_cycles(cfg, n, waits=False), vclk)  # fp32: no bf16 N/2 mode
    negate = cycles_ps(vector_cycles(cfg, 1, waits=False), vclk)  # MIN_II
    exp = cycles_ps(act_cycles(cfg, n, waits=True, reduce=True), sclk)
    recip = cycles_ps(vector_cycles(cfg, 1, waits=True), vclk)
    scale = cycles_ps(vector_cycles(cfg, n, waits=False), vclk)
    # negate reads row_max's m, scale reads recip's r: each waits for VectorE's commit latency
    # after the instruction before it (a read after write on the same engine; not busy time)
    commit = cycles_ps(cfg.core.vector.commit_latency_cycles, vclk)
    device = row_max + commit + negate + exp + recip + commit + scale  # each needs the one before
    assert g["device_time_ns"] == device / 1000
    assert g["total_time_ns"] == (seconds_ps(cfg.host_link.launch_overhead) + device) / 1000
    assert_engines(
        g, {"core0.vector": (row_max + negate + recip + scale, 4), "core0.scalar": (exp, 1)}, device
    )
    assert_flops(g, cfg, 0, device)  # only matmuls count FLOPs
    assert g["memory"] == {
        "sbuf_peak_bytes": 128 * (3 * n + 4) * 4,
        "psum_peak_bytes": 0,
        "hbm_peak_bytes": 0,
    }
    assert g["dma"] == {} and g["timings"] == {}


# -- gemm_double_buffered: DMA into two buffers, PSUM accumulation, stores ------------------------


def gemm_device_ps(cfg, share: int, slow: bool) -> Fraction:
    """When gemm_double_buffered's last store completes, from the trace's semaphores and
    in-order queues, with each DMA data phase taking `share` times its work and TensorE at
    full speed (slow=False) or at warmup_start_rate of it (slow=True, its slowest).

    Each queue sets up its transfers one at a time (S(16) each: every copy spans 128
    partitions) and moves their data in order; at most four transfers (one per queue) move at
    once, each at 1/4 to all of its engines: `share` 1 and 4 bound every data phase, and the
    end time only grows with any duration."""
    s16, lat, st_lat = setup_ps(cfg), latency_ps(cfg), latency_ps(cfg, store=True)
    tclk, sclk = cfg.core.tensor.clock_hz, cfg.core.scalar.clock_hz
    wx = copy_work_ps(cfg, 128, 128 * 2)  # an xT K-tile [128, 128] bf16
    ww = copy_work_ps(cfg, 128, 512 * 2)  # a w K-tile [128, 512] bf16
    wo = copy_work_ps(cfg, 128, 512 * 2, store=True)  # a store of o [128, 512] bf16
    d = cfg.core.dma
    assert d.engines * d.store_bandwidth < cfg.hbm.bandwidth / cfg.hbm.stacks  # HBM never binds
    # an N-tile's 4 matmuls: the first waits (cold, new stationary), 3 back to back
    mm = cycles_ps(matmul_cycles(cfg, 128, 512, cold=True), tclk) + 3 * cycles_ps(
        matmul_cycles(cfg, 128, 512, cold=False), tclk
    )
    if slow and warm(cfg):
        mm = mm / Fraction(cfg.core.tensor.warmup_start_rate)
    act = cycles_ps(act_cycles(cfg, 512, waits=True), sclk)  # acc -> o (copy), waits on mm
    xl = queue_ends([0] * 4, s16, share * wx)[-1] + lat
    ld0 = queue_ends([0] * 4, s16, share * ww)[-1] + lat  # q1: N-tile 0 (and q2: N-tile 1)
    mm0 = max(xl, ld0) + mm
    mm1 = mm0 + mm
    act0 = mm0 + act
    act1 = max(mm1, act0) + act
    # refills of w0 (N-tile 2, q1) and w1 (N-tile 3, q2) are issued once the matmuls reading
    # them end; each queue's setup stage is free by then
    ld2, ld3 = (queue_ends([issue] * 4, s16, share * ww)[-1] + lat for issue in (mm0, mm1))
    q3 = [0, 0]  # the store queue: setup free, data free

    def store(issue):
        q3[0] = max(issue, q3[0]) + s16
        q3[1] = max(q3[0], q3[1]) + share * wo
        return q3[1] + st_lat

    st0, st1 = store(act0), store(act1)
    mm2 = max(ld2, act0, mm1) + mm  # waits w0 refilled and acc0 read out
    act2 = max(mm2, st0, act1) + act  # waits mm2 and o0 stored
    store(act2)  # o2
    mm3 = max(ld3, act1, mm2) + mm
    act3 = max(mm3, st1, act2) + act
    return store(act3)


@by_name("gemm_double_buffered")
def test_gemm_double_buffered(name):
    g, cfg = golden(name)
    m, k, n = 128, 512, 2048  # y [M, N] = xT.T @ w, bf16; 4 K-tiles x 4 N-tiles of 512
    s16, lat = setup_ps(cfg), latency_ps(cfg)
    tclk, sclk = cfg.core.tensor.clock_hz, cfg.core.scalar.clock_hz
    # bytes: every tensor moved once
    xt, w, y = k * m * 2, k * n * 2, m * n * 2
    assert (g["hbm"]["bytes_read"], g["hbm"]["bytes_written"]) == (xt + w, y)
    assert {q: (r["bytes"], r["transfers"]) for q, r in g["dma"].items()} == {
        "core0.q0": (xt, 4),
        "core0.q1": (w // 2, 8),
        "core0.q2": (w // 2, 8),
        "core0.q3": (y, 4),
    }
    # compute: 16 matmuls, a cold one per N-tile; 4 activations (copies) that wait
    mm = 4 * (
        cycles_ps(matmul_cycles(cfg, 128, 512, cold=True), tclk)
        + 3 * cycles_ps(matmul_cycles(cfg, 128, 512, cold=False), tclk)
    )
    act = 4 * cycles_ps(act_cycles(cfg, 512, waits=True), sclk)
    device = round(g["device_time_ns"] * 1000)
    assert_engines(
        g, {"core0.tensor": (tensor_busy(cfg, mm, 16), 16), "core0.scalar": (act, 4)}, device
    )
    assert_flops(g, cfg, 2 * m * k * n, device)
    assert g["memory"] == {
        "sbuf_peak_bytes": 128 * (512 + 2 * 2048 + 2 * 512) * 2,
        "psum_peak_bytes": 2 * 128 * 512 * 4,
        "hbm_peak_bytes": xt + w + y,
    }
    # q0's four xT loads: set up one after another (S(16) each), each moving its data while q1
    # and q2 move theirs (1x to 3x its work): busy from 0 to its last completion
    wx, ww = copy_work_ps(cfg, 128, 128 * 2), copy_work_ps(cfg, 128, 512 * 2)
    q0 = round(g["dma"]["core0.q0"]["busy_ns"] * 1000)
    lo, hi = (queue_ends([0] * 4, s16, x * wx)[-1] + lat for x in (1, 3))
    assert lo - 1 < q0 < hi + 4
    # q1 and q2: busy from 0 until their first four loads complete, then from the refill's
    # issue to its completion: at least twice four setups, a data phase and the latency
    for q in ("core0.q1", "core0.q2"):  # (8 completions on each queue)
        busy = round(g["dma"][q]["busy_ns"] * 1000)
        assert 2 * (4 * s16 + ww + lat) - 1 < busy < device, q
    # the device time, bounded by the dependency graph with DMA at full and at a quarter speed
    # and TensorE at full and its slowest speed (24 transfers: up to 24 ps of rounding)
    assert gemm_device_ps(cfg, 1, False) - 1 < device < gemm_device_ps(cfg, 4, True) + 24
    assert g["total_time_ns"] == (seconds_ps(cfg.host_link.launch_overhead) + device) / 1000
    assert g["hbm"]["bandwidth_bytes_per_s"] == ratio((xt + w + y) / (Fraction(device) / PS))
    assert g["timings"] == {}


# -- weight_stream: a wide weight streamed through two SBUF buffers (params: defaults) ------------


@by_name("weight_stream")
def test_weight_stream(name):
    g, cfg = golden(name)
    batch, tiles, k = 8, 16, 512  # the trace's params: defaults; y [batch, 512 x tiles]
    n = 512 * tiles
    tclk, sclk = cfg.core.tensor.clock_hz, cfg.core.scalar.clock_hz
    xt, w, y = k * batch * 2, k * n * 2, batch * n * 2
    assert (g["hbm"]["bytes_read"], g["hbm"]["bytes_written"]) == (xt + w, y)
    # 4 xT K-tiles on q0; each N-tile's 4 w K-tiles on q1 (even N-tiles) or q2 (odd); stores q3
    assert {q: (r["bytes"], r["transfers"]) for q, r in g["dma"].items()} == {
        "core0.q0": (xt, 4),
        "core0.q1": (w // 2, 2 * tiles),
        "core0.q2": (w // 2, 2 * tiles),
        "core0.q3": (y, tiles),
    }
    # per N-tile: 4 matmuls of M = batch, N = 512, the first waits (cold); one activation that
    # waits
    mm_tile = cycles_ps(matmul_cycles(cfg, batch, 512, cold=True), tclk) + 3 * cycles_ps(
        matmul_cycles(cfg, batch, 512, cold=False), tclk
    )
    act = cycles_ps(act_cycles(cfg, 512, waits=True), sclk)
    device = round(g["device_time_ns"] * 1000)
    assert_engines(
        g,
        {
            "core0.tensor": (tensor_busy(cfg, tiles * mm_tile, 4 * tiles), 4 * tiles),
            "core0.scalar": (tiles * act, tiles),
        },
        device,
    )
    assert_flops(g, cfg, 2 * batch * k * n, device)
    assert g["memory"] == {
        "sbuf_peak_bytes": 128 * (4 * batch + 2 * 2048) * 2
        + 2 * batch * 512 * 2,  # x_all, w0, w1; o0, o1
        "psum_peak_bytes": 2 * batch * 512 * 4,
        "hbm_peak_bytes": xt + w + y,
    }
    # the device time, between two bounds. HBM never binds on this chip (one core's engines
    # move less than its stack), so DMA time is engine work and setups.
    d = cfg.core.dma
    assert d.engines * d.engine_bandwidth < cfg.hbm.bandwidth / 4
    s16, lat = setup_ps(cfg), latency_ps(cfg)
    wx = copy_work_ps(cfg, 128, batch * 2)  # an xT K-tile [128, batch]
    ww = copy_work_ps(cfg, 128, 512 * 2)  # a w K-tile [128, 512]
    # a store of o [batch, 512]: batch rows of 1 KiB, on the engines of those partitions
    engines = math.ceil(batch / (cfg.core.sbuf.partitions // d.engines))
    store = (
        (Fraction(d.descriptor_cost) * PS + Fraction(512 * 2) * PS / Fraction(d.store_bandwidth))
        * batch
        / engines
    )
    st = setup_ps(cfg, engines) + store + latency_ps(cfg, store=True)
    slow = Fraction(cfg.core.tensor.warmup_start_rate) if warm(cfg) else 1
    #  lower: the last N-tile's queue sets up its 2 x tiles loads one after another (q1 the
    #  even N-tiles, q2 the odd), the last one's data and latency; then that N-tile's
    #  matmuls, activation and store (which need the last load);
    lower = 2 * tiles * s16 + ww + lat + mm_tile + act + st
    #  upper: everything one after the other, TensorE at its slowest (the queues share the
    #  engines work-conservingly, so while anything waits, something on its path runs)
    upper = (
        4 * (s16 + wx + lat) + 4 * tiles * (s16 + ww + lat) + tiles * (mm_tile / slow + act + st)
    )
    assert lower < device < upper + 4 + 5 * tiles
    assert g["total_time_ns"] == (seconds_ps(cfg.host_link.launch_overhead) + device) / 1000
    assert g["hbm"]["bandwidth_bytes_per_s"] == ratio((xt + w + y) / (Fraction(device) / PS))


# -- two_streams: host copies, two logical cores, events -------------------------------------------


@by_name("two_streams")
def test_two_streams(name):
    g, cfg = golden(name)
    hl, s16 = cfg.host_link, setup_ps(cfg)
    lat, st_lat = latency_ps(cfg), latency_ps(cfg, store=True)
    latency, launch = seconds_ps(hl.latency), seconds_ps(hl.launch_overhead)
    copy = seconds_ps(hl.copy_overhead)  # host time of a memcpy_async; records cost 0 on trn*
    assert hl.event_overhead == 0
    link = Fraction(hl.bandwidth) / PS  # bytes per ps
    sclk, tclk = cfg.core.scalar.clock_hz, cfg.core.tensor.clock_hz
    x, w, y, hs = 128 * 2048 * 2, 128 * 512 * 2, 128 * 512 * 2, 128 * 128 * 2  # bytes (bf16)
    consumer = 1 * cfg.lnc  # logical core 1's first physical core
    # Each stream is a host thread. Both issue their host copy at 0 (each costs its thread
    # `copy`); after the link latency the copies share the link until host_w (the smaller) is
    # in, so host_x is in HBM after the latency and both sizes at link speed
    x_in = copy + latency + (x + w) / link
    # act_x on core 0: the producer's thread launched it at copy + launch; it starts when
    # both that and the copy before it are done; load x [128, 2048] bf16, GELU (waits), store h
    load_x = s16 + copy_work_ps(cfg, 128, 2048 * 2) + lat
    store_h = s16 + copy_work_ps(cfg, 128, 2048 * 2, store=True) + st_lat
    gelu = cycles_ps(act_cycles(cfg, 2048, waits=True), sclk)
    h_ready = max(x_in, copy + launch) + load_x + gelu + store_h
    # more_work: launched by the producer's thread right after (at copy + 2 launches); GELU
    # over [128, 24576] fp32, no wait
    more_work = cycles_ps(act_cycles(cfg, 24576, waits=False), sclk)
    producer_done = max(h_ready, copy + 2 * launch) + more_work
    # project on the consumer's core: its thread waits until the producer's thread has recorded
    # h_ready (at copy + launch), then launches it (done at copy + 2 launches); it starts once
    # h_ready has fired on the device too. It loads h[:, 0:128] and w together (set up at once
    # on two queues, then the same engines, evenly: work-conserving), a cold matmul on a cold
    # PE array, the PSUM -> SBUF copy (waits), stores y; then y goes to the host (enqueued by
    # its thread at 2 copies + 2 launches), alone on the link
    wh, ww = copy_work_ps(cfg, 128, 128 * 2), copy_work_ps(cfg, 128, 512 * 2)
    wy = copy_work_ps(cfg, 128, 512 * 2, store=True)
    mm = cold_ps(cfg, cycles_ps(matmul_cycles(cfg, 128, 512, cold=True), tclk))
    act = cycles_ps(act_cycles(cfg, 512, waits=True), sclk)
    project_end = (
        max(h_ready, copy + 2 * launch) + (s16 + wh + ww + lat) + mm + act + (s16 + wy + st_lat)
    )
    consumer_done = max(project_end, 2 * copy + 2 * launch) + latency + y / link
    t = {k: v["ns"] for k, v in g["timings"].items()}
    near(t["start->h_ready"], h_ready, completions=4)
    near(t["start->producer_done"], producer_done, completions=4)
    near(t["start->consumer_done"], consumer_done, completions=9)
    near(t["h_ready->consumer_done"], consumer_done - h_ready, completions=9)
    near(g["total_time_ns"], max(producer_done, consumer_done), completions=9)
    # the host copies, at `copy`, are the first spans
    assert round(g["device_time_ns"] * 1000) == round(g["total_time_ns"] * 1000) - copy
    device = round(g["device_time_ns"] * 1000)
    assert_engines(
        g,
        {
            "core0.scalar": (gelu + more_work, 2),
            f"core{consumer}.tensor": ((math.floor(mm), math.ceil(mm) + 1), 1),
            f"core{consumer}.scalar": (act, 1),
        },
        device,
    )
    assert_flops(g, cfg, 2 * 128 * 128 * 512, device)
    # DMA queues: act_x's load (q0) and store (q1); project's h slice then y store (q0: h's
    # slice's data ends at twice its work, sharing with w) and w (q1)
    dma = g["dma"]
    assert {q: (r["bytes"], r["transfers"]) for q, r in dma.items()} == {
        "core0.q0": (x, 1),
        "core0.q1": (x, 1),
        f"core{consumer}.q0": (hs + y, 2),
        f"core{consumer}.q1": (w, 1),
    }
    near(dma["core0.q0"]["busy_ns"], load_x)
    near(dma["core0.q1"]["busy_ns"], store_h)
    near(dma[f"core{consumer}.q0"]["busy_ns"], (s16 + 2 * wh + lat) + (s16 + wy + st_lat), 2)
    near(dma[f"core{consumer}.q1"]["busy_ns"], s16 + wh + ww + lat, completions=2)
    # HBM: read by the x load, project's loads and the copy to the host; written by the two
    # host copies and the two stores
    assert g["hbm"]["bytes_read"] == x + hs + w + y
    assert g["hbm"]["bytes_written"] == x + w + x + y
    assert g["memory"] == {
        "sbuf_peak_bytes": 2 * 128 * 24576 * 4,  # more_work's two tiles
        "psum_peak_bytes": 128 * 512 * 4,
        "hbm_peak_bytes": x + x + w + y,
    }  # x, h, w, y (host tensors: none)


# -- llama70b_layer_timing: weight streaming, HBM-bound ----------------------------------------

HIDDEN, INTER, KV = 8192, 28672, 1024
LAUNCHES = 7
# per physical core, the projections' (K rows, output columns it computes): half the columns of
# each, except k (all on core 0) and v (all on core 1)
CORE_PROJECTIONS = [
    [
        (HIDDEN, HIDDEN // 2),
        (HIDDEN, KV),
        (HIDDEN, HIDDEN // 2),
        (HIDDEN, INTER // 2),
        (HIDDEN, INTER // 2),
        (INTER, HIDDEN // 2),
    ],  # q, k, o, gate, up, down
    [
        (HIDDEN, HIDDEN // 2),
        (HIDDEN, KV),
        (HIDDEN, HIDDEN // 2),
        (HIDDEN, INTER // 2),
        (HIDDEN, INTER // 2),
        (INTER, HIDDEN // 2),
    ],  # q, v, o, gate, up, down
]


def layer_counts(projections) -> dict[str, int]:
    """One core's work per launch: column blocks of up to 2048 (4 PSUM banks of 512), a load of
    [128, block] per K-tile and block, a matmul per K-tile and bank, an activation per bank (the
    first of a block waits), a store per block."""
    c = dict.fromkeys(("blocks", "loads", "matmuls", "acts", "load_bytes", "store_bytes"), 0)
    for k, cols in projections:
        blocks = math.ceil(cols / 2048)
        c["blocks"] += blocks
        c["loads"] += k // 128 * blocks
        c["matmuls"] += k // 128 * (cols // 512)
        c["acts"] += cols // 512
        c["load_bytes"] += k * cols * 2
        c["store_bytes"] += 128 * cols * 2
    return c


@by_name("llama70b_layer_timing")
def test_llama70b_layer(name):
    g, cfg = golden(name)
    assert g["mode"] == "timing"  # shapes only: 1.6 GiB of weights are never allocated
    tclk, sclk = cfg.core.tensor.clock_hz, cfg.core.scalar.clock_hz
    per_core = [layer_counts(p) for p in CORE_PROJECTIONS]
    weights = (2 * HIDDEN * HIDDEN + 2 * HIDDEN * KV + 3 * HIDDEN * INTER) * 2  # bytes, bf16
    assert sum(c["load_bytes"] for c in per_core) == weights == 1_711_276_032
    read = LAUNCHES * weights
    written = LAUNCHES * sum(c["store_bytes"] for c in per_core)
    assert (g["hbm"]["bytes_read"], g["hbm"]["bytes_written"]) == (read, written)
    count = sum(e["instructions"] for e in g["engines"].values()) + sum(
        q["transfers"] for q in g["dma"].values()
    )
    assert (
        count
        == LAUNCHES * sum(c["matmuls"] + c["acts"] + c["loads"] + c["blocks"] for c in per_core)
        == 116_130
    )
    busy = {}
    for core, c in enumerate(per_core):
        # every load's first matmul waits on it, with a new stationary (the next K-tile of x)
        mm = c["loads"] * cycles_ps(matmul_cycles(cfg, 128, 512, cold=True), tclk) + (
            c["matmuls"] - c["loads"]
        ) * cycles_ps(matmul_cycles(cfg, 128, 512, False), tclk)
        act = c["blocks"] * cycles_ps(act_cycles(cfg, 512, waits=True), sclk) + (
            c["acts"] - c["blocks"]
        ) * cycles_ps(act_cycles(cfg, 512, waits=False), sclk)
        busy[f"core{core}.tensor"] = (
            tensor_busy(cfg, LAUNCHES * mm, LAUNCHES * c["matmuls"]),
            LAUNCHES * c["matmuls"],
        )
        busy[f"core{core}.scalar"] = (LAUNCHES * act, LAUNCHES * c["acts"])
        # loads alternate between q0 and q1 (an even number of K-tiles per block); stores on q2
        half = (LAUNCHES * c["load_bytes"] // 2, LAUNCHES * c["loads"] // 2)
        for q, want in (
            ("q0", half),
            ("q1", half),
            ("q2", (LAUNCHES * c["store_bytes"], LAUNCHES * c["blocks"])),
        ):
            got = g["dma"][f"core{core}.{q}"]
            assert (got["bytes"], got["transfers"]) == want, (core, q)
    device = round(g["device_time_ns"] * 1000)
    assert_engines(g, busy, device)
    params = weights // 2
    assert_flops(g, cfg, LAUNCHES * 2 * 128 * params, device, compute_cores=2)
    assert g["memory"] == {
        "sbuf_peak_bytes": 128 * (HIDDEN + INTER + 4 * 2048 + 2048) * 2,  # per physical core
        "psum_peak_bytes": 128 * 2048 * 4,
        "hbm_peak_bytes": weights + written // LAUNCHES,
    }  # weights and outputs
    # The host thread enqueues the seven launches one launch cost apart (records cost 0), far
    # faster than the device runs them: only the first waits for the host, the others start
    # as soon as the one before ends, and each starts on an idle chip, so all seven kernels
    # take the same time `kernel`: step0->step1 is launch + kernel, every later step kernel
    launch = seconds_ps(cfg.host_link.launch_overhead)
    assert cfg.host_link.event_overhead == 0
    t = {k: round(v["ns"] * 1000) for k, v in g["timings"].items()}
    kernel = t["step6->step7"]
    assert kernel > launch and t["step0->step1"] == launch + kernel
    assert t["step0->step7"] == launch + LAUNCHES * kernel
    assert round(g["total_time_ns"] * 1000) == launch + LAUNCHES * kernel == device + launch
    step = launch + kernel  # the first launch, host cost included
    # that is at least the host's launch cost plus the longest of: both cores' HBM traffic
    # through their one shared stack (lnc 2 pairs two physical cores, which share a stack), each
    # core's bytes through its DMA engines, each core's TensorE work
    assert cfg.hbm.cores_per_stack == 2 and cfg.lnc == 2
    stack = Fraction(cfg.hbm.bandwidth / cfg.hbm.stacks) / PS
    engines = Fraction(cfg.core.dma.engines * cfg.core.dma.engine_bandwidth) / PS
    hbm_bound = (read + written) / LAUNCHES / stack
    lower = launch + max(
        hbm_bound,
        max((c["load_bytes"] + c["store_bytes"]) / engines for c in per_core),
        busy["core0.tensor"][0][0] / LAUNCHES,
    )
    assert lower == launch + hbm_bound  # HBM-bound
    # and within 1% of it: the trace's four rotating weight buffers keep the stack busy
    # (its design claim, not a model formula)
    assert lower <= step <= launch + Fraction(101, 100) * hbm_bound
    assert g["hbm"]["bandwidth_bytes_per_s"] == ratio((read + written) / (Fraction(device) / PS))
