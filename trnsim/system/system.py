"""A System: N chips on one SimPy environment and one fluid bandwidth model, joined by links.

Ranks are logical NeuronCores: rank r is logical core r % ranks_per_chip of chip
r // ranks_per_chip (chip-major). Every chip is a `Chip` (its cores, HBM and DMA) whose DMA
shares the System's `FluidModel`, so collective traffic and compute DMA meet on the same DMA
engine and HBM stack resources; each link direction, switch port and NIC of the `Topology` is
one more resource (bytes per ps).

The System moves bytes for collectives (`trnsim.collectives` says which): a *move* copies a
region of one rank's buffer to one or two ranks (two: duplication, 1 read and 2 writes) over
the route between their chips; a *reduce* adds inputs into a rank's buffer with that rank's DMA.
Each is one fluid flow:

- move from rank s: s's DMA engines (the store rate, `dma.store_bandwidth`, spread evenly over
  the rank's `lnc x engines`), s's HBM stack (a read), every link of the route (1 byte a byte),
  and each destination's stack (a write) for a copy; the payload of a reduce is staged on the
  receiving chip (the DMA's buffers), not written to HBM;
- reduce at rank d: d's engines at `cc.reduce_rate` of the store rate, d's stack for the
  accumulator's read and write, and the stacks of the `others` whose regions are added too.
  So a ring reduce-scatter hop costs 3 HBM accesses (read, read, write) and KangaRing's 4 for a
  pair where two ring hops take 6, the counts R-CC gives.

Weighted sharing (R-OVL): an engine round-robins between its rings at packet boundaries, so a
CC flow (64 KiB packets) gets `cc.packet_bytes / compute_packet_bytes` (16) times the engine
time of a compute flow (4 KiB) on an engine both want; strict priority (Trn3) is a weight of
2^20. Round-robin at packet boundaries shares an engine's *bytes* 16:1, whatever each packet
costs the engine (a reduce's twice a copy's). The fluid model is max-min fair in work units,
and a compute transfer's work is engine-ps at the load rate (`DmaSystem`: bytes on an engine /
dma.engine_bandwidth), so a CC flow's work is counted in the same unit: its bytes per engine
of its rank / engine_bandwidth (bytes in links-only mode, where no engine is used). A flow of
weight w is given work `W / w` and coefficients `coef x w`: it rises at the common level L while
doing w L units a ps, which is weighted max-min fairness without touching the filling. So a CC
copy beside a compute load on one engine gets w r / (1 + w r) of the engine's time (r =
engine_bandwidth / store_bandwidth, the relative cost of their bytes): 16/17 at one rate.

Approximation: a CC flow is charged on one engine of each of its rank's physical cores (the
first), standing for all of them (a CC flow spreads evenly over its rank's engines, so they
all carry the same load): compute transfers use every engine of their core, so they meet it
there, and an update costs 2 engine resources a flow instead of 32. A compute transfer that
skips a core's first engine does not slow a collective.

`links_only=True` leaves DMA engines, HBM and reductions unbounded (flows use only links, a
move between ranks of one chip takes no time): the configuration of the closed forms.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import simpy

from trnsim.chip import Chip
from trnsim.config import ChipConfig, SystemConfig
from trnsim.dma.fluid import Flow, FluidModel
from trnsim.errors import TrnsimError
from trnsim.report.recorder import Recorder
from trnsim.system.topology import Efa, Level, Switch, Topology, Torus
from trnsim.units import PS_PER_S

STRICT_WEIGHT = 2.0**20
"""The weight standing for strict priority: a compute flow gets 2^-20 of a contended engine."""


@dataclass(frozen=True)
class CcParams:
    """The chip's collective DMA settings (the chip config's `cc:` section)."""

    packet_bytes: int = 64 * 1024
    compute_packet_bytes: int = 4 * 1024
    reduce_rate: float = 0.5
    duplication: bool = True
    strict_priority: bool = False

    @classmethod
    def of(cls, chip: ChipConfig) -> CcParams:
        cc = getattr(chip, "cc", None)
        compute = chip.core.dma.packet_bytes
        if cc is None:
            return cls(compute_packet_bytes=compute)
        return cls(
            cc.packet_bytes,
            cc.compute_packet_bytes or compute,
            cc.reduce_rate,
            cc.duplication,
            cc.strict_priority,
        )

    @property
    def weight(self) -> float:
        """A CC flow's weight against a compute flow's 1."""
        if self.strict_priority:
            return STRICT_WEIGHT
        return self.packet_bytes / self.compute_packet_bytes


class System:
    """N chips, their links and one fluid model on one SimPy environment (see module doc).

    `link_bandwidth` overrides links by name (`"c5+x"`, `"c3.efa.out"`: B/s per direction),
    e.g. a degraded link. `cc` defaults to the chip config's `cc:` section.
    """

    def __init__(
        self,
        chip: ChipConfig,
        topology: Topology,
        ranks_per_chip: int,
        *,
        lnc: int | None = None,
        functional: bool = False,
        links_only: bool = False,
        link_bandwidth: dict[str, float] | None = None,
        cc: CcParams | None = None,
        env: simpy.Environment | None = None,
    ):
        lnc = chip.lnc if lnc is None else lnc
        if ranks_per_chip < 1 or (chip.cores // lnc) % ranks_per_chip:
            raise TrnsimError(
                f"ranks_per_chip {ranks_per_chip}: {chip.name} at lnc={lnc} has "
                f"{chip.cores // lnc} logical cores, which it must divide"
            )
        self.cfg, self.topology, self.lnc = chip, topology, lnc
        self.ranks_per_chip = ranks_per_chip
        self.ranks = topology.chips * ranks_per_chip
        self.functional, self.links_only = functional, links_only
        self.cc = cc if cc is not None else CcParams.of(chip)
        self.weight = self.cc.weight
        self.env = env if env is not None else simpy.Environment()
        self.fluid = FluidModel(self.env)
        self.fluid.on_change = self._sample
        self.chips = [
            Chip(self.env, chip, Recorder(), functional, lnc, self.fluid)
            for _ in range(topology.chips)
        ]
        overrides = dict(link_bandwidth or {})
        self.link_rid: list[int] = []
        for link in topology.links:
            bw = overrides.pop(link.name, link.bandwidth)
            if bw <= 0:
                raise TrnsimError(f"link {link.name}: bandwidth must be > 0, got {bw}")
            self.link_rid.append(self.fluid.add_resource(bw / PS_PER_S, watched=False))
        if overrides:
            try:
                topology.link_id(next(iter(overrides)))
            except KeyError as e:  # the form of link names
                raise TrnsimError(f"link_bandwidth: {e.args[0]}") from None
        self.link_bytes = [0.0] * len(topology.links)
        """Bytes that crossed each link (by link id) so far."""
        self.hbm_read = [0.0] * topology.chips
        """Bytes collectives read from each chip's HBM so far."""
        self.hbm_written = [0.0] * topology.chips
        d = chip.core.dma
        engines = lnc * d.engines
        self._move_coef = 1.0 / (engines * d.store_bandwidth / PS_PER_S)  # engine-ps per byte
        self._reduce_coef = self._move_coef / self.cc.reduce_rate
        self._uses: dict[tuple, tuple] = {}
        self._scaled: dict[int, tuple] = {}
        # a work unit: a ps of one engine of the rank loading (links only: a byte)
        self._unit = 1.0 if links_only else 1.0 / (engines * d.engine_bandwidth / PS_PER_S)

    @classmethod
    def from_config(
        cls,
        cfg: SystemConfig,
        functional: bool = False,
        links_only: bool = False,
        link_bandwidth: dict[str, float] | None = None,
        env: simpy.Environment | None = None,
    ) -> System:
        """The System of a `SystemConfig` (`trnsim.config.load_system`): its chips, topology
        (torus or switch, one per node, nodes joined by EFA), lnc and ranks per chip."""
        t = cfg.topology
        efa = Efa(cfg.efa.bandwidth, cfg.efa.latency) if cfg.nodes > 1 else None
        if t.kind == "torus":
            z = t.z_link
            topo: Topology = Torus(
                t.dims,
                (t.link.bandwidth, t.link.latency),
                (z.bandwidth, z.latency) if z is not None else None,
                cfg.nodes,
                efa,
            )
        else:
            levels = tuple(Level(lv.name, lv.chips, lv.bandwidth, lv.latency) for lv in t.levels)
            topo = Switch(levels, cfg.nodes, efa)
        return cls(
            cfg.chip,
            topo,
            cfg.ranks_per_chip,
            lnc=cfg.lnc,
            functional=functional,
            links_only=links_only,
            link_bandwidth=link_bandwidth,
            env=env,
        )

    # -- ranks ---------------------------------------------------------------------------------

    def rank_place(self, rank: int) -> tuple[int, int]:
        """(chip, logical core) of `rank`: chip-major; a chip's ranks spread evenly over its
        logical cores (all of them when ranks_per_chip is the chip's logical cores), as
        `SystemConfig.rank_place`."""
        if not 0 <= rank < self.ranks:
            raise TrnsimError(
                f"rank {rank} does not exist: the system has ranks 0..{self.ranks - 1}"
            )
        chip, local = divmod(rank, self.ranks_per_chip)
        return chip, local * (self.cfg.cores // self.lnc // self.ranks_per_chip)

    def chip_of(self, rank: int) -> int:
        return rank // self.ranks_per_chip

    def _engines(self, rank: int) -> list[int]:
        """The engine resources standing for `rank`'s DMA engines (one per physical core)."""
        chip, logical = self.rank_place(rank)
        dma = self.chips[chip].dma
        return [
            dma.engine_base + p * dma.engines
            for p in range(logical * self.lnc, (logical + 1) * self.lnc)
        ]

    def _stack(self, rank: int) -> int:
        chip, logical = self.rank_place(rank)
        c = self.chips[chip]
        return c.dma.stack_resources[c.hbm.home_stack(logical * self.lnc)]

    # -- flows ---------------------------------------------------------------------------------

    def move_uses(
        self, src: int, dsts: tuple[int, ...], staged: bool = False
    ) -> tuple[tuple, tuple[int, ...], float]:
        """(fluid uses per byte, link ids, latency s) of a move from rank `src` to `dsts`
        (ranks of one chip); `staged`: the payload of a reduce, not written to HBM. Cached."""
        key = ("m", src, dsts, staged)
        hit = self._uses.get(key)
        if hit is None:
            route = self.topology.route(self.chip_of(src), self.chip_of(dsts[0]))
            uses: dict[int, float] = {}
            for lid in route.links:
                uses[self.link_rid[lid]] = 1.0
            if not self.links_only:
                for e in self._engines(src):
                    uses[e] = uses.get(e, 0.0) + self._move_coef
                s = self._stack(src)
                uses[s] = uses.get(s, 0.0) + 1.0
                for d in () if staged else dsts:
                    s = self._stack(d)
                    uses[s] = uses.get(s, 0.0) + 1.0
            hit = self._uses[key] = (tuple(sorted(uses.items())), route.links, route.latency)
        return hit

    def reduce_uses(self, dst: int, others: tuple[int, ...]) -> tuple:
        """Fluid uses per byte of reducing a payload (and `others`' buffers) into `dst`'s."""
        key = ("r", dst, others)
        hit = self._uses.get(key)
        if hit is None:
            uses: dict[int, float] = {}
            if not self.links_only:
                for e in self._engines(dst):
                    uses[e] = uses.get(e, 0.0) + self._reduce_coef
                s = self._stack(dst)
                uses[s] = uses.get(s, 0.0) + 2.0  # the accumulator's read and write
                for o in others:
                    s = self._stack(o)
                    uses[s] = uses.get(s, 0.0) + 1.0
            hit = self._uses[key] = tuple(sorted(uses.items()))
        return hit

    def start(
        self, key: tuple, nbytes: float, uses: tuple, on_done: Callable[[Flow], None], data=None
    ):
        """Start a CC flow of `nbytes` on `uses` (per byte) at the CC weight. Returns the flow,
        or None when it uses nothing (links-only mode between ranks of a chip): it takes no
        time and the caller completes it itself."""
        if not uses:
            return None
        w = self.weight
        unit = self._unit
        scaled = self._scaled.get(id(uses))
        if scaled is None or scaled[0] is not uses:  # uses per work unit, weighted
            scaled = self._scaled[id(uses)] = (uses, tuple([(r, c / unit * w) for r, c in uses]))
        flow = Flow(key, nbytes * unit / w, scaled[1], math.inf, on_done, data)
        self.fluid.start(flow)
        return flow

    def count_move(
        self,
        src: int,
        dsts: tuple[int, ...],
        links: tuple[int, ...],
        nbytes: int,
        staged: bool = False,
    ) -> None:
        """Account a move's bytes on its links and HBM stacks."""
        for lid in links:
            self.link_bytes[lid] += nbytes
        self.hbm_read[self.chip_of(src)] += nbytes
        for d in () if staged else dsts:
            self.hbm_written[self.chip_of(d)] += nbytes

    def count_reduce(self, dst: int, others: tuple[int, ...], nbytes: int) -> None:
        chip = self.chip_of(dst)
        self.hbm_read[chip] += nbytes * (1 + len(others))
        self.hbm_written[chip] += nbytes

    def _sample(self) -> None:
        for c in self.chips:
            c.dma.sample()
