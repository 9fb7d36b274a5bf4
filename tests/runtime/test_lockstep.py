"""runtime.lockstep: a collective's arrival on a CC stream still busy with the group's earlier
collectives is the end of those (known from their holds), without running the device there,
so compute the host launches afterwards runs beside the CC stream's backlog."""

from trnsim.runtime import devices
from trnsim.runtime.lockstep import arrive, hold

K = 10_000_000  # a kernel: 10 us


def _setup():
    dev = devices("trn2", "timing", 2)[0]
    return dev, dev.default_stream, dev.stream("cc g")


def _mark(dev, s):
    return s.record_event(dev.event(enable_timing=True))


def test_an_arrival_behind_a_collective_in_flight_does_not_idle_the_core():
    """A collective held 50 us, then a kernel and a second collective issued after it: the
    second arrives when the first ends (the CC stream's backlog), the device is run only
    through the kernel, and the kernel the host launches next starts when that one ends, not
    when the first collective does."""
    dev, s, cc = _setup()
    end1 = arrive(s, cc, "first") + 50_000_000
    hold(cc, end1)
    s.launch_timed("k1", K)
    k1_end = _mark(dev, s)
    assert arrive(s, cc, "second") == end1
    assert dev.ctx.env.now < end1  # not run ahead to the arrival
    s.launch_timed("k2", K)
    k2_end = _mark(dev, s)
    s.synchronize()
    assert k2_end.time_ps - k1_end.time_ps == K  # k2 right after k1 (and its host launch)
    assert k2_end.time_ps < end1


def test_an_arrival_on_an_idle_cc_stream_is_when_the_issuing_stream_gets_there():
    """The first collective ends before the kernel issued after it: the second arrives at the
    kernel's end, as before."""
    dev, s, cc = _setup()
    a = arrive(s, cc, "first")
    hold(cc, a + K // 2)
    s.launch_timed("k", K)
    k_end = _mark(dev, s)
    assert arrive(s, cc, "second") == k_end.time_ps > a + K // 2
