"""The calibration against AWS's published figures (docs/calibration.md): every figure of
`trnsim.calibration` within its tolerance, the issue's acceptance bands for the Trn2 DMA curve,
and the mechanism behind each figure derived by hand from the config."""

from pathlib import Path

import pytest

from trnsim import calibration as cal
from trnsim.config import load_chip
from trnsim.units import seconds_to_ps

TRN2 = load_chip("trn2")


@pytest.fixture(scope="module")
def figures():
    return cal.figures()


def test_every_figure_within_its_tolerance(figures):
    off = [(f.name, f.simulated, f.low, f.high) for f in figures if not f.ok]
    assert off == []


@pytest.mark.parametrize(
    "nbytes, low, high",
    [(256, 0.07, 0.14), (1024, 0.33, 0.52), (2048, 0.68, 0.92), (4096, 0.87, 1)],
)
def test_trn2_curve_acceptance(nbytes, low, high):
    rel = cal.curve("trn2", points=(nbytes, 32 * 1024))[nbytes]
    assert low <= rel <= high


def test_curve_is_setup_bound_below_the_knee():
    """By hand: a 16-engine transfer's setup S = transfer_setup + 15 x engine_stagger bounds a
    queue's rate; its data D = 8 descriptors x d + 8 x B / engine_bandwidth. Below the knee
    (D < S) one transfer goes through per S, above it one per D: relative throughput
    B / max(S, D) over 32 KiB / D(32 KiB)."""
    d = TRN2.core.dma
    s = seconds_to_ps(d.transfer_setup) + 15 * seconds_to_ps(d.engine_stagger)

    def data(b):
        return (8 * d.descriptor_cost + 8 * b / d.engine_bandwidth) * 1e12

    ref = 32768 / data(32768)
    rel = cal.curve("trn2", points=(256, 1024, 8192, 32768))
    for b in (256, 1024, 8192):
        assert rel[b] == pytest.approx(b / max(s, data(b)) / ref, rel=1e-3)


def test_single_transfers_by_hand():
    """A[4, 4096] bf16 (4 partitions: engine 0 alone, 4 descriptors of 8 KiB): first byte after
    S(1) = transfer_setup, data 4 d + 32 KiB / B, completion L later. A[128, 128]: 16 engines
    of 2 KiB, S(16), the same."""
    d = TRN2.core.dma
    one = cal.single_transfer("trn2", [4, 4096])
    data = (4 * d.descriptor_cost + 32768 / d.engine_bandwidth) * 1e9
    assert one["first_byte_ns"] == d.transfer_setup * 1e9
    assert one["data_ns"] == pytest.approx(data, abs=1e-3)
    assert one["total_ns"] == pytest.approx(
        (d.transfer_setup + d.load_completion_latency) * 1e9 + data, abs=1e-3
    )
    sixteen = cal.single_transfer("trn2", [128, 128])
    assert sixteen["engines"] == 16
    assert sixteen["first_byte_ns"] == pytest.approx(
        (d.transfer_setup + 15 * d.engine_stagger) * 1e9
    )
    store = cal.single_transfer("trn2", [4, 4096], store=True)
    assert store["data_ns"] == pytest.approx(
        (4 * d.descriptor_cost + 32768 / d.store_bandwidth) * 1e9, abs=1e-3
    )


def test_trn1_scalar_chains_by_hand():
    """Dependent: MIN_II + commit latency ScalarE cycles apart; independent: MIN_II."""
    s = load_chip("trn1").core.scalar
    assert 170 <= cal.activation_chain_ns("trn1") <= 210
    dep = (s.min_ii_cycles + s.commit_latency_cycles) / s.clock_hz * 1e9
    assert cal.activation_chain_ns("trn1", n=200) == pytest.approx(dep, rel=1e-2)
    ind = s.min_ii_cycles / s.clock_hz * 1e9
    assert cal.activation_chain_ns("trn1", dependent=False) == pytest.approx(ind, abs=1e-3)


def test_matmul_spacing_is_a_floor():
    t = TRN2.core.tensor
    # (durations are whole ps: 64 cycles at 2.4 GHz = 26.667 ns, rounded up)
    spacing = cal.matmul_spacing_cycles("trn2", moving=32)
    assert spacing == pytest.approx(t.mm_init_latency_cycles, abs=0.01)
    assert cal.matmul_spacing_cycles("trn2", moving=128) == pytest.approx(128, abs=0.01)


def test_vector_dependent_is_n_plus_144():
    v = TRN2.core.vector
    assert cal.vector_chain_cycles("trn2", free=512) == pytest.approx(
        512 + v.commit_latency_cycles, abs=0.01
    )


def test_the_docs_tables_are_what_the_command_prints(figures):
    """docs/calibration.md is current: regenerate its tables with `python
    benchmarks/calibration.py` when the model or a config changes."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "calibration.md").read_text()
    assert cal.table(figures) in docs
    for chip in ("trn1", "trn3"):
        rel = cal.curve(chip)
        assert all(f"{rel[b]:.3f}" in docs for b in (256, 2048))
