"""softmax and log_softmax over rows of 8K and 16K (issue 26; the hidden sizes of Llama-2/3-70B
and larger): rows of `softmax.PIECE_ROWS` or more go in pieces over the partitions
(`softmax_pieces`; before, only those whose packed plan held fewer than three blocks in SBUF's
BUFFER_SHARE, or fewer rows than partitions). Packed, one or two blocks in
flight left the load, the passes and the store in turn: fp32 rows of 8K and 16K reached 70%
and 48% of their bound, bf16 rows of 16K 70% (trn2, LNC 2, 16 MiB); in pieces 83-92%. Each
within 80% of the larger of its DMA and engine bounds (`test_rows_families.reached`), and
numpy's values (--check) at LNC 1 and 2, the same at both. Such rows of a length not a multiple
of 128 go with a remainder column (`softmax_ragged`): fp32 rows of 8000 45% -> 90%."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import checked_at_both_lncs
from tests.kernels.test_rows_families import case, reached
from trnsim.dtypes import dtype
from trnsim.trace.program import OpSpec, TensorSpec

OPS = ("softmax", "log_softmax")
LENGTHS = (8192, 16384)


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("d", LENGTHS)
def test_mid_rows_reach_80_percent_of_their_bound(op, dt, d):
    got, row, engines = reached(*case(op, d, dt), op, dt, d)
    assert got >= 0.8, (row["time_ns"], row["roofline_ns"], engines)


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", [(256, 8192), (2, 160, 16384), (256, 8000)])
def test_mid_rows_check(op, dt, shape, tmp_path):
    """numpy's values (--check) at LNC 1 and 2, the same at both: 128 rows or more a core (the
    plan by buffers, not by idle partitions), a 3-D x (a core's rows across its first dim),
    rows of 8000 (not a multiple of 128: with a remainder column, `softmax_ragged`)."""
    rng = np.random.default_rng(5)
    path = tmp_path / "x.npy"
    np.save(path, (rng.standard_normal(shape) * 3).astype(np.float32))
    specs = {"x": TensorSpec("x", shape, dtype(dt), ("file", str(path))),
             "out": TensorSpec("out", shape, dtype(dt), None)}  # fmt: skip
    checked_at_both_lncs(specs, [OpSpec(op, {"x": "x", "out": "out"}, 1)])
