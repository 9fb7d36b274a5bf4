"""Streams: order, overlap, waits, query and synchronize against the host clock; and the trace
runner's streams as host threads on this API."""

import numpy as np
import pytest

from tests.runtime.helpers import (
    COPY,
    LATENCY,
    LAUNCH,
    PS_PER_BYTE,
    TRN2,
    VECTOR_MAX,
    kernel_runs,
    memset_kernel,
    memset_ps,
)
from trnsim.api import Trace
from trnsim.errors import DeadlockError
from trnsim.report.perfetto import HOST_PID, chrome_trace
from trnsim.runtime import Device, devices


def test_work_on_one_stream_runs_in_order_and_streams_of_two_cores_overlap():
    d0, d1 = devices(TRN2)[:2]
    d0.launch(memset_kernel("p", 32768))
    d0.launch(memset_kernel("q", 64))
    d1.launch(memset_kernel("r", 32768))
    d0.synchronize()
    p, r, q = kernel_runs(d0.recorder)
    assert (p.kernel, r.kernel, q.kernel) == ("p", "r", "q")
    assert p.start_ps == LAUNCH and r.start_ps == 3 * LAUNCH  # after the host enqueued them
    assert q.start_ps == p.end_ps  # in order on its stream (enqueued earlier, at 2 x LAUNCH)
    assert r.start_ps < p.end_ps and r.core == 2  # logical core 1 = physical cores 2-3


def test_a_copy_and_a_kernel_on_two_streams_overlap():
    """Total close to the longer of the two, not their sum: the copy uses the host link, the
    kernel VectorE."""
    dev = Device(TRN2, mode="timing")
    copier, compute = dev.stream("copier"), dev.stream("compute")
    n = 2 << 20
    host = np.zeros(n, np.uint8)
    compute.launch(memset_kernel("long", 32768))
    copier.memcpy_async(dev.malloc(n), host)
    dev.synchronize()
    kernel, copy = memset_ps(32768), LATENCY + round(n * PS_PER_BYTE)
    k = next(s for s in kernel_runs(dev.recorder) if s.kernel == "long")
    c = next(s for s in dev.recorder.spans if s.op == "copy")
    assert (k.start_ps, k.end_ps) == (LAUNCH, LAUNCH + kernel)
    assert (c.start_ps, c.end_ps) == (LAUNCH + COPY, LAUNCH + COPY + copy)
    assert dev.env.now == max(LAUNCH + kernel, LAUNCH + COPY + copy) < LAUNCH + kernel + copy


def test_query_is_false_right_after_a_long_enqueue_and_true_after_synchronize():
    dev = Device(TRN2, mode="timing")
    s = dev.stream()
    n = 64 << 20  # 64 MiB over the 64 GB/s host link: about 1 ms
    s.memcpy_async(dev.malloc(n), np.zeros(n, np.uint8))
    assert not s.query()  # at the host's present (COPY) the copy has barely started
    assert dev.env.now <= dev.host_time_ps == COPY  # query ran the device no further
    s.synchronize()
    end = COPY + LATENCY + round(n * PS_PER_BYTE)
    assert dev.host_time_ps == end == dev.env.now  # synchronize moved the host clock
    assert s.query()


def test_wait_stream_orders_two_streams():
    dev = Device(TRN2)
    a, b = dev.stream("a"), dev.stream("b")
    a.launch(memset_kernel("first", 16384))
    b.wait_stream(a)
    b.launch(memset_kernel("second", 64))
    dev.synchronize()
    first, second = dev.recorder.spans
    assert second.start_ps == first.end_ps  # enqueued at 2 x LAUNCH < first's end


def test_an_idle_stream_holds_no_simulation_process():
    dev = Device(TRN2)
    s = dev.stream()
    s.launch(memset_kernel())
    s.synchronize()
    dev.ctx.advance_to(dev.host_time_ps)  # what is left at this instant: processes ending
    assert s.query() and not dev.ctx.busy and dev.env.peek() == float("inf")


def _two_stream_trace(sync: bool):
    t = Trace("sync")
    t.kernel("long").tile("a", "sbuf", [128, 32768], "float32")
    for c in range(0, 32768, VECTOR_MAX):
        t.kernels["long"].memset(dst=f"a[:, {c}:{c + VECTOR_MAX}]", value=1.0)
    t.kernel("short").tile("b", "sbuf", [128, 64], "float32")
    t.kernels["short"].memset(dst="b", value=2.0)
    steps = [("launch", "long")] + ([("synchronize", None)] if sync else []) + [("launch", "short")]
    t.stream("s", 0, steps)
    return t


def test_a_trace_synchronize_step_blocks_its_host_thread():
    """Without it the second launch is enqueued at 2 x LAUNCH and runs right after the first;
    with it the host waits for the first kernel, then pays another launch."""
    long, short = memset_ps(32768), memset_ps(64)
    free = _two_stream_trace(sync=False).run("trn2", mode="timing")
    assert free.total_ps == LAUNCH + long + short
    synced = _two_stream_trace(sync=True).run("trn2", mode="timing")
    assert synced.total_ps == LAUNCH + long + LAUNCH + short


def test_a_trace_wait_for_an_event_no_stream_records_is_a_deadlock():
    t = Trace("lonely")
    t.kernel("k").tile("a", "sbuf", [128, 64], "float32")
    t.kernels["k"].memset(dst="a", value=1.0)
    t.stream("lonely", 0, [("wait", "never"), ("launch", "k")])
    with pytest.raises(DeadlockError, match="stream lonely waits for event 'never'"):
        t.run("trn2", mode="timing")


def test_the_timeline_has_a_host_track_per_host_thread():
    t = Trace("two")
    t.kernel("k").tile("a", "sbuf", [128, 64], "float32")
    t.kernels["k"].memset(dst="a", value=1.0)
    t.stream("s0", 0, [("launch", "k"), ("record", "e")])
    t.stream("s1", 1, [("wait", "e"), ("launch", "k")])
    result = t.run("trn2", mode="timing")
    events = chrome_trace(result.device.recorder)["traceEvents"]
    names = [e["args"]["name"] for e in events if e["pid"] == HOST_PID and "name" in e["args"]]
    assert names == ["host", "stream s0", "stream s1"]
    calls = [(e["tid"], e["name"], e["ts"], e["dur"]) for e in events
             if e["pid"] == HOST_PID and e["ph"] == "X"]  # fmt: skip
    launch_us = LAUNCH / 1e6
    assert (0, "launch", 0.0, launch_us) in calls
    assert (1, "launch", launch_us, launch_us) in calls  # after s0 recorded e, at LAUNCH


def test_a_timed_launch_costs_a_launch_and_holds_its_core_for_its_duration():
    """launch_timed: a host launch each, then the logical core for exactly the duration, after
    the work ahead of it on the core; another logical core is not held."""
    d0, d1 = devices(TRN2)[:2]
    s = d0.stream()
    d0.launch(memset_kernel("p", 64))  # host 0-10 us; runs 10 us to ~10.07 us
    s.launch_timed("timed", 17_000_000)  # host 10-20 us; the core is free: 20-37 us
    d1.default_stream.launch_timed("other", 17_000_000)  # host 20-30 us; logical core 1
    start, end = d0.event(enable_timing=True), d0.event(enable_timing=True)
    s.record_event(start)  # at 30 us on the host: fires when "timed" ends
    s.launch_timed("timed2", 5_000_000)  # host 30-40 us: runs 40-45 us
    s.record_event(end)
    d0.synchronize()
    assert kernel_runs(d0.recorder)[0].end_ps < 2 * LAUNCH
    assert start.time_ps == 2 * LAUNCH + 17_000_000
    assert end.time_ps == 4 * LAUNCH + 5_000_000
    assert d0.host_time_ps == 3 * LAUNCH + 17_000_000  # "other": 30 us + 17 us


def test_timed_launches_in_a_row_are_launch_bound_or_back_to_back():
    """1,000 timed launches on one stream: each waits for its host launch when the kernel is
    shorter than a launch, and they run back to back when it is longer."""
    for dur, want in (
        (1_000_000, 1000 * LAUNCH + 1_000_000),
        (15_000_000, LAUNCH + 1000 * 15_000_000),
    ):
        dev = Device(TRN2, mode="timing")
        for _ in range(1000):
            dev.default_stream.launch_timed("k", dur)
        dev.synchronize()
        assert dev.env.now == want


def test_a_timed_run_gives_the_core_to_another_stream_while_it_waits_for_the_host():
    dev = Device(TRN2, mode="timing")
    a, b = dev.stream(), dev.stream()
    for _ in range(3):
        a.launch_timed("a", 1_000_000)  # host 0-10, 10-20, 20-30 us: runs 10-11, 20-21, 30-31
    b.launch_timed("b", 50_000_000)  # host 30-40 us: runs 40-90 us on the same core
    a.launch_timed("a4", 1_000_000)  # host 40-50 us: the core is b's until 90 us
    ea, eb = dev.event(enable_timing=True), dev.event(enable_timing=True)
    a.record_event(ea)
    b.record_event(eb)
    dev.synchronize()
    assert eb.time_ps == 4 * LAUNCH + 50_000_000
    assert ea.time_ps == eb.time_ps + 1_000_000
