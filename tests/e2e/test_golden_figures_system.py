"""The golden report of the bundled trace on a system (tests/golden/ddp_allreduce.json), its key
figures derived by hand from systems/trn2-48xl.yaml and configs/trn2.yaml, as
test_golden_figures.py derives the one-chip goldens'.

4 ranks, one a chip on chips 0-3 (x = 0..3 of the 4x4 torus: a ring of 4 along x), S = 2 MiB
a collective, links of B = 256 GB/s and A = 1.5 us a hop, start cost C = 10 us:

- a broadcast from rank 0 (chip 0): direct, one copy to each chip by its route: chip 1 over
  c0+x, chip 3 over c0-x, chip 2 (the opposite chip, a tie: + from an even coordinate) over
  c0+x and c1+x. c0+x carries two of them (2S, the busiest link) at B/2 each: C + 2A + S/(B/2),
  exactly (the DMA engines and HBM are faster than a half link);
- an all_reduce of S: RDH (mesh_max 1 MB <= S <= rdh_max 56 MB), halving first across the far
  bit of the chip index (distance 2: 2 hops, S/2) then the near one (1 hop, S/4), doubling back:
  per rank and phase S/2 x 2 + S/4 link-bytes, 10 S in all over the 8 x links; the links of the
  near exchanges (c0+x, c1-x, c2+x, c3-x) carry 1.5 S each, the others S. Links only it would
  take C + 2 (2A + S/2/B) + 2 (A + S/4/B) = C + 6A + 1.5 S/B; the DMA engines and HBM (the
  reductions at cc.reduce_rate) make it longer: bounded here, and equal to the engine's own
  time run alone in tests/e2e/test_bundled_system_trace.py.
"""

from __future__ import annotations

import json
from fractions import Fraction

from tests.e2e.golden_model import GOLDEN, near, ratio, seconds_ps
from trnsim.config import load_system

SYSTEM = load_system("trn2-48xl")
S = 2 * 1024 * 1024


def test_ddp_allreduce():
    g = json.loads((GOLDEN / "ddp_allreduce.json").read_text(encoding="utf-8"))
    link, coll = SYSTEM.topology.link, SYSTEM.collectives
    B = Fraction(link.bandwidth) / 10**12  # bytes per ps
    A, C = seconds_ps(link.latency), seconds_ps(coll.start_cost)
    assert (g["system"], g["chip"], g["ranks"], list(g["chips"])) == (
        "trn2-48xl", "trn2", [0, 4, 8, 12], ["0", "1", "2", "3"])  # fmt: skip
    bc1, bc2, ar2, ar1 = g["collectives"]
    # the broadcasts: one after the other on each comm stream, from t = 0
    bcast = C + 2 * A + S / (B / 2)
    for row, start in ((bc1, 0), (bc2, bcast)):
        assert (row["op"], row["algorithm"], row["bytes"], row["ranks"]) == (
            "broadcast", "direct", S, 4)  # fmt: skip
        near(row["time_ns"], bcast)
        near(row["start_ns"], start)
        assert (row["links"], row["link_bytes"], row["busiest_link"]) == (3, 4 * S, "c0+x")
        assert row["link_utilization"] == ratio(2 * S / (B * row["time_ns"] * 1000))
    # the all_reduces
    assert coll.mesh_max <= S <= coll.rdh_max
    links_only = C + 6 * A + Fraction(3, 2) * S / B
    for row in (ar2, ar1):
        assert (row["op"], row["algorithm"], row["links"], row["link_bytes"]) == (
            "all_reduce", "rdh", 8, 10 * S)  # fmt: skip
        assert links_only <= row["time_ns"] * 1000 <= Fraction(6, 5) * links_only
        assert row["busiest_link"] == "c3-x"  # of the four carrying 1.5 S, the last by name
        assert row["link_utilization"] == ratio(Fraction(3, 2) * S / (B * row["time_ns"] * 1000))
        assert row["busbw_bytes_per_s"] == ratio(row["algbw_bytes_per_s"] * 2 * 3 / 4)
        assert row["algbw_bytes_per_s"] == ratio(S / (row["time_ns"] * 1e-9))
    assert ar2["time_ns"] >= ar1["time_ns"]  # beside g1's matmul's DMA: never faster
    assert ar1["start_ns"] >= ar2["start_ns"] + ar2["time_ns"] - 1e-6  # one comm stream, in order
    # the links over the run: two broadcasts and two all_reduces
    assert g["links"] == {
        "c0+x": 2 * 2 * S + 2 * 1.5 * S,
        "c0-x": 2 * S + 2 * S,
        "c1+x": 2 * S + 2 * S,
        "c1-x": 2 * 1.5 * S,
        "c2+x": 2 * 1.5 * S,
        "c2-x": 2 * S,
        "c3+x": 2 * S,
        "c3-x": 2 * 1.5 * S,
    }
    # each chip: the two gradients' matmuls (the update's elementwise ops use no TensorE)
    for chip in g["chips"].values():
        assert chip["flops"] == 2 * 1024 * 256 * 1024 + 2 * 1024 * 1024 * 1024
    # communication: rank r had a collective in flight during both broadcasts and both
    # all_reduces (their windows do not overlap), and compute hid part of it
    for v in g["communication"]["ranks"].values():
        want = bc1["time_ns"] + bc2["time_ns"] + ar2["time_ns"] + ar1["time_ns"]
        assert abs(v["collective_ns"] - want) < 1e-6
        assert abs(v["overlapped_ns"] + v["exposed_ns"] - v["collective_ns"]) < 1e-6
        assert 0 < v["overlapped_ns"] <= ar2["time_ns"]  # g1's matmul beside g2's all_reduce
    # rank 0's step: from its weights (the second broadcast's end) to its gradients reduced
    t = g["timings"]["weights0->reduced0"]["ns"]
    assert abs(t - (ar1["start_ns"] + ar1["time_ns"] - bc2["start_ns"] - bc2["time_ns"])) < 1e-6
