"""layer_norm's pipelined variant (`norms`, "pipelined"): output pieces of their own tiles, the
weight's and bias' engines chosen by the list schedule, the first and last blocks cut smaller,
or ScalarE's share of the statistics whole row slots; TensorE's bias two PSUM banks a copy out
(two row slots a piece for rows of 512 or fewer), the first block in two lanes, the
normalisation folded into the weight and TensorE's bias: numpy's values (--check) in each form,
and the same values at LNC 1 and 2."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import checked_layer_norm
from trnsim.dtypes import dtype
from trnsim.kernels import norms
from trnsim.kernels.norm_stages import NormStages
from trnsim.trace.program import TensorSpec


def _run(shape, variant, lnc=2, out_dt="bfloat16", monkeypatch=None):
    """out of layer_norm over x of `shape` (bf16, weight and bias bf16) with `variant` forced,
    checked against numpy (functional, --check); and the run's tile names."""
    monkeypatch.setattr(norms, "VARIANTS", (variant,))
    norms._CHOSEN.clear()
    d, bf = shape[-1], dtype("bfloat16")
    specs = {
        "x": TensorSpec("x", shape, bf, "normal"),
        "w": TensorSpec("w", (d,), bf, "normal"),
        "b": TensorSpec("b", (d,), bf, "normal"),
        "out": TensorSpec("out", shape, dtype(out_dt), None),
    }
    return checked_layer_norm(specs, lnc)


@pytest.mark.parametrize(
    "shape,variant,out_dt",
    [
        ((4096, 512), {"pipe": True, "s_share": 0.375}, "bfloat16"),  # ScalarE's row slots
        ((3000, 512), {"pipe": True}, "bfloat16"),  # tapered, a last block of 952 rows
        ((2048, 1536), {"pipe": True}, "bfloat16"),  # pieces of 1024 and 512 columns
        ((1024, 2048), {"pipe": True}, "bfloat16"),  # the first block in two lanes
        ((4096, 256), {"pipe": True}, "bfloat16"),  # pieces of two row slots, one PSUM bank
        ((2048, 512), {"pipe": True}, "float32"),  # bf16 in, fp32 out
        ((4096, 512), {"pipe": True, "pe_rstd": True, "s_share": 0.25}, "bfloat16"),  # folded
        ((3000, 512), {"pipe": True, "pe_rstd": True}, "bfloat16"),  # ... two slots a piece
        ((1024, 4096), {"pipe": True, "pe_rstd": True}, "bfloat16"),  # ... a slot a block
    ],
)
def test_pipelined_layer_norm_gives_numpys_values(shape, variant, out_dt, monkeypatch):
    seen = []  # (the form each core's lowering took)
    piece, rows = NormStages.piece, NormStages.row_stats
    monkeypatch.setattr(NormStages, "piece", lambda k, *a: seen.append("piece") or piece(k, *a))
    monkeypatch.setattr(NormStages, "row_stats",
                        lambda k, *a: seen.append("rows") or rows(k, *a))  # fmt: skip
    diag = NormStages.diagonals
    monkeypatch.setattr(NormStages, "diagonals",
                        lambda k, *a: seen.append("fused") or diag(k, *a))  # fmt: skip
    _run(shape, variant, out_dt=out_dt, monkeypatch=monkeypatch)
    assert "piece" in seen
    assert ("rows" in seen) == ("s_share" in variant)
    assert ("fused" in seen) == ("pe_rstd" in variant)


def test_folded_normalisation_gives_the_same_values_at_lnc_1_and_2(monkeypatch):
    """The normalisation folded into the weight and TensorE's bias (`pe_rstd`): the same
    values whichever engines the list schedule picks for a core's diagonals and weights."""
    v = {"pipe": True, "pe_rstd": True, "s_share": 0.25}
    a, b = (_run((4096, 512), v, lnc, monkeypatch=monkeypatch) for lnc in (1, 2))
    assert np.array_equal(a, b)


def test_scalar_row_slots_are_the_same_rows_at_lnc_1_and_2(monkeypatch):
    """Whole blocks aligned to their rows a partition (`norms._aligned`): the rows whose
    statistics ScalarE takes, which round apart from VectorE's, are the same at either LNC."""
    v = {"pipe": True, "s_share": 0.375}
    a, b = (_run((4096, 512), v, lnc, monkeypatch=monkeypatch) for lnc in (1, 2))
    assert np.array_equal(a, b)
