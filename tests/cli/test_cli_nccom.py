"""`trnsim nccom` through click's CliRunner: nccom-test's columns and bus factors against the
engine's Result, the aliases, -N, --set against the links-only closed form, the selector's
thresholds in --show-algorithm, --json and --csv, --check, the what-ifs (a degraded link, a
straggler), and the one-line errors (exit 2)."""

import csv
import io
import json

import numpy as np
import pytest
from click.testing import CliRunner

from trnsim.cli import main, nccom_run
from trnsim.cli.nccom import parse_size, sizes
from trnsim.collectives import World
from trnsim.config import load_system
from trnsim.dtypes import dtype
from trnsim.errors import TrnsimError

GiB = 2**30


def run(*args):
    return CliRunner().invoke(main, ["nccom", *args])


def ok(*args):
    r = run(*args)
    assert r.exit_code == 0, r.output
    return r.stdout


def table(out: str) -> list[list[str]]:
    """The table's rows (after the '#' line and the header, before the average)."""
    lines = out.splitlines()
    assert lines[0].startswith("# ") and lines[1].split()[:2] == ["size(B)", "count(elems)"]
    assert lines[-1].startswith("Avg bus bandwidth:")
    return [line.split() for line in lines[2:-1]]


FACTORS = {  # nccom-test's bus bandwidth factors, by hand, for r ranks
    "all_reduce": lambda r: 2 * (r - 1) / r,
    "all_gather": lambda r: (r - 1) / r,
    "reduce_scatter": lambda r: (r - 1) / r,
    "all_to_all": lambda r: (r - 1) / r,
}


@pytest.mark.parametrize("op", list(FACTORS))
def test_columns_and_bus_factors_from_the_results_time(op):
    r, size = 8, 1 << 20
    out = ok(op, "-r", str(r), "-b", "256K", "-e", "1M", "-f", "4", "--show-algorithm")
    rows = table(out)
    assert [row[0] for row in rows] == ["262144", "1048576"]
    cfg = load_system("trn2-48xl")
    res = World.from_config(cfg).collective(op, range(r), size, "float32")
    seconds = res.time_ps / 1e12
    algbw = size / seconds / GiB
    busbw = algbw * FACTORS[op](r)
    assert rows[1] == [
        str(size),
        str(size // 4),
        "fp32",
        f"{res.time_ps / 1e6:.2f}",
        f"{algbw:.2f}",
        f"{busbw:.2f}",
        res.algorithm,
    ]
    assert res.busbw / GiB == pytest.approx(busbw)  # the engine's factor is nccom-test's too
    avg = float(out.splitlines()[-1].split()[-2])
    assert avg == pytest.approx(np.mean([float(row[5]) for row in rows]), abs=0.01)


@pytest.mark.parametrize("op", ["send_recv", "permute"])
def test_send_recv_and_permute_have_a_bus_factor_of_one(op):
    doc = json.loads(ok(op, "-r", "8", "-b", "1M", "-e", "1M", "--json"))
    (row,) = doc["rows"]
    algbw = row["size_bytes"] / (row["time_ps"] / 1e12) / GiB
    assert row["algbw_GiBps"] == pytest.approx(algbw)
    assert row["busbw_GiBps"] == pytest.approx(algbw)
    assert row["algorithm"] == "direct"


def test_send_recv_is_every_rank_to_the_next_at_once():
    """nccl-tests' send_recv on ranks 0-7 (chips 0 and 1): 3 -> 4 and 7 -> 0 cross the link
    between the chips in opposite directions, the others stay on a chip: links only, the time
    is one transfer's, A + S/B (docs/collectives.md)."""
    args = ["-r", "8", "-b", "1M", "-e", "1M", "--links-only", "--json"]
    (row,) = json.loads(ok("sendrecv", *args))["rows"]
    assert row["time_ps"] / 1e12 == pytest.approx(1.5e-6 + (1 << 20) / 256e9, rel=1e-6)


@pytest.mark.parametrize(
    "alias, op",
    [
        ("allr", "all_reduce"),
        ("allg", "all_gather"),
        ("redsct", "reduce_scatter"),
        ("alltoall", "all_to_all"),
        ("sendrecv", "send_recv"),
    ],
)
def test_aliases(alias, op):
    args = ["-r", "8", "-b", "4K", "-e", "4K", "--json"]
    a, b = json.loads(ok(alias, *args)), json.loads(ok(op, *args))
    assert a == b and a["op"] == op


def test_nnodes_sets_the_systems_nodes():
    doc = json.loads(
        ok("allr", "-N", "2", "--set", "ranks_per_chip=1", "-b", "4M", "-e", "4M", "--json")
    )
    assert (doc["nodes"], doc["ranks"], doc["system_ranks"]) == (2, 32, 32)
    assert doc["rows"][0]["algorithm"].startswith("hierarchical:")
    r = run("allr", "-r", "33", "-N", "2", "--set", "ranks_per_chip=1")
    assert r.exit_code == 2 and "-r 33: trn2-48xl has 32 ranks (32 chips x 1)" in r.stderr


def test_set_link_bandwidth_against_the_closed_form():
    """Ring all-reduce, one rank a chip on the 4x4 torus, links only: 2(N-1)(A + S/(kNB)),
    N = 16, k = 4 rings, A = 1.5 us; at 256 and at 128 GB/s."""
    base = ["-r", "16", "--set", "ranks_per_chip=1", "--links-only", "--algorithm", "ring"]
    times = {}
    for bw in (256e9, 128e9):
        args = [*base, "-b", "64M", "-e", "64M", "--json"]
        args += ["--set", f"topology.link.bandwidth={bw / 1e9:g}GB/s"]
        times[bw] = json.loads(ok("allr", *args))["rows"][0]["time_ps"]
        want = 2 * 15 * (1.5e-6 + (64 << 20) / (4 * 16 * bw))
        assert times[bw] / 1e12 == pytest.approx(want, rel=1e-3)
    transfer = 2 * 15 * (64 << 20) / (4 * 16 * 256e9)
    assert (times[128e9] - times[256e9]) / 1e12 == pytest.approx(transfer, rel=1e-3)


def _algorithms(*args) -> list[str]:
    return [row[-1] for row in table(ok("allr", "-r", "16", "--show-algorithm", *args))]


def test_show_algorithm_switches_at_the_configured_thresholds():
    sets = ["--set", "collectives.mesh_max=4000B", "--set", "collectives.rdh_max=40000B"]
    assert _algorithms(*sets, "-b", "3996", "-e", "3996") == ["mesh"]
    assert _algorithms(*sets, "-b", "4000", "-e", "4000") == ["rdh"]
    assert _algorithms(*sets, "-b", "39996", "-e", "39996") == ["rdh"]
    assert _algorithms(*sets, "-b", "40000", "-e", "40000") == ["kangaring"]
    assert _algorithms(*sets, "-b", "1K", "-e", "256K", "-f", "4") == [
        "mesh",
        "rdh",
        "rdh",
        "kangaring",
        "kangaring",
    ]


def test_the_default_thresholds_are_the_systems():
    # trn2-48xl: mesh below 1 MB, RDH below 56 MB (decimal, as R-CC writes them)
    assert _algorithms("-b", "999996", "-e", "999996") == ["mesh"]
    assert _algorithms("-b", "1000000", "-e", "1000000") == ["rdh"]


def test_json_and_csv_parse_and_agree():
    args = ["allr", "-r", "8", "-b", "1K", "-e", "64K", "-f", "8"]
    doc = json.loads(ok(*args, "--json"))
    rows = list(csv.DictReader(io.StringIO(ok(*args, "--csv"))))
    assert [int(r["size_bytes"]) for r in rows] == [1024, 8192, 65536]
    assert list(rows[0]) == [
        "size_bytes",
        "count",
        "type",
        "time_us",
        "algbw_GiBps",
        "busbw_GiBps",
        "algorithm",
    ]
    for c, j in zip(rows, doc["rows"]):
        assert float(c["time_us"]) == j["time_us"] == j["time_ps"] / 1e6
        assert float(c["busbw_GiBps"]) == j["busbw_GiBps"]
    assert doc["avg_busbw_GiBps"] == pytest.approx(np.mean([r["busbw_GiBps"] for r in doc["rows"]]))
    assert (doc["op"], doc["system"], doc["dtype"]) == ("all_reduce", "trn2-48xl", "float32")


@pytest.mark.parametrize("op", ["allr", "allg", "redsct", "alltoall", "permute", "sendrecv"])
def test_check_ok(op):
    rows = table(ok(op, "-r", "8", "-b", "1K", "-e", "8K", "-f", "8", "-d", "bf16", "--check"))
    assert [row[-1] for row in rows] == ["OK", "OK"]


def test_check_fail_exits_1(monkeypatch):
    monkeypatch.setattr(nccom_run, "_verify", lambda got, want, job: "FAIL")
    r = run("allr", "-r", "4", "-b", "1K", "-e", "1K", "--check")
    assert r.exit_code == 1
    assert r.stdout.splitlines()[2].split()[-1] == "FAIL"
    assert r.stderr == "error: --check: 1 of 1 sizes differ from numpy\n"


def test_verify_catches_a_wrong_sum():
    job = nccom_run.Job(load_system("trn2-48xl"), "all_reduce", 4, dtype("float32"))
    total = np.ones(8)
    want = {0: (total, np.full(8, 4.0))}
    assert nccom_run._verify({0: np.ones(8, np.float32)}, want, job) == "OK"
    assert nccom_run._verify({0: np.full(8, 1.01, np.float32)}, want, job) == "FAIL"


def test_a_straggler_and_a_degraded_link():
    base = ["allr", "-r", "16", "--set", "ranks_per_chip=1", "--links-only", "--algorithm"]
    base += ["ring", "-b", "64M", "-e", "64M", "--json"]
    t0 = json.loads(ok(*base))["rows"][0]["time_ps"]
    late = json.loads(ok(*base, "--straggler", "3=100us"))
    assert late["rows"][0]["time_ps"] == pytest.approx(t0 + 100e6, rel=1e-6)
    assert late["settings"]["stragglers"] == {"3": 1e-4}
    slow = json.loads(ok(*base, "--link", "c1+x=64GB/s"))["rows"][0]["time_ps"]
    assert slow > t0


def test_chip_ring_finds_a_ring_over_neighbours_or_none():
    topo = World.from_config(load_system("trn2-48xl")).system.topology
    ring = nccom_run.chip_ring(topo, list(range(8)))  # two rows of the 4x4: no sub-torus
    assert sorted(ring) == list(range(8))
    assert all(len(topo.route(a, b).links) == 1 for a, b in zip(ring, ring[1:] + ring[:1]))
    assert nccom_run.chip_ring(topo, list(range(5))) is None  # chip 4 has one neighbour


def test_parse_size_and_steps():
    assert [parse_size(t, "-b") for t in ("64", "64B", "1K", "1k", "1KiB", "1KB", "1.5M")] == [
        64,
        64,
        1024,
        1024,
        1024,
        1000,
        3 << 19,
    ]
    assert parse_size("1G", "-e") == parse_size("1GiB", "-e") == GiB
    assert sizes(1024, GiB, 4)[-1] == GiB and len(sizes(1024, GiB, 4)) == 11
    with pytest.raises(TrnsimError, match="-b 0.5: expected a whole number of bytes"):
        parse_size("0.5", "-b")


def test_help_has_examples_and_names_the_rank_order():
    text = " ".join(ok("--help").split())
    assert "trnsim nccom all_reduce -r 64 -b 1KiB -e 1GiB" in text
    assert "the first R of the system, chip-major" in text


def test_nccom_test_iteration_flags_are_accepted():
    assert table(ok("allr", "-r", "4", "-b", "1K", "-e", "1K", "-n", "20", "-w", "5"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["alreduce"], "unknown operation 'alreduce'; did you mean 'all_reduce'?"),
        (["allr", "-r", "65"], "-r 65: trn2-48xl has 64 ranks (16 chips x 4)"),
        (["allr", "-r", "0"], "-r 0: trn2-48xl has 64 ranks"),
        (["allr", "-b", "1X"], "-b 1X: expected a whole number of bytes"),
        (["allr", "-b", "1G", "-e", "1M"], "expected -b at most -e"),
        (["allr", "-b", "2"], "-b 2: less than one fp32 element (4 B)"),
        (["allr", "-f", "1"], "-f 1: expected a step factor of 2 or more"),
        (["allr", "-d", "fp64"], "-d fp64: unknown datatype"),
        (["allr", "--system", "trn9"], "unknown system 'trn9'"),
        (
            ["allr", "--set", "topology.link.bandwit=1GB/s"],
            "did you mean 'topology.link.bandwidth'",
        ),
        (["allr", "--algorithm", "rign"], "--algorithm rign: unknown algorithm; did you mean"),
        (["allr", "--link", "c99+x=1GB/s"], "no link named 'c99+x'; did you mean 'c9+x'?"),
        (["allr", "--link", "c5+x=fast"], "--link c5+x=fast: expected a bandwidth"),
        (["allr", "--straggler", "64=1us"], "expected a rank of the group, 0 to 63"),
        (["allr", "--json", "--csv"], "--json and --csv: expected at most one"),
        (["allr", "-e", "8M", "--check"], "--check: -e 8M x 64 ranks is more than 256 MiB"),
        (["permute", "-r", "20", "-b", "1K", "-e", "1K"], "permute: the chips of ranks 0-19"),
        (["allr", "-r", "48", "--algorithm", "rdh", "-e", "1K"], "rdh cannot run all_reduce"),
        (
            ["permute", "--system", "trn3-ultraserver", "-e", "1K"],
            "ranks 0-255 span 64 chips of a switched system",
        ),
    ],
)
def test_errors_are_one_line_exit_2(args, message):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: "), r.stderr
    assert message in r.stderr, r.stderr
