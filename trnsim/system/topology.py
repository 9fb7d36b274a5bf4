"""How chips are wired: directed links with a bandwidth and a latency, and routes between chips.

Every link direction, switch port direction and NIC direction is one `Link` (a capacity of the
fluid model once a `System` registers it). Two kinds of fabric, each repeated over `units`
copies joined by EFA (one NIC per chip, out and in):

- `Torus(dims, ...)`: chips at coordinates (x fastest); each chip has a link to each neighbour
  in each dimension and direction (`c5+x`, `c5-y`, ...). A route goes dimension by dimension
  (x first), each the shorter way round; a tie (the opposite chip of an even ring) goes + from an
  even coordinate and - from an odd one, so that the pairs exchanging across a ring use
  disjoint links (recursive halving at distance 2 on a ring of 4 is then at full link rate).
  The last dimension may have links of its own (`z_link`: the UltraServer's links between
  instances).
- `Switch(levels, ...)`: levels of switches, each with the number of chips under one switch
  (cumulative) and a per-chip port (`c5.server.up`, `c5.server.down`). A route goes up to the
  lowest level whose switch holds both chips and down again: the sender's up port and the
  receiver's down port of that level.

Routes between units use the sender's NIC out and the receiver's NIC in (`c5.efa.out`,
`c17.efa.in`), and the torus or switch hops are not modelled there (the NIC is the bottleneck
at 200 Gb/s per chip against NeuronLink's hundreds of GB/s). A route's latency is the sum of
its hops' latencies.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.system.cycles import coords_of, directed_rings, index_of, sub_torus

DIM_NAMES = "xyzw"


@dataclass(frozen=True)
class Link:
    """One direction of a link, a switch port or a NIC: `bandwidth` B/s, `latency` s per hop."""

    name: str
    bandwidth: float
    latency: float


@dataclass(frozen=True)
class Route:
    """The links a transfer from one chip to another crosses (ids into `Topology.links`), in
    order, and the sum of their latencies in seconds."""

    links: tuple[int, ...]
    latency: float


@dataclass(frozen=True)
class Efa:
    """The NIC of each chip, for routes between units: B/s per direction, one-way latency s."""

    bandwidth: float
    latency: float


class Topology:
    """Chips and the directed links between them; see the module docstring."""

    chips: int
    links: list[Link]
    key: tuple
    """A hashable description: schedules are cached per topology key."""

    def __init__(self, unit_chips: int, units: int, efa: Efa | None):
        self.unit_chips, self.units = unit_chips, units
        self.chips = unit_chips * units
        self.links = []
        self._ids: dict[str, int] = {}
        self._routes: dict[tuple[int, int], Route] = {}
        self.efa = efa
        if units > 1 and efa is None:
            raise ValueError(f"{units} units of {unit_chips} chips need an EFA between them")

    def _add(self, name: str, bandwidth: float, latency: float) -> int:
        self._ids[name] = len(self.links)
        self.links.append(Link(name, bandwidth, latency))
        return len(self.links) - 1

    def _add_efa(self) -> None:
        if self.units > 1:
            for c in range(self.chips):
                self._add(f"c{c}.efa.out", self.efa.bandwidth, self.efa.latency)
                self._add(f"c{c}.efa.in", self.efa.bandwidth, 0.0)

    def link_id(self, name: str) -> int:
        """The id of the link named `name` (KeyError with the known names' form if none)."""
        try:
            return self._ids[name]
        except KeyError:
            raise KeyError(
                f"no link named {name!r}; links are named like {self.links[0].name!r}"
                if self.links
                else f"no link named {name!r}: this topology has no links"
            ) from None

    def unit_of(self, chip: int) -> int:
        return chip // self.unit_chips

    def route(self, a: int, b: int) -> Route:
        """The route from chip `a` to chip `b` (empty from a chip to itself); cached."""
        r = self._routes.get((a, b))
        if r is None:
            if a == b:
                r = Route((), 0.0)
            elif self.unit_of(a) != self.unit_of(b):
                out, inn = self._ids[f"c{a}.efa.out"], self._ids[f"c{b}.efa.in"]
                r = Route((out, inn), self.efa.latency)
            else:
                links = self._route(a, b)
                r = Route(links, sum(self.links[i].latency for i in links))
            self._routes[(a, b)] = r
        return r

    def _route(self, a: int, b: int) -> tuple[int, ...]:
        raise NotImplementedError

    def rings(self, chips: list[int], k: int) -> list[list[int]]:
        """Up to `k` directed cycles through `chips` sharing no link where the fabric allows
        (each at least one ring: `chips` in the order given)."""
        return [list(chips)]


class Torus(Topology):
    """A torus of `dims` chips (x first), times `units` joined by EFA; see the module doc."""

    def __init__(
        self,
        dims: tuple[int, ...],
        link: tuple[float, float],
        z_link: tuple[float, float] | None = None,
        units: int = 1,
        efa: Efa | None = None,
    ):
        dims = tuple(int(d) for d in dims)
        if not dims or any(d < 1 for d in dims) or len(dims) > len(DIM_NAMES):
            raise ValueError(f"torus dims must be 1 to 4 sizes >= 1, got {dims}")
        n = 1
        for d in dims:
            n *= d
        super().__init__(n, units, efa)
        self.dims = dims
        self.key = ("torus", dims, link, z_link, units, efa)
        for c in range(self.chips):
            for k, size in enumerate(dims):
                if size < 2:
                    continue
                bw, lat = z_link if (k == 2 and z_link is not None) else link
                for sign in "+-":
                    self._add(f"c{c}{sign}{DIM_NAMES[k]}", bw, lat)
        self._add_efa()

    def coords(self, chip: int) -> tuple[int, ...]:
        """The coordinates of `chip` in its unit (x first)."""
        return coords_of(chip % self.unit_chips, self.dims)

    def _route(self, a: int, b: int) -> tuple[int, ...]:
        base = a - a % self.unit_chips
        here, there = list(self.coords(a)), self.coords(b)
        links = []
        for k, size in enumerate(self.dims):
            d = (there[k] - here[k]) % size
            if d == 0:
                continue
            up = d < size - d or (d == size - d and here[k] % 2 == 0)
            hops = d if up else size - d
            sign = "+" if up else "-"
            for _ in range(hops):
                chip = base + index_of(tuple(here), self.dims)
                links.append(self._ids[f"c{chip}{sign}{DIM_NAMES[k]}"])
                here[k] = (here[k] + (1 if up else -1)) % size
        return tuple(links)

    def rings(self, chips: list[int], k: int) -> list[list[int]]:
        """Edge-disjoint directed Hamiltonian rings when `chips` are a full sub-torus of one
        unit (`cycles.directed_rings`), else one ring in the order given."""
        if len(chips) < 3 or len({self.unit_of(c) for c in chips}) > 1:
            return [list(chips)]
        base = chips[0] - chips[0] % self.unit_chips
        sub = sub_torus([c - base for c in chips], self.dims)
        if sub is None:
            return [list(chips)]
        dims, mapping = sub
        rings = directed_rings(dims, k)
        if not rings:
            return [list(chips)]
        return [[base + mapping[i] for i in ring] for ring in rings]


@dataclass(frozen=True)
class Level:
    """A switch level: `chips` under one switch (cumulative), per-chip port B/s per direction,
    latency s."""

    name: str
    chips: int
    bandwidth: float
    latency: float


class Switch(Topology):
    """Chips on levels of switches (lowest first), times `units` joined by EFA."""

    def __init__(self, levels: tuple[Level, ...], units: int = 1, efa: Efa | None = None):
        levels = tuple(sorted(levels, key=lambda lv: lv.chips))
        if not levels:
            raise ValueError("a switch topology needs at least one level")
        for lo, hi in zip(levels, levels[1:]):
            if hi.chips % lo.chips:
                raise ValueError(
                    f"switch level {hi.name} holds {hi.chips} chips, not a multiple of level "
                    f"{lo.name}'s {lo.chips}"
                )
        super().__init__(levels[-1].chips, units, efa)
        self.levels = levels
        self.key = ("switch", levels, units, efa)
        for c in range(self.chips):
            for lv in levels:
                self._add(f"c{c}.{lv.name}.up", lv.bandwidth, lv.latency)
                self._add(f"c{c}.{lv.name}.down", lv.bandwidth, 0.0)
        self._add_efa()

    def _route(self, a: int, b: int) -> tuple[int, ...]:
        for lv in self.levels:
            if a // lv.chips == b // lv.chips:
                return (self._ids[f"c{a}.{lv.name}.up"], self._ids[f"c{b}.{lv.name}.down"])
        raise AssertionError("chips of one unit share the top switch")
