"""bf16 layer_norm over short rows with the normalisation folded (kernels/norm_fused.py, the
SHORT variant for bf16 rows of 64 to 384 with a weight and a bias): numpy's values (--check) at
LNC 1 and 2 with the same values bit for bit, over many blocks (the y tiles' ring, the cut
first and last blocks) and 3-D x; rows far from zero; three passes a row slot (no
normalisation pass); and 16 MiB of rows of 96 to 384 at 80% of their bound (96, 100, 200:
79.96%, 79.7% and 72.4% before it)."""

import numpy as np
import pytest

from tests.kernels.helpers import saved_specs
from tests.kernels.test_norm_short import _run, _specs
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.isa import Activation, BnStats, ScalarTensorTensor, TensorScalar
from trnsim.kernels import norms
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.norm_fused import Fused
from trnsim.kernels.norm_short import lower_norm_short


@pytest.fixture
def short(monkeypatch):
    """Every layer_norm lowered by norm_short (`_variant` tries it only for x of TRIAL_BYTES or
    more)."""
    monkeypatch.setattr(norms, "_variant", lambda *a: norms.SHORT)


@pytest.mark.parametrize("shape", [(20000, 96), (6000, 384), (5, 77, 100), (3001, 200),
                                   (777, 97), (2, 300, 64)])  # fmt: skip
def test_fused_rows_check_at_both_lncs(short, shape):
    specs = _specs(shape, "bfloat16")
    out = [_run(specs, "wb", lnc)[0] for lnc in (1, 2)]
    assert np.array_equal(out[0], out[1])


def test_fused_rows_far_from_zero(short, tmp_path):
    """Rows of mean 100 and spread 1 (bf16 x), a bias of spread 10: --check holds, alike at LNC
    1 and 2 (y = (x - mean) w is rounded after the mean's subtraction, in fp32)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1029, 96)) + 100.0
    arrays = {"x": x, "w": rng.standard_normal(96), "b": 10 * rng.standard_normal(96),
              "out": np.zeros((1029, 96))}  # fmt: skip
    specs = saved_specs(arrays, dtype("bfloat16"), tmp_path)
    out = [_run(specs, "wb", lnc)[0] for lnc in (1, 2)]
    assert np.array_equal(out[0], out[1])


def test_three_passes_a_row_slot():
    """A row slot's passes over its elements: bn_stats, (x - mean) w, the copy out times rstd;
    no normalisation of its own (`norm_short`'s activation or tensor_scalar over x)."""
    rows, d = 4096, 96
    b = KernelBuilder(_specs((rows, d), "bfloat16"))
    lower_norm_short(b, load_chip("trn2"), "x", "out", "w", "b", 1e-5, (0, rows), Fused)
    slots = rows // 128
    stt = [i for i in b.instructions if isinstance(i, ScalarTensorTensor) and i.op0 == "subtract"]
    stats = [i for i in b.instructions if isinstance(i, BnStats)]
    outs = [i for i in b.instructions
            if isinstance(i, (Activation, TensorScalar)) and i.src.name.startswith("lnf_bias")]  # fmt: skip
    assert len(stt) == len(stats) == len(outs) == slots


@pytest.mark.parametrize("d,floor", [(96, 0.8), (100, 0.8), (128, 0.8), (200, 0.8), (256, 0.8),
                                     (384, 0.8)])  # fmt: skip
def test_fused_rows_reach_their_floor(d, floor):
    """16 MiB of bf16 rows of 96 to 384 (trn2, LNC 2): `_variant` takes SHORT, which reaches
    80% of the larger bound (96, 100, 200: 71.2, 70.3 and 68.6 us before it; 58.7, 58.9, 58.2).
    Rows of 200 and 384 reached 79.6% and 79.0% of their DMA bound, 46.3 us (58.2, 58.6 us),
    with 8 KiB blocks and `norm_short.SEARCH`; 80.6%, 80.5% with `norm_fused.BLOCK_BYTES` and
    its SEARCH (57.4, 57.5 us), 256 78.3% -> 80.5%."""
    from tests.kernels.test_rows_families import case, reached

    norms._CHOSEN.clear()
    got, row, _ = reached(*case("layer_norm", d, "bfloat16"), "layer_norm", "bfloat16", d)
    assert [v for _, v in norms._CHOSEN.values()] == [norms.SHORT]
    norms._CHOSEN.clear()
    assert got >= floor, row["time_ns"]
