"""bf16 layer_norm rows in pieces in lanes of a little more than `pe_span` PSUM banks (rows of
151936: 64 pieces of 2374, two lanes of 1188 and 1186): TensorE's bias tiles a bank wider
(`norms.LANE_SPAN`), so each lane's copy out of PSUM is one ScalarE instruction; --check holds
and LNC 1 and 2 give the same values."""

from __future__ import annotations

from tests.kernels.helpers import checked_layer_norm, layer_norm_specs, variant_at_both_lncs
from trnsim.dtypes import dtype
from trnsim.kernels import norm_affine, norms


def test_lane_span_values(monkeypatch):
    assert norms.LANE_SPAN
    variant_at_both_lncs(monkeypatch, (8, 151936), dtype("bfloat16"), "STT_PARTS")


def test_lane_span_one_copy_a_lane(monkeypatch):
    """Lanes of 1188 and 1186 columns: each bias add spans 3 banks (1536 columns), not 2
    (1024, and a second copy of the last 164 or 162)."""
    spans = []
    real = norm_affine.PeBias.add

    def counted(self, o, f, lo, w, p, span=1, *a, **kw):
        spans.append((w, span))
        real(self, o, f, lo, w, p, span, *a, **kw)

    monkeypatch.setattr(norm_affine.PeBias, "add", counted)
    monkeypatch.setattr(norms, "VARIANTS", (norms.STT_PARTS,))
    norms._CHOSEN.clear()
    checked_layer_norm(layer_norm_specs((8, 151936), dtype("bfloat16")), 2)
    norms._CHOSEN.clear()
    assert spans and all(1024 < w <= 1536 and span == 3 for w, span in spans)
