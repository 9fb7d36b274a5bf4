"""Many chips: topologies (links, routes, rings) and the System of chips on one fluid model."""

from trnsim.system.system import CcParams, System
from trnsim.system.topology import Efa, Level, Link, Route, Switch, Topology, Torus

__all__ = ["CcParams", "Efa", "Level", "Link", "Route", "Switch", "System", "Topology", "Torus"]
