"""rms_norm at the row lengths between test_rows_families' (issue 26): fp32 rows of 8192 and
bf16 rows of 16384 (32 KiB, two blocks of a row a partition a core at LNC 2) go in pieces
(`norms.RMS_PIECE_BLOCKS`, `norms.RMS_PIECES`): each within 80% of its bound (they reached 68%
and 55% as two blocks), and --check holds there at LNC 1 (the rows a partition each) and 2."""

from __future__ import annotations

import pytest

from tests.kernels.helpers import checked_at_both_lncs
from tests.kernels.test_rows_families import case, reached
from trnsim.dtypes import dtype
from trnsim.trace.program import OpSpec, TensorSpec

MID = (("float32", 8192), ("bfloat16", 16384))


@pytest.mark.parametrize("dt,d", MID)
def test_rms_norm_mid_rows_reach_80_percent_of_their_bound(dt, d):
    got, row, engines = reached(*case("rms_norm", d, dt), "rms_norm", dt, d)
    assert got >= 0.8, (row["time_ns"], row["roofline_ns"], engines)


@pytest.mark.parametrize("dt,d", MID)
def test_rms_norm_mid_rows_check(dt, d):
    """384 rows: 192 a core at LNC 2 (more than the partitions, two blocks: in pieces), all
    384 on one core at LNC 1 (three blocks: a row a partition); --check holds at both."""
    shape, t = (384, d), dtype(dt)
    specs = {"x": TensorSpec("x", shape, t, "normal"), "w": TensorSpec("w", (d,), t, "normal"),
             "out": TensorSpec("out", shape, t, None)}  # fmt: skip
    args = {"x": "x", "out": "out", "weight": "w", "eps": 1e-5}
    checked_at_both_lncs(specs, [OpSpec("rms_norm", args, 1)], equal=False)
