"""Small systems for the collectives' tests: explicit topologies on the trn2 chip config."""

from trnsim.collectives import Settings, World
from trnsim.config import load_chip
from trnsim.system import Efa, Level, Switch, System, Torus

CHIP = load_chip("trn2")
B = 100e9  # B/s per link direction
A = 1e-6  # s per hop
C = 2e-6  # start cost, s


def torus_world(dims, rings=1, ranks_per_chip=1, links_only=True, units=1, efa=None, **kw):
    """A World on a torus of `dims` (links B, A), `rings` parallel rings, start cost C."""
    sysm = System(
        CHIP,
        Torus(dims, (B, A), units=units, efa=efa),
        ranks_per_chip,
        links_only=links_only,
        functional=kw.pop("functional", False),
        link_bandwidth=kw.pop("link_bandwidth", None),
    )
    settings = Settings(
        start_cost=kw.pop("start_cost", C), rings=rings, slices=kw.pop("slices", 1), **kw
    )
    return World(sysm, settings)


def switch_world(chips, ranks_per_chip=1, links_only=True, **kw):
    """A World on one switch level of `chips` chips (ports B, A)."""
    sysm = System(
        CHIP,
        Switch((Level("server", chips, B, A),)),
        ranks_per_chip,
        links_only=links_only,
        functional=kw.pop("functional", False),
    )
    return World(sysm, Settings(start_cost=kw.pop("start_cost", C), **kw))


def close(got_ps: int, expected_s: float, rel: float = 1e-3) -> bool:
    """Within `rel` (0.1%) of a hand formula in seconds."""
    want = expected_s * 1e12
    return abs(got_ps - want) <= rel * want


__all__ = ["A", "B", "C", "CHIP", "Efa", "close", "switch_world", "torus_world"]
