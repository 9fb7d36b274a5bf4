"""trnsim sweep over a system's keys (--system, or a trace naming a system:): each point's
system config built with the grid's values, its collectives timed as the collectives engine
times them alone under that config, the system figures of the row (link bytes of a ring
all_reduce: 2 (n - 1) x its size), the system column, the errors (an unknown key names the key
and the system file; --chip with --system), resuming, and single-chip tables unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from trnsim.cli import main
from trnsim.collectives import World
from trnsim.config import load_system
from trnsim.errors import TrnsimError
from trnsim.sweep import run_sweep, table

ROOT = Path(__file__).resolve().parents[2]
GEMM = str(ROOT / "traces" / "gemm_double_buffered.yaml")
RANKS = (0, 4, 8, 12)  # one rank on each of chips 0-3 of trn2-48xl: a row of its 4x4 torus
SIZE = 8 << 20  # bytes each rank all-reduces

STEPS = "\n".join(
    f"  - {{name: s{r}, rank: {r}, do: [{{collective: {{op: all_reduce, group: {list(RANKS)}, "
    f"bytes: {SIZE}, dtype: bfloat16, algorithm: ring}}}}]}}"
    for r in RANKS
)
TRACE = f"trnsim: 1\nname: ring\nmode: timing\nstreams:\n{STEPS}\n"


def alone(*overrides: str):
    """The all_reduce as the collectives engine times it alone on trn2-48xl with `overrides`."""
    world = World.from_config(load_system("trn2-48xl", overrides))
    return world.collective("all_reduce", RANKS, SIZE, "bfloat16", algorithm="ring")


@pytest.fixture
def trace(tmp_path) -> str:
    path = tmp_path / "ring.yaml"
    path.write_text(TRACE)
    return str(path)


def test_a_grid_over_the_link_bandwidth(trace, tmp_path):
    out = tmp_path / "t.csv"
    bws = ("32GB/s", "128GB/s")
    r = run_sweep([trace], systems=["trn2-48xl"], grid=[f"topology.link.bandwidth={','.join(bws)}"],
                  out=out)  # fmt: skip
    assert r.failed == 0 and r.columns == table.columns(["topology.link.bandwidth"], system=True)
    assert r.columns[:4] == ["trace", "system", "chip", "topology.link.bandwidth"]
    for row, bw in zip(r.rows, bws):
        want = alone(f"topology.link.bandwidth={bw}")
        assert (row["system"], row["chip"], row["topology.link.bandwidth"]) == ("trn2-48xl",
                                                                             "trn2", bw)  # fmt: skip
        assert row["collectives"] == 1
        # the collective is the run: its window is the device time, on each of the 4 ranks
        assert row["device_time_ns"] * 1000 == want.time_ps
        assert row["collective_ns"] == 4 * want.time_ps / 1000
        assert row["exposed_ns"] == row["collective_ns"] and row["exposed_fraction"] == 1.0
        assert row["busbw_max_bytes_per_s"] == want.busbw
        # a ring all_reduce sends 2 (n - 1) / n of the vector from each of its n ranks
        assert row["link_bytes"] == 2 * (len(RANKS) - 1) * SIZE
        assert row["flops"] == 0 and row["config_hash"]
    slow, fast = r.rows
    assert slow["device_time_ns"] > 2 * fast["device_time_ns"]  # 4x the link: link-bound
    # the table resumes: both points are already there
    again = run_sweep([trace], systems=["trn2-48xl"], out=out,
                      grid=[f"topology.link.bandwidth={','.join(bws)}"])  # fmt: skip
    assert (again.ran, again.skipped) == (0, 2)


def test_a_trace_naming_its_system_sweeps_its_keys(tmp_path):
    path = tmp_path / "ring.yaml"
    path.write_text(TRACE.replace("mode: timing\n", "mode: timing\nsystem: trn2-48xl\n"))
    r = run_sweep([str(path)], grid=["chip.hbm.bandwidth=4TB/s", "collectives.start_cost=0s,5us"])
    assert r.failed == 0 and [row["system"] for row in r.rows] == ["trn2-48xl"] * 2
    first, second = (row["device_time_ns"] for row in r.rows)
    assert second - first == pytest.approx(5000, abs=1e-6)  # the start cost, paid once


def test_unknown_system_key_names_the_key_and_the_file(trace):
    r = run_sweep([trace], systems=["trn2-48xl"], grid=["topology.link.bandwith=32GB/s"])
    path = ROOT / "systems" / "trn2-48xl.yaml"
    assert r.rows[0]["error"] == (
        f"--grid topology.link.bandwith=32GB/s: unknown key 'topology.link.bandwith' in system "
        f"trn2-48xl ({path}); did you mean 'topology.link.bandwidth'?"
    )
    # a chip key without chip. on a system: the system's suggestion
    r = run_sweep([trace], systems=["trn2-48xl"], sets=["hbm.bandwidth=1TB/s"])
    assert "unknown key 'hbm.bandwidth' in system trn2-48xl" in r.rows[0]["error"]
    assert r.rows[0]["error"].endswith("did you mean 'chip.hbm.bandwidth'?")


def test_chip_and_system_do_not_go_together(trace, tmp_path):
    with pytest.raises(TrnsimError, match=r"^--chip trn3 with --system trn2-48xl: the system's "
                       r"chip runs; expected --set chip=trn3"):  # fmt: skip
        run_sweep([trace], chips=["trn3"], systems=["trn2-48xl"])
    named = tmp_path / "named.yaml"
    named.write_text(TRACE.replace("mode: timing\n", "mode: timing\nsystem: trn2-48xl\n"))
    r = run_sweep([str(named)], chips=["trn2"])
    assert r.failed == 1 and r.rows[0]["error"].startswith(
        "--chip trn2 with a trace naming system: trn2-48xl"
    )


def test_the_cli_and_single_chip_tables(trace):
    result = CliRunner().invoke(main, ["sweep", trace, "--system", "trn2-48xl", "--grid",
                                       "topology.link.bandwidth=64GB/s", "-q"])  # fmt: skip
    assert result.exit_code == 0, result.output
    head, row = result.stdout.splitlines()
    assert head.startswith("trace,system,chip,topology.link.bandwidth,total_time_ns,")
    assert row.startswith(f"{trace},trn2-48xl,trn2,64GB/s,")
    one_chip = run_sweep([GEMM], grid=["hbm.bandwidth=2TB/s"], mode="timing")
    assert one_chip.columns == table.columns(["hbm.bandwidth"])
    assert "system" not in one_chip.columns and "collectives" not in one_chip.columns
