"""Routes, rings and the System's rank map, by hand."""

import pytest

from trnsim.config import load_chip, load_system
from trnsim.system import Efa, Level, Switch, System, Torus
from trnsim.system.cycles import hamiltonian_cycles


def names(topo, a, b):
    return [topo.links[i].name for i in topo.route(a, b).links]


def test_torus_routes_dimension_order_shortest_way_round():
    t = Torus((4, 4), (1e9, 1e-6))
    assert names(t, 0, 5) == ["c0+x", "c1+y"]  # x first, then y
    assert names(t, 0, 3) == ["c0-x"]  # wrap-around: 1 hop back, not 3 forward
    assert names(t, 0, 2) == ["c0+x", "c1+x"]  # a tie from an even coordinate goes +
    assert names(t, 1, 3) == ["c1-x", "c0-x"]  # and from an odd one -
    assert t.route(0, 5).latency == pytest.approx(2e-6)
    assert t.route(4, 4).links == ()


def test_z_links_and_efa():
    t = Torus((2, 2, 2), (1e9, 1e-6), (5e8, 3e-6), units=2, efa=Efa(25e9, 15e-6))
    z = t.links[t.route(0, 4).links[0]]
    assert (z.name, z.bandwidth, z.latency) == ("c0+z", 5e8, 3e-6)
    assert names(t, 1, 9) == ["c1.efa.out", "c9.efa.in"]
    assert t.route(1, 9).latency == 15e-6


def test_switch_routes_meet_at_the_lowest_common_level():
    t = Switch((Level("server", 4, 1e9, 1e-6), Level("rack", 16, 2e9, 2e-6)))
    assert names(t, 1, 2) == ["c1.server.up", "c2.server.down"]
    assert names(t, 1, 6) == ["c1.rack.up", "c6.rack.down"]
    assert t.route(1, 6).latency == 2e-6


@pytest.mark.parametrize("dims, cycles", [((4, 4), 2), ((4, 4, 4), 3), ((8,), 1), ((3, 5), 2)])
def test_hamiltonian_cycles_are_edge_disjoint_and_cover_every_chip(dims, cycles):
    found = hamiltonian_cycles(dims)
    assert len(found) == cycles
    n = 1
    for d in dims:
        n *= d
    edges = []
    for c in found:
        assert sorted(c) == list(range(n))
        edges += [frozenset((c[i], c[(i + 1) % n])) for i in range(n)]
    assert len(edges) == len(set(edges))


def test_rings_of_the_4x4_torus_use_each_directed_link_once():
    t = Torus((4, 4), (1e9, 1e-6))
    rings = t.rings(list(range(16)), 4)
    used = [lid for r in rings for i in range(16) for lid in t.route(r[i], r[(i + 1) % 16]).links]
    assert len(used) == 64 == len(set(used)) == len(t.links)


def test_rank_map_matches_the_system_config():
    cfg = load_system("trn2-48xl")
    s = System.from_config(cfg)
    assert s.ranks == cfg.ranks == 64
    assert [s.rank_place(r) for r in (0, 5, 63)] == [cfg.rank_place(r) for r in (0, 5, 63)]
    two = System(load_chip("trn2"), Torus((2,), (1e9, 1e-6)), 2)  # 2 of 4 logical cores
    assert two.rank_place(1) == (0, 2)
