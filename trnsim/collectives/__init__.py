"""Collectives as the Neuron runtime runs them: schedules as data, chosen by size, run by the
chips' DMA on a System's fluid model (`world` has the API)."""

from trnsim.collectives.build import ALGORITHMS, OPS, build
from trnsim.collectives.schedule import Schedule, Transfer
from trnsim.collectives.select import Settings, select
from trnsim.collectives.world import Handle, Result, World

__all__ = [
    "ALGORITHMS",
    "OPS",
    "Handle",
    "Result",
    "Schedule",
    "Settings",
    "Transfer",
    "World",
    "build",
    "select",
]
