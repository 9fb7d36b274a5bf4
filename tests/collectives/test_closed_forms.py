"""Closed forms (DISTRIBUTED.md) where links are the only cost: DMA, HBM and reductions
unbounded, one rank per chip (two for KangaRing, whose pairs live on a chip), every formula
worked out by hand. N ranks, S bytes, k rings, link B, hop latency A, start cost C."""

import pytest

from tests.collectives.helpers import A, B, C, Efa, close, switch_world, torus_world

S = 48 << 20  # divisible by every N * k below


@pytest.mark.parametrize(
    "dims, k",
    [((8,), 1), ((8,), 2), ((4, 4), 1), ((4, 4), 2), ((4, 4), 4)],
)
@pytest.mark.parametrize(
    "op, phases", [("all_reduce", 2), ("all_gather", 1), ("reduce_scatter", 1)]
)
def test_ring(dims, k, op, phases):
    """Ring: C + phases (N - 1)(A + S / (k N B)); k edge-disjoint rings on the torus."""
    w = torus_world(dims, rings=k)
    n = w.system.ranks
    r = w.collective(op, range(n), S, algorithm="ring")
    assert r.rings == k
    assert close(r.time_ps, C + phases * (n - 1) * (A + S / (k * n * B)))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_rdh_on_a_switch(n):
    """RDH on 2^p ranks, every partner one switch hop away: RS = C + pA + S(1 - 1/N)/B,
    AR = C + 2pA + 2S(N - 1)/(N B)."""
    p = n.bit_length() - 1
    w = switch_world(n)
    rs = w.collective("reduce_scatter", range(n), S, algorithm="rdh")
    assert close(rs.time_ps, C + p * A + S * (1 - 1 / n) / B)
    ar = w.collective("all_reduce", range(n), S, algorithm="rdh")
    assert close(ar.time_ps, C + 2 * p * A + 2 * S * (n - 1) / (n * B))


def test_rdh_on_the_4x4_torus():
    """The 4x4 torus as a 4-D hypercube: partners at distance 1 and 2 along x and y; the pairs
    at distance 2 use disjoint links (ties go + from even coordinates), so every step runs at
    B and pays its hops' latency: 1 + 2 + 1 + 2 = 6 hops a phase."""
    w = torus_world((4, 4))
    ar = w.collective("all_reduce", range(16), S, algorithm="rdh")
    assert close(ar.time_ps, C + 2 * 6 * A + 2 * S * 15 / (16 * B))
    ag = w.collective("all_gather", range(16), S, algorithm="rdh")
    assert close(ag.time_ps, C + 6 * A + S * 15 / (16 * B))


def test_kangaring_on_the_4x4_torus():
    """KangaRing, 2 ranks a chip (one pair): only the 16 primaries in the ring, on the 4
    directed rings of the torus's 2 Hamiltonian cycles, each share a pair's 2S/N / k; the
    pair's own steps are inside a chip (free here): AR = C + 2(N/2 - 1)(A + 2S/(k N B))."""
    w = torus_world((4, 4), ranks_per_chip=2)
    n = 32
    r = w.collective("all_reduce", range(n), S, algorithm="kangaring")
    assert r.rings == 4
    assert close(r.time_ps, C + 2 * (n // 2 - 1) * (A + 2 * S / (4 * n * B)))
    ag = w.collective("all_gather", range(n), S, algorithm="kangaring")
    assert close(ag.time_ps, C + (n // 2 - 1) * (A + 2 * S / (4 * n * B)))


@pytest.mark.parametrize("n", [2, 5, 8])
def test_single_step_mesh_on_one_switch_level(n):
    """Single-step Mesh all-reduce: every rank's port out carries (N - 1) S:
    C + A + (N - 1) S / B."""
    w = switch_world(n)
    r = w.collective("all_reduce", range(n), S, algorithm="mesh1")
    assert close(r.time_ps, C + A + (n - 1) * S / B)


def test_mesh_on_one_switch_level():
    """Mesh all-reduce = RS + AG, each one step of (N - 1) S/N out of each port."""
    n = 8
    w = switch_world(n)
    r = w.collective("all_reduce", range(n), S, algorithm="mesh")
    assert close(r.time_ps, C + 2 * (A + (n - 1) * S / n / B))


def test_hierarchical_all_reduce_on_two_nodes():
    """X = 2 nodes of Y = 4 chips (a ring of 4 each, 2 rings), EFA between them:
    AR = C + RS_intra(Y, S) + AR_inter(X, S/Y) + AG_intra(Y, S), the inter part a ring over
    EFA (bandwidth E, latency L): 2(X - 1)(L + S/(Y X E))."""
    e, lat = 20e9, 10e-6
    w = torus_world((4,), rings=2, units=2, efa=Efa(e, lat))
    x, y, k = 2, 4, 2
    r = w.collective("all_reduce", range(8), S, algorithm="hierarchical:ring+ring")
    intra = (y - 1) * (A + S / (k * y * B))
    inter = 2 * (x - 1) * (lat + S / (y * x * e))
    assert r.algorithm == "hierarchical:ring+ring"
    assert close(r.time_ps, C + intra + inter + intra)


def test_two_collectives_sharing_a_link_get_half_each():
    """Ranks 0 and 1 on chip 0 send to ranks 2 and 3 on chip 1 in two groups (two jobs) at
    once: both cross link c0+x, each at B/2: C + A + S/(B/2). Alone: C + A + S/B."""
    w = torus_world((2,), ranks_per_chip=2)
    alone = w.collective("send_recv", (0, 2), S)
    assert close(alone.time_ps, C + A + S / B)
    handles = [w.post(r, "send_recv", g, S) for g in ((0, 2), (1, 3)) for r in g]
    w.run()
    for h in handles:
        assert close(h.result.time_ps, C + A + S / (B / 2))


@pytest.mark.parametrize(
    "counts, load",
    [
        ([[0, 1, 0], [0, 0, 0], [0, 0, 0]], 1),  # one flow
        ([[0, 1, 1], [0, 0, 0], [0, 0, 0]], 2),  # rank 0's port up carries two
        ([[0, 1, 0], [0, 0, 0], [0, 1, 0]], 2),  # rank 1's port down receives two
        ([[5, 4, 2], [1, 0, 0], [0, 4, 0]], 8),  # uneven: rank 1 receives 4 + 4 (its own 5 local)
    ],
)
def test_all_to_allv_on_one_switch_level(counts, load):
    """all_to_allv, one direct step: C + A + (the busiest port's bytes) / B, a port being a
    chip's way up (its row, off the diagonal) or down (its column) the switch."""
    x = 3 << 20  # elements of bf16 a unit of `counts`
    w = switch_world(3)
    r = w.collective("all_to_allv", range(3), 0, "bfloat16",
                     counts=[[c * x for c in row] for row in counts])  # fmt: skip
    assert r.algorithm == "direct"
    assert close(r.time_ps, C + A + load * x * 2 / B)
