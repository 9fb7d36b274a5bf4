"""layer_norm's plan variants (`norms._variant`): the one whose list schedule ends soonest,
chosen the same way whatever the logical core's size, so LNC 1 and LNC 2 give the same values."""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from tests.kernels.helpers import checked_layer_norm
from tests.kernels.test_op_report import ops_program, run_ops
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.kernels import lower_cores, norms
from trnsim.kernels.builder import KernelBuilder
from trnsim.trace.program import TensorSpec

F32 = dtype("float32")
SHAPE = (2048, 512)  # 4 MiB of fp32: past TRIAL_BYTES


def _specs(shape=SHAPE, t=F32, x: str = "normal") -> dict:
    """A layer_norm's x (filled by `x`), weight, bias (normal) and out of `shape` and `t`."""
    return {
        "x": TensorSpec("x", shape, t, x),
        "w": TensorSpec("w", shape[-1:], t, "normal"),
        "b": TensorSpec("b", shape[-1:], t, "normal"),
        "out": TensorSpec("out", shape, t, None),
    }


def test_the_variant_is_the_one_whose_schedule_ends_soonest():
    cfg = load_chip("trn2")
    assert 4 * np.prod(SHAPE) >= norms.TRIAL_BYTES
    norms._CHOSEN.clear()
    b = KernelBuilder(_specs())
    args = (cfg, "layer_norm", "x", "out", "w", "b", 1e-5)
    chosen = norms._variant(b, *args)
    spans, tried = [], norms._tried(b, cfg, "x", "out", "w", "b")
    assert len(tried) > 1
    for i in tried:  # (the others are for other rows, or lower as one of these does)
        tb = KernelBuilder(b.tensors)
        tb.part = (0, cfg.lnc)
        spans.append(norms._lower(tb, *args, norms.VARIANTS[i]))
    assert chosen == norms.VARIANTS[tried[int(np.argmin(spans))]]
    assert all(s > 0 for s in spans)
    # kept: the next core (or op of the same shapes) does not try them again
    assert norms._variant(KernelBuilder(b.tensors), *args) is chosen


def test_lnc_1_and_2_give_the_same_values():
    """The choice (which may change ScalarE's share of the statistics, so the rounding) is made
    for the chip's default LNC whatever the run's."""
    out = []
    for lnc in (1, 2):
        norms._CHOSEN.clear()
        out.append(checked_layer_norm(_specs(), lnc))
    assert np.array_equal(out[0], out[1])


@pytest.mark.parametrize("shape,dt,fast", [
    ((16, 65536), "float32", next(v for v in norms.VARIANTS if v.get("psum_affine"))),
    ((2, 1 << 20), "bfloat16", norms.SPREAD_LATER),
    ((16, 65536), "bfloat16", next(v for v in norms.VARIANTS if v.get("psum_combine")
                                   and v.get("pe_pieces"))),
])  # fmt: skip
def test_pieces_variants_same_values(monkeypatch, shape, dt, fast):
    """fp32 rows in pieces with the weight and bias out of PSUM for VectorE, each pass's engine
    picked by the list schedule and the row's statistics read from PSUM (`norms.psum_affine`,
    `flex`, `psum_combine`), and bf16 rows in segments with the weight and bias behind the
    second row (`spread_at`, `flex`), and bf16 rows of 64K with the row's statistics read from
    PSUM (`psum_combine`), give the plain plan's values, bit for bit, and numpy's
    (--check); both past TRIAL_BYTES."""
    t = dtype(dt)
    specs = _specs(shape, t)
    assert fast in norms.VARIANTS
    out = []
    for v in ({}, fast):
        monkeypatch.setattr(norms, "VARIANTS", (v,))
        norms._CHOSEN.clear()
        out.append(checked_layer_norm(specs, 2))
    norms._CHOSEN.clear()
    assert np.array_equal(out[0], out[1])


@pytest.mark.parametrize("name,shape", [
    *((n, (16, 65536)) for n in ("STT", "STT_LANES", "STT_LANES_SEARCH", "STT_TSUMS")),
    ("STT_PARTS", (64, 16384)),  # (rows of 8 pieces: `std_rolled`)
])  # fmt: skip
def test_stt_values_no_worse_than_the_plain_plan(monkeypatch, name, shape):
    """bf16 rows of 64K with (x - mean) * weight in one scalar_tensor_tensor and rstd by
    TensorE as diag(rstd) in two bf16 parts (`norms.STT`; `STT_LANES`: a block in two lanes,
    two blocks' [p, 1] steps at once; `STT_LANES_SEARCH`: its passes on the engines the list
    schedule's search picks; `STT_TSUMS`: rstd as ScalarE's scale as it copies out, std in two
    parts, the row's mean on TensorE; `STT_PARTS`, bf16 rows of 16384: STT_TSUMS with std's
    second part on the row 8 partitions on): --check holds, LNC 1 and 2 give the same values,
    and their error against float64 is no larger than the plain plan's (its roundings differ:
    not bit for bit)."""
    stt = getattr(norms, name)
    t = dtype("bfloat16")
    specs = _specs(shape, t)
    assert stt in norms.VARIANTS
    out = {}
    for key, v, lnc in (("plain", {}, 2), ("stt", stt, 2), ("stt1", stt, 1)):
        monkeypatch.setattr(norms, "VARIANTS", (v,))
        norms._CHOSEN.clear()
        got, *inputs = checked_layer_norm(specs, lnc, inputs=True)
        out[key] = got.astype(np.float64)
    norms._CHOSEN.clear()
    assert np.array_equal(out["stt"], out["stt1"])
    assert not np.array_equal(out["stt"], out["plain"])
    x, w, b = (a.astype(np.float64) for a in inputs)
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b
    rms = {k: np.sqrt(((v - ref) ** 2).mean()) for k, v in out.items()}
    assert rms["stt"] <= rms["plain"], rms


def test_stt_lanes_search_gives_stt_lanes_values(monkeypatch):
    """`norms.STT_LANES_SEARCH`: STT_LANES's passes, each fused pass and rstd's diagonals on
    the engine the list schedule's search picks (the same operations on the same numbers on
    VectorE or GpSimd): the same values, bit for bit, at LNC 2."""
    t, shape = dtype("bfloat16"), (16, 65536)
    specs = _specs(shape, t)
    out = []
    for v in (norms.STT_LANES, norms.STT_LANES_SEARCH):
        monkeypatch.setattr(norms, "VARIANTS", (v,))
        norms._CHOSEN.clear()
        out.append(checked_layer_norm(specs, 2))
    norms._CHOSEN.clear()
    assert np.array_equal(out[0], out[1])


@pytest.mark.parametrize("name", ["STT", "STT_LANES", "STT_LANES_SEARCH", "STT_STD", "STT_TSUMS",
                                  "STT_PARTS"])  # fmt: skip
@pytest.mark.parametrize("shape", [(3, 65536), (2, 3, 16384), (9, 2048), (40, 8192)])
def test_stt_on_other_rows_in_pieces(monkeypatch, shape, name):
    """`norms.STT` (and `STT_LANES`, `STT_LANES_SEARCH`, `STT_STD`: rstd as ScalarE's scale
    and std's second part on the row k partitions on, `STT_TSUMS`: the row's mean on TensorE,
    `STT_PARTS`: as STT_TSUMS, std's second part so also for rows of fewer than 32 pieces)
    forced on smaller bf16 rows in pieces (3 rows of 64K: 96 partitions, the shift wraps at
    p; an odd number of rows, so a block's load halves differ; rows of a 3-d x, whose
    blocks are not one range of rows and load whole; two rows' pieces a partition; an odd
    number of blocks, the last alone in its group of [p, 1] steps): --check holds at LNC 1
    and 2."""
    t = dtype("bfloat16")
    specs = _specs(shape, t)
    monkeypatch.setattr(norms, "_variant", lambda *a: getattr(norms, name))
    for lnc in (1, 2):
        checked_layer_norm(specs, lnc)


def test_stt_tsums_far_from_zero(monkeypatch):
    """`norms.STT_TSUMS` (the row's mean on TensorE, ScalarE's squares about it) on rows whose
    mean is far from zero (x = arange: means up to 2^17, their spread 2^14): --check holds at
    LNC 1 and 2."""
    t, shape = dtype("bfloat16"), (3, 65536)
    specs = _specs(shape, t, x="arange")
    monkeypatch.setattr(norms, "_variant", lambda *a: norms.STT_TSUMS)
    for lnc in (1, 2):
        checked_layer_norm(specs, lnc)


@pytest.mark.parametrize("shape", [(4097, 1000), (1023, 4095), (8, 128 * 513)])
def test_fp32_affine_in_psum_any_width(shape):
    """fp32 rows whose width is not a multiple of a PSUM bank's 512 columns (1000: the weight
    and bias kept in PSUM whole, 4000 bytes a partition across two banks; 4095: their first
    columns; 128 x 513, in pieces: the row's statistics repeated over the partitions,
    `_psum_copy`, were cut 256 + 257): each matmul into them stays within a bank (it crossed
    one at 1000 and at 513, a lowering error), --check holds, and LNC 1 and 2 give the same
    values."""
    specs = _specs(shape)
    out = []
    for lnc in (1, 2):
        norms._CHOSEN.clear()
        out.append(checked_layer_norm(specs, lnc))
    assert np.array_equal(out[0], out[1])


def test_no_variant_over_the_core_semaphores():
    """[129, 128 x 513] fp32: the variants with the most piece buffers count on more
    semaphores than a core has (275 of 256; the run was refused; 213 with
    `norm_stages.SUM_COMBINE`'s fewer tiles, so the core here has 200); `_variant` takes the
    fastest that fits, and the op runs, no faster than its DMA bound."""
    cfg = load_chip("trn2")
    cfg = replace(cfg, core=replace(cfg.core, semaphores=200))
    shape = (129, 128 * 513)
    specs = {n: TensorSpec(n, s, F32, "normal") for n, s in
             (("x", shape), ("w", shape[-1:]), ("b", shape[-1:]), ("out", shape))}  # fmt: skip
    norms._CHOSEN.clear()
    b = KernelBuilder(specs)
    args = (cfg, "layer_norm", "x", "out", "w", "b", 1e-5)
    chosen = norms._variant(b, *args)
    tried = norms._tried(b, cfg, "x", "out", "w", "b")
    sems, spans = {}, {}
    for i in tried:
        tb = KernelBuilder(b.tensors)
        tb.part = (0, cfg.lnc)
        spans[i] = norms._lower(tb, *args, norms.VARIANTS[i])
        sems[i] = len({s for ins in tb.instructions for s, _ in ins.wait + ins.signal})
    assert max(sems.values()) > cfg.core.semaphores  # (so the test tests something)
    fits = [i for i in tried if sems[i] <= cfg.core.semaphores]
    assert chosen == norms.VARIANTS[min(fits, key=lambda i: (spans[i], i))]
    norms._CHOSEN.clear()
    r, _ = run_ops(
        {n: (s.shape, "float32") for n, s in specs.items()},
        [("layer_norm", {"x": "x", "out": "out", "weight": "w", "bias": "b"})],
        lnc=2,
    )
    (row,) = r.summary["ops"]
    assert row["time_ns"] >= row["roofline_ns"]


def test_variant_fits_the_semaphores_at_lnc_1_too(monkeypatch):
    """[512, 16384] bf16 (rows in pieces, `in_pieces`): STT_LANES with 10 buffers and its loads
    in eight parts fits the 256 semaphores with a core's 16 blocks (LNC 2), not with 32 (LNC 1:
    its `stat_group` tiles take 10 buffers, not 8); `_variant`, which chooses at the default
    LNC for both, takes the plain plan instead, estimated later. With those tiles in 5 buffers
    (`stat_slots`) it fits at both and is taken."""
    cfg = load_chip("trn2")
    specs = _specs((512, 16384), dtype("bfloat16"))
    args = (cfg, "layer_norm", "x", "out", "w", "b", 1e-5)
    big = norms.STT_LANES | {"load_parts": 8, "piece_bufs": 10, "in_pieces": True}
    sems, spans = [], []
    for part in ((0, 2), (0, 1)):
        tb = KernelBuilder(specs)
        tb.part = part
        spans.append(norms._lower(tb, *args, big))
        sems.append(norms._sems(tb))
    assert sems[0] <= cfg.core.semaphores < sems[1], sems
    tb = KernelBuilder(specs)
    tb.part = (0, 2)
    assert spans[0] < norms._lower(tb, *args, {})
    for v, taken in ((big, {}), (big | {"stat_slots": 5}, big | {"stat_slots": 5})):
        monkeypatch.setattr(norms, "VARIANTS", ({}, v))
        norms._CHOSEN.clear()
        assert norms._variant(KernelBuilder(specs), *args) == taken
    norms._CHOSEN.clear()


def test_segment_sums_values(monkeypatch, tmp_path):
    """bf16 rows of 2^20 with their statistics as sums about the first segment's mean
    (`norms.SEG_SUMS`, `norm_sums`) give SEG_AFFINE's values (--check holds for both): bit
    for bit at mean 0 and where a row's first element is 1000 among values of spread 1 (about
    that element, as before, 44% of the outputs differed, errors up to 9x); at mean 100 but
    for at most 0.1% of them, by a rounding of the bf16 (x - mean) * rstd * w before the bias
    (TensorE's sums of the segments round apart from bn_stats': 1,330 of 2^21 outputs with
    the matmul's float64 sums, at most 2^-8 apart), as near to numpy's float64 values."""
    bf, shape = dtype("bfloat16"), (2, 1 << 20)
    rng = np.random.default_rng(3)
    arrays = {"w": rng.standard_normal(shape[-1]), "b": rng.standard_normal(shape[-1])}
    for mean, first in ((0.0, None), (100.0, None), (0.0, 1000.0)):
        arrays["x"] = rng.standard_normal(shape) + mean
        if first is not None:
            arrays["x"][:, 0] = first
        specs = {"out": TensorSpec("out", shape, bf, None)}
        for name, a in arrays.items():
            np.save(tmp_path / f"{name}.npy", a.astype(ml_dtypes.bfloat16))
            specs[name] = TensorSpec(name, a.shape, bf, ("file", str(tmp_path / f"{name}.npy")))
        out = []
        for v in (norms.SEG_AFFINE, norms.SEG_SUMS):
            monkeypatch.setattr(norms, "VARIANTS", (v,))
            norms._CHOSEN.clear()
            out.append(checked_layer_norm(specs, 2))
        a, b = (o.astype(np.float64) for o in out)
        assert (a != b).mean() <= (1e-3 if mean else 0.0), (mean, first, (a != b).sum())
        x = arrays["x"].astype(ml_dtypes.bfloat16).astype(np.float64)
        w, bias = (arrays[k].astype(ml_dtypes.bfloat16).astype(np.float64) for k in "wb")
        ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w
        errs = [np.abs(o - (ref + bias)).mean() for o in (a, b)]
        assert errs[1] == pytest.approx(errs[0], rel=1e-3), (mean, first, errs)
    norms._CHOSEN.clear()


def test_segment_sums_instructions(monkeypatch):
    """`norm_sums`' statistics of a core's rows of 2^20 (bf16, 4 segments a row, 2 rows a core
    at LNC 2): TensorE sums each segment's 4 banks of 512 columns, ScalarE squares each segment
    once, VectorE runs no bn_stats."""
    monkeypatch.setattr(norms, "VARIANTS", (norms.SEG_SUMS,))
    norms._CHOSEN.clear()
    shape = (4, 1 << 20)
    prog, cfg = ops_program({"x": (shape, "bfloat16"), "out": (shape, "bfloat16"),
                             "w": (shape[-1:], "bfloat16"), "b": (shape[-1:], "bfloat16")},
                            [("layer_norm", {"x": "x", "out": "out", "weight": "w", "bias": "b"})],
                            lnc=2)  # fmt: skip
    (core, *_) = lower_cores(prog.kernels["k"].ops, prog.tensors, cfg, 2)
    norms._CHOSEN.clear()
    ops = [type(i).__name__ for i in core.instructions]
    squares = [i for i in core.instructions if getattr(i, "func", None) == "square"]
    sums = [i for i in core.instructions
            if type(i).__name__ == "Matmul" and "ones" in i.stationary.name]  # fmt: skip
    assert "BnStats" not in ops
    assert len(squares) == 2 * 4 and len(sums) == 2 * 4 * 4


def test_stt_loads_in_parts_the_weight_and_bias_behind(monkeypatch):
    """`norms.STT` (bf16 rows of 64K, 4 rows a block, 8 blocks a core at LNC 2): each block's
    load is four copies of a row each (32 partitions) on four queues, and the weight's and the
    bias' row copies go on those queues behind blocks 2 and 4 (`load_parts`, `affine_at`):
    each queue moves block 0, 1 and 2's rows, then the weight's row on its partitions, block
    3's, 4's, then the bias' row."""
    monkeypatch.setattr(norms, "_variant", lambda *a: norms.STT)
    shape = (64, 65536)
    prog, cfg = ops_program({"x": (shape, "bfloat16"), "out": (shape, "bfloat16"),
                             "w": (shape[-1:], "bfloat16"), "b": (shape[-1:], "bfloat16")},
                            [("layer_norm", {"x": "x", "out": "out", "weight": "w", "bias": "b"})],
                            lnc=2)  # fmt: skip
    (core, *_) = lower_cores(prog.kernels["k"].ops, prog.tensors, cfg, 2)
    queues: dict = {}
    for i in core.instructions:
        if type(i).__name__ == "DmaCopy" and i.src.name in ("x", "w", "b"):
            queues.setdefault(i.queue, []).append(i)
    assert len(queues) == 4
    for q, ins in queues.items():
        assert [i.src.name for i in ins[:7]] == ["x", "x", "x", "w", "x", "x", "b"], q
        rows = {i.dst.index[0][:2] for i in ins}  # (each queue's partitions: a row's)
        assert len(rows) == 1 and [b - a for a, b in rows] == [32], rows
