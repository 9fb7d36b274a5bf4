"""softmax and log_softmax over fp32 rows of 262400 to 262784 elements (16 MiB of x: 15 rows),
in two segments of 128 pieces of ~1025 (`softmax_pieces`; with a remainder column where the
length is not a multiple of 128 or has no good piece divisor, `softmax_ragged`): 8 groups
resident, each slot ~16 tiles of two semaphores each, counted on 262 (softmax) and 280
(log_softmax) semaphores of a core's 256, and the program was refused at LNC 1 and 2. The plan
now takes fewer slots where its tiles would not fit (`softmax_pieces._fitting_bufs`): the rows
lower at both, with numpy's values (--check), the same at both, and reach 80% of their bound."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import checked_at_both_lncs
from tests.kernels.test_rows_families import case, reached
from trnsim.dtypes import dtype
from trnsim.trace.program import OpSpec, TensorSpec

LENGTHS = (262783, 262784)  # a remainder column of 127; 128 x 2053 (prime: no pieces divisor)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("d", LENGTHS)
def test_rows_of_two_segments_lower_with_numpys_values(op, d, tmp_path):
    """15 rows of d fp32 (the 16 MiB case) lower at LNC 1 and 2 (8 groups on a core) and give
    numpy's values (--check), the same at both."""
    shape = (15, d)
    rng = np.random.default_rng(5)
    path = tmp_path / "x.npy"
    np.save(path, (rng.standard_normal(shape) * 3).astype(np.float32))
    specs = {"x": TensorSpec("x", shape, dtype("float32"), ("file", str(path))),
             "out": TensorSpec("out", shape, dtype("float32"), None)}  # fmt: skip
    checked_at_both_lncs(specs, [OpSpec(op, {"x": "x", "out": "out"}, 1)])


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("d", LENGTHS)
def test_rows_of_two_segments_reach_80_percent_of_their_bound(op, d):
    got, row, engines = reached(*case(op, d, "float32"), op, "float32", d)
    assert got >= 0.8, (row["time_ns"], row["roofline_ns"], engines)
