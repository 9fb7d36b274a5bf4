"""argmax over rows longer than 128 partitions of a segment, not a multiple of 128
(`argmax_stream`), where `argmax_ragged` kept three whole rows resident and overflowed SBUF
(bf16 [3, 5000011] needed 403 KB a partition): numpy's first index at LNC 1 and 2 (a maximum
planted in a late segment, ties, the remainder column, the last segment), and a time no shorter
than the DMA time of the bytes read."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.test_op_report import run_ops
from tests.kernels.test_rows_irregular_reductions import _run, _saved
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.kernels.argmax_stream import C, stream_layout, streams
from trnsim.trace.program import TensorSpec


@pytest.mark.parametrize("shape,dt", [((2, 2000003), "bfloat16"), ((3000017,), "float32"),
                                      ((2, 1500007), "float32"), ((4000037,), "bfloat16")])  # fmt: skip
def test_long_rows_values(shape, dt, tmp_path):
    """numpy's values, the same at LNC 1 and 2: a tie late in the row (the first wins), a tie
    between the first segment and the remainder column; one row: a max in the last segment's
    main part tied with the remainder column."""
    x = np.random.default_rng(3).integers(-50, 50, shape).astype(np.float32)
    d = shape[-1]
    rows = x.reshape(-1, d)
    rows[0, [d - 300001, d - 3]] = 99  # in a late segment, tied later
    if len(rows) > 1:
        rows[1, [5, d - 2]] = 99  # the first segment's and the remainder column's
    else:
        rows[0, [d - 200, d - 1]] = 100  # the last segment's main part, then its remainder
    specs = _saved(tmp_path, x=x)
    specs["x"] = TensorSpec("x", shape, dtype(dt), specs["x"].init)
    specs["out"] = TensorSpec("out", shape[:-1] or (1,), dtype("int32"), None)
    a, b = _run(specs, "argmax", {"x": "x", "out": "out", "dim": -1})
    assert np.array_equal(a, b)
    assert list(a.reshape(-1)) == list(np.argmax(rows, axis=1))


def test_stream_layout():
    """bf16 rows of 5000011 = 128 x 39040 + 2891: 20 segments of 2048 columns a partition (the
    last of 128) in chunks of 64, and a tail of 22 columns and a remainder column of 75; a
    row of 2^24 - 1 fp32 in 128 of 1024 and a tail of 63 columns and 127 left."""
    lay = stream_layout(5000011, 2)
    assert (lay.mm, lay.t, lay.W, lay.cols(19)) == (39040, 20, 2048, (38912, 39040))
    assert (lay.tail.m, lay.tail.r) == (22, 75)
    assert 128 * lay.mm + lay.tail.d == 5000011
    lay = stream_layout(2**24 - 1, 4)
    assert (lay.mm, lay.t, lay.tail.m, lay.tail.r) == (131008, 128, 63, 127)
    assert stream_layout(2**24, 4).tail is None


@pytest.mark.parametrize("dt", ["bfloat16", "float32"])
def test_long_rows_lower_and_take_at_least_their_dma_time(dt):
    """[3, 5000011] at LNC 2 lowers (it overflowed SBUF: 403 KB a partition in bf16), takes no
    less than the DMA time of the bytes it reads (x once, and a chunk a partition a row
    gathered again), and keeps its fraction of the bound."""
    cfg = load_chip("trn2")
    d = 5000011
    assert streams(cfg, TensorSpec("x", (3, d), dtype(dt), None))
    r, _ = run_ops({"x": ((3, d), dt), "out": ((3,), "int32")},
                   [("argmax", {"x": "x", "out": "out", "dim": -1})], lnc=2)  # fmt: skip
    (row,) = r.summary["ops"]
    assert row["time_ns"] >= row["dma_bound_ns"] * (1 + 128 * C / d)
    # one pass over x: bf16 65.4 us (63%), fp32 120.8 us (69%) of the bound (75% at most: a
    # core's two rows of three)
    assert row["roofline_ns"] / row["time_ns"] >= {"bfloat16": 0.6, "float32": 0.65}[dt]
