"""Graphs: capture on a stream, replay as one host launch, and what capture refuses."""

import numpy as np
import pytest

from tests.runtime.helpers import (
    COPY,
    GRAPH_LAUNCH,
    LAUNCH,
    TRN2,
    copy_kernel,
    memset_kernel,
    memset_ps,
)
from trnsim.errors import TrnsimError
from trnsim.runtime import Device


def test_replay_runs_the_captured_work_with_its_bound_memory():
    dev = Device(TRN2)
    x = dev.malloc(128 * 256 * 4).view("float32", (128, 256))
    y = dev.malloc(128 * 256 * 4).view("float32", (128, 256))
    host = np.full((128, 256), 2.0, np.float32)
    out = np.zeros_like(host)
    g = dev.graph()
    with g.capture():
        dev.memcpy_async(x, host)
        dev.launch(copy_kernel(), {"x": x, "y": y})
        dev.memcpy_async(out, y)
    dev.synchronize()
    assert (out == 0).all() and not dev.recorder.spans  # captured, not run
    g.replay()
    dev.synchronize()
    assert (out == 2.0).all()
    host[...] = 5.0
    g.replay()  # same memory, new values
    dev.synchronize()
    assert (out == 5.0).all()


def test_a_replay_is_one_host_launch():
    dev = Device(TRN2, mode="timing")
    s = dev.stream()
    g = dev.graph()
    with g.capture(s):
        for i in range(3):
            s.launch(memset_kernel(f"k{i}", 64))
    g.replay()
    assert dev.host_time_ps == LAUNCH  # not 3 x LAUNCH
    dev.synchronize()
    starts = [sp.start_ps for sp in dev.recorder.spans]
    # kernel i starts at most one per GRAPH_LAUNCH after the replay, once the one before ends
    assert memset_ps(64) < GRAPH_LAUNCH
    assert starts == [LAUNCH + (i + 1) * GRAPH_LAUNCH for i in range(3)]


def test_a_replay_of_long_kernels_starts_each_when_the_one_before_ends():
    """Starting a kernel overlaps the kernel before it: a graph of kernels longer than
    GRAPH_LAUNCH costs the device only the first start."""
    dev = Device(TRN2, mode="timing")
    n = 16 * 1024  # elements a partition: a memset longer than GRAPH_LAUNCH
    k = memset_ps(n)
    assert k > GRAPH_LAUNCH
    g = dev.graph()
    with g.capture():
        for i in range(3):
            dev.launch(memset_kernel(f"k{i}", n))
    g.replay()
    dev.synchronize()
    starts = [sp.start_ps for sp in dev.recorder.spans]
    assert starts == [LAUNCH + GRAPH_LAUNCH + i * k for i in range(3)]
    assert dev.host_time_ps == LAUNCH + GRAPH_LAUNCH + 3 * k


def test_copies_in_a_graph_pay_no_host_copy_cost():
    dev = Device(TRN2, mode="timing")
    g = dev.graph()
    buf = dev.malloc(512)
    with g.capture():
        for _ in range(4):
            dev.memcpy_async(buf, np.zeros(512, np.uint8))
    g.replay()
    assert dev.host_time_ps == LAUNCH < 4 * COPY + LAUNCH


def test_capture_refuses_events_and_a_second_capture():
    dev = Device(TRN2)
    g = dev.graph()
    with pytest.raises(TrnsimError, match="graph replay: nothing was captured"):
        g.replay()
    with g.capture():
        with pytest.raises(TrnsimError, match="during graph capture"):
            dev.event().record()
        with pytest.raises(TrnsimError, match="already being captured"):
            with dev.graph().capture():
                pass
    with pytest.raises(TrnsimError, match="already captured"):
        with g.capture():
            pass
