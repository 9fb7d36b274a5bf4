"""bf16 layer_norm rows in pieces whose later core would have one tile more, a partial one
(`norm_shared`): both cores of an LNC 2 logical core take it, each weighting, biasing and
storing half its lanes; --check holds at LNC 1 and 2 with the same values bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import layer_norm_at_both_lncs
from trnsim.dtypes import dtype
from trnsim.kernels import norm_shared, norms
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.row_pieces import PieceLayout
from trnsim.trace.program import TensorSpec


def _blocks(rows: int, d: int, lay, c: int, share, lanes: int = 2):
    x = TensorSpec("x", (rows, d), dtype("bfloat16"), "normal")
    b = KernelBuilder({"x": x})
    b.part = (c, 2)
    return norm_shared.shared_blocks(b, x, lay, share, lanes, share[c == 0])


def test_shared_tail_blocks():
    """65 rows of 128256 in 64 pieces, 2 a tile, cut 32 / 33: the lone row 64 on both cores,
    core c storing lane c; not where the cores' tiles are even, nor with one lane."""
    lay = PieceLayout(128256, 2004, 64, 2, 1)
    blocks, lanes = _blocks(65, 128256, lay, 0, (0, 32))
    assert len(blocks) == 17 and blocks[-1][1] == 1 and lanes == {16: {0}}
    assert blocks[-1][0][-1].start == 64
    blocks, lanes = _blocks(65, 128256, lay, 1, (32, 65))
    assert len(blocks) == 17 and blocks[-1][1] == 1 and lanes == {16: {1}}
    assert _blocks(55, 128256, lay, 1, (28, 55))[1] == {}  # (14 tiles each)
    assert len(_blocks(65, 128256, lay, 0, (0, 32), lanes=1)[0]) == 16  # (its own rows)


@pytest.mark.parametrize("shape", [
    (9, 128256),  # (64 pieces of 2004, 2 rows a tile: cut 4 / 5, row 8 on both cores)
    (19, 100000),  # (32 pieces of 3125, 4 rows a tile: cut 8 / 11, rows 16-18 on both)
])  # fmt: skip
def test_shared_tail_values(monkeypatch, shape):
    got = []

    def spy(*a):
        got.append(norm_shared.shared_blocks(*a))
        return got[-1]

    monkeypatch.setattr(norms, "shared_blocks", spy)
    assert np.prod(shape) * 2 >= norms.TRIAL_BYTES
    layer_norm_at_both_lncs(shape, dtype("bfloat16"))
    assert any(lanes for _, lanes in got)  # (the shared tile was lowered)
