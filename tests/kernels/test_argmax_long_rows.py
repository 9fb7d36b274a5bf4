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
from trnsim.kernels.argmax_ragged import PIECE_BYTES
from trnsim.kernels.argmax_stream import segment_layout, streams
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


def test_segment_layout():
    """bf16 rows of 5000011 = 128 x 39062 + 75: 19 segments of 2048 columns a partition and one
    of 150 and the remainder column; a row of 2^24 fp32 in 128 of 1024; short rows in two."""
    lay = segment_layout(5000011, 2048)
    assert (lay.t, lay.W, lay.width(18), lay.width(19), lay.r) == (20, 2048, 2048, 151, 75)
    assert sum(lay.main(s) for s in range(lay.t)) * 128 + lay.r == 5000011
    lay = segment_layout(2**24, 1024)
    assert (lay.t, lay.width(127), lay.r) == (128, 1024, 0)
    lay = segment_layout(1000, 2048)
    assert (lay.t, lay.W, lay.width(1)) == (2, 4, 4)


@pytest.mark.parametrize("dt", ["bfloat16", "float32"])
def test_long_rows_lower_and_take_at_least_their_dma_time(dt):
    """[3, 5000011] at LNC 2 lowers (it overflowed SBUF: 403 KB a partition in bf16) and takes
    no less than the DMA time of the bytes it reads: x once, and a segment's worth a row
    gathered again."""
    cfg, isz = load_chip("trn2"), dtype(dt).itemsize
    d = 5000011
    assert streams(cfg, TensorSpec("x", (3, d), dtype(dt), None))
    lay = segment_layout(d, PIECE_BYTES // isz)
    r, _ = run_ops({"x": ((3, d), dt), "out": ((3,), "int32")},
                   [("argmax", {"x": "x", "out": "out", "dim": -1})], lnc=2)  # fmt: skip
    (row,) = r.summary["ops"]
    assert row["time_ns"] >= row["dma_bound_ns"] * (1 + 128 * lay.W / d)
