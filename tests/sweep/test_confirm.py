"""trnsim.sweep: asking before a big sweep (`confirm`, `confirm_above`), with the estimate from
its first points, which run once whatever the answer. Small grids, the threshold lowered."""

from __future__ import annotations

from pathlib import Path

import pytest

import trnsim.sweep.execute as execute
from trnsim.sweep import estimate, run_sweep, table
from trnsim.sweep.worker import simulate

ROOT = Path(__file__).resolve().parents[2]
GEMM = str(ROOT / "traces" / "gemm_double_buffered.yaml")
GRID = ["hbm.bandwidth=1TB/s,2TB/s,3TB/s,4TB/s,5TB/s"]


@pytest.fixture
def calls(monkeypatch):
    """The bandwidth of every point simulated, in order."""
    ran: list[float] = []

    def counting(bundle, params, cfg, mode):
        ran.append(cfg.hbm.bandwidth)
        return simulate(bundle, params, cfg, mode)

    monkeypatch.setattr(execute, "simulate", counting)
    return ran


def sweep(out, confirm, above=4, **kw):
    return run_sweep(
        [GEMM], ["trn2"], GRID, mode="timing", out=out, confirm=confirm, confirm_above=above, **kw
    )


def test_accepted_the_points_timed_are_kept_not_run_again(tmp_path, calls):
    asked = []

    def yes(n, first):
        e = first()
        assert first() is e  # timed once
        asked.append((n, e))
        return True

    out = tmp_path / "t.csv"
    result = sweep(out, yes)
    [(n, e)] = asked
    assert (n, e.measured, e.failed, e.left) == (5, estimate.ESTIMATE_POINTS, 0, 2)
    assert e.seconds > 0 and e.seconds_left(2) == pytest.approx(e.each * 2 / 2)
    assert sorted(calls) == [1e12, 2e12, 3e12, 4e12, 5e12]  # each point once
    assert (result.ran, result.failed, result.declined) == (5, 0, False)
    run_sweep([GEMM], ["trn2"], GRID, mode="timing", out=tmp_path / "plain.csv")
    assert out.read_bytes() == (tmp_path / "plain.csv").read_bytes()


def test_declined_after_timing_the_table_holds_the_points_timed(tmp_path, calls, monkeypatch):
    monkeypatch.setattr(estimate, "ESTIMATE_POINTS", 2)
    out = tmp_path / "t.csv"
    result = sweep(out, lambda n, first: first() and False)
    assert (result.declined, result.ran, len(calls)) == (True, 2, 2)
    assert [r["hbm.bandwidth"] for r in table.read(out)[1]] == ["1TB/s", "2TB/s"]
    calls.clear()
    again = sweep(out, None)  # resumed: the points timed are not run again
    assert (again.skipped, again.ran, sorted(calls)) == (2, 3, [3e12, 4e12, 5e12])


def test_declined_without_timing_nothing_runs_or_is_written(tmp_path, calls):
    out = tmp_path / "t.csv"
    result = sweep(out, lambda n, first: False)
    assert (result.declined, result.ran, calls, out.exists()) == (True, 0, [], False)


def test_a_refusal_raised_by_confirm_writes_nothing(tmp_path, calls):
    def refuse(n, first):
        raise RuntimeError("no terminal")

    out = tmp_path / "t.csv"
    with pytest.raises(RuntimeError):
        sweep(out, refuse)
    assert (calls, out.exists()) == ([], False)


def test_only_points_to_run_count(tmp_path, calls, monkeypatch):
    asked = []

    def ask(n, first):
        asked.append(n)
        return True

    sweep(None, ask, above=5)  # 5 points, not more than 5: not asked
    out = tmp_path / "t.csv"
    run_sweep([GEMM], ["trn2"], ["hbm.bandwidth=1TB/s,2TB/s"], mode="timing", out=out)
    assert sweep(out, ask, above=3).skipped == 2  # 2 of the 5 in the table: 3 to run
    bad = sweep(None, ask, above=2, sets=["core.sbuf.partition_bytes=4XB"])  # fail before running
    assert asked == [] and bad.failed == 5
    monkeypatch.setattr(estimate, "CONFIRM_ABOVE", 4)  # the default threshold, read when called
    run_sweep([GEMM], ["trn2"], GRID, mode="timing", confirm=ask)
    assert asked == [5]


def test_the_first_points_stop_at_the_time_limit(monkeypatch, calls):
    monkeypatch.setattr(estimate, "ESTIMATE_SECONDS", 0.0)  # one point at least, then the limit
    timed = []
    sweep(None, lambda n, first: timed.append(first()) or True)
    assert (timed[0].measured, timed[0].left, len(calls)) == (1, 4, 5)
