"""layer_norm at row lengths of real models that are not powers of two, of 1000 elements or more
(issue 26): the rows of x are 16 MiB, trn2 LNC 2. Lengths that reach 80% of their bound assert
it; those that do not yet are xfail, each with its time. A row too long for a partition whose
length is not a multiple of 128 goes in pieces when a power of two k divides it and its k pieces
fit (`norms.DIVISOR_PIECES`: bf16 rows of 20000, 16 pieces of 1250, 104.6 -> 71.1 us), or with
a remainder column (`norm_ragged`, 8 units in flight: fp32 rows of 50257 88.7 -> 67.9 us) as the
list schedule estimates; a tile's lanes take even widths where f is even (`norms.EVEN_LANES`:
bf16 (x - mean) * w runs one element a cycle only over an even count).
The plans give numpy's values (--check) and the same values at LNC 1 and 2."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import checked_layer_norm
from tests.kernels.test_rows_families import case, marked, reached
from trnsim.dtypes import dtype
from trnsim.kernels import norms
from trnsim.trace.program import TensorSpec

SHORT = {  # (dtype, row length): why it does not reach 80% yet
    ("bfloat16", 20000): "71.1 us, 65%: in 16 pieces (STT_LANES_SEARCH); every engine busy "
    "55-63 us",
    ("bfloat16", 50257): "96.4 us, 48%: a remainder column (norm_ragged): two ScalarE passes "
    "and two output passes a row",
    ("float32", 50257): "67.9 us, 69%: a remainder column (norm_ragged), a unit's [p, 1] "
    "steps on VectorE",
}
PARAMS = marked([("float32", 1600), ("bfloat16", 3072), ("bfloat16", 20000),
                  ("bfloat16", 50257), ("float32", 50257)], SHORT)  # fmt: skip


@pytest.mark.parametrize("dt,d", PARAMS)
def test_layer_norm_irregular_rows_reach_80_percent_of_their_bound(dt, d):
    got, row, engines = reached(*case("layer_norm", d, dt), "layer_norm", dt, d)
    assert got >= 0.8, (row["time_ns"], row["roofline_ns"], engines)


def test_divisor_layout():
    """Rows not a multiple of 128 in k pieces, k the power of two dividing d for pieces of at
    most DIVISOR_MOST bytes (fewer where k must divide d), none past DIVISOR_BYTES."""
    lay = norms._divisor_layout
    assert (lay(20000, 2048, 2, 128).k, lay(20000, 2048, 2, 128).f) == (16, 1250)
    assert (lay(100000, 2048, 2, 128).k, lay(100000, 2048, 2, 128).f) == (32, 3125)
    assert lay(100000, 1024, 4, 128) is None  # (3125 fp32: 12.5 KiB a partition)
    assert lay(50257, 2048, 2, 128) is None  # (odd: a remainder column)


def _specs(shape, t) -> dict:
    return {
        "x": TensorSpec("x", shape, t, "normal"),
        "w": TensorSpec("w", shape[-1:], t, "normal"),
        "b": TensorSpec("b", shape[-1:], t, "normal"),
        "out": TensorSpec("out", shape, t, None),
    }


@pytest.mark.parametrize("shape,dt,variant", [
    ((56, 20000), "bfloat16", "STT_LANES"),  # (16 pieces of 1250, lanes of 624 and 626)
    ((8, 151936), "bfloat16", "STT_LANES"),  # (128 pieces of 1187, lanes of 594 and 593)
    ((27, 20000), "float32", "PSUM_PIECES"),  # (32 pieces of 625, 4 rows a tile)
    ((12, 50257), "float32", "RAGGED"),  # (a remainder column, 2 rows a unit, 8 buffers)
])  # fmt: skip
def test_irregular_rows_in_pieces_values(monkeypatch, shape, dt, variant):
    """Rows in pieces of a power of two dividing d (not a multiple of 128), lanes of even or
    odd widths, and rows with a remainder column (LAYER_BUFS): --check holds, and LNC 1 and 2 give the same values (x of TRIAL_BYTES or
    more, so the variant applies)."""
    v = getattr(norms, variant)
    monkeypatch.setattr(norms, "VARIANTS", (v[0] if isinstance(v, tuple) else v,))
    assert np.prod(shape) * dtype(dt).itemsize >= norms.TRIAL_BYTES
    out = []
    for lnc in (1, 2):
        norms._CHOSEN.clear()
        out.append(checked_layer_norm(_specs(shape, dtype(dt)), lnc))
    norms._CHOSEN.clear()
    assert np.array_equal(out[0], out[1])
