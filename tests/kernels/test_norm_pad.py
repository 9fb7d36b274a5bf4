"""bf16 layer_norm rows whose pieces would leave partitions empty, in padded pieces over all of
them (`norm_pad`): the layout, --check at LNC 1 and 2 with the same values bit for bit (x of
TRIAL_BYTES or more: the variant applies), and rows of 50257 faster so."""

from __future__ import annotations

import pytest

from tests.kernels.helpers import (
    checked_layer_norm,
    layer_norm_specs,
    variant_at_both_lncs,
)
from tests.kernels.test_rows_families import case, reached
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.kernels import norms
from trnsim.kernels.norm_pad import pad_of, padded
from trnsim.trace.program import TensorSpec


def test_padded_layout():
    """Padded only where the pieces would leave partitions empty (`norms._pads`)."""
    cfg = load_chip("trn2")
    lay = padded(50257, 2048, 128)  # (29 pieces of 1733 on 116 partitions before)
    assert (lay.k, lay.f, lay.g, pad_of(lay)) == (32, 1571, 4, 15)

    def pads(d, dt="bfloat16", v=norms.STT_PARTS):
        tx = TensorSpec("x", (64, d), dtype(dt), "normal")
        return norms._pads(cfg, "layer_norm", tx, norms._piece_layout(cfg, tx, d), v)

    assert pads(50257)
    assert not pads(50257, v=norms.STT_LANES_SEARCH)  # (no TensorE row mean: uncorrected)
    assert not pads(50257, "float32")
    assert not pads(100000)  # (32 pieces of 3125, every partition)
    assert not pads(1000000)  # (a row a tile)


@pytest.mark.parametrize("shape,variant", [
    ((43, 50257), "STT_GROUP3[0]"),  # (11 tiles: 24 and 19 rows, groups of 12; a tile of 3)
    ((2, 24, 50257), "STT_PARTS"),  # (a 3-D x, a batch row whole tiles and groups)
])  # fmt: skip
def test_padded_values(monkeypatch, shape, variant):
    variant_at_both_lncs(monkeypatch, shape, dtype("bfloat16"), variant)


def test_padded_values_batch_rows(monkeypatch):
    """A 3-D x whose batch rows cut tiles (blocks of 1 and 2 rows): --check holds at LNC 1 and
    2 (their values may differ by a rounding: `stt_std`'s groups of blocks are not alike at
    both, as without the padding)."""
    monkeypatch.setattr(norms, "VARIANTS", (norms.STT_PARTS,))
    for lnc in (1, 2):
        norms._CHOSEN.clear()
        checked_layer_norm(layer_norm_specs((2, 13, 50257), dtype("bfloat16")), lnc)
    norms._CHOSEN.clear()


def test_bf16_rows_of_50257_padded():
    """trn2 LNC 2, 16 MiB: 29 pieces of 1733 on 116 partitions (STT_LANES_SEARCH) 74.2 us,
    62.4%; 32 of 1571, 15 short (STT_GROUP3) 62.0 us, 74.6%."""
    norms._CHOSEN.clear()
    got, row, _ = reached(*case("layer_norm", 50257, "bfloat16"), "layer_norm", "bfloat16", 50257)
    norms._CHOSEN.clear()
    assert got >= 0.72, row["time_ns"]
