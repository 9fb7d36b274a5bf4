"""fp32 layer_norm over rows of real models' widths that fit a partition (issue 26): 16 MiB of x,
trn2 LNC 2, within 80% of the bound with `norms.STT_FIT` (`norm_stt`: the statistics ScalarE's,
normalisation, weight and bias two scalar_tensor_tensors a column part, or ScalarE's
normalisation and VectorE's weight and bias out of PSUM), chosen by `norms._variant`'s estimate.
Widths that do not reach it yet are xfail with their time. The plan gives numpy's values
(--check, rows of mean 10^4 too) and the same values at LNC 1 and 2, x's last rows (64 or
fewer) two partitions a row too."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import checked_at_both_lncs
from tests.kernels.test_op_report import run_ops
from tests.kernels.test_rows_families import _check, case, marked, reached
from trnsim.dtypes import dtype
from trnsim.kernels import norms
from trnsim.trace.program import OpSpec, TensorSpec

SHORT: dict = {}  # (dtype, row length): why it does not reach 80% yet
PARAMS = marked([("float32", d) for d in (2560, 3072, 4544, 5120, 6144)], SHORT)


@pytest.mark.parametrize("dt,d", PARAMS)
def test_layer_norm_fp32_rows_that_fit_reach_80_percent_of_their_bound(dt, d):
    got, row, engines = reached(*case("layer_norm", d, dt), "layer_norm", dt, d)
    assert got >= 0.8, (row["time_ns"], row["roofline_ns"], engines)


@pytest.fixture
def stt_only(monkeypatch):
    """`norms.STT_FIT` the only plan variant (x of TRIAL_BYTES or more, so it applies)."""
    monkeypatch.setattr(norms, "VARIANTS", (norms.STT_FIT,))
    monkeypatch.setattr(norms, "_CHOSEN", {})


def test_stt_fit_values_at_both_lncs(stt_only):
    """Rows of 2560 and 5120 (a core's last block of 8 and 16 rows at LNC 2; more rows a core
    than partitions, or `norms._lower` puts them in pieces), and a 4-D x (blocks of 70 rows, an
    item of its leading dims each: a part's columns past them): --check holds, LNC 1 and 2 give
    the same values."""
    f32 = dtype("float32")
    for shape in ((520, 2560), (400, 5120), (2, 3, 70, 3000)):
        assert np.prod(shape) * 4 >= norms.TRIAL_BYTES
        specs = {"x": TensorSpec("x", shape, f32, "normal"),
                 "out": TensorSpec("out", shape, f32, None),
                 "w": TensorSpec("w", shape[-1:], f32, "normal"),
                 "b": TensorSpec("b", shape[-1:], f32, "normal")}  # fmt: skip
        checked_at_both_lncs(specs, [OpSpec("layer_norm", {"x": "x", "out": "out",
                                                           "weight": "w", "bias": "b"}, 1)])  # fmt: skip
    assert {str(v) for _, v in norms._CHOSEN.values()} == {str(norms.STT_FIT)}


def test_stt_fit_buffers_within_the_semaphores():
    """16 MiB of rows of 2048 at LNC 1 (16 blocks on one core): the buffers capped so their
    tiles' semaphores fit a core's (rows of 1024, when the plan took them: 29 buffers took 309
    of 256 and the program was refused)."""
    from trnsim.kernels import norm_stt

    norms._CHOSEN.clear()
    r, _ = run_ops(*case("layer_norm", 2048, "float32"), lnc=1)
    assert [v for _, v in norms._CHOSEN.values()] == [norms.STT_FIT]
    d, room = 2048, int(224 * 1024 * norm_stt.SHARE)
    assert room // (d * 4) * 2 * (2 + norm_stt.SMALL_TILES) > 256 - norm_stt.SEMS_KEPT
    assert r.summary["ops"][0]["time_ns"] > 0
    norms._CHOSEN.clear()


def test_stt_fit_at_mean_1e4(stt_only, tmp_path):
    """Rows of mean 10^4 and spread 1: each row shifted by its first element before its sums
    (exact), so the normalised values keep 7 digits at LNC 1 and 2."""
    for lnc in (1, 2):
        (got,) = _check("layer_norm", 1e4, tmp_path, (400, 5120), lnc).values()
        assert got["ok"], got
        assert got["max_abs_err"] < 1e-5


def test_stt_fit_with_a_massive_first_channel(stt_only, tmp_path):
    """Rows whose first element is 1000 (or -3000) while the rest are N(0, 1), as an LLM's
    massive activation channel: the sum of squares taken about x0 lost the variance to
    q - a^2 in fp32 (--check failed by 0.048); about the first part's mean it holds, at LNC 1
    and 2, the last rows two partitions a row too (179 rows: a tail of 51)."""
    rng = np.random.default_rng(7)
    for rows, d, first in ((400, 5120, 1000.0), (179, 5120, -3000.0)):
        x = rng.standard_normal((rows, d)).astype(np.float32)
        x[:, 0] = first
        files = {}
        for name, v in (("x", x), ("w", 1 + 0.1 * rng.standard_normal(d)),
                        ("b", 0.1 * rng.standard_normal(d))):  # fmt: skip
            files[name] = tmp_path / f"{name}{rows}.npy"
            np.save(files[name], np.asarray(v, np.float32))
        f32 = dtype("float32")
        specs = {"x": TensorSpec("x", x.shape, f32, ("file", str(files["x"]))),
                 "out": TensorSpec("out", x.shape, f32, None),
                 "w": TensorSpec("w", (d,), f32, ("file", str(files["w"]))),
                 "b": TensorSpec("b", (d,), f32, ("file", str(files["b"])))}  # fmt: skip
        checked_at_both_lncs(specs, [OpSpec("layer_norm", {"x": "x", "out": "out",
                                                           "weight": "w", "bias": "b"}, 1)],
                             equal=False)  # fmt: skip
    assert {str(v) for _, v in norms._CHOSEN.values()} == {str(norms.STT_FIT)}


def test_stt_fit_tails_in_segments_at_both_lncs(stt_only, tmp_path):
    """A core's last rows in segments a row (`norm_stt._tails`, the rows cut evenly between
    the cores, `rows.EVEN_LAYER_FP32`): 307 rows of 5120 go 153 and 154 a core, 25 rows in 5
    segments and 26 in 4; 288 rows, 16 in 8 segments. --check holds, a massive first channel
    too, and LNC 1 (the same rows in the same segments, `norm_stt._ranges`) gives the LNC 2
    values bit for bit."""
    from trnsim.config import load_chip
    from trnsim.kernels import norm_stt

    cfg = load_chip("trn2")
    assert norm_stt._tails(cfg, 25, 5120) == [(25, 5)]
    assert norm_stt._tails(cfg, 26, 5120) == [(26, 4)]
    assert norm_stt._tails(cfg, 16, 5120) == [(16, 8)]
    rng = np.random.default_rng(3)
    for rows, first in ((307, None), (288, 1000.0)):
        x = rng.standard_normal((rows, 5120)).astype(np.float32)
        if first is not None:
            x[:, 0] = first
        files = {}
        for name, v in (("x", x), ("w", 1 + 0.1 * rng.standard_normal(5120)),
                        ("b", 0.1 * rng.standard_normal(5120))):  # fmt: skip
            files[name] = tmp_path / f"{name}{rows}.npy"
            np.save(files[name], np.asarray(v, np.float32))
        f32 = dtype("float32")
        specs = {n: TensorSpec(n, np.load(files[n]).shape, f32, ("file", str(files[n])))
                 for n in ("x", "w", "b")}  # fmt: skip
        specs["out"] = TensorSpec("out", x.shape, f32, None)
        checked_at_both_lncs(specs, [OpSpec("layer_norm", {"x": "x", "out": "out",
                                                           "weight": "w", "bias": "b"}, 1)])  # fmt: skip
    assert {str(v) for _, v in norms._CHOSEN.values()} == {str(norms.STT_FIT)}
