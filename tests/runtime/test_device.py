"""The device: properties, launches with bound tensors, copies with values, errors, and the
host clock of a launch-bound loop (contracts in the manner of PyTorch's device tests)."""

import numpy as np
import pytest

from tests.runtime.helpers import (
    GRAPH_LAUNCH,
    LAUNCH,
    TRN2,
    copy_kernel,
    memset_kernel,
    memset_ps,
)
from trnsim.core.run import NeuronCore
from trnsim.errors import DeadlockError, TrnsimError
from trnsim.runtime import Device, devices
from trnsim.trace.program import KernelSpec, OpSpec


def test_properties():
    dev = Device(TRN2)  # lnc=2: 4 logical cores of 2 physical cores each
    assert dev.name == "trn2 logical NeuronCore 0 (lnc=2)"
    assert dev.memory == TRN2.hbm.stacks * TRN2.hbm.stack_capacity
    assert dev.clocks["tensor"] == TRN2.core.tensor.clock_hz
    assert dev.peak_flops["bfloat16"] == TRN2.peak_flops.bfloat16 / 4


def test_devices_share_one_chip():
    devs = devices(TRN2)
    assert [d.index for d in devs] == [0, 1, 2, 3]
    assert all(d.env is devs[0].env and d.chip is devs[0].chip for d in devs)
    assert len(devices(TRN2, lnc=1)) == 8


def test_bad_logical_core():
    with pytest.raises(TrnsimError, match="logical cores 0..3"):
        Device(TRN2, index=4)


def test_launch_reads_and_writes_the_bound_buffers():
    dev = Device(TRN2)
    x = dev.malloc(128 * 256 * 4).view("float32", (128, 256))
    y = dev.malloc(128 * 256 * 4).view("float32", (128, 256))
    host = np.arange(128 * 256, dtype=np.float32).reshape(128, 256)
    dev.memcpy_async(x, host)
    dev.launch(copy_kernel(), {"x": x, "y": y})
    out = np.zeros_like(host)
    dev.memcpy_async(out, y)
    dev.synchronize()
    np.testing.assert_array_equal(out, host)


def test_a_timing_only_launch_takes_the_same_time_and_writes_nothing():
    times = []
    for timing_only in (False, True):
        dev = Device(TRN2)
        x = dev.malloc(128 * 256 * 4).view("float32", (128, 256))
        y = dev.malloc(128 * 256 * 4).view("float32", (128, 256))
        x.array[...] = 3.0
        dev.launch(copy_kernel(), {"x": x, "y": y}, timing_only=timing_only)
        dev.synchronize()
        assert (y.array == (0.0 if timing_only else 3.0)).all()
        times.append(dev.host_time_ps)
    assert times[0] == times[1] > LAUNCH


def test_copies_move_and_cast_values():
    dev = Device(TRN2)
    h = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    a = dev.malloc(h.nbytes).view("float32", h.shape)
    b = dev.malloc(h.nbytes // 2).view("bfloat16", h.shape)
    back = np.zeros_like(h)
    dev.memcpy_async(a, h)  # host -> device
    dev.memcpy_async(b, a)  # device -> device, with a cast to bf16 (DMA)
    dev.memcpy_async(back, b)  # device -> host, cast back to fp32
    dev.synchronize()
    np.testing.assert_array_equal(back, h.astype(b.dtype.np).astype(np.float32))
    with pytest.raises(TrnsimError, match="different element counts"):
        dev.memcpy_async(np.zeros(3, np.float32), a)
    with pytest.raises(TrnsimError, match="both sides are host memory"):
        dev.memcpy_async(np.zeros(3, np.float32), np.ones(3, np.float32))


def test_a_thousand_tiny_launches_are_launch_bound():
    """Each launch costs the host LAUNCH (10 us); a 64-cycle memset (67 ns) runs as soon as it
    is enqueued, so kernel i runs from (i + 1) x LAUNCH: the loop takes 1,000 x LAUNCH + one
    kernel, and the device is idle 99% of the time."""
    dev = Device(TRN2, mode="timing")
    k = memset_kernel("tiny", 64)
    for _ in range(1000):
        dev.launch(k)
    assert dev.host_time_ps == 1000 * LAUNCH  # enqueueing alone took the host 10 ms
    dev.synchronize()
    assert dev.host_time_ps == dev.env.now == 1000 * LAUNCH + memset_ps(64)
    spans = dev.recorder.spans
    assert [s.start_ps for s in spans[:3]] == [LAUNCH, 2 * LAUNCH, 3 * LAUNCH]


def test_the_same_loop_replayed_as_a_graph():
    """One host launch, then the device starts a kernel every GRAPH_LAUNCH (1 us; each kernel
    is shorter): LAUNCH + 1,000 x GRAPH_LAUNCH + kernel, faster than eager by 999 x (LAUNCH -
    GRAPH_LAUNCH) - GRAPH_LAUNCH."""
    dev = Device(TRN2, mode="timing")
    k = memset_kernel("tiny", 64)
    g = dev.graph()
    with g.capture():
        for _ in range(1000):
            dev.launch(k)
    assert g.nodes == 1000 and dev.host_time_ps == 0  # capturing runs nothing, costs nothing
    g.replay()
    assert dev.host_time_ps == LAUNCH
    dev.synchronize()
    graph = LAUNCH + 1000 * GRAPH_LAUNCH + memset_ps(64)
    assert dev.host_time_ps == graph
    eager = 1000 * LAUNCH + memset_ps(64)
    assert eager - graph == 999 * (LAUNCH - GRAPH_LAUNCH) - GRAPH_LAUNCH


def test_a_kernel_of_ops_needs_its_tensors_bound():
    dev = Device(TRN2)
    k = KernelSpec("mlp", ops=[OpSpec("matmul", {"a": "x", "b": "w", "out": "h"})])
    with pytest.raises(TrnsimError, match="launch mlp: matmul: a names 'x', which is not among"):
        dev.launch(k)


def test_a_semaphore_deadlock_names_the_stuck_queue():
    dev = Device(TRN2)
    dev.launch(memset_kernel("stuck", wait={"never": 1}))
    assert not dev.default_stream.query()  # query neither blocks nor raises
    with pytest.raises(DeadlockError) as e:
        dev.synchronize()
    msg = str(e.value)
    assert "core0.vector in kernel stuck waits for semaphore 'never' >= 1 (it is 0)" in msg
    assert "stream default is in launch stuck" in msg


@pytest.mark.parametrize("exc", [NotImplementedError, RecursionError])
def test_errors_inside_the_simulation_propagate(monkeypatch, exc):
    """Regression: Device.run caught RuntimeError broadly, so these (subclasses of it) were
    reported as an empty deadlock."""

    def start(self, launch):
        raise exc("inside an engine")

    monkeypatch.setattr(NeuronCore, "start", start)
    dev = Device(TRN2)
    dev.launch(memset_kernel())
    with pytest.raises(exc, match="inside an engine"):
        dev.synchronize()


def test_a_kernel_of_ops_is_lowered_once_and_launched():
    """A high-level kernel launches through the runtime: lowered by the kernel library for the
    views' shapes (once per kernel and shapes), values as numpy's."""
    import numpy as np

    from trnsim.trace.program import KernelSpec, OpSpec

    dev = Device("trn2")
    x = dev.malloc(256 * 512 * 4).view("float32", (256, 512))
    y = dev.malloc(256 * 512 * 4).view("float32", (256, 512))
    ops = [OpSpec("exp", {"x": "x", "out": "y"}), OpSpec("relu", {"x": "y", "out": "y"})]
    k = KernelSpec("k", ops=ops)
    h = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)
    dev.memcpy_async(x, h)
    dev.launch(k, {"x": x, "y": y})
    dev.launch(k, {"x": x, "y": y})
    dev.synchronize()
    np.testing.assert_allclose(y.numpy(), np.exp(h), rtol=1e-5)
    assert dev.lower(k, {"x": x, "y": y}) is dev.lower(k, {"x": x, "y": y})
