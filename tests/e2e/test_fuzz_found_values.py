"""Regressions the fuzzer found in computed values: immediates beyond float range, inf in a
matmul, init files that are not numbers, sliced copy steps (fixed in trnsim/engines,
memory/init.py and the runtime)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.e2e.fuzzing import CHIPS, HUGE_IMMEDIATE, MODES, chip, run_trace
from trnsim import trace
from trnsim.errors import TrnsimError
from trnsim.runtime import session

# ----------------------------------------------------------------------------------------------
# numerics: found by the fuzzer, fixed in trnsim/engines (alu.py, gpsimd.py, tensor.py)


@pytest.mark.parametrize(
    "instruction, tile, expected",
    [
        (
            f"{{op: tensor_scalar, src: a, dst: a, op0: add, operand0: {HUGE_IMMEDIATE}}}",
            "float32",
            np.inf,
        ),
        (
            f"{{op: tensor_scalar, src: a, dst: a, op0: add, operand0: -{HUGE_IMMEDIATE}, "
            f"engine: gpsimd}}",
            "float32",
            -np.inf,
        ),
        (
            f"{{op: activation, func: identity, src: a, dst: a, scale: 1, bias: {HUGE_IMMEDIATE}}}",
            "float32",
            np.inf,
        ),
        (
            f"{{op: activation, func: identity, src: a, dst: a, bias: -{HUGE_IMMEDIATE}}}",
            "float32",
            -np.inf,
        ),
        (f"{{op: memset, dst: a, value: {HUGE_IMMEDIATE}}}", "int32", 2**31 - 1),
        (f"{{op: memset, dst: a, value: -{HUGE_IMMEDIATE}, engine: gpsimd}}", "int16", -(2**15)),
        (
            f"{{op: affine_select, on_true: a, dst: a, on_false: {HUGE_IMMEDIATE}, start: -9}}",
            "float32",
            np.inf,
        ),
        (f"{{op: iota, dst: a, start: {HUGE_IMMEDIATE}}}", "float32", np.inf),
        (
            f"{{op: select, predicate: a, on_true: a, on_false: {HUGE_IMMEDIATE}, dst: a}}",
            "float32",
            np.inf,
        ),
    ],
)
@pytest.mark.parametrize("mode", MODES)
def test_integer_immediates_beyond_float_range_saturate(instruction, tile, expected, mode):
    """Regression: an integer immediate too large for a float (operand0, scale, bias, value,
    on_false, start) raised OverflowError ('int too large to convert to float') from numpy in
    functional mode. It now becomes +-inf in fp32, like a float beyond fp32's range does, and is
    saturated by the cast to an integer tile."""
    text = (
        f"trnsim: 1\ntiles:\n  a: {{memory: sbuf, shape: [128, 4], dtype: {tile}}}\n"
        f"instructions:\n  - {instruction}\n"
    )
    result = run_trace(text, "trn2", mode)
    assert isinstance(result, session.RunResult), result
    if mode == "functional":
        assert (result.tile("main", "a") == expected).all()


@pytest.mark.parametrize("chip_name", CHIPS)
def test_matmul_of_inf_gives_nan_without_a_warning(chip_name):
    """Regression (engines/tensor.py; fuzzer): inf * 0 inside a matmul made numpy print
    'RuntimeWarning: invalid value encountered in matmul' (an exception under -W error); the
    Vector/Scalar/GpSimd engines already computed under np.errstate(all="ignore")."""
    text = (
        "trnsim: 1\ntiles:\n"
        "  s: {memory: sbuf, shape: [128, 128], dtype: float32}\n"
        "  m: {memory: sbuf, shape: [128, 512], dtype: float32}\n"
        "  d: {memory: psum, shape: [128, 512], dtype: float32}\n"
        "  e: {memory: psum, shape: [128, 128], dtype: float32}\ninstructions:\n"
        "  - {op: memset, dst: s, value: .inf, signal: {a: 1}}\n"
        "  - {op: matmul, stationary: s, moving: m, dst: d, wait: {a: 1}}\n"
        "  - {op: transpose, src: s, dst: e, wait: {a: 1}}\n"
    )
    result = run_trace(text, chip_name, "functional")  # RuntimeWarnings raise in run_trace
    assert np.isnan(result.tile("main", "d")).all()
    assert np.isinf(result.tile("main", "e")).all()


# ----------------------------------------------------------------------------------------------
# initial values and host copies


@pytest.mark.parametrize(
    "values",
    [
        np.array([["a", "b"], ["c", "d"]]),  # was ValueError: could not convert string to float
        np.zeros((2, 2), dtype=[("a", "f4"), ("b", "i4")]),  # was TypeError: cannot cast
        np.ones((2, 2), complex),  # was ComplexWarning, and the imaginary part silently dropped
    ],
)
def test_init_file_of_non_numbers_is_a_clean_error(tmp_path, values):
    """Regression (memory/init.py): a .npy of the right shape but of strings, records or complex
    numbers passed the loader's shape check; converting it at run time raised from numpy. The
    loader now checks the values' type too, and names the line."""
    np.save(tmp_path / "v.npy", values)
    path = tmp_path / "t.yaml"
    path.write_text(
        "trnsim: 1\ntiles:\n  t: {memory: sbuf, shape: [2, 2], dtype: float32, "
        "init: {file: v.npy}}\ninstructions: [{op: memset, dst: t, value: 1}]\n"
    )
    with pytest.raises(
        TrnsimError,
        match=r"t\.yaml:3: tiles\.t\.init\.file: '.*v\.npy': holds .* values; expected "
        r"numbers to convert to float32$",
    ):
        session.run_program(trace.load(path), chip("trn2"), "functional")


SLICED_COPY = """\
trnsim: 1
tensors:
  x: {shape: [4, 4], dtype: float32, init: arange}
  y: {shape: [2, 4], dtype: float32}
  z: {shape: [4, 4], dtype: float32}
streams:
  - {name: s, do: [{copy: {src: "x[0:2, :]", dst: y}}]}
"""


def test_copy_step_honours_its_slices():
    result = run_trace(SLICED_COPY, "trn2", "functional")
    assert isinstance(result, session.RunResult), result
    assert np.array_equal(result.tensor("y"), np.arange(8, dtype=np.float32).reshape(2, 4))
