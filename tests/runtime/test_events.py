"""Events, with CUDA's semantics: record, query, synchronize, elapsed_time, wait_event."""

import pytest

from tests.runtime.helpers import LAUNCH, TRN2, kernel_runs, memset_kernel, memset_ps
from trnsim.errors import TrnsimError
from trnsim.runtime import Device, devices


def test_an_event_is_complete_after_its_stream_synchronizes():
    dev = Device(TRN2)
    s = dev.stream()
    e = dev.event()
    s.launch(memset_kernel("k", 16384))
    e.record(s)
    assert not e.query()  # the kernel starts at the host's present (LAUNCH)
    s.synchronize()
    assert e.query() and e.time_ps == LAUNCH + memset_ps(16384)


def test_elapsed_time_is_the_simulated_gap():
    dev = Device(TRN2)
    start, end = dev.event(enable_timing=True), dev.event(enable_timing=True)
    start.record()
    dev.launch(memset_kernel())
    end.record()
    assert end.time_ps is None  # nothing has run yet: simulation is lazy
    end.synchronize()
    assert dev.host_time_ps == end.time_ps == LAUNCH + memset_ps(512)
    assert start.time_ps == 0
    assert start.elapsed_time(end) == pytest.approx((LAUNCH + memset_ps(512)) / 1e9)  # ms


def test_elapsed_time_needs_timing_recorded_and_complete_events():
    dev = Device(TRN2)
    a, b = dev.event(enable_timing=True), dev.event(enable_timing=True)
    with pytest.raises(TrnsimError, match="never recorded"):
        a.elapsed_time(b)
    a.record()
    dev.launch(memset_kernel("k", 16384))
    b.record()
    with pytest.raises(TrnsimError, match="has not completed; synchronize it first"):
        a.elapsed_time(b)
    b.synchronize()
    assert a.elapsed_time(b) > 0
    c = dev.event()
    c.record()
    dev.synchronize()
    with pytest.raises(TrnsimError, match="enable_timing=False"):
        a.elapsed_time(c)


def test_a_never_recorded_event_is_complete_and_waiting_on_it_is_a_no_op():
    dev = Device(TRN2)
    never = dev.event()
    assert never.query()
    never.synchronize()  # returns at once
    s = dev.stream("s")
    s.wait_event(never)
    s.launch(memset_kernel())
    dev.synchronize()  # no deadlock
    assert dev.recorder.spans[0].start_ps == LAUNCH


def test_query_never_blocks_nor_raises_while_another_stream_waits():
    """Regression (was a strict xfail): Event.query and Stream.query ran the whole device and
    raised DeadlockError while another stream waited for an event the host had not recorded
    yet. Now waiting on an unrecorded event is a no-op, and query runs the device only to the
    host's present."""
    dev = Device(TRN2)
    a, b = dev.stream("a"), dev.stream("b")
    later, done = dev.event(), dev.event()
    b.wait_event(later)  # not recorded yet: a no-op, as in CUDA
    b.launch(memset_kernel("second"))
    a.launch(memset_kernel("first", 16384))
    a.record_event(done)
    assert not done.query() and not a.query()  # first runs from 2 x LAUNCH for 17 us
    assert dev.host_time_ps == 2 * LAUNCH
    later.record(a)
    dev.synchronize()
    assert done.query() and a.query() and b.query()


def test_a_stream_waiting_on_another_s_event_never_starts_its_next_work_earlier():
    dev = Device(TRN2)
    a, b = dev.stream("a"), dev.stream("b")
    e = dev.event()
    a.launch(memset_kernel("first", 32768))
    e.record(a)
    b.wait_event(e)
    b.launch(memset_kernel("second", 64))  # enqueued at 2 x LAUNCH, before first ends
    dev.synchronize()
    first, second = kernel_runs(dev.recorder)
    assert second.start_ps == e.time_ps == first.end_ps == LAUNCH + memset_ps(32768)


def test_a_wait_is_for_the_record_before_it():
    """A later record of the event does not move a wait enqueued earlier (CUDA semantics)."""
    dev, other = devices(TRN2)[:2]  # two logical cores: kernels of one run one at a time
    a, b = dev.stream("a"), other.stream("b")
    e = dev.event()
    e.record(a)  # at 0: complete as soon as a reaches it
    b.wait_event(e)
    a.launch(memset_kernel("long", 32768))
    e.record(a)  # re-recorded after the long kernel
    b.launch(memset_kernel("short", 64))
    dev.synchronize()
    long, short = sorted(kernel_runs(dev.recorder), key=lambda s: s.kernel)
    assert short.start_ps == 2 * LAUNCH < long.end_ps  # did not wait for the second record


def test_an_event_of_another_chip_is_an_error():
    dev, other = Device(TRN2), Device(TRN2)
    e = other.event()
    with pytest.raises(TrnsimError, match="the event is of another chip"):
        e.record(dev.default_stream)
    with pytest.raises(TrnsimError, match="the event is of another chip"):
        dev.default_stream.wait_event(e)
