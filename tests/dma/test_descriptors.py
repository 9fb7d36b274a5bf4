"""Cutting copies into descriptors: run lengths, segment counting, per-engine pieces.

Brute-force oracle: walk both access patterns element by element in flat order and start a new
descriptor whenever either side's next address is not adjacent, the SBUF partition changes, or
the element index crosses a multiple of max_descriptor_bytes / itemsize.
"""

import dataclasses
import itertools
import math
import random

import numpy as np
import pytest

from trnsim.config import load_chip
from trnsim.dma.descriptors import Piece, cut, run_elements, segments
from trnsim.dtypes import dtype
from trnsim.isa import Ap
from trnsim.memory.buffer import Buffer, bind

BF16, FP32 = dtype("bfloat16"), dtype("float32")
TRN2 = load_chip("trn2")
DMA = TRN2.core.dma
P = TRN2.core.sbuf.partitions


def ref(memory, shape, index=(), dt=BF16):
    buf = Buffer("b", memory, tuple(shape), dt)
    return bind(Ap("b", tuple(index)), buf, "test")


def sl(a=None, b=None, c=None):
    return (a, b, c)


def test_run_elements():
    assert run_elements(ref("hbm", [128, 1024])) == 128 * 1024  # the whole tensor is one run
    assert run_elements(ref("hbm", [128, 1024], [sl(0, 128), sl(256, 512)])) == 256
    assert run_elements(ref("hbm", [4, 8, 16], [sl(1, 3), sl(), sl()])) == 2 * 8 * 16
    assert run_elements(ref("hbm", [4, 8, 16], [sl(), 3, sl()])) == 16  # int index: rows apart
    assert run_elements(ref("hbm", [4, 8], [sl(), sl(0, 8, 2)])) == 1  # strided: one by one
    assert run_elements(ref("hbm", [4, 8], [sl(0, 4, 2), sl()])) == 8
    # tiles: partitions are separate memories, so only the free dims count
    assert run_elements(ref("sbuf", [128, 2048])) == 2048
    assert run_elements(ref("sbuf", [128, 4, 512], [sl(0, 64), sl(), sl(0, 256)])) == 256
    assert run_elements(ref("sbuf", [128])) == 1


def test_segments_matches_enumeration():
    rng = random.Random(7)
    for _ in range(300):
        grids = tuple(rng.randint(1, 40) for _ in range(rng.randint(1, 3)))
        lo = rng.randint(0, 200)
        hi = lo + rng.randint(1, 200)
        cuts = sum(1 for x in range(lo + 1, hi) if any(x % g == 0 for g in grids))
        assert segments(lo, hi, grids) == 1 + cuts, (lo, hi, grids)


def test_32kib_tile_on_one_engine():
    """[8, 2048] bf16 = 32 KiB, partitions 0-7: engine 0 only, one 4 KiB row per descriptor."""
    pieces = cut(ref("hbm", [8, 2048]), ref("sbuf", [128, 2048], [sl(0, 8)]), False, DMA, P)
    assert pieces == (Piece(0, 8, 8 * 2048, 32768, 32768),)


def test_full_tile_spreads_over_all_engines():
    """[128, 4096] bf16: P/E = 8 partitions per engine, 8 descriptors of 8 KiB each."""
    per = P // DMA.engines
    pieces = cut(ref("hbm", [128, 4096]), ref("sbuf", [128, 4096]), False, DMA, P)
    assert [p.engine for p in pieces] == list(range(DMA.engines))
    assert all(p == Piece(p.engine, per, per * 4096, per * 8192, per * 8192) for p in pieces)


def test_partition_offset_picks_engines():
    pieces = cut(ref("hbm", [32, 64]), ref("sbuf", [128, 64], [sl(64, 96)]), False, DMA, P)
    per = P // DMA.engines
    assert [p.engine for p in pieces] == list(range(64 // per, 96 // per))


def test_rows_longer_than_a_descriptor_are_split():
    """A 96 KiB row with 64 KiB descriptors: 2 per partition (the cut is at the 64 KiB grid)."""
    n = 3 * DMA.max_descriptor_bytes // 2 // BF16.itemsize
    pieces = cut(ref("hbm", [8, n]), ref("sbuf", [128, n], [sl(0, 8)]), False, DMA, P)
    assert [p.descriptors for p in pieces] == [2 * 8]


def test_sliced_hbm_source():
    """x[0:128, 256:512] of a [128, 1024] tensor: one 512-byte run per row = per partition."""
    src = ref("hbm", [128, 1024], [sl(0, 128), sl(256, 512)])
    pieces = cut(src, ref("sbuf", [128, 256]), False, DMA, P)
    assert sum(p.descriptors for p in pieces) == 128 and len(pieces) == DMA.engines


def test_hbm_to_hbm_round_robin():
    """4 MiB contiguous: 64 descriptors of 64 KiB dealt over 16 engines = 4 each."""
    n = 4 * 2**20 // BF16.itemsize
    pieces = cut(ref("hbm", [n]), ref("hbm", [n]), False, DMA, P)
    d = n * BF16.itemsize // DMA.max_descriptor_bytes
    assert [p.descriptors for p in pieces] == [d // DMA.engines] * DMA.engines
    assert sum(p.elements for p in pieces) == n
    # fewer descriptors than engines: only the first few engines work
    small = cut(ref("hbm", [3, 100]), ref("hbm", [3, 1000], [sl(), sl(0, 100)]), False, DMA, P)
    assert [(p.engine, p.descriptors, p.elements) for p in small] == [
        (0, 1, 100),
        (1, 1, 100),
        (2, 1, 100),
    ]


def test_cast_moves_the_larger_side():
    pieces = cut(ref("hbm", [8, 512]), ref("sbuf", [128, 512], [sl(0, 8)], FP32), False, DMA, P)
    (p,) = pieces
    assert (p.src_bytes, p.dst_bytes, p.engine_bytes) == (8 * 512 * 2, 8 * 512 * 4, 8 * 512 * 4)


def _addresses(r):
    """Flat-order (partition or -1, element address) of every element of a Ref."""
    shape = r.buf.shape
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    onchip = r.buf.onchip
    out = []
    for idx in itertools.product(*(range(*rg) for rg in r.ranges)):
        if onchip:
            out.append((idx[0], sum(i * s for i, s in zip(idx[1:], strides[1:]))))
        else:
            out.append((-1, sum(i * s for i, s in zip(idx, strides))))
    return out


def _brute(src, dst, dma, partitions):
    a, b = _addresses(src), _addresses(dst)
    m = max(1, dma.max_descriptor_bytes // max(src.dtype.itemsize, dst.dtype.itemsize))
    side = b if dst.buf.memory == "sbuf" else a if src.buf.memory == "sbuf" else None
    counts: dict[int, int] = {}
    n_desc = 0
    for i in range(len(a)):
        new = (
            i == 0
            or i % m == 0
            or a[i][0] != a[i - 1][0]
            or a[i][1] != a[i - 1][1] + 1
            or b[i][0] != b[i - 1][0]
            or b[i][1] != b[i - 1][1] + 1
        )
        if new:
            if side is None:
                e = n_desc % dma.engines
            else:
                e = side[i][0] * dma.engines // partitions
            counts[e] = counts.get(e, 0) + 1
            n_desc += 1
    return dict(sorted(counts.items()))


def _random_ref(rng, memory, size):
    """A random view with `size` elements: a slice of a bigger tensor or tile."""
    while True:
        if memory == "sbuf":
            parts = rng.choice([d for d in (1, 2, 4, 8, 16, 32) if size % d == 0])
            free = size // parts
            inner = rng.choice([d for d in range(1, free + 1) if free % d == 0])
            shape = [parts, free // inner, inner]
            p0 = rng.choice(range(0, 128 - parts + 1, max(parts, 1)))
            pad = rng.randint(0, 3)
            buf_shape = [128, shape[1], inner + pad]
            index = [sl(p0, p0 + parts), sl(), sl(0, inner)]
            return ref("sbuf", buf_shape, index)
        rows = rng.choice([d for d in range(1, size + 1) if size % d == 0])
        cols = size // rows
        step = rng.choice([1, 1, 2])
        buf_shape = [rows + rng.randint(0, 2), cols * step + rng.randint(0, 3)]
        index = [sl(0, rows), sl(0, cols * step, step)]
        return ref("hbm", buf_shape, index)


@pytest.mark.parametrize("seed", range(40))
def test_cut_matches_brute_force(seed):
    rng = random.Random(seed)
    dma = dataclasses.replace(DMA, max_descriptor_bytes=rng.choice([8, 16, 64, 4096]))
    size = rng.choice([8, 12, 16, 24, 32, 64, 96])
    src = _random_ref(rng, rng.choice(["hbm", "sbuf"]), size)
    dst = _random_ref(rng, rng.choice(["hbm", "sbuf"]), size)
    pieces = cut(src, dst, False, dma, P)
    assert {p.engine: p.descriptors for p in pieces} == _brute(src, dst, dma, P)
    assert sum(p.elements for p in pieces) == size


def test_transpose_cut_by_destination_rows():
    """src [64, 128] in HBM -> dst [128, 64] in SBUF: one 128-byte row per dst partition."""
    src, dst = ref("hbm", [64, 128]), ref("sbuf", [128, 64])
    pieces = cut(src, dst, True, DMA, P)
    assert sum(p.descriptors for p in pieces) == 128
    assert np.all([p.elements == 8 * 64 for p in pieces])
