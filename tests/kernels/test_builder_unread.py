"""The builder's checks: no queue writes over another queue's write not yet read, and no
instruction reads a tile region nothing wrote before it."""

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


def test_a_read_of_a_tile_nothing_wrote_is_a_lowering_bug():
    """A stage emitted before the one that computes what it reads (`norm_ragged` once read
    its rstd so and gave the bias alone for fp32 rows of 10^6): refused as it is emitted."""
    b, t = _strip(2)  # columns [0, 256) written
    s = b.tile("s", "sbuf", (128, 4), BF16)
    with pytest.raises(AssertionError, match="reads s.*which nothing wrote before it"):
        b.emit(Memset, [ap(s)], [ap(t, slice(0, 128), slice(0, 4))], dst=ap(t), value=0.0)
    b2, t2 = _strip(2)
    src = ap(t2, slice(0, 128), slice(0, 64))  # inside what was written: fine
    out = b2.tile("o", "sbuf", (128, 64), BF16)
    b2.emit(DmaCopy, [src], [ap(out)], src=src, dst=ap(out), queue=0)
    b3 = KernelBuilder({"x": TensorSpec("x", (128, 512), BF16, None)})
    w = b3.tile("w", "sbuf", (128, 512), BF16)
    src, dst = ap("x", slice(0, 128), slice(0, 256)), ap(w, slice(0, 128), slice(0, 256))
    b3.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=0)
    late = ap(w, slice(0, 128), slice(256, 512))  # outside every region written so far
    with pytest.raises(AssertionError, match="which nothing wrote before it"):
        b3.emit(
            DmaCopy,
            [late],
            [ap("x", slice(0, 128), slice(256, 512))],
            src=late,
            dst=ap("x", slice(0, 128), slice(256, 512)),
            queue=1,
        )
