"""What a schedule builder needs to know of the System: where ranks are, the fabric's rings
and routes, and the collective settings. Its `key` (with the op, group and sizes) keys the
cache of schedules."""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.system.topology import Topology, Torus


@dataclass(frozen=True)
class Context:
    """`rings`: parallel rings Ring uses (KangaRing uses as many as the fabric has);
    `slices`: pieces a reducing ring transfer is sent in; `chips_per_node`: chips joined by
    NeuronLink (nodes are joined by EFA)."""

    topology: Topology
    ranks_per_chip: int
    chips_per_node: int
    rings: int = 1
    slices: int = 1
    duplication: bool = True

    @property
    def key(self) -> tuple:
        return (
            self.topology.key,
            self.ranks_per_chip,
            self.chips_per_node,
            self.rings,
            self.slices,
            self.duplication,
        )

    def chip(self, rank: int) -> int:
        return rank // self.ranks_per_chip

    def node(self, rank: int) -> int:
        return self.chip(rank) // self.chips_per_node

    def islands(self, ranks: tuple[int, ...]) -> list[list[int]] | None:
        """The group split where hierarchical algorithms split it: by node when it spans
        several, else (one node of a torus whose third dimension has links of its own, the
        UltraServer's instances) by plane of the first two dimensions. None if neither."""
        nodes = {self.node(r) for r in ranks}
        if len(nodes) > 1:
            key = self.node
        else:
            t = self.topology
            if not (isinstance(t, Torus) and len(t.dims) == 3 and t.key[3] is not None):
                return None
            plane = t.dims[0] * t.dims[1]
            planes = {self.chip(r) // plane for r in ranks}
            if len(planes) < 2:
                return None

            def key(r):
                return self.chip(r) // plane

        out: dict[int, list[int]] = {}
        for r in ranks:
            out.setdefault(key(r), []).append(r)
        return [out[k] for k in sorted(out)]

    def by_chip(self, ranks) -> dict[int, list[int]]:
        """The ranks of each chip, chips in ascending order, ranks in group order."""
        out: dict[int, list[int]] = {}
        for r in ranks:
            out.setdefault(self.chip(r), []).append(r)
        return {c: out[c] for c in sorted(out)}

    def whole_chips(self, ranks) -> bool:
        """Does the group hold every rank of each chip it touches?"""
        return all(len(v) == self.ranks_per_chip for v in self.by_chip(ranks).values())
