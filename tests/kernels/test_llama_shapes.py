"""Shapes of the Llama-70B decoder-layer traces at LNC 2: decode's grouped-query attention
with a group's query heads folded into the query dim, and ops whose output rows are all one
core's."""

from __future__ import annotations

import numpy as np

from tests.kernels.test_op_report import run_ops


def test_decode_attention_folds_a_group_of_query_heads_into_queries():
    """One query per head (decode), 8 query heads per kv head: q [B, Hkv, 8, D] against k, v
    [B, Hkv, S, D] is GQA attention of q [B, 8 Hkv, 1, D] (query head h reads kv head h // 8);
    at LNC 2 the 8-row query blocks never straddle the cores' shares (cut at 128 rows)."""
    b, hkv, g, s, d = 4, 2, 8, 256, 64
    r, _ = run_ops(
        {
            "q": ((b, hkv, g, d), "bfloat16"),
            "k": ((b, hkv, s, d), "bfloat16"),
            "v": ((b, hkv, s, d), "bfloat16"),
            "out": ((b, hkv, g, d), "float32"),
        },
        [("scaled_dot_product_attention", {"q": "q", "k": "k", "v": "v", "out": "out"})],
        lnc=2,
        mode="functional",
    )
    q, k, v = (r.tensor(n).astype(np.float64) for n in ("q", "k", "v"))
    q = q.reshape(b, hkv * g, 1, d)  # the query heads, one query each
    kh, vh = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)  # head h -> kv head h // g
    sc = q @ kh.transpose(0, 1, 3, 2) / np.sqrt(d)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ vh
    got = r.tensor("out").reshape(b, hkv * g, 1, d)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)  # P is bf16 inside
    assert r.summary["logical_cores"] == {"0": ["core0", "core1"]}


def _softmax_cores(shape) -> set:
    r, _ = run_ops(
        {"x": (shape, "float32"), "out": (shape, "float32")},
        [("softmax", {"x": "x", "out": "out"})],
        lnc=2,
        mode="functional",
    )
    x = r.tensor("x")
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(r.tensor("out"), e / e.sum(-1, keepdims=True), rtol=1e-5)
    return {e.split(".")[0] for e, x in r.summary["engines"].items() if x["instructions"]}


def test_an_op_of_128_short_rows_runs_on_one_core_of_two():
    """At LNC 2 an output of 128 rows that fit (`rows.rows_fit`) is one core's share; the other
    has no block (a row op: an elementwise op alone in its kernel shares such a tensor by
    elements, test_shape_families)."""
    assert len(_softmax_cores((128, 512))) == 1


def test_an_op_of_128_long_rows_is_split_evenly():
    """Rows of 4 KiB or more, fewer than 256: the row op is isolated and its rows cut evenly
    (`rows.core_share`), so both cores work."""
    assert _softmax_cores((128, 1024)) == {"core0", "core1"}
