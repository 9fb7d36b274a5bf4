"""layer_norm at the row lengths between the tested ones, at both ends (issue 26), trn2 LNC 2,
16 MiB: >= 80% of the larger bound, as test_rows_families asserts, at fp32 rows of 128 that fit
(up to 16 buffers: `norms.FLEX_BUFS`), of 256K (a [128, f] tile a row, 8 a core, 1 MiB, loaded
one after another, `norms.BIG_LOADS`; in two lanes on the engines the list schedule picks,
`norms.ROW_TILES`) and of 512K (in segments, the rows first, their statistics read from PSUM, a
descent over the engines: `norms.ROWS_FIRST_SEARCH`), bf16 rows of 128 (`norm_fused`: 80.6% of an
engine bound of 47.8 us, 92.2% of the 54.6 us it was while a row of one bn_stats chunk paid a
bn_aggr of its own, `row_bounds`; `norms.FLEX_16` 78.9% before) and bf16 rows of 512K
(`norm_long`: 82.8%, a share of the parts' y straight into PSUM; 77.7% before, a tile a row
73.9% before that). And the values hold (--check, LNC 1 == LNC 2)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import checked_layer_norm
from tests.kernels.test_rows_families import case, reached
from trnsim.dtypes import dtype
from trnsim.kernels import norms
from trnsim.trace.program import TensorSpec

REACHED = {("float32", 128): 0.8, ("float32", 262144): 0.8, ("float32", 524288): 0.8,
           ("bfloat16", 128): 0.8, ("bfloat16", 524288): 0.8}  # fmt: skip
# (before: 79.2%, 65.8%, 77.4%, 78.9% (74.2% before that), 77.7% (62.5%, 73.9% before `norm_long`))


@pytest.mark.parametrize("dt,d", sorted(REACHED))
def test_row_ends_reach_what_they_did(dt, d):
    got, row, engines = reached(*case("layer_norm", d, dt), "layer_norm", dt, d)
    assert got >= REACHED[(dt, d)], (row["time_ns"], row["roofline_ns"], engines)


@pytest.mark.parametrize("dt,shape,only", [
    ("float32", (3, 262144), None), ("float32", (3, 262144), "ROW_TILES"),
    ("bfloat16", (3, 524288), None), ("bfloat16", (3, 524288), "ROW_TILES"),
    ("float32", (3, 524288), "ROWS_FIRST_SEARCH"),
    ("float32", (40000, 128), "FLEX_BUFS"), ("bfloat16", (40000, 128), "FLEX_16")])  # fmt: skip
def test_row_ends_check(dt, shape, only, monkeypatch):
    """Rows a tile each, loaded one after another (and with ROW_TILES alone); fp32 rows of 512K
    in segments with ROWS_FIRST_SEARCH alone; short rows with
    FLEX_BUFS or FLEX_16 alone: --check holds at LNC 1 and 2 (3 rows: the cores' shares differ),
    with the same values."""
    if only:
        monkeypatch.setattr(norms, "VARIANTS", [getattr(norms, only)])
        monkeypatch.setattr(norms, "_CHOSEN", {})
    t = dtype(dt)
    specs = {
        n: TensorSpec(n, s, t, None if n == "out" else "normal")
        for n, s in (("x", shape), ("w", shape[-1:]), ("b", shape[-1:]), ("out", shape))
    }
    outs = [checked_layer_norm(specs, lnc) for lnc in (1, 2)]
    np.testing.assert_array_equal(outs[0], outs[1])
