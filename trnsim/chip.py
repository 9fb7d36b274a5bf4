"""A chip: physical NeuronCores sharing HBM stacks and a DMA system, grouped into logical cores."""

from __future__ import annotations

import simpy

from trnsim.config import ChipConfig
from trnsim.core.link import CoreLink
from trnsim.core.run import NeuronCore
from trnsim.dma import DmaSystem
from trnsim.dma.fluid import FluidModel
from trnsim.errors import TrnsimError
from trnsim.memory.hbm import Hbm
from trnsim.report.recorder import Recorder
from trnsim.units import seconds_to_ps


class Chip:
    """All parts of one chip on one SimPy environment (dependency injection, as in gem5)."""

    def __init__(
        self,
        env: simpy.Environment,
        cfg: ChipConfig,
        recorder: Recorder,
        functional: bool,
        lnc: int | None = None,
        fluid: FluidModel | None = None,
    ):
        """`fluid`: a fluid model shared with other chips (`trnsim.system.System`); by default
        the chip's DMA has its own."""
        lnc = cfg.lnc if lnc is None else lnc
        if lnc not in cfg.lnc_allowed:
            raise TrnsimError(
                f"lnc {lnc} is not supported on {cfg.name}; expected one of "
                f"{', '.join(map(str, cfg.lnc_allowed))}"
            )
        self.env, self.cfg, self.recorder, self.lnc = env, cfg, recorder, lnc
        self.hbm = Hbm(cfg, functional)
        self.dma = DmaSystem(env, cfg, self.hbm, recorder, fluid)
        latency = seconds_to_ps(cfg.core.barrier_latency)
        links = [  # each pair of an LNC 2 logical core meets at core_barrier
            CoreLink(env, (i, i + 1), latency) if lnc == 2 else None for i in range(0, cfg.cores, 2)
        ]
        self.cores = [
            NeuronCore(env, i, cfg, self.dma, recorder, functional, links[i // 2])
            for i in range(cfg.cores)
        ]

    @property
    def logical_cores(self) -> int:
        return self.cfg.cores // self.lnc

    def physical(self, logical: int) -> list[NeuronCore]:
        """The physical cores making up logical core `logical`."""
        if not 0 <= logical < self.logical_cores:
            raise TrnsimError(
                f"logical core {logical} does not exist: {self.cfg.name} with "
                f"lnc={self.lnc} has logical cores 0..{self.logical_cores - 1}"
            )
        return self.cores[logical * self.lnc : (logical + 1) * self.lnc]
