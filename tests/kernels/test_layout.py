"""How lowerings walk tensors: row blocks (of a core's share of the rows) cover exactly the rows
they claim, in order; flat blocks hold each element of a share once; the cores' shares
partition the rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trnsim.kernels.layout import core_rows, flat_blocks, flat_walk, row_blocks, row_groups

SHAPES = [(5, 7, 3), (3, 130, 4), (2, 3, 4, 5), (300, 8), (1, 9), (7,)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("most", [1, 4, 128])
def test_row_blocks_of_a_range_cover_it_in_order(shape, most):
    rows = math.prod(shape[:-1])
    index = np.arange(rows).reshape(shape[:-1])
    step = max(1, rows // 12)
    for lo in range(0, rows, step):
        for hi in range(lo + 1, rows + 1, step):
            got = []
            for ix, n in row_blocks(shape, most, (lo, hi)):
                sel = np.asarray(index[ix]).reshape(-1)
                assert len(sel) == n
                got += sel.tolist()
            assert got == list(range(lo, hi))


@pytest.mark.parametrize("shape", [(300, 1000), (4, 3000), (2, 130, 7), (5000,)])
def test_flat_blocks_of_a_share_hold_its_elements(shape):
    data = np.arange(math.prod(shape)).reshape(shape)
    for part in ((0, 2), (1, 2)):
        lo, hi = core_rows(shape, part)
        blocks = flat_blocks(shape, 128, 2048, (lo, hi))
        flat = [v for ix, p, f in blocks for v in data[ix].reshape(-1).tolist()]
        assert all(np.asarray(data[ix]).size == p * f for ix, p, f in blocks)
        d = shape[-1]
        assert sorted(flat) == list(range(lo * d, hi * d))  # each element once (column chunks
        # of long rows come block by block, not in flat order)


def test_core_shares_partition_the_rows_at_multiples_of_128():
    assert core_rows((1000, 64), (0, 2)) == (0, 512)
    assert core_rows((1000, 64), (1, 2)) == (512, 1000)
    assert core_rows((100, 64), (0, 2)) == (0, 0)  # too few rows to split: one core does all
    assert core_rows((100, 64), (1, 2)) == (0, 100)


@pytest.mark.parametrize(
    "shape,most,per,sizes",
    [
        ((8192, 64), (8, 16), 8, [1024] * 8),  # the least of `most`
        ((300, 64), (8,), 4, [300]),  # one block of 300 rows: 4 divides it, 8 does not
        ((3, 130, 8), (4,), 2, [130, 130, 130]),  # the walk cuts blocks at items of 130 rows
        ((7, 9), (8,), 1, [7]),
        ((2048, 64), (0,), 1, [128] * 16),  # at least 1
        ((256, 64), (64,), 2, [256]),  # rows fill the partitions first: 2 to each of 128
        ((1000, 64), (64,), 8, [1000]),  # 8 to each of 125
    ],
)
def test_row_groups_put_the_same_rows_to_a_partition_in_every_block(shape, most, per, sizes):
    got, blocks = row_groups(shape, 128, None, *most)
    assert got == per
    assert [n for _, n in blocks] == sizes
    assert all(n % per == 0 and n // per <= 128 for n in sizes)


def test_few_small_items_longer_than_a_block_s_free_size_go_as_one_block():
    """A broadcast walks its rows with a free size of 1 where they are fewer than the
    partitions: the 30 rows of [2, 3, 5, d] are one block of [30, 1] (they were 15 blocks of
    [2, 1], one to a partition, 11 us for a 60-element add), and every row is in it once."""
    assert flat_walk((2, 3, 5), 0, 30, 128, 1) == [((slice(0, 2),), 30, 1)]
    assert flat_walk((3, 5), 0, 15, 128, 1) == [((slice(0, 3),), 15, 1)]
    # 10 items of 2500 (more than F = 2048): one [125, 200] block, not 20 of [10, 1250]
    assert flat_walk((10, 2500), 0, 25000, 128, 2048) == [((slice(0, 10),), 125, 200)]
    # no p x f = n with p <= 128, f <= F: the items walked together (`layout._across`), a
    # piece of 64 elements of each item, [128, 2], then the rest of each, [6, 1] (they were
    # 66 blocks of [2, 2], one item to a partition)
    assert flat_walk((2, 131), 0, 262, 128, 2) == [
        ((slice(0, 2), slice(0, 128)), 128, 2),
        ((slice(0, 2), slice(128, 131)), 6, 1),
    ]


@pytest.mark.parametrize(
    "dims,blocks",
    [
        # 63 items of [4095, 4] (a core's share of [127, 4095, 1, 4] bf16): 4 blocks on all
        # partitions, not 8 of [63, 2048] (half the DMA engines: 48% of the DMA bound at LNC 2)
        ((63, 4095, 4), [(128, 2016)] * 3 + [(126, 2046)]),
        # 77 rows of 50257 (the rest of [333, 50257] after 256 rows one to a partition): 17
        # blocks, not 77 of [128, 392] and 77 of [81, 1]
        ((77, 50257), [(128, 1925)] * 15 + [(128, 1309), (99, 63)]),
    ],
)
def test_few_large_items_are_walked_together_on_all_partitions(dims, blocks):
    data = np.arange(math.prod(dims)).reshape(dims)
    got = flat_walk(dims, 0, data.size, 128, 2048)
    assert sorted((p, f) for _, p, f in got) == sorted(blocks)
    assert all(np.asarray(data[ix]).size == p * f for ix, p, f in got)
    assert sorted(v for ix, _, _ in got for v in data[ix].reshape(-1).tolist()) == list(
        range(data.size)
    )
