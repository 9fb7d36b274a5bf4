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


def test_wide_wait_groups():
    """VectorE's first bn_stats of tile n waits for the loads of the tiles after it up to
    n + int(n WAIT_BETA) (`_wait_groups`): each later tile waited for once, none before
    WAIT_FROM, none past the last tile or `ahead` tiles on."""
    from trnsim.kernels.norm_wide import WAIT_BETA, WAIT_FROM, _wait_groups

    assert (WAIT_FROM, WAIT_BETA) == (3, 0.25)
    assert _wait_groups(14, 10) == {4: [5], 6: [7], 8: [9, 10], 11: [12, 13]}
    assert _wait_groups(13, 10) == {4: [5], 6: [7], 8: [9, 10], 11: [12]}
    assert _wait_groups(5, 10) == {} and _wait_groups(7, 10) == {4: [5]}
    assert _wait_groups(60, 2)[41] == [42, 43]  # (n + int(n / 4) = 51: 2 ahead at most)
    for tiles in range(1, 40):
        groups = _wait_groups(tiles, 10)
        waited = [m for ms in groups.values() for m in ms]
        assert len(waited) == len(set(waited)) and all(n < tiles for n in waited)
        assert all(min(ms) == n + 1 and n >= WAIT_FROM for n, ms in groups.items())
        assert not set(waited) & set(groups)


def test_wide_values_waited_loads(monkeypatch):
    """Rows of 20000 in 13 tiles a core at LNC 1 and 7 at LNC 2: some bn_stats wait for the
    loads of later tiles (`_wait_groups`); the values are numpy's, the same at both."""
    variant_at_both_lncs(monkeypatch, (200, 20000), dtype("bfloat16"), "WIDE")
