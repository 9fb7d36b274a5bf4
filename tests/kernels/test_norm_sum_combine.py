"""layer_norm's fp32 rows in pieces whose statistics are all ScalarE's (`NormStages.sum_combine`:
the row's mean and variance from ScalarE's sums, summed on TensorE, four [p, 1] steps a block;
`PSUM_SHIFT`: ScalarE's shift bias -x0 read from PSUM): numpy's values at LNC 1 and 2, the
same bit for bit, at a mean of 10^4 and with a massive first channel; and the widths it
brought to 80% of their bound."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import checked_at_both_lncs, saved_specs
from tests.kernels.test_rows_families import case, reached
from trnsim.dtypes import dtype
from trnsim.kernels import norm_stages, norms
from trnsim.trace.program import OpSpec, TensorSpec

LN = [OpSpec("layer_norm", {"x": "x", "out": "out", "weight": "w", "bias": "b"}, 1)]


@pytest.fixture
def combined(monkeypatch):
    """The blocks `_second_sum_combine` took (so a test sees the path it means to test)."""
    seen = []
    orig = norm_stages.NormStages._second_sum_combine

    def spy(self, n, p):
        seen.append((self.c, self.d))
        return orig(self, n, p)

    monkeypatch.setattr(norm_stages.NormStages, "_second_sum_combine", spy)
    norms._CHOSEN.clear()
    yield seen
    norms._CHOSEN.clear()


@pytest.mark.parametrize("mean,first", [(1e4, None), (0.0, 1000.0), (0.0, -3000.0)])
def test_sum_combine_values(combined, tmp_path, mean, first):
    """fp32 rows of 12288 (16 pieces of 768, c = 768: not a power of two) of mean 10^4 and
    spread 1, or N(0, 1) with a first element of 1000 (-3000): --check holds at LNC 1 and 2
    (37 rows: a last tile of 5 rows) and the two agree bit for bit."""
    rng = np.random.default_rng(3)
    shape = (37, 12288)
    x = rng.standard_normal(shape) + mean
    if first is not None:
        x[:, 0] = first
    arrays = {"x": x, "w": 1 + 0.1 * rng.standard_normal(shape[-1]),
              "b": 0.1 * rng.standard_normal(shape[-1])}  # fmt: skip
    arrays = {n: a.astype(np.float32).astype(np.float64) for n, a in arrays.items()}  # (as run)
    f32 = dtype("float32")
    specs = saved_specs(arrays, f32, tmp_path) | {"out": TensorSpec("out", shape, f32, None)}
    got = checked_at_both_lncs(specs, LN)
    assert combined and all(c == 768 for c, _ in combined)
    if first is None:  # (shifted by x0: the normalised values keep 7 digits)
        x = arrays["x"]
        ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
        ref = ref * arrays["w"] + arrays["b"]
        assert np.abs(got[0] - ref).max() < 1e-5


@pytest.mark.parametrize("d", [12288, 14336, 20000, 24576, 32000])
def test_fp32_rows_in_pieces_reach_80_percent(combined, d):
    """trn2 LNC 2, 16 MiB, us: 12288 65.6 -> 56.6, 14336 63.6 -> 55.3, 20000 66.0 (with a
    remainder column) -> 56.6 (16 pieces of 1250), 24576 64.4 -> 55.4, 32000 62.0 -> 54.0."""
    got, row, engines = reached(*case("layer_norm", d, "float32"), "layer_norm", "float32", d)
    assert got >= 0.8, (row["time_ns"], row["roofline_ns"], engines)
    assert combined
