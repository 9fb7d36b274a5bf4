"""bf16 layer_norm rows in pieces with `stt_std`: cut at whole stat groups where that cut lies
less than half a tile before the even one (`norms._later_more`), so the later core's surplus is
one partial tile both cores share (`norm_shared`); values the same at LNC 1 and 2."""

from __future__ import annotations

import pytest

from tests.kernels.helpers import variant_at_both_lncs
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.kernels import norms
from trnsim.kernels.builder import KernelBuilder
from trnsim.trace.program import TensorSpec


def _cuts(rows: int, d: int) -> list:
    t = dtype("bfloat16")
    tensors = {
        "x": TensorSpec("x", (rows, d), t, "normal"),
        "out": TensorSpec("out", (rows, d), t, "normal"),
        "w": TensorSpec("w", (d,), t, "normal"),
        "b": TensorSpec("b", (d,), t, "normal"),
    }
    cfg, got = load_chip("trn2"), []
    for c in range(2):
        b = KernelBuilder(tensors)
        b.part = (c, 2)
        got.append(norms._share(b, cfg, "layer_norm", "x", "out", "w", "b", norms.STT_PARTS)[0])
    return got


@pytest.mark.parametrize("rows, d, want", [
    (262, 32000, [(0, 128), (128, 262)]),  # (16 MiB: 131 and 131 before; 58.46 -> 58.08 us)
    (819, 10240, [(0, 409), (409, 819)]),  # (the groups' cut 384 or 416: evenly, `_std_share`)
])  # fmt: skip
def test_cut(rows, d, want):
    assert _cuts(rows, d) == want


def test_values(monkeypatch):
    """37 rows of 32000 (16 pieces, 8 rows a tile): cut 16 / 21 (18 / 19 before), rows 32-36
    on both cores."""
    assert _cuts(37, 32000) == [(0, 16), (16, 37)]
    variant_at_both_lncs(monkeypatch, (37, 32000), dtype("bfloat16"), "STT_PARTS")
