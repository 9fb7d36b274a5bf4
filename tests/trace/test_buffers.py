"""trace.buffers: tensors (views), tiles, init files, and one exact error per way they can be
wrong."""

import pytest

from tests.trace.helpers import TENS, T, error, parse
from trnsim.dtypes import dtype
from trnsim.trace.program import TensorSpec

BF16 = dtype("bfloat16")


def test_views_resolve_to_the_root_and_inherit():
    p = parse("""\
        trnsim: 1
        tensors:
          v2: {view: v1, shape: [4, 2, 8]}
          v1: {view: q, shape: [8, 8], dtype: bf16}
          q: {shape: [64], dtype: bfloat16, on: host}
          same: {view: q}
        """)
    assert p.tensors["v2"] == TensorSpec("v2", (4, 2, 8), BF16, None, "host", "q", 3)
    assert p.tensors["v1"].view == "q" and p.tensors["v1"].dtype == BF16
    assert p.tensors["same"].shape == (64,)
    assert list(p.tensors) == ["v2", "v1", "q", "same"]


def test_huge_shapes_are_accepted():
    p = parse(T + "tensors:\n  x: {shape: [1000000000, 1000000000], dtype: bfloat16}\n")
    assert p.tensors["x"].shape == (10**9, 10**9)


ERRORS = [
    # tensors
    (T + "tensors: [x]\n", "t.yaml:2: tensors: got a list; expected a mapping of tensor name"),
    (T + "tensors:\n  x: [1, 2]\n", "t.yaml:3: tensors.x: got a list; expected {shape: [...]"),
    (
        T + "tensors:\n  x: {shape: [0], dtype: int8}\n",
        "t.yaml:3: tensors.x.shape[0]: got 0; expected a positive integer",
    ),
    (
        T + "tensors:\n  x:\n    dtype: int8\n    shape:\n      - 4\n      - 2.0\n",
        "t.yaml:7: tensors.x.shape[1]: got 2.0; expected a positive integer",
    ),
    (
        T + "tensors:\n  x: {shape: [true], dtype: int8}\n",
        "t.yaml:3: tensors.x.shape[0]: got true; expected a positive integer",
    ),
    (
        T + "tensors:\n  x: {shape: '128', dtype: int8}\n",
        "t.yaml:3: tensors.x.shape: got '128'; expected a list of positive integers",
    ),
    (
        T + "tensors:\n  x: {shape: [], dtype: int8}\n",
        "t.yaml:3: tensors.x.shape: got an empty list; expected a list of positive integers",
    ),
    (
        T + "tensors:\n  x: {dtype: int8}\n",
        "t.yaml:3: tensors.x: missing key 'shape'; expected shape: a list of positive integers",
    ),
    (
        T + "tensors:\n  x: {shape: [2]}\n",
        "t.yaml:3: tensors.x: missing key 'dtype'; expected one of float32, bfloat16",
    ),
    (
        T + "tensors:\n  x: {shape: [2], dtype: bfloat61}\n",
        "t.yaml:3: tensors.x.dtype: unknown dtype 'bfloat61' (did you mean 'bfloat16'?); "
        "expected one of float32, bfloat16,",
    ),
    (
        T + "tensors:\n  x: {shape: [2], dtype: [int8]}\n",
        "t.yaml:3: tensors.x.dtype: got a list; expected one of float32",
    ),
    (
        T + "tensors:\n  x:\n    shape: [2]\n    dtype: int8\n    init: normall\n",
        "t.yaml:6: tensors.x.init: got 'normall' (did you mean 'normal'?); "
        "expected one of zeros, ones, random, normal, arange",
    ),
    (
        T + "tensors:\n  x: {shape: [2], dtype: int8, init: 3}\n",
        "t.yaml:3: tensors.x.init: got 3; expected one of zeros, ones, random, normal, arange, or "
        "{file: name.npy}",
    ),
    (
        T + "tensors:\n  x: {shape: [2], dtype: int8, init: {path: a.npy}}\n",
        "t.yaml:3: tensors.x.init.path: unknown key 'path'; expected one of file",
    ),
    (
        T + "tensors:\n  x: {shape: [2], dtype: int8, on: gpu}\n",
        "t.yaml:3: tensors.x.on: got 'gpu'; expected one of hbm, host",
    ),
    (
        T + "tensors:\n  x: {shape: [2], dtype: int8, shpe: 1}\n",
        "t.yaml:3: tensors.x.shpe: unknown key 'shpe' (did you mean 'shape'?); "
        "expected one of shape, dtype, init, on, view",
    ),
    (
        T + "tensors:\n  1x: {shape: [2], dtype: int8}\n",
        "t.yaml:3: tensors.1x: tensor name '1x' is not an identifier",
    ),
    (
        T + "tensors:\n  7: {shape: [2], dtype: int8}\n",
        "t.yaml:3: tensors.7: tensor name 7 is not an identifier",
    ),
    # views
    (
        TENS + "  v: {view: xx, shape: [8192]}\n",
        "t.yaml:4: tensors.v.view: unknown tensor 'xx' (did you mean 'x'?); expected one of x, v",
    ),
    (
        T + "tensors:\n  a: {view: b}\n  b: {view: a}\n",
        "t.yaml:4: tensors.b.view: views form a cycle: a -> b -> a; expected a view of a tensor",
    ),
    (
        TENS + "  v: {view: x, shape: [100]}\n",
        "t.yaml:4: tensors.v.shape: 100 elements in a view of 'x' with 8192; "
        "expected the same number of elements as the viewed tensor",
    ),
    (
        TENS + "  v: {view: x, dtype: bfloat16}\n",
        "t.yaml:4: tensors.v.dtype: bfloat16 differs from 'x'; expected float32 (or no dtype)",
    ),
    (
        TENS + "  v: {view: x, init: ones}\n",
        "t.yaml:4: tensors.v.init: a view cannot have init; expected init on the viewed tensor",
    ),
    # tiles
    (
        TENS + "tiles:\n  t: {shape: [128, 2], dtype: float32}\ninstructions: []\n",
        "t.yaml:5: tiles.t: missing key 'memory'; expected one of sbuf, psum",
    ),
    (
        TENS + "tiles:\n  t: {memory: dram, shape: [128, 2], dtype: float32}\ninstructions: []\n",
        "t.yaml:5: tiles.t.memory: got 'dram'; expected one of sbuf, psum",
    ),
    (
        TENS + "tiles:\n  x: {memory: sbuf, shape: [128, 2], dtype: float32}\ninstructions: []\n",
        "t.yaml:5: tiles.x: tile 'x' has the name of a tensor; expected a name no tensor uses",
    ),
    (
        TENS + "tiles:\n  t: {memory: sbuf, shape: [1], dtype: float32}\n",
        "t.yaml:4: tiles: top-level tiles: without instructions:",
    ),
]


@pytest.mark.parametrize("text, start", ERRORS)
def test_errors_name_file_line_and_key(text, start):
    assert error(text).startswith(start)
