"""Device memory: malloc/free by bytes, strided views, statistics, and its errors."""

import numpy as np
import pytest

from tests.runtime.helpers import TRN2
from trnsim.errors import OutOfMemoryError, TrnsimError
from trnsim.runtime import Device

ALIGN = TRN2.hbm.alignment  # 512 B: every block is a multiple


def test_freed_memory_is_reused():
    dev = Device(TRN2)
    a = dev.malloc(1 << 20)
    b = dev.malloc(1 << 20)
    assert b.address == a.address + (1 << 20)  # first fit, in address order
    dev.free(a)
    c = dev.malloc(4096)
    assert c.address == a.address  # the hole a left
    d = dev.malloc((1 << 20) - 4096)
    assert d.address == a.address + 4096  # and the rest of it


def test_views_share_memory():
    dev = Device(TRN2)
    buf = dev.malloc(16 * 4)
    m = buf.view("float32", (4, 4))
    flat = buf.view("float32")
    m.array[1, 2] = 5.0
    assert flat.array[6] == 5.0 and flat.shape == (16,)
    col = m[:, 2]  # a strided view: every 4th element from element 2
    assert col.shape == (4,) and col.strides == (4,) and col.data_ptr == buf.address + 8
    col.array[...] = 7.0
    assert flat.array.tolist()[2::4] == [7.0] * 4
    t = buf.view("float32", (4, 4), strides=(1, 4))  # the transpose, no copy
    np.testing.assert_array_equal(t.array, m.array.T)
    assert not t.is_contiguous and m.is_contiguous
    assert m[1:3].view((8,)).array.tolist() == flat.array[4:12].tolist()
    tail = buf.view("int32", (2,), offset=56)
    tail.array[...] = 0
    assert flat.array[14] == flat.array[15] == 0.0


def test_a_view_must_fit_its_buffer():
    dev = Device(TRN2)
    buf = dev.malloc(64)
    with pytest.raises(TrnsimError, match="needs 68 bytes; the buffer has 64"):
        buf.view("float32", (17,))
    with pytest.raises(TrnsimError, match="needs 68 bytes"):
        buf.view("float32", (4, 4), strides=(4, 1), offset=4)
    with pytest.raises(TrnsimError, match="element counts must match"):
        buf.view("float32", (4, 4))[:, :2].view((8,))


def test_statistics_match_the_allocations():
    dev = Device(TRN2)
    a = dev.malloc(1000)  # one 1024-byte block (2 x 512)
    b = dev.malloc(3 * ALIGN)
    assert dev.memory_allocated() == 2 * ALIGN + 3 * ALIGN == dev.memory_reserved()
    dev.free(a)
    assert dev.memory_allocated() == 3 * ALIGN
    assert dev.max_memory_allocated() == 5 * ALIGN
    s = dev.memory_stats()
    assert s["allocated_bytes.all.current"] == 3 * ALIGN
    assert s["allocated_bytes.all.peak"] == 5 * ALIGN
    assert s["allocated_bytes.all.allocated"] == 5 * ALIGN
    assert s["allocated_bytes.all.freed"] == 2 * ALIGN
    assert s["requested_bytes.all.current"] == 3 * ALIGN
    assert s["requested_bytes.all.peak"] == 1000 + 3 * ALIGN
    assert s["allocation.all.current"] == 1 and s["allocation.all.allocated"] == 2
    dev.reset_peak_memory_stats()
    assert dev.max_memory_allocated() == 3 * ALIGN
    dev.free(b)
    assert dev.memory_allocated() == 0 and dev.memory_stats()["num_ooms"] == 0


def test_out_of_memory_says_what_was_requested_and_what_is_free():
    dev = Device(TRN2, mode="timing")
    stack = TRN2.hbm.stack_capacity
    with pytest.raises(OutOfMemoryError) as e:
        dev.malloc(2 * stack)  # larger than any stack
    msg = str(e.value)
    assert "48 GiB requested" in msg and "96 GiB free" in msg and "largest free block 24 GiB" in msg
    assert dev.memory_stats()["num_ooms"] == 1 and dev.memory_allocated() == 0
    assert isinstance(e.value, TrnsimError)  # an error, not a crash


def test_use_after_free_is_an_error():
    dev = Device(TRN2)
    buf = dev.malloc(512)
    v = buf.view("float32")
    dev.free(buf)
    for use in (
        lambda: v.array,
        lambda: buf.view("float32"),
        lambda: dev.memcpy_async(v, np.zeros(128, np.float32)),
        lambda: dev.free(buf),
    ):
        with pytest.raises(TrnsimError, match="use of freed device buffer"):
            use()


def test_a_buffer_of_another_chip_is_an_error():
    dev, other = Device(TRN2), Device(TRN2)
    v = other.malloc(512).view("float32")
    with pytest.raises(TrnsimError, match="belongs to another chip"):
        dev.memcpy_async(v, np.zeros(128, np.float32))
    with pytest.raises(TrnsimError, match="belongs to another chip"):
        dev.free(v.buffer)


def test_timing_mode_buffers_have_no_values():
    dev = Device(TRN2, mode="timing")
    v = dev.malloc(1 << 30).view("bfloat16", (1 << 14, 1 << 15))
    assert v.array is None and v.nbytes == 1 << 30
    with pytest.raises(TrnsimError, match="timing-only"):
        v.numpy()


def test_copies_to_and_from_a_strided_view_touch_only_its_elements():
    dev = Device(TRN2)
    m = dev.malloc(8 * 8 * 4).view("float32", (8, 8))
    col = m[:, 3]
    dev.memcpy_async(col, np.arange(8, dtype=np.float32))  # host -> a strided device view
    back = np.zeros((4,), np.float32)
    dev.memcpy_async(back, m[2:6, 3])
    dev.synchronize()
    expect = np.zeros((8, 8), np.float32)
    expect[:, 3] = np.arange(8)
    np.testing.assert_array_equal(m.numpy(), expect)
    assert back.tolist() == [2.0, 3.0, 4.0, 5.0]
