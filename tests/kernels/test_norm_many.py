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
    (23, 50257),  # (32 padded pieces of 1571, 4 rows a tile; 11 and 12 rows a core)
])  # fmt: skip
def test_many_values(monkeypatch, shape):
    variant_at_both_lncs(monkeypatch, shape, dtype("bfloat16"), "MANY")


@pytest.mark.parametrize("shape", [(11, 100000), (23, 50257)])
def test_many_at_mean_1e4(monkeypatch, tmp_path, shape):
    """Rows of mean 10^4 (bf16: steps of 64 there) and a massive first channel: the mean from
    TensorE's sums, the squares about it on ScalarE (padded: the pad's M^2 taken off); LNC 1
    and 2 agree bit for bit."""
    monkeypatch.setattr(norms, "VARIANTS", (norms.MANY,))
    massive_at_both_lncs(shape, tmp_path)


@pytest.mark.parametrize("shape", [(11, 100000), (23, 50257)])
def test_many_last_tiles_without_tensor_e(monkeypatch, shape):
    """The last two tiles (full and partial ones) wholly on `tail_alu`'s path (y + b std in
    fp32, times rstd: GpSimd), not TensorE and PSUM: --check and the mean error hold, and LNC
    1 and 2 (whose last tiles hold other rows) agree bit for bit."""
    monkeypatch.setattr(norm_many, "ALU_LAST", (1.0, 1.0))
    variant_at_both_lncs(monkeypatch, shape, dtype("bfloat16"), "MANY")


def test_many_padded_buffers_reused(monkeypatch):
    """Padded pieces in x's buffers used again (2 of them, 5 tiles a core at LNC 2): the pad
    zeroed at a buffer's first load stays 0 (the output's pad columns 0: the weight's and
    bias' are)."""
    from trnsim.kernels import norm_wide

    monkeypatch.setattr(norm_wide, "BUFS", 2)
    variant_at_both_lncs(monkeypatch, (40, 50257), dtype("bfloat16"), "MANY")


def test_many_pieces():
    """k: the fewest powers of two pieces of at most PIECE_MOST columns dividing d."""
    assert norm_many.pieces(128, 100000) == 32  # (3125, odd)
    assert norm_many.pieces(128, 65536) == 32  # (2048)
    assert norm_many.pieces(128, 50257) == 32  # (padded: 32 of 1571, the last 15 short)
    assert norm_many.padded(50257, 32) == (1571, 15)
    assert norm_many.pieces(128, 151936) == 0  # (32 pieces of 4748: too wide)
