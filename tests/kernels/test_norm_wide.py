"""bf16 layer_norm rows in k pieces with the normalisation folded into three passes
(`norm_wide`, `norms.WIDE`): --check holds and LNC 1 and 2 give the same values (x of
TRIAL_BYTES or more: the variant applies), partial tiles included."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import (
    checked_layer_norm,
    massive_at_both_lncs,
    saved_specs,
    variant_at_both_lncs,
)
from trnsim.dtypes import dtype
from trnsim.kernels import norms
from trnsim.trace.program import TensorSpec


@pytest.mark.parametrize("shape", [
    (120, 10240),  # (4 pieces of 2560, 32 rows a tile: 60 rows a core, a partial tile)
    (53, 20000),  # (8 pieces of 2500, 16 rows a tile)
    (120, 9496),  # (4 pieces of 2374: bn_stats' chunks unequal, so bn_aggr, `NO_AGGR`'s not)
])  # fmt: skip
def test_wide_values(monkeypatch, shape):
    variant_at_both_lncs(monkeypatch, shape, dtype("bfloat16"), "WIDE")


def test_wide_at_mean_1e4(monkeypatch, tmp_path):
    """Rows of mean 10^4 (bf16: steps of 64 there) and a massive first channel: the pieces'
    means and variances combined over a row's partitions (Chan's formula) keep its variance;
    LNC 1 and 2 agree bit for bit."""
    monkeypatch.setattr(norms, "VARIANTS", (norms.WIDE,))
    massive_at_both_lncs((120, 10240), tmp_path)


def test_wide_tail_alu_bits(monkeypatch, tmp_path):
    """The last tile's columns out of GpSimd or VectorE (`TAIL_ALU`: b times std as bf16 plus
    y in fp32, then times rstd) hold TensorE's and PSUM's bits: every column of each core's
    last tile that way against none, rows of mean 10^4 and a massive first channel."""
    from trnsim.kernels import norm_wide

    monkeypatch.setattr(norms, "VARIANTS", (norms.WIDE,))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((120, 12288)) * 300 + 1e4
    x[:, 0] += 3e4
    arrays = {"x": x, "w": rng.standard_normal(12288), "b": rng.standard_normal(12288) * 50}
    t = dtype("bfloat16")
    out = []
    for n in (99999, 1):  # (none; every column: L // TAIL_ALU)
        monkeypatch.setattr(norm_wide, "TAIL_ALU", n)
        specs = saved_specs(arrays, t, tmp_path) | {"out": TensorSpec("out", x.shape, t, None)}
        norms._CHOSEN.clear()
        out.append(checked_layer_norm(specs, 2))
    norms._CHOSEN.clear()
    assert np.array_equal(out[0], out[1])


def test_wide_even_parts():
    """y's column parts are of even widths (VectorE's fast case) and cover the piece: 2500
    in 16 or 8 (`STT_PARTS`)."""
    from trnsim.kernels.norm_wide import _even_parts

    for n, k in ((2500, 16), (2500, 8), (3072, 16), (1792, 8)):
        parts = _even_parts(n, k)
        assert len(parts) == k and parts[0][0] == 0 and parts[-1][1] == n
        assert all(a == z for (_, a), (z, _) in zip(parts, parts[1:]))
        assert all((z - a) % 2 == 0 for a, z in parts)
