"""The row ops' engine-throughput bound (`kernels.row_bounds`): layer_norm's 16-bit rows that fit
may fold the normalisation into the weight and TensorE's bias (`NormStages.fused`; rows in
pieces, `NormStages.stt`), which the bound counts, worked by hand here."""

from __future__ import annotations

import pytest

from trnsim.config import load_chip
from trnsim.kernels import row_bounds
from trnsim.kernels.row_bounds import engine_bound_ns


def test_layer_norm_bf16_bound_counts_the_folded_normalisation():
    """bf16 rows of 512, 64 a partition (16 MiB over two cores): statistics 3/4 on VectorE and
    1/4 on ScalarE (2 (512 + 64) cycles a row at 1.2 GHz: 240 ns), the weight 1/4 on VectorE
    and 3/4 on GpSimd (1024 cycles: 640 ns), every row folded: ScalarE copies TensorE's sums
    out (512 cycles: 426.7 ns), the diagonals 3/4 VectorE (64 cycles at 0.96 GHz: 50 ns) and
    1/4 GpSimd (128 cycles: 26.7 ns). ScalarE and GpSimd 666.7 ns a row, VectorE 633.3."""
    cfg = load_chip("trn2")
    got = engine_bound_ns(cfg, "layer_norm", 512, 2, 8192, True)
    assert got == pytest.approx(64 * (1152 / 4 + 512) / 1.2, rel=1e-9)


def test_the_fold_only_tightens_the_bound(monkeypatch):
    """Without the folded options, the pairs of the normalisation's and the bias' engines give
    the bound the two passes gave apart: bf16 rows of 1024 (two bn_stats chunks), 44.27 us
    apart, 41.81 folded; of 512 (one chunk, no bn_aggr a row) 42.67 us either way (45.87 apart
    when a row of one chunk paid a bn_aggr of its own). fp32 rows, which have no fold (their
    bias not on TensorE), keep theirs."""
    cfg = load_chip("trn2")
    folded = engine_bound_ns(cfg, "layer_norm", 1024, 2, 4096, True)
    at_512 = engine_bound_ns(cfg, "layer_norm", 512, 2, 8192, True)
    fp32 = engine_bound_ns(cfg, "layer_norm", 512, 4, 4096, True)
    passes = row_bounds.passes

    def unfolded(*a):
        out = passes(*a)
        return out[:-1] + [out[-1][:-2]] if isinstance(out[-1], list) else out

    monkeypatch.setattr(row_bounds, "passes", unfolded)
    apart = engine_bound_ns(cfg, "layer_norm", 1024, 2, 4096, True)
    assert folded == pytest.approx(41_813.3, abs=0.1)
    assert folded < apart == pytest.approx(44_266.7, abs=0.1)
    assert engine_bound_ns(cfg, "layer_norm", 512, 2, 8192, True) == at_512
    assert engine_bound_ns(cfg, "layer_norm", 512, 4, 4096, True) == fp32


def test_a_row_of_one_chunk_pays_no_bn_aggr_of_its_own():
    """Rows of 512 elements or fewer are one bn_stats chunk: their two halves (even and odd
    columns) combine for a block of rows at once, so VectorE's statistics are bn_stats' d
    cycles a row (MIN_II at least), no bn_aggr's MIN_II a row beside them. bf16 rows of 96,
    16 MiB over two cores (43690.7 rows a core, 341.3 a partition): VectorE's statistics 96
    cycles, the weight on GpSimd, the rest shared: 47.79 us, not 56.89 (which `norm_fused`
    came within 3% of, 58.65 us); rows of 1024 (two chunks) keep their bn_aggr."""
    cfg = load_chip("trn2")
    assert row_bounds.passes(cfg, "layer_norm", 96, 2, True)[0]["vector"] == 96
    assert row_bounds.passes(cfg, "layer_norm", 1024, 2, True)[0]["vector"] == 1024 + 64
    rows = 16 * 2**20 / 2 / 96 / 2
    assert engine_bound_ns(cfg, "layer_norm", 96, 2, rows, True) == pytest.approx(47_786.7, abs=1)


def test_layer_norm_16_bit_rows_in_pieces_count_the_sums(monkeypatch):
    """16-bit rows in pieces may take their statistics as TensorE's sums of x and ScalarE's of
    (x - x0)^2 (`norm_sums`): ScalarE's option one activation a column and its reduction (2^20
    + 64 cycles a row), not two; fp32 rows and rows that fit keep the two. The bound of bf16
    rows of 2^20 (4 a core) only tightens so."""
    cfg, d = load_chip("trn2"), 1 << 20
    red = cfg.core.scalar.reduce_cycles
    assert row_bounds.passes(cfg, "layer_norm", d, 2, False)[0]["scalar"] == d + red
    assert row_bounds.passes(cfg, "layer_norm", d, 4, False)[0]["scalar"] == 2 * (d + red)
    assert row_bounds.passes(cfg, "layer_norm", 512, 2, True)[0]["scalar"] == 2 * (512 + red)
    sums = engine_bound_ns(cfg, "layer_norm", d, 2, 4, False)
    passes = row_bounds.passes

    def two(*a):
        out = passes(*a)
        out[0]["scalar"] = 2 * (a[2] + red)
        return out

    monkeypatch.setattr(row_bounds, "passes", two)
    assert sums < engine_bound_ns(cfg, "layer_norm", d, 2, 4, False)


def test_layer_norm_bf16_rows_in_pieces_fold_too(monkeypatch):
    """bf16 rows of 64K, 64 a core (half a row a partition), trn2: VectorE 0.96 GHz, ScalarE
    and GpSimd 1.2. Statistics (VectorE d + 13 x 2 x 128 for bn_aggr's 128 triples, or ScalarE
    d + 64 as sums), the weight (with the fold (x - mean) * weight: VectorE d, GpSimd 2d), the
    normalisation folded into TensorE's bias (ScalarE's copy out, d). Best in quarters:
    VectorE 3/4 of the statistics and 1/4 of the weight (35.4 us), ScalarE the rest of the
    statistics and the copy out (34.1), GpSimd 3/4 of the weight, the busiest: 2d 3/4 / 1.2
    GHz a row, 40.96 us (unfolded 40.97: ScalarE's statistics as sums, one pass, already even
    the engines out nearly as well)."""
    cfg, d = load_chip("trn2"), 65536
    got = engine_bound_ns(cfg, "layer_norm", d, 2, 64, False)
    assert got == pytest.approx(0.5 * (2 * d * 3 / 4) / 1.2, rel=1e-9)
    passes = row_bounds.passes
    monkeypatch.setattr(row_bounds, "passes", lambda *a: passes(*a)[:-1] + [passes(*a)[-1][:-1]])
    assert engine_bound_ns(cfg, "layer_norm", d, 2, 64, False) == pytest.approx(40973.3, abs=0.1)
