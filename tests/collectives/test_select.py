"""The runtime's selection by size (R-CC), at the configured thresholds."""

import pytest

from trnsim.collectives import World
from trnsim.collectives.select import select
from trnsim.config import load_system


@pytest.fixture(scope="module")
def trn2():
    return World.from_config(load_system("trn2-48xl"))


def test_thresholds_on_64_ranks(trn2):
    c = load_system("trn2-48xl").collectives
    ranks = tuple(range(64))

    def sel(n):
        return select("all_reduce", ranks, n, trn2.ctx, trn2.settings)

    assert sel(c.mesh_max - 1) == "mesh"
    assert sel(c.mesh_max) == "rdh"
    assert sel(c.rdh_max - 1) == "rdh"
    assert sel(c.rdh_max) == "kangaring"


def test_fallbacks_and_forcing(trn2):
    s = trn2.settings
    # 3 chips' ranks: RDH needs 2^p chips, KangaRing every rank of a chip: 12 ranks -> kangaring
    assert select("all_reduce", tuple(range(12)), 10 << 20, trn2.ctx, s) == "kangaring"
    # one rank a chip: no pairs: ring
    assert select("all_reduce", tuple(range(0, 48, 4)), 1 << 30, trn2.ctx, s) == "ring"
    assert select("all_reduce", tuple(range(64)), 1 << 30, trn2.ctx, s, "ring") == "ring"
    assert select("all_to_all", tuple(range(64)), 1 << 30, trn2.ctx, s) == "direct"


def test_multi_node_groups_run_hierarchically():
    w = World.from_config(load_system("trn2-48xl-x4"))
    ranks = tuple(range(256))
    assert select("all_reduce", ranks, 4096, w.ctx, w.settings) == "hierarchical:mesh+mesh"
    assert select("all_reduce", ranks, 1 << 30, w.ctx, w.settings) == "hierarchical:kangaring+rdh"


def test_the_ultraserver_splits_at_its_instances():
    """256 ranks on the Trn2 UltraServer, beyond the published thresholds: the instances are
    islands (Z links), KangaRing inside, RDH across."""
    w = World.from_config(load_system("trn2-ultraserver"))
    got = select("all_reduce", tuple(range(256)), 1 << 30, w.ctx, w.settings)
    assert got == "hierarchical:kangaring+rdh"
