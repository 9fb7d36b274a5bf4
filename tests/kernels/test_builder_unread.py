"""The builder's check that no queue writes over another queue's write not yet read."""

from __future__ import annotations

import pytest

from trnsim.dtypes import dtype
from trnsim.isa import DmaCopy, Memset
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.trace.program import TensorSpec

BF16 = dtype("bfloat16")


def _strip(n: int) -> tuple[KernelBuilder, str]:
    """A tile written in `n` disjoint [128, 128] column blocks by DMA queues 0 and 1 in turn."""
    b = KernelBuilder({"x": TensorSpec("x", (128, 128 * n), BF16, None)})
    t = b.tile("s", "sbuf", (128, 128 * n), BF16)
    for i in range(n):
        src, dst = (
            ap("x", slice(0, 128), slice(128 * i, 128 * (i + 1))),
            ap(t, slice(0, 128), slice(128 * i, 128 * (i + 1))),
        )
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=i % 2)
    return b, t


def test_disjoint_writes_of_several_queues_pass():
    b, _ = _strip(64)
    assert len(b.instructions) == 64


@pytest.mark.parametrize("block", [0, 37, 63])
def test_a_write_over_another_queues_unread_write_is_a_lowering_bug(block):
    b, t = _strip(64)
    q = 1 - block % 2  # the other queue than the one that wrote the block
    src = ap("x", slice(0, 128), slice(0, 64))
    dst = ap(t, slice(0, 128), slice(128 * block + 64, 128 * block + 128))
    with pytest.raises(AssertionError, match="lowering bug: dma_copy writes"):
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=q)


def test_a_dma_queue_may_not_write_over_its_own_unread_write():
    b, t = _strip(2)
    src = ap("x", slice(0, 128), slice(0, 64))
    dst = ap(t, slice(0, 128), slice(0, 64))  # block 0, written by queue 0 and not read
    with pytest.raises(AssertionError, match="lowering bug: dma_copy writes s\\[0:128, 0:64\\]"):
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=0)


def test_a_compute_engine_may_write_over_its_own_unread_write():
    b = KernelBuilder({})
    t = b.tile("s", "sbuf", (128, 64), BF16)
    for _ in range(2):  # in order on one engine: the second memset needs no read between
        b.emit(Memset, [], [ap(t)], dst=ap(t), value=0.0)
    assert len(b.instructions) == 2
