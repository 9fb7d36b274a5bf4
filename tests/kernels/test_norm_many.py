"""bf16 layer_norm rows of 65536 or more in k pieces, `norm_wide`'s passes with the statistics
on TensorE and ScalarE (`norm_many`, `norms.MANY`): --check holds and LNC 1 and 2 give the same
values (x of TRIAL_BYTES or more: the variant applies), partial tiles and a core of few rows
included."""

from __future__ import annotations

import pytest

from tests.kernels.helpers import massive_at_both_lncs, variant_at_both_lncs
from trnsim.dtypes import dtype
from trnsim.kernels import norm_many, norms


@pytest.mark.parametrize("shape", [
    (11, 100000),  # (32 pieces of 3125, odd: 4 rows a tile; 5 and 6 rows a core, partial tiles)
    (17, 65536),  # (32 pieces of 2048; a core of 8 rows, the other 9)
])  # fmt: skip
def test_many_values(monkeypatch, shape):
    variant_at_both_lncs(monkeypatch, shape, dtype("bfloat16"), "MANY")


def test_many_at_mean_1e4(monkeypatch, tmp_path):
    """Rows of mean 10^4 (bf16: steps of 64 there) and a massive first channel: the mean from
    TensorE's sums, the squares about it on ScalarE; LNC 1 and 2 agree bit for bit."""
    monkeypatch.setattr(norms, "VARIANTS", (norms.MANY,))
    massive_at_both_lncs((11, 100000), tmp_path)


def test_many_pieces():
    """k: the fewest powers of two pieces of at most PIECE_MOST columns dividing d."""
    assert norm_many.pieces(128, 100000) == 32  # (3125, odd)
    assert norm_many.pieces(128, 65536) == 32  # (2048)
    assert norm_many.pieces(128, 50257) == 0  # (odd: `norm_pad`'s)
