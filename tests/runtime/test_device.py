"""The device API: streams, events, launches and copies, as API contracts."""

import numpy as np
import pytest

from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.errors import DeadlockError, TrnsimError
from trnsim.runtime import Device
from trnsim.trace import parse_instruction
from trnsim.trace.program import CoreProgram, KernelSpec, OpSpec, TileSpec
from trnsim.units import cycles_to_ps, seconds_to_ps

TRN2 = load_chip("trn2")
LAUNCH = seconds_to_ps(TRN2.host_link.launch_overhead)


def memset_kernel(name="k", n=512):
    """One VectorE memset of a [128, n] fp32 tile: max(64, n) cycles."""
    tiles = {"a": TileSpec("a", "sbuf", (128, n), dtype("float32"))}
    ins = [parse_instruction({"op": "memset", "dst": "a", "value": 1.0}, 0, "i")]
    return KernelSpec(name, per_core=[CoreProgram(tiles, ins)])


def test_event_elapsed_time_is_the_simulated_gap():
    dev = Device(TRN2)
    s = dev.stream(0)
    start, end = dev.event("start"), dev.event("end")
    s.record_event(start)
    s.launch(memset_kernel())
    s.record_event(end)
    never = dev.event("never")  # an event no stream records
    kernel_ps = cycles_to_ps(512, TRN2.core.vector.clock_hz)
    assert end.time_ps is None  # nothing has run yet: simulation advances lazily
    # query is a synchronizing call (runtime.device): it runs the clock until the work before
    # the record is done, so it answers True here, with the event's time set
    assert end.query()
    assert end.time_ps == start.time_ps + LAUNCH + kernel_ps
    assert not never.query() and never.time_ps is None
    s.synchronize()
    assert start.query() and end.query()
    assert end.time_ps - start.time_ps == LAUNCH + kernel_ps
    assert start.elapsed_time(end) == pytest.approx((LAUNCH + kernel_ps) / 1e9)


@pytest.mark.xfail(
    strict=True,
    raises=DeadlockError,
    reason=(
        "bug: Event.query and Stream.query run Device.run() with no target, which raises "
        "DeadlockError while another stream waits for an event the host has not recorded yet; "
        "the queried work is complete (Event.synchronize returns) and the host may record the "
        "event later"
    ),
)
def test_query_does_not_fail_on_a_stream_waiting_for_a_later_record():
    dev = Device(TRN2)
    a, b = dev.stream(0, "a"), dev.stream(1, "b")
    later, done = dev.event("later"), dev.event("done")
    b.wait_event(later)  # recorded by the host below, after the queries
    b.launch(memset_kernel("second"))
    a.launch(memset_kernel("first"))
    a.record_event(done)
    assert done.query() and a.query()
    assert not b.query()  # still waiting
    a.record_event(later)
    dev.synchronize()
    assert b.query()


def test_stream_wait_event_orders_two_streams():
    dev = Device(TRN2)
    a, b = dev.stream(0, "a"), dev.stream(1, "b")
    done = dev.event("done")
    a.launch(memset_kernel("first", 4096))
    a.record_event(done)
    b.wait_event(done)
    b.launch(memset_kernel("second"))
    dev.synchronize()
    first, second = dev.recorder.spans
    assert (first.kernel, second.kernel) == ("first", "second")
    assert second.start_ps >= first.end_ps + LAUNCH  # b issued its launch after the event


def test_launches_on_different_cores_overlap_and_on_one_core_serialize():
    dev = Device(TRN2)
    for core in (0, 1):
        dev.stream(core).launch(memset_kernel(f"k{core}", 16384))  # 17 us > one launch cost
    dev.synchronize()
    k0, k1 = sorted(dev.recorder.spans, key=lambda s: s.kernel)
    assert (k0.core, k1.core) == (0, 2)  # logical core 1 = physical cores 2, 3 at lnc=2
    assert k1.start_ps < k0.end_ps  # overlap (the host issued them one launch cost apart)

    dev = Device(TRN2)
    dev.stream(0).launch(memset_kernel("p", 4096))
    dev.stream(0).launch(memset_kernel("q", 4096))
    dev.synchronize()
    p, q = dev.recorder.spans
    assert q.start_ps >= p.end_ps


def test_host_to_device_copy_moves_values():
    dev = Device(TRN2)
    h = dev.malloc("h", (128, 256), dtype("float32"), "normal", on="host")
    d = dev.malloc("d", (128, 256), dtype("bfloat16"))
    dev.default_stream.memcpy(d, h)
    dev.synchronize()
    np.testing.assert_array_equal(d.array, h.array.astype(dtype("bfloat16").np))
    assert dev.env.now > 0


def test_wait_for_an_event_never_recorded_is_a_deadlock():
    dev = Device(TRN2)
    s = dev.stream(0, "lonely")
    s.wait_event(dev.event("never"))
    with pytest.raises(DeadlockError, match="stream lonely waits for event 'never'"):
        dev.synchronize()


def test_high_level_kernels_are_not_yet_supported():
    dev = Device(TRN2)
    k = KernelSpec("mlp", ops=[OpSpec("matmul", {"a": "x", "b": "w", "out": "h"})])
    with pytest.raises(TrnsimError, match="high-level ops \\(matmul\\) are not yet supported"):
        dev.default_stream.launch(k)


def test_bad_logical_core():
    dev = Device(TRN2)  # lnc=2: 4 logical cores
    with pytest.raises(TrnsimError, match="logical cores 0..3"):
        dev.stream(4)
    assert Device(TRN2, lnc=1).chip.logical_cores == 8
