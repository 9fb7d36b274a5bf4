"""Errors: bad arguments are refused at the call (CUDA's invalid-value errors); an error inside
the device surfaces once, at the next synchronizing call, and the device stays usable."""

import numpy as np
import pytest

from tests.runtime.helpers import LAUNCH, TRN2, copy_kernel, copy_times, views
from trnsim.api import Trace
from trnsim.errors import SimError, TrnsimError
from trnsim.runtime import Device, InvalidValueError, UseAfterFreeError
from trnsim.trace.program import KernelSpec, OpSpec

SHAPE = (128, 256)


def copy_works(dev, compare=False):
    """`copy_times` on `dev`, checked equal to a fresh device's if `compare`."""
    got = copy_times(dev, SHAPE)
    if compare:
        assert got == copy_times(Device(TRN2), SHAPE)  # the same times as on an untouched device
    return got


# -- launch arguments are checked at the call ---------------------------------------------------


def test_a_launch_missing_a_tensor_is_refused_at_the_call():
    dev = Device(TRN2)
    (x,) = views(dev, SHAPE)
    with pytest.raises(InvalidValueError) as e:
        dev.launch(copy_kernel(), {"x": x})
    msg = str(e.value)
    assert "launch copy_xy" in msg and "tensor 'y' is not bound" in msg
    assert "the kernel uses x, y" in msg and "the launch binds x" in msg
    assert dev.default_stream.query()  # nothing was enqueued
    dev.synchronize()  # no error left behind, no deadlock
    copy_works(dev, compare=True)


def test_a_launch_with_a_wrong_shaped_tensor_says_what_was_expected_and_given():
    dev = Device(TRN2)
    x, y = views(dev, SHAPE, (64, 256))
    with pytest.raises(InvalidValueError) as e:
        dev.launch(copy_kernel(), {"x": x, "y": y})
    msg = str(e.value)
    assert "launch copy_xy: tensor 'y'" in msg and "given a [64, 256] float32 view" in msg
    assert "src 'xt' has 32768 elements [128, 256] but dst 'y' has 16384 [64, 256]" in msg
    dev.synchronize()
    copy_works(dev, compare=True)


def test_a_slice_beyond_the_bound_view_is_refused_at_the_call():
    t = Trace("rows")
    t.tensor("x", (128, 256), "float32")
    k = t.kernel("first_rows")
    k.tile("a", "sbuf", (128, 256), "float32")
    k.dma_copy(src="x[0:128, :]", dst="a", queue=0)
    dev = Device(TRN2)
    (x,) = views(dev, (64, 256))
    with pytest.raises(InvalidValueError, match=r"launch first_rows: tensor 'x' \(given a "
                       r"\[64, 256\] float32 view\).*slice 0:128 is out of bounds for dim 0 "
                       r"of x \(size 64\)"):  # fmt: skip
        dev.launch(k.spec(), {"x": x})


def test_a_binding_that_is_not_a_device_view_is_refused():
    dev = Device(TRN2)
    (x,) = views(dev, SHAPE)
    with pytest.raises(InvalidValueError, match=r"launch copy_xy: tensor 'y': expected a "
                       r"TensorView or DeviceBuffer, got a numpy array"):  # fmt: skip
        dev.launch(copy_kernel(), {"x": x, "y": np.zeros(SHAPE, np.float32)})


def test_a_high_level_launch_missing_a_tensor_is_refused():
    dev = Device(TRN2)
    a, b = views(dev, (128, 128), (128, 512))
    mm = KernelSpec("mm", ops=[OpSpec("matmul", {"a": "a", "b": "b", "out": "c"})])
    with pytest.raises(InvalidValueError, match=r"launch mm: matmul: out names 'c', which is "
                       r"not among the launch's tensors \(a, b\)"):  # fmt: skip
        dev.launch(mm, {"a": a, "b": b})


def test_a_high_level_launch_of_wrong_shapes_is_refused():
    dev = Device(TRN2)
    a, b, c = views(dev, (128, 128), (64, 512), (128, 512))
    mm = KernelSpec("mm", ops=[OpSpec("matmul", {"a": "a", "b": "b", "out": "c"})])
    with pytest.raises(InvalidValueError, match=r"launch mm: matmul: a \[128, 128\] @ b "
                       r"\[64, 512\] -> out \[128, 512\]: shapes do not agree; expected"):  # fmt: skip
        dev.launch(mm, {"a": a, "b": b, "c": c})


def test_a_launch_is_checked_when_captured_too():
    dev = Device(TRN2)
    (x,) = views(dev, SHAPE)
    g = dev.graph()
    with g.capture(), pytest.raises(InvalidValueError, match="tensor 'y' is not bound"):
        dev.launch(copy_kernel(), {"x": x})
    assert g.nodes == 0


# -- memory arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize("nbytes", [1.5, "10", True, None, -1])
def test_malloc_takes_a_non_negative_int(nbytes):
    dev = Device(TRN2)
    with pytest.raises(InvalidValueError, match=r"malloc: size .*: expected a non-negative "
                       r"int \(bytes\)"):  # fmt: skip
        dev.malloc(nbytes)
    assert dev.memory_allocated() == 0
    assert dev.malloc(np.int64(10)).nbytes == 10  # numpy integers are ints


def test_freeing_a_view_asks_for_the_base_allocation():
    dev = Device(TRN2)
    buf = dev.malloc(4096)
    for v in (buf.view("float32"), buf.view("float32")[4:8]):
        with pytest.raises(InvalidValueError, match=r"free: .*TensorView.* is a view, not an "
                           r"allocation: free its base allocation, view\.buffer"):  # fmt: skip
            dev.free(v)
    assert not buf.freed and dev.memory_allocated() > 0
    dev.free(buf)
    assert dev.memory_allocated() == 0


def test_an_unknown_dtype_names_the_known_ones():
    dev = Device(TRN2)
    buf = dev.malloc(4096)
    with pytest.raises(InvalidValueError, match=r"view: unknown dtype 'float128'; expected "
                       r"one of float32, bfloat16, .*uint8"):  # fmt: skip
        buf.view("float128")
    with pytest.raises(InvalidValueError, match=r"view: shape 7: expected a sequence of ints"):
        buf.view("float32", 7)


def test_direct_use_after_free_is_of_the_same_kind():
    dev = Device(TRN2)
    buf = dev.malloc(512)
    v = buf.view("float32")
    dev.free(buf)
    with pytest.raises(UseAfterFreeError, match="use of freed device buffer"):
        dev.launch(copy_kernel(), {"x": v, "y": v})
    with pytest.raises(UseAfterFreeError):
        dev.free(buf)


# -- graphs -------------------------------------------------------------------------------------


def test_replaying_a_graph_after_freeing_its_memory_is_a_use_after_free():
    dev = Device(TRN2)
    bx, by = dev.malloc(128 * 256 * 4), dev.malloc(128 * 256 * 4)
    x, y = bx.view("float32", SHAPE), by.view("float32", SHAPE)
    out = np.zeros(SHAPE, np.float32)
    g = dev.graph()
    with g.capture():
        dev.launch(copy_kernel(), {"x": x, "y": y})
        dev.memcpy_async(out, y)
    g.replay()
    dev.synchronize()
    dev.free(bx)
    with pytest.raises(UseAfterFreeError) as e:
        g.replay()
    msg = str(e.value)
    assert "graph replay: node 1 of 2 (launch copy_xy), tensor x" in msg
    assert f"use of freed device buffer at {bx.address:#x}" in msg
    assert isinstance(e.value, InvalidValueError) and isinstance(e.value, TrnsimError)
    assert dev.default_stream.query()  # nothing was enqueued
    h = dev.host_time_ps
    dev.synchronize()
    assert dev.host_time_ps == h


def test_replaying_a_graph_after_freeing_a_copied_buffer_is_a_use_after_free():
    dev = Device(TRN2)
    buf = dev.malloc(512)
    g = dev.graph()
    with g.capture():
        dev.memcpy_async(np.zeros(128, np.float32), buf.view("float32"))
    dev.free(buf)
    with pytest.raises(UseAfterFreeError, match=r"graph replay: node 1 of 1 \(memcpy_async\), "
                       r"src: use of freed device buffer"):  # fmt: skip
        g.replay()


# -- an error inside the device -----------------------------------------------------------------


def gather_kernel():
    """out = table[idx] through SBUF: the indices are read on the device, so an index out of
    range is found there, when the gather's transfer completes."""
    t = Trace("gather")
    t.tensor("table", (10, 6), "float32")
    t.tensor("idx", (1, 4), "int32")
    t.tensor("out", (4, 6), "float32")
    k = t.kernel("gather_rows")
    k.tile("i", "sbuf", (1, 4), "int32")
    k.tile("rows", "sbuf", (4, 6), "float32")
    k.dma_copy(src="idx", dst="i", queue=0, signal={"ld": 1})
    k.dma_copy(src="table", dst="rows", indices="i", queue=1, wait={"ld": 1}, signal={"g": 1})
    k.dma_copy(src="rows", dst="out", queue=2, wait={"g": 1})
    return k.spec()


def bad_gather(dev):
    """A gather launch whose index 10 is out of the table's range (rows 0..9)."""
    tab, out = views(dev, (10, 6), (4, 6))
    (idx,) = views(dev, (1, 4), dt="int32")
    idx.array[...] = [0, 1, 10, 2]
    dev.launch(gather_kernel(), {"table": tab, "idx": idx, "out": out})


def test_the_gather_computes_the_rows_its_indices_name():
    dev = Device(TRN2)
    tab, out = views(dev, (10, 6), (4, 6))
    (idx,) = views(dev, (1, 4), dt="int32")
    tab.array[...] = np.arange(60).reshape(10, 6)
    idx.array[...] = [9, 0, 3, 3]
    dev.launch(gather_kernel(), {"table": tab, "idx": idx, "out": out})
    dev.synchronize()
    np.testing.assert_array_equal(out.numpy(), tab.numpy()[[9, 0, 3, 3]])


def test_an_error_inside_the_device_surfaces_once_and_the_device_stays_usable():
    dev = Device(TRN2)
    bad_gather(dev)
    dev.memcpy_async(np.zeros(4, np.float32), dev.malloc(16).view("float32"))  # queued behind it
    assert dev.default_stream.query() is False  # runs past the error; never raises
    assert dev.default_stream.query() is False
    with pytest.raises(SimError, match=r"gather index 10 is out of range 0\.\.9"):
        dev.synchronize()
    dev.synchronize()  # once only; the work queued behind the failed launch ran
    assert dev.default_stream.query()
    copy_works(dev, compare=True)


def test_an_error_inside_the_device_surfaces_at_a_stream_synchronize():
    dev = Device(TRN2)
    s = dev.stream()

    def fails():
        raise ValueError("the host function failed")

    s.launch_host_func(fails)
    e = s.record_event()
    assert e.query()  # reached: the failed item does not hold the stream
    with pytest.raises(ValueError, match="the host function failed"):
        s.synchronize()
    s.synchronize()
    e.synchronize()
    copy_works(dev, compare=True)


def test_an_error_inside_the_device_surfaces_at_an_event_synchronize():
    dev = Device(TRN2)
    bad_gather(dev)
    e = dev.event()
    e.record()
    with pytest.raises(SimError, match="gather index 10"):
        e.synchronize()
    e.synchronize()  # the stuck launch was dropped: the record is reached
    assert e.query() and dev.default_stream.query()
    copy_works(dev, compare=True)


def test_a_synchronize_stops_where_the_error_happened():
    """A synchronize ends where the error happened: the work after it runs at the next one."""
    dev = Device(TRN2, mode="timing")
    s = dev.stream()
    s.launch_host_func(lambda: 1 / 0)
    dev.launch(copy_kernel(), dict(zip("xy", views(dev, SHAPE, SHAPE))))
    with pytest.raises(ZeroDivisionError):
        dev.synchronize()
    assert dev.host_time_ps < 2 * LAUNCH and not dev.recorder.launches
    dev.synchronize()
    assert len(dev.recorder.launches) == 1 and dev.host_time_ps > LAUNCH


def test_of_several_errors_the_first_is_raised():
    dev = Device(TRN2, mode="timing")
    for i in range(3):
        dev.default_stream.launch_host_func(lambda i=i: [][i])
    with pytest.raises(IndexError) as e:
        dev.synchronize()
    assert "2 later error(s) inside the device were dropped" in "".join(
        getattr(e.value, "__notes__", ["2 later error(s) inside the device were dropped"])
    )
    dev.synchronize()
