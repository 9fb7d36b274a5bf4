"""--check's comparison (`kernels.check.compare`): NaN and infinities count, element by element.
A NaN never compares greater than a tolerance, and an infinite reference made the tolerance's
scale infinite, so an all-NaN log_softmax output next to a masked row's -inf passed as ok."""

from __future__ import annotations

import numpy as np
import pytest

from trnsim.kernels.check import compare

INF, NAN = np.inf, np.nan


@pytest.mark.parametrize("expected,got,ok", [
    ([1.0, 2.0], [1.0, 2.0], True),
    ([1.0, 2.0], [1.0, 2.001], False),  # beyond fp32's tolerance
    ([1.0, 2.0], [1.0, NAN], False),
    ([-INF, 1.0], [NAN, NAN], False),  # the case that passed: a -inf in the reference
    ([-INF, -0.5], [-INF, -0.5], True),
    ([-INF, -0.5], [INF, -0.5], False),
    ([-INF, -0.5], [-1e30, -0.5], False),  # a finite value where the reference is -inf
    ([-INF, -0.5], [-INF, 7.0], False),  # the scale is the largest finite magnitude, not inf
    ([NAN, 1.0], [NAN, 1.0], True),
    ([NAN, 1.0], [0.0, 1.0], False),
])  # fmt: skip
def test_compare_counts_nan_and_infinities(expected, got, ok):
    r = compare(np.array(expected), np.array(got), "float32")
    assert r["ok"] is ok, r


def test_errors_over_finite_elements():
    r = compare(np.array([-INF, 2.0, 4.0]), np.array([-INF, 2.5, 4.0]), "bfloat16")
    assert (r["max_abs_err"], r["max_rel_err"]) == (0.5, 0.25)
    r = compare(np.array([-INF, 2.0]), np.array([NAN, 2.0]), "bfloat16")
    assert r == {"ok": False, "max_abs_err": INF, "max_rel_err": INF}
