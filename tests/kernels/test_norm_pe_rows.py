"""bf16 layer_norm rows in pieces in lanes with TensorE's bias: the weight loaded once and
spread over a tile's rows by TensorE (`norm_pe_rows`, `norms.PE_ROWS`): --check holds and LNC 1
and 2 give the same values, and each lane's weight is one load of [k, w]."""

from __future__ import annotations

import pytest

from tests.kernels.helpers import checked_layer_norm, layer_norm_specs, variant_at_both_lncs
from trnsim.dtypes import dtype
from trnsim.kernels import norm_pe_rows, norms


@pytest.mark.parametrize("shape,variant", [
    ((300, 10240), "WIDE_PIECES[1]"),  # (4 pieces of 2560, 32 rows a tile, two lanes)
    ((300, 12288), "STT_GROUP3[1]"),  # (8 pieces of 1536, 16 rows a tile)
])  # fmt: skip
def test_pe_rows_values(monkeypatch, shape, variant):
    assert norms.PE_ROWS
    variant_at_both_lncs(monkeypatch, shape, dtype("bfloat16"), variant)


def test_pe_rows_load_once(monkeypatch):
    """Rows of 10240 (WIDE_PIECES[1]): the weight loaded once a lane (two lanes), not once per
    row of a tile (32)."""
    loads = []
    real = norm_pe_rows.pe_rows

    def counted(b, cfg, src, t, k, n, queue, **kw):
        loads.append((src.name, k, n))
        real(b, cfg, src, t, k, n, queue, **kw)

    monkeypatch.setattr(norms, "pe_rows", counted)
    monkeypatch.setattr(norms, "VARIANTS", (norms.WIDE_PIECES[1],))
    norms._CHOSEN.clear()
    checked_layer_norm(layer_norm_specs((300, 10240), dtype("bfloat16")), 2)
    norms._CHOSEN.clear()
    assert loads and set(loads) == {("w", 4, 32)}
