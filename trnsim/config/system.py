"""The system configuration tree: chips joined by links (a torus) or switches, nodes joined by EFA.

Frozen dataclasses like the chip tree (`trnsim.config.tree`), every field with its unit kind and
help; `SystemConfig` at the root holds the `ChipConfig` of its chips. Build one with
`trnsim.config.load_system`; the file format, the units and the assumptions are in
docs/systems.md.

Ranks are numbered by one rule, chip-major: rank r runs on chip r // ranks_per_chip, and chip c
is in node c // chips_per_node, at torus coordinates (x fastest) of c % chips_per_node. Within a
chip, a chip's ranks spread evenly over its logical cores (`rank_place`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trnsim.config.tree import ChipConfig, q
from trnsim.errors import TrnsimError

__all__ = [
    "ALGORITHMS",
    "TOPOLOGIES",
    "RankError",
    "LinkConfig",
    "SwitchLevelConfig",
    "TopologyConfig",
    "EfaConfig",
    "CollectiveConfig",
    "SystemConfig",
]

TOPOLOGIES = ("torus", "switch")
ALGORITHMS = ("auto", "ring", "mesh", "mesh1", "rdh", "kangaring", "hierarchical")
"""`collectives.algorithm`: auto (the selector), or one forced: ring, mesh, mesh1 (single-step
mesh), rdh (recursive doubling/halving), kangaring, hierarchical (intra-node then inter-node)."""


class RankError(TrnsimError, IndexError):
    """A rank, chip or node number outside the system: the message names the valid range."""


@dataclass(frozen=True)
class LinkConfig:
    """One chip-to-chip link of a torus, in one direction."""

    bandwidth: float = q("B/s", "bytes/s of one direction of one link")
    latency: float = q("s", "latency of one hop over the link")


@dataclass(frozen=True)
class SwitchLevelConfig:
    """One level of a switched system: the chips under one switch of this level (cumulative:
    16 per server, 64 per rack), and each chip's way into it."""

    chips: int = q("count", "chips under one switch of this level (including lower levels)")
    bandwidth: float = q("B/s", "bytes/s per chip per direction into this level")
    latency: float = q("s", "latency of a transfer between chips that meet at this level")
    name: str = q("str", "the level's name (its key in topology.levels)", loader=True, default="")


@dataclass(frozen=True)
class TopologyConfig:
    """How the chips of one node are joined: a torus of direct links, or levels of switches."""

    kind: str = q("str", "torus or switch")
    dims: tuple[int, ...] = q("list", "torus: chips per dimension, x first", default=())
    link: LinkConfig | None = q("section", "torus: each X and Y neighbour link", default=None)
    z_link: LinkConfig | None = q(
        "section", "torus: each link of the third dimension (default: link)", default=None
    )
    levels: tuple[SwitchLevelConfig, ...] = q(
        "named", "switch: the levels, keyed by name, lowest first", default=()
    )

    @property
    def chips(self) -> int:
        """Chips joined by this topology (one node)."""
        if self.kind == "torus":
            return math.prod(self.dims)
        return self.levels[-1].chips if self.levels else 0

    def dim_link(self, dim: int) -> LinkConfig:
        """The link of torus dimension `dim` (0 = x): `z_link` for the third, `link` else."""
        if self.kind != "torus":
            raise ValueError("a switched topology has no torus dimensions")
        return self.z_link if dim == 2 and self.z_link is not None else self.link

    def links_per_dim(self, dim: int) -> int:
        """Links a chip has in torus dimension `dim`: 2 (to each neighbour of its ring; a ring
        of 2 chips has both, to the one neighbour), none in a dimension of one chip."""
        return 2 if self.dims[dim] >= 2 else 0


@dataclass(frozen=True)
class EfaConfig:
    """The scale-out network between nodes (EFA)."""

    bandwidth: float = q("B/s", "bytes/s per chip per direction")
    latency: float = q("s", "point-to-point latency, HBM to HBM across nodes")


@dataclass(frozen=True)
class CollectiveConfig:
    """How the runtime runs collectives: the fixed costs, and the algorithm selection."""

    start_cost: float = q("s", "fixed cost of starting one collective")
    rings: int = q("count", "parallel directed rings Ring may use")
    mesh_max: int = q("bytes", "auto selection: Mesh below this many bytes")
    rdh_max: int = q("bytes", "auto selection: RDH up to this many bytes, KangaRing above")
    algorithm: str = q("str", f"auto, or one forced: {', '.join(ALGORITHMS[1:])}")
    slices: int = q("count", "slices a reduce-scatter chunk is sent in (overlap)")


@dataclass(frozen=True)
class SystemConfig:
    """Chips of one kind in nodes (a trn2.48xlarge, an UltraServer), nodes joined by EFA.

    `chips_per_node`, `chips` and `ranks` follow from the other fields.
    """

    name: str = q("str", "system name")
    description: str = q("str", "one-line description")
    chip: ChipConfig = q("section", "the chip config (in YAML: a chip name or a path)")
    topology: TopologyConfig = q("section", "how a node's chips are joined")
    efa: EfaConfig = q("section", "the network between nodes")
    collectives: CollectiveConfig = q("section", "collective algorithms and costs")
    nodes: int = q("count", "nodes (instances) joined by EFA", default=1)
    lnc: int = q("count", "logical NeuronCore size (default: the chip's lnc)", default=0)
    ranks_per_chip: int = q(
        "count", "ranks on each chip (default: its logical cores; must divide them)", default=0
    )
    source: str = q("str", "path of the YAML file this config was loaded from", default="")
    chips_per_node: int = field(
        init=False, metadata={"unit": "count", "help": "chips in one node (from the topology)"}
    )
    chips: int = field(init=False, metadata={"unit": "count", "help": "nodes x chips_per_node"})
    ranks: int = field(init=False, metadata={"unit": "count", "help": "chips x ranks_per_chip"})

    def __post_init__(self) -> None:
        per_node = self.topology.chips
        object.__setattr__(self, "chips_per_node", per_node)
        object.__setattr__(self, "chips", self.nodes * per_node)
        object.__setattr__(self, "ranks", self.nodes * per_node * self.ranks_per_chip)

    @property
    def logical_cores(self) -> int:
        """Logical NeuronCores per chip at this system's lnc."""
        return self.chip.cores // self.lnc

    def rank_place(self, rank: int) -> tuple[int, int]:
        """(chip, logical core) of `rank`: chip-major, chip = rank // ranks_per_chip; a chip's
        ranks spread evenly over its logical cores (logical core = (rank % ranks_per_chip) x
        logical_cores / ranks_per_chip: all of them at the default ranks_per_chip)."""
        _check_range("rank", rank, self.ranks)
        chip, local = divmod(rank, self.ranks_per_chip)
        return chip, local * (self.logical_cores // self.ranks_per_chip)

    def chip_ranks(self, chip: int) -> range:
        """The ranks on `chip`."""
        _check_range("chip", chip, self.chips)
        return range(chip * self.ranks_per_chip, (chip + 1) * self.ranks_per_chip)

    def chip_node(self, chip: int) -> int:
        """The node of `chip`: chip // chips_per_node."""
        _check_range("chip", chip, self.chips)
        return chip // self.chips_per_node

    def chip_coords(self, chip: int) -> tuple[int, ...]:
        """Torus coordinates of `chip` within its node, x first and fastest ((x, y) on a 4x4:
        chip 5 of a node is (1, 1)); on a switched system, the index under each level, lowest
        first (chip 21 of 16-chip servers in 64-chip racks is (5, 1): chip 5 of server 1)."""
        _check_range("chip", chip, self.chips)
        local = chip % self.chips_per_node
        coords = []
        for size in _sizes(self):
            local, c = divmod(local, size)
            coords.append(c)
        return tuple(coords)

    def coords_chip(self, coords: tuple[int, ...], node: int = 0) -> int:
        """The chip at torus (or switch) `coords` in `node`: the inverse of `chip_coords`."""
        _check_range("node", node, self.nodes)
        chip, scale = 0, 1
        for c, size in zip(coords, _sizes(self)):
            _check_range("coordinate", c, size)
            chip += c * scale
            scale *= size
        return node * self.chips_per_node + chip


def _sizes(system: SystemConfig) -> tuple[int, ...]:
    """Chips per torus dimension; on a switch, groups of the level below per level."""
    if system.topology.kind == "torus":
        return system.topology.dims
    counts = [level.chips for level in system.topology.levels]
    return (counts[0], *(b // a for a, b in zip(counts, counts[1:])))


def _check_range(what: str, value: int, count: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < count:
        raise RankError(f"{what} {value!r} is out of range: this system has {what}s 0..{count - 1}")
