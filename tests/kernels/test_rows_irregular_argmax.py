"""argmax over rows no even piece layout fits (GPT-2's vocab of 50257, 100000, 128 x 1187):
the chunk maxima and a gather over k pieces of f = d // k, the r = d - k f last elements a
column of their own (`argmax_chunks.remainder_layout`), where they took three passes over x
(`argmax_ragged`). trn2 LNC 2, 16 MiB of x, against the larger of the DMA and engine bounds
(tests/kernels/test_rows_families.py); and numpy's values (--check), the same at LNC 1 and 2,
ties giving the first index."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.test_rows_families import reached
from tests.kernels.test_rows_families_argmax_loss import case
from tests.kernels.test_rows_irregular_reductions import _run, _saved
from trnsim.dtypes import dtype
from trnsim.kernels.argmax_chunks import remainder_layout
from trnsim.trace.program import TensorSpec

# (dtype, row length): the fraction of the bound reached (rounded down to 5%); before, in
# three passes: fp32 50257 42%, 100000 44%, 151936 49%; bf16 50257 31%, 100000 31%, 151936 33%
FLOOR = {
    ("float32", 50257): 0.6,  # (32 pieces of 1570, 17 left)
    ("float32", 100000): 0.6,
    ("bfloat16", 50257): 0.55,
    ("bfloat16", 100000): 0.65,  # (32 pieces of 3125, none left)
    ("float32", 151936): 0.65,  # (128 x 1187, prime: 127 pieces of 1196, 44 left)
    ("bfloat16", 151936): 0.6,  # (41 pieces of 3705, 31 left, 3 rows a tile)
}


def test_remainder_layout_pieces():
    """50257 fp32: 32 pieces of 1570 (chunks of 157), 17 left; 151936 = 128 x 1187 (prime): 127
    of 1196, 44 left (bf16: 41 of 3705, 31 left); 2 x a large prime, no chunk length in any piece count: none."""
    lay = remainder_layout(50257, 4, 128)
    assert (lay.k, lay.f, lay.g, 50257 - lay.d) == (32, 1570, 4, 17)
    lay = remainder_layout(151936, 4, 128)
    assert (lay.k, lay.f, lay.g, 151936 - lay.d) == (127, 1196, 1, 44)
    lay = remainder_layout(151936, 2, 128)  # (64 x 2374: chunks of 1187, half a piece)
    assert (lay.k, lay.f, lay.g, 151936 - lay.d) == (41, 3705, 3, 31)
    for d in range(50000, 50300):
        lay = remainder_layout(d, 4, 128)
        assert lay is None or (lay.d == lay.k * lay.f and 0 <= d - lay.d < lay.k), d


@pytest.mark.parametrize("dt,d", list(FLOOR))
def test_irregular_argmax_keeps_its_floor(dt, d):
    got, row, engines = reached(*case("argmax", d, dt), "argmax", dt, d)
    assert got >= FLOOR[(dt, d)], (row["time_ns"], row["roofline_ns"], engines)


@pytest.mark.parametrize("shape,dt", [((5, 50257), "float32"), ((5, 50257), "bfloat16"),
                                      ((3, 100000), "float32"), ((3, 151936), "float32"),
                                      ((5, 151936), "bfloat16")])  # fmt: skip
def test_irregular_argmax_check(shape, dt, tmp_path):
    """numpy's first index at LNC 1 and 2 (5 rows: 2 or 3 a core, 4 or 8 a tile), ties
    in a row's main part and its remainder (the first wins), a max in the remainder alone,
    a max on a piece's first and last elements."""
    rng = np.random.default_rng(9)
    x = rng.integers(-50, 50, shape).astype(np.float32)
    d = shape[1]
    f = remainder_layout(d, dtype(dt).itemsize, 128).f
    x[0, [7, d - 3]] = 99  # a tie, main part and remainder: 7
    x[1, d - 2] = 99  # the remainder alone
    x[2, [d - 1, d - 5]] = 99  # a tie within the remainder: d - 5
    if shape[0] > 3:
        x[3, f] = 99  # a piece's first element
        x[4, [f - 1, f * 3]] = 99  # a piece's last element, then a later piece's first
    specs = _saved(tmp_path, x=x)
    specs["x"] = TensorSpec("x", shape, dtype(dt), specs["x"].init)
    specs["out"] = TensorSpec("out", shape[:1], dtype("int32"), None)
    a, b = _run(specs, "argmax", {"x": "x", "out": "out", "dim": -1})
    assert np.array_equal(a, b)
    assert list(a) == list(np.argmax(x, axis=1))


def test_irregular_argmax_check_3d(tmp_path):
    """x [2, 3, 50257] fp32 (rows of 3-D x: a tile's two rows across its first dim)."""
    x = np.random.default_rng(10).standard_normal((2, 3, 50257)).astype(np.float32)
    x[1, 0, 50250] = 9.0  # in the remainder
    specs = _saved(tmp_path, x=x)
    specs["out"] = TensorSpec("out", (2, 3), dtype("int32"), None)
    a, b = _run(specs, "argmax", {"x": "x", "out": "out", "dim": -1})
    assert np.array_equal(a, b) and np.array_equal(a, np.argmax(x, axis=-1))
