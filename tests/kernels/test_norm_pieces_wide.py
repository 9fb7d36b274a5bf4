"""bf16 layer_norm rows in pieces: STT_PARTS in WIDE_PIECES' fewer pieces (`norms.WIDE_STT`)
and with the [p, 1] steps of three blocks at once (`norms.STT_GROUP3`), and the row's mean
spread by TensorE's first matmuls (`norm_tsums.SPREAD`): --check holds and LNC 1 and 2 give
the same values (x of TRIAL_BYTES or more: the variant applies); rows of 20000 take `norm_wide`'s
WIDE."""

from __future__ import annotations

import pytest

from tests.kernels.helpers import variant_at_both_lncs
from tests.kernels.test_rows_families import case, reached
from trnsim.dtypes import dtype
from trnsim.kernels import norms


@pytest.mark.parametrize("shape,variant", [
    ((53, 20000), "WIDE_STT"),  # (8 pieces of 2500, 16 rows a tile: a tile a core and a part)
    ((43, 24576), "STT_GROUP3[0]"),  # (16 pieces, 8 rows a tile, groups of 24 rows)
    ((300, 12288), "STT_GROUP3[1]"),  # (in pieces: 8 of 1536, 16 rows a tile, groups of 48)
])  # fmt: skip
def test_wide_and_grouped_values(monkeypatch, shape, variant):
    variant_at_both_lncs(monkeypatch, shape, dtype("bfloat16"), variant)


def test_bf16_rows_of_20000_take_wide_pieces():
    """trn2 LNC 2, 16 MiB: 16 pieces of 1250 (STT_LANES_SEARCH) 71.1 us, 65.2%; 8 of 2500
    (WIDE_STT) 65.3 us, 71.0%; 8 of 2500 with the normalisation folded (`norm_wide`, WIDE)
    61.9 us, 74.9%."""
    norms._CHOSEN.clear()
    got, row, _ = reached(*case("layer_norm", 20000, "bfloat16"), "layer_norm", "bfloat16", 20000)
    assert [v for _, v in norms._CHOSEN.values()] == [norms.WIDE]
    assert got >= 0.74, row["time_ns"]
    norms._CHOSEN.clear()
