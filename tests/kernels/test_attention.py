"""Flash attention lowered: values against numpy over causal and not, grouped-query heads,
ragged sequence lengths, and chips with and without a DMA transpose."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import run_lowered
from trnsim.errors import TraceError
from trnsim.kernels import lower, reference
from trnsim.kernels.check import compare
from trnsim.trace.program import OpSpec

OP = "scaled_dot_product_attention"


def _attention(q, kv, causal, chip="trn2", scale=None):
    t = {
        "q": (q, "bfloat16", "normal"),
        "k": (kv, "bfloat16", "normal"),
        "v": (kv, "bfloat16", "normal"),
        "out": (q, "float32", None),
    }
    args = {"q": "q", "k": "k", "v": "v", "out": "out", "is_causal": causal}
    if scale is not None:
        args["scale"] = scale

    def emit(b, cfg):
        p = lower([OpSpec(OP, args)], b.tensors, cfg)
        b.tiles.update(p.tiles)
        b.instructions[:] = p.instructions

    r, _ = run_lowered(t, emit, chip=chip)
    ref = reference(OP, args, {n: r.tensor(n) for n in "qkv"})
    return r.tensor("out"), ref


@pytest.mark.parametrize(
    "q,kv,causal,chip",
    [
        ((1, 2, 128, 64), (1, 1, 512, 64), False, "trn2"),  # 2 query heads share one kv head
        ((1, 2, 200, 64), (1, 2, 200, 64), True, "trn2"),  # ragged, the diagonal masked
        ((2, 4, 130, 128), (2, 2, 700, 128), False, "trn3"),  # several key blocks, D = 128
        ((2, 300, 32), (2, 300, 32), True, "trn1"),  # no batch dim; TensorE transposes
        # a lone last query block with two key blocks back to back (and pairs with two each)
        ((1, 1, 1152, 64), (1, 1, 1152, 64), True, "trn2"),
    ],
)
def test_values_match_numpy(q, kv, causal, chip):
    got, ref = _attention(q, kv, causal, chip)
    assert compare(ref, got, "float32", OP)["ok"]


def test_the_causal_mask_is_applied():
    got, ref = _attention((1, 1, 256, 64), (1, 1, 256, 64), True)
    # row 0 attends to key 0 only: it is v[0] exactly (up to bf16)
    np.testing.assert_allclose(got[0, 0, 0], ref[0, 0, 0], rtol=1e-2, atol=1e-2)
    assert not compare(ref[..., ::-1, :].copy(), got, "float32", OP)["ok"]


def test_explicit_scale():
    got, ref = _attention((1, 1, 128, 64), (1, 1, 128, 64), False, scale=0.05)
    assert compare(ref, got, "float32", OP)["ok"]


def test_heads_that_do_not_group_are_an_error():
    from trnsim.config import load_chip
    from trnsim.dtypes import dtype
    from trnsim.trace.program import TensorSpec

    tensors = {
        n: TensorSpec(n, s, dtype("bfloat16"))
        for n, s in (
            ("q", (3, 64, 32)),
            ("k", (2, 64, 32)),
            ("v", (2, 64, 32)),
            ("out", (3, 64, 32)),
        )
    }
    with pytest.raises(TraceError, match=r"with H a multiple of Hkv"):
        lower(
            [OpSpec(OP, {"q": "q", "k": "k", "v": "v", "out": "out"})], tensors, load_chip("trn2")
        )


@pytest.mark.parametrize("s_q,skv", [(8, 2048), (100, 1536)])
def test_a_lone_query_block_over_several_key_blocks(s_q, skv):
    """One query block per head (decode's folded heads: 8 rows) meets several key blocks in
    consecutive units: each unit's row max has its own column, so the next unit's max never
    overwrites one the exp has not read (a lowering bug the builder caught)."""
    got, ref = _attention((2, 1, s_q, 64), (2, 1, skv, 64), False)
    assert compare(ref, got, "float32", OP)["ok"]
