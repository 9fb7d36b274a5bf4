"""cross_entropy over logits a mask set to -inf (a causal or padding mask, or a vocabulary
restricted to some tokens): a row's column chunk or piece whose elements are all -inf has max
-inf, and exp(x - max) = exp(-inf + inf) gave NaN for the whole loss (rows of 4096 in column
chunks, rows of 151936 in pieces; TensorE's 0 * -inf in the pieces' combine). Each chunk's and
piece's max is kept at least the most negative fp32, as softmax's are: torch's finite loss, at
LNC 1 and 2."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import checked_at_both_lncs
from trnsim.dtypes import dtype
from trnsim.trace.program import OpSpec, TensorSpec


@pytest.mark.parametrize("shape,dt", [
    ((4, 4096), "float32"),  # column chunks
    ((4, 4096), "bfloat16"),
    ((3, 151936), "float32"),  # pieces (128 x 1187)
    ((4, 50257), "float32"),  # a remainder column
    ((300, 100), "float32"),  # short rows: a row's max is never all of a mask
])  # fmt: skip
def test_cross_entropy_over_masked_logits(shape, dt, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    d = shape[-1]
    x[:, : 3 * d // 4] = -np.inf  # the first three quarters of every row masked
    t = rng.integers(3 * d // 4, d, shape[0]).astype(np.int32)
    for name, a in (("x", x), ("t", t)):
        np.save(tmp_path / f"{name}.npy", a)
    specs = {"x": TensorSpec("x", shape, dtype(dt), ("file", str(tmp_path / "x.npy"))),
             "t": TensorSpec("t", shape[:1], dtype("int32"), ("file", str(tmp_path / "t.npy"))),
             "out": TensorSpec("out", (1,), dtype("float32"), None)}  # fmt: skip
    op = OpSpec("cross_entropy", {"input": "x", "target": "t", "out": "out"}, 1)
    (loss, _) = checked_at_both_lncs(specs, [op], equal=False)
    assert np.isfinite(loss).all() and loss[0] > 0
