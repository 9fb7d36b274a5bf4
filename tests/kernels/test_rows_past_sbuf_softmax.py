"""softmax and log_softmax over one row longer than SBUF holds twice (read twice,
`softmax_pieces`): a row of 2^23 fp32 (32 MiB) was refused for SBUF (each of its 32 segments
kept a buffer of its own) and one of 2^24 for semaphores (two columns a segment). Each pass now
streams its segments through rotating buffers, each segment's max and sum of exp taken before
its buffer is loaded again."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import checked_at_both_lncs
from tests.kernels.test_op_report import run_ops
from trnsim.dtypes import dtype
from trnsim.trace.program import OpSpec, TensorSpec


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_a_row_of_2_23_fp32_gives_numpys_values(op, tmp_path):
    """Segments of different means (a ramp under the noise), so a segment's sum of exp taken
    from another segment's data would show."""
    d = 1 << 23
    rng = np.random.default_rng(3)
    path = tmp_path / "x.npy"
    np.save(path, (rng.standard_normal((1, d)) + np.linspace(0, 12, d)).astype(np.float32))
    specs = {"x": TensorSpec("x", (1, d), dtype("float32"), ("file", str(path))),
             "out": TensorSpec("out", (1, d), dtype("float32"), None)}  # fmt: skip
    checked_at_both_lncs(specs, [OpSpec(op, {"x": "x", "out": "out"}, 1)], equal=False)


@pytest.mark.parametrize("op,dt,d", [("softmax", "float32", 1 << 24),
                                     ("log_softmax", "bfloat16", 1 << 25)])  # fmt: skip
def test_rows_of_64_mib_lower_and_read_x_twice(op, dt, d):
    """A row of 64 MiB lowers; its time is at least the DMA's for x read twice and out
    written once at the chip's peak (the roofline counts x once)."""
    x = ((1, d), dt)
    r, cfg = run_ops({"x": x, "out": x}, [(op, {"x": "x", "out": "out"})], lnc=2)
    (row,) = r.summary["ops"]
    assert row["time_ns"] >= 1.5 * row["dma_bound_ns"], (row["time_ns"], row["dma_bound_ns"])
