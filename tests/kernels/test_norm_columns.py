"""layer_norm of few fp32 rows too long for SBUF by columns (`norm_columns`): each core of an
LNC 2 logical core takes every row's half of the columns and half of the weight and bias, the
cores exchanging their partial sums through out at a `core_barrier`. The values are numpy's
(--check, rows of mean 10^4 too) and the same at LNC 1 and 2, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import checked_at_both_lncs, saved_specs
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.kernels import norm_columns, norms
from trnsim.trace.program import OpSpec, TensorSpec


def test_layout_and_choice():
    """A half of 10^6 over 125 partitions in 4 chunks of 1000 (4 KB of fp32); of 2^20 over 128;
    rows of 10^6 by columns for fp32 of few rows (x resident at LNC 1 too: 5 at most), not for
    bf16 nor shorter rows."""
    cfg = load_chip("trn2")
    assert norm_columns.layout(cfg, 1000000) == (125, [1000] * 4)
    assert norm_columns.layout(cfg, 1 << 20) == (128, [1024] * 4)
    assert norm_columns.layout(cfg, 100000) is None
    f32, bf16 = dtype("float32"), dtype("bfloat16")
    x = TensorSpec("x", (4, 1000000), f32, None)
    w = TensorSpec("w", (1000000,), f32, None)
    assert norm_columns.by_columns(cfg, "layer_norm", x, x, w, w)
    assert not norm_columns.by_columns(cfg, "rms_norm", x, x, w, None)
    xb = TensorSpec("x", (8, 1000000), bf16, None)
    assert not norm_columns.by_columns(cfg, "layer_norm", xb, xb, None, None)
    many = TensorSpec("x", (6, 1000000), f32, None)  # (x not resident at LNC 1)
    assert not norm_columns.by_columns(cfg, "layer_norm", many, many, w, w)


@pytest.mark.parametrize("shape,mean,affine", [
    ((3, 1000000), 1e4, "wb"),  # (x resident at either LNC)
    ((4, 1000000), 1e4, "wb"),  # (LNC 1: the weight and bias a chunk at a time beside x)
    ((2, 2, 524288), 0.0, "w"),  # (128 partitions a half; a weight alone)
    ((1, 524288), 1e4, ""),  # (no weight nor bias)
    ((2, 524288), 0.0, "b"),  # (a bias alone)
])  # fmt: skip
def test_columns_values(shape, mean, affine, tmp_path):
    rng = np.random.default_rng(7)
    d = shape[-1]
    arrays = {"x": rng.standard_normal(shape) * 3 + mean}
    args = {"x": "x", "out": "out"}
    for k, name in (("w", "weight"), ("b", "bias")):
        if k in affine:
            arrays[k] = rng.standard_normal(d)
            args[name] = k
    specs = saved_specs(arrays, dtype("float32"), tmp_path)
    specs["out"] = TensorSpec("out", shape, dtype("float32"), None)
    x, out = specs["x"], specs["out"]
    assert norm_columns.by_columns(load_chip("trn2"), "layer_norm", x, out,
                                   *(specs.get(k) for k in ("w", "b")))  # fmt: skip
    norms._CHOSEN.clear()
    checked_at_both_lncs(specs, [OpSpec("layer_norm", args, 1)])


def test_columns_16_bit_values(monkeypatch, tmp_path):
    """The 16-bit path (not chosen, `DTYPES`): the totals carried through bf16 out as hi + lo
    give numpy's values, the same at LNC 1 and 2."""
    monkeypatch.setattr(norm_columns, "DTYPES", ("float32", "bfloat16"))
    rng = np.random.default_rng(9)
    shape, d = (3, 1000000), 1000000
    arrays = {"x": rng.standard_normal(shape) * 3 + 2.0, "w": rng.standard_normal(d),
              "b": rng.standard_normal(d)}  # fmt: skip
    specs = saved_specs(arrays, dtype("bfloat16"), tmp_path)
    specs["out"] = TensorSpec("out", shape, dtype("bfloat16"), None)
    args = {"x": "x", "out": "out", "weight": "w", "bias": "b"}
    norms._CHOSEN.clear()
    checked_at_both_lncs(specs, [OpSpec("layer_norm", args, 1)])


@pytest.mark.parametrize("shape", [(3, 1000000), (2, 2, 524288)])
def test_columns_race_free(shape):
    """The exchange through out is ordered: each core's store of its totals before the
    meeting, the other's read after it, the output's stores after the read (the race check
    finds a race without the first of these barriers)."""
    from tests.kernels.test_op_report import run_ops
    from trnsim.trace.races import find_races

    f32 = "float32"
    t = {"x": (shape, f32), "out": (shape, f32), "w": (shape[-1:], f32), "b": (shape[-1:], f32)}
    args = {"x": "x", "out": "out", "weight": "w", "bias": "b"}
    r, _ = run_ops(t, [("layer_norm", args)], lnc=2)
    assert find_races(r.program) == []
