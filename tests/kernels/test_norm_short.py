"""layer_norm over short rows (kernels/norm_short.py, the SHORT variant): numpy's values
(--check) for fp32 and bf16 rows, with and without weight and bias, 2-D and 3-D, odd row counts,
at LNC 1 and 2 with the same values bit for bit; fp32 rows of mean 1e4 (the shift); the
weight and bias one `tensor_tensor` a block; fp32 rows of 96 and 100 at 80% of their bound."""

import numpy as np
import pytest

from tests.kernels.helpers import saved_specs
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.isa import TensorTensor
from trnsim.kernels import norms
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.norm_short import lower_norm_short
from trnsim.runtime.session import run_program
from trnsim.trace.program import KernelSpec, OpSpec, Program, Step, StreamSpec, TensorSpec


@pytest.fixture
def short(monkeypatch):
    """Every layer_norm lowered by norm_short (the variant `_variant` would otherwise choose
    only for x of TRIAL_BYTES or more)."""
    monkeypatch.setattr(norms, "_variant", lambda *a: norms.SHORT)


def _run(specs: dict, affine: str, lnc: int):
    args = {"x": "x", "out": "out", "eps": 1e-5}
    args |= {"weight": "w"} if "w" in affine else {}
    args |= {"bias": "b"} if "b" in affine else {}
    prog = Program("p", "trn2", 0, "functional", lnc, [], specs,
                   {"k": KernelSpec("k", ops=[OpSpec("layer_norm", args, 1)])},
                   [StreamSpec("s", 0, [Step("launch", "k")])])  # fmt: skip
    r = run_program(prog, load_chip("trn2"), "functional", check=True)
    checks = r.summary["check"]
    assert checks and all(c["ok"] for c in checks.values()), (lnc, checks)
    return r.tensor("out"), checks


def _specs(shape, dt, odt=None):
    t = dtype(dt)
    return {"x": TensorSpec("x", shape, t, "normal"),
            "w": TensorSpec("w", shape[-1:], t, "normal"),
            "b": TensorSpec("b", shape[-1:], t, "normal"),
            "out": TensorSpec("out", shape, dtype(odt or dt), None)}  # fmt: skip


@pytest.mark.parametrize(
    "shape,dt,affine",
    [
        ((4099, 64), "float32", "wb"),
        ((3001, 96), "float32", "wb"),
        ((2999, 100), "bfloat16", "wb"),
        ((1777, 200), "float32", "w"),
        ((901, 384), "bfloat16", ""),
        ((3, 333, 96), "float32", "b"),
        ((5, 77, 100), "bfloat16", "wb"),
        ((1000, 64), "bfloat16>float32", "wb"),
        ((999, 96), "float32>bfloat16", "wb"),
        ((1001, 3), "float32", "wb"),  # (MIN_ROW and odd: halves of 2 and 1)
        ((700, 2), "bfloat16", "wb"),
    ],
)
def test_short_rows_check_at_both_lncs(short, shape, dt, affine):
    specs = _specs(shape, *dt.split(">"))  # (x's dtype > the output's)
    out = [_run(specs, affine, lnc)[0] for lnc in (1, 2)]
    assert np.array_equal(out[0], out[1])


@pytest.mark.parametrize("d", [64, 96, 100])
def test_short_rows_at_mean_1e4(short, d, tmp_path):
    """fp32 rows of mean 1e4 and spread 1 (and a massive first channel): the shift keeps the
    normalised values to a few units in 2^-23, at LNC 1 and 2 alike."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1029, d)) + 1e4
    x[:, 0] *= 30.0
    arrays = {"x": x, "w": rng.standard_normal(d), "b": rng.standard_normal(d),
              "out": np.zeros((1029, d))}  # fmt: skip
    specs = saved_specs(arrays, dtype("float32"), tmp_path)
    out = []
    for lnc in (1, 2):
        got, checks = _run(specs, "wb", lnc)
        (c,) = checks.values()
        assert c["max_abs_err"] < 1e-5, c
        out.append(got)
    assert np.array_equal(out[0], out[1])


def test_affine_is_one_instruction_a_block():
    """The weight and the bias each one tensor_tensor a block, reading the spread [p, D] tile
    (or its PSUM copy, fp32) broadcast along the block's rows."""
    d, rows, f32 = 96, 8192, dtype("float32")
    b = KernelBuilder(_specs((rows, d), "float32"))
    lower_norm_short(b, load_chip("trn2"), "x", "out", "w", "b", 1e-5, (0, rows))
    tts = [i for i in b.instructions if isinstance(i, TensorTensor) and i.src1.bcast]
    assert tts and all(len(i.src1.bcast) == 1 for i in tts)
    assert {i.alu for i in tts} == {"multiply", "add"}
    assert len(tts) < rows // 128  # (one a block, not one a row slot)
    assert f32.itemsize == 4


@pytest.mark.parametrize("d", [96, 100])
def test_short_rows_reach_80_percent(d):
    """16 MiB of fp32 rows of 96 and 100 (trn2, LNC 2): `_variant` picks SHORT (its estimate
    ends soonest), which reaches 80% of the DMA bound (61.5 and 60.4 us before it; 54.4 and
    55.1 us with it)."""
    from tests.kernels.test_rows_families import case, reached

    norms._CHOSEN.clear()
    got, row, _ = reached(*case("layer_norm", d, "float32"), "layer_norm", "float32", d)
    assert [v for _, v in norms._CHOSEN.values()] == [norms.SHORT]
    norms._CHOSEN.clear()
    assert got >= 0.8, row["time_ns"]
