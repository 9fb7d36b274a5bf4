"""bf16 layer_norm over rows of 2^18, 2^19 and 10^6 (`norm_long`; 10^6 padded): which norms go
there, --check at LNC 1 and 2 with the same values bit for bit (rows of mean 10^4 too, a massive
first channel, an odd count of rows, a core with none), and the rows faster so (trn2 LNC 2, 16
MiB)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import checked_at_both_lncs, saved_specs
from tests.kernels.test_rows_families import case, reached
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.kernels import norms
from trnsim.kernels.norm_long import long_rows
from trnsim.trace.program import OpSpec, TensorSpec

REACHED = {262144: 0.78, 524288: 0.82, 1000000: 0.77}  # (78.1%, 82.8%, 77.9%; before: 78.1%,
# 82.8%, 77.5%; before that 76.4%, 77.7%, 72.2%; first 70.4%, 73.9%, 68.9%)


def test_long_rows_applies():
    """bf16 layer_norms with a weight and a bias, rows of 2^18 to below 2^20."""
    cfg = load_chip("trn2")

    def ok(d, dt="bfloat16", affine=True, op="layer_norm"):
        t = TensorSpec("x", (4, d), dtype(dt), "normal")
        v = TensorSpec("w", (d,), dtype(dt), "normal") if affine else None
        return long_rows(cfg, op, t, t, v, v)

    assert ok(262144) and ok(524288) and ok(1000000) and ok(300000) and ok((1 << 20) - 2)
    assert not ok(262144, "float32")
    assert not ok(524288, affine=False)
    assert not ok(262144, op="rms_norm")
    assert not ok(1 << 20) and not ok(131072) and not ok(100000) and not ok(300001)


@pytest.mark.parametrize("shape,mean,massive", [
    ((3, 262144), 0.0, False),  # (1 and 2 rows a core: ScalarE's statistics in each's first)
    ((2, 524288), 1e4, False),
    ((2, 262144), 0.0, True),
    ((1, 262144), 0.0, False),  # (LNC 2: the first core has no row)
    ((3, 1000000), 0.0, False),  # (padded: 448 zeros on the last part's partition 0)
    ((2, 1000000), 1e4, False),
    ((2, 1000000), 0.0, True),
    ((2, 300000), 1e4, False),  # (2 parts of 128 x 1172, padded)
    ((2, 700000), 0.0, True),  # (3 parts of 128 x 1824, padded; the weight early)
])  # fmt: skip
def test_long_rows_values(shape, mean, massive, tmp_path):
    """--check at LNC 1 and 2, the same values at both; rows of mean 10^4 (spread 3), or a
    first channel 1000 spreads out (an LLM's massive activation)."""
    rng = np.random.default_rng(11)
    d = shape[-1]
    x = rng.standard_normal(shape) * 3 + mean
    if massive:
        x[:, 0] = 3000.0
        x[:, -1] = -3000.0  # (10^6: in the padded part)
    arrays = {"x": x, "w": rng.standard_normal(d), "b": rng.standard_normal(d)}
    specs = saved_specs(arrays, dtype("bfloat16"), tmp_path)
    specs["out"] = TensorSpec("out", shape, dtype("bfloat16"), None)
    op = OpSpec("layer_norm", {"x": "x", "out": "out", "weight": "w", "bias": "b"}, 1)
    checked_at_both_lncs(specs, [op])


@pytest.mark.parametrize("d", sorted(REACHED))
def test_long_rows_reach(d):
    norms._CHOSEN.clear()
    got, row, engines = reached(*case("layer_norm", d, "bfloat16"), "layer_norm", "bfloat16", d)
    assert got >= REACHED[d], (row["time_ns"], row["roofline_ns"], engines)
