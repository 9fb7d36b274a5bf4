"""`load_system`: read, merge, override and build a system config with its chip's config, then
check the rules that involve more than one field (`trnsim.config` re-exports `load_system`).

The system file names its chip (`chip: trn2`, a bundled name or a path relative to the file);
the chip's config is read into the system's tree under `chip`, so that `--set chip.hbm.
bandwidth=4TB/s` reaches it and its errors name the chip file's lines. `--set chip=trn3` swaps
the chip (applied before the other overrides, whatever their order).

Link figures have one owner: the system file gives each link's (or each switch level's)
bandwidth and latency; the chip config's `chip_links` keeps the published per-chip totals, and
a system whose in-node links add up to more than those is refused (`_check_links`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from trnsim.config.build import apply_override, build
from trnsim.config.load import (
    CHIPS,
    SYSTEMS,
    ConfigError,
    Origins,
    _brief,
    fail,
    latest,
    merge,
    read_tree,
    resolve,
    where_of,
)
from trnsim.config.rules import finish_chip
from trnsim.config.system import ALGORITHMS, TOPOLOGIES, SystemConfig, TopologyConfig
from trnsim.config.tree import ChipConfig
from trnsim.units import fmt_rate

__all__ = ["load_system", "list_systems", "systems_dir", "OVERRIDE_EXAMPLE"]

OVERRIDE_EXAMPLE = "topology.link.bandwidth=200GB/s"
_SLACK = 1 + 1e-9  # a sum of figures equal to the total is not "more", whatever the rounding


def systems_dir() -> Path:
    """The directory of the bundled system configs: `<trnsim package>/systems` when
    installed, `<repo>/systems` in a checkout."""
    return SYSTEMS.directory()


def list_systems() -> list[str]:
    """Names of the bundled system configs, sorted (e.g. ['trn2-48xl', 'trn2-ultraserver'])."""
    return SYSTEMS.names()


def load_system(name_or_path: str, overrides: Sequence[str] = ()) -> SystemConfig:
    """Load, merge (`base:`), override and validate a system config and its chip's config.

    `name_or_path` is a bundled system name (`trn2-48xl`) or a path to a YAML file (it contains
    `/` or ends with `.yaml`). `overrides` are `key.path=value` strings, applied after
    inheritance: system keys (`nodes=4`, `topology.link.bandwidth=200GB/s`,
    `topology.levels.server.bandwidth=300GB/s`), the chip (`chip=trn3`) or the chip's keys
    (`chip.hbm.bandwidth=4TB/s`). Raises ConfigError (one line: file, line, key).
    """
    path = resolve(str(name_or_path), None, "", SYSTEMS)
    tree, origins = read_tree(path, bundle=SYSTEMS)
    rest = []
    for text in overrides:
        if str(text).partition("=")[0].strip() == "chip":
            _set_chip(tree, origins, str(text))
        else:
            rest.append(text)
    chip_path = _include_chip(tree, origins)
    for text in rest:
        apply_override(tree, origins, text, SystemConfig, OVERRIDE_EXAMPLE)
    z_given = _default_z_link(tree, origins)
    cfg = build(SystemConfig, tree, (), origins)
    chip = finish_chip(cfg.chip, chip_path, origins, ("chip",))
    topology = _check_topology(cfg.topology, origins, z_given)
    chip, lnc, ranks_per_chip = _check_ranks(cfg, chip, origins)
    _check_collectives(cfg, origins)
    _check_links(topology, chip, origins)
    return dataclasses.replace(
        cfg,
        chip=chip,
        topology=topology,
        lnc=lnc,
        ranks_per_chip=ranks_per_chip,
        source=str(path),
    )


# ---------------------------------------------------------------------------------------------
# the chip, read into the system's tree


def _set_chip(tree: dict, origins: Origins, text: str) -> None:
    """`--set chip=NAME|PATH`: another chip for the system."""
    value = text.partition("=")[2].strip()
    if not value:
        raise ConfigError(f"--set {text}: expected chip=NAME or chip=PATH, e.g. chip=trn3")
    tree["chip"] = value
    for key in [k for k in origins if k[:1] == ("chip",)]:
        del origins[key]
    origins[("chip",)] = (f"--set {text}", None, len(origins))


def _include_chip(tree: dict, origins: Origins) -> Path:
    """Replace the `chip:` name or path in `tree` by the chip config's own tree (its bases
    merged), its origins under `chip`; return the chip file."""
    if "chip" not in tree:
        fail(
            origins,
            (),
            "missing key 'chip' (the chip config; a chip name or a path to a YAML file)",
        )
    ref = tree["chip"]
    if not isinstance(ref, str):
        fail(
            origins, ("chip",), f"expected a chip name or a path to a YAML file, got {_brief(ref)}"
        )
    where, line, _ = origins[("chip",)]
    by_set = where.startswith("--set ")
    prefix = f"{where}: " if by_set else f"{where}:{line}: chip: " if line else f"{where}: chip: "
    relative_to = None if by_set else Path(where).parent
    chip_path = resolve(ref, relative_to, prefix, CHIPS)
    chip_tree, chip_origins = read_tree(chip_path, where=prefix)
    tree["chip"] = chip_tree
    for key, origin in chip_origins.items():
        origins[("chip", *key)] = origin
    return chip_path


def _default_z_link(tree: dict, origins: Origins) -> bool:
    """A torus's `z_link` keys default to `link`'s (merged key by key, so `--set topology.
    z_link.bandwidth=...` alone is enough); returns whether `z_link` was given."""
    topo = tree.get("topology")
    if not isinstance(topo, dict):
        return False
    given = "z_link" in topo
    link, z_link = topo.get("link"), topo.get("z_link", {})
    if topo.get("kind") != "torus" or not isinstance(link, dict) or not isinstance(z_link, dict):
        return given
    for key in link:
        if key not in z_link and ("topology", "link", key) in origins:
            origins[("topology", "z_link", key)] = origins[("topology", "link", key)]
    if not given:
        origins[("topology", "z_link")] = origins.get(("topology", "link"), origins[()])
    topo["z_link"] = merge(link, z_link)
    return given


# ---------------------------------------------------------------------------------------------
# rules that involve more than one field


def _check_topology(topo: TopologyConfig, origins: Origins, z_given: bool) -> TopologyConfig:
    """The keys of the topology's kind, and only those; switch levels sorted lowest first."""
    at = ("topology",)
    if topo.kind not in TOPOLOGIES:
        fail(origins, (*at, "kind"), f"expected one of {', '.join(TOPOLOGIES)}, got {topo.kind!r}")
    if topo.kind == "torus":
        if topo.levels:
            fail(origins, (*at, "levels"), "only a switch has levels (kind is torus)")
        if not topo.dims:
            fail(
                origins,
                at,
                "missing key 'dims' (a torus's chips per dimension, x first, e.g. [4, 4])",
            )
        if len(topo.dims) > 3:
            fail(origins, (*at, "dims"), f"at most 3 dimensions (x, y, z), got {list(topo.dims)}")
        if topo.link is None:
            fail(origins, at, "missing key 'link' (each X and Y neighbour link; a section)")
        if z_given and len(topo.dims) < 3:
            z_keys = [k for k in origins if k[:2] == (*at, "z_link")]
            fail(
                origins,
                latest(origins, *z_keys, (*at, "dims")),
                f"only a 3-D torus has Z links; dims {list(topo.dims)} has {len(topo.dims)}",
            )
        return topo
    for key in ("dims", "link", "z_link"):
        if getattr(topo, key):
            fail(origins, (*at, key), "only a torus has dims, link and z_link (kind is switch)")
    if not topo.levels:
        fail(origins, at, "missing key 'levels' (a switch's levels, keyed by name; a mapping)")
    levels = tuple(sorted(topo.levels, key=lambda level: level.chips))
    for below, level in zip(levels, levels[1:]):
        if level.chips <= below.chips or level.chips % below.chips:
            fail(
                origins,
                latest(
                    origins,
                    (*at, "levels", level.name, "chips"),
                    (*at, "levels", below.name, "chips"),
                ),
                f"level {level.name} has {level.chips} chips, not a larger multiple of level "
                f"{below.name}'s {below.chips}",
            )
    return dataclasses.replace(topo, levels=levels)


def _check_ranks(
    cfg: SystemConfig, chip: ChipConfig, origins: Origins
) -> tuple[ChipConfig, int, int]:
    """(the chip at the system's lnc, lnc, ranks_per_chip): the system's `lnc`, when given, is
    its chips' (one of chip.lnc_allowed); ranks_per_chip divides the logical cores."""
    lnc = cfg.lnc or chip.lnc
    if cfg.lnc:
        if lnc not in chip.lnc_allowed or chip.cores % lnc:
            fail(
                origins,
                latest(origins, ("lnc",), ("chip", "lnc_allowed")),
                f"lnc ({lnc}) is not in chip.lnc_allowed {list(chip.lnc_allowed)} "
                f"({where_of(origins, ('chip', 'lnc_allowed'))})",
            )
        chip_lnc_set = origins.get(("chip", "lnc"), ("",))[0].startswith("--set ")
        if chip_lnc_set and chip.lnc != lnc:
            fail(
                origins,
                latest(origins, ("lnc",), ("chip", "lnc")),
                f"lnc ({lnc}) and chip.lnc ({chip.lnc}) disagree: set one (the system's lnc, "
                "when given, is its chips' lnc)",
            )
        chip = dataclasses.replace(chip, lnc=lnc)
    logical = chip.cores // lnc
    ranks_per_chip = cfg.ranks_per_chip or logical
    if logical % ranks_per_chip:
        fail(
            origins,
            latest(origins, ("ranks_per_chip",), ("lnc",), ("chip", "lnc")),
            f"ranks_per_chip ({ranks_per_chip}) must divide the chip's logical cores "
            f"({logical} = chip.cores {chip.cores} / lnc {lnc})",
        )
    return chip, lnc, ranks_per_chip


def _check_collectives(cfg: SystemConfig, origins: Origins) -> None:
    c = cfg.collectives
    if c.algorithm not in ALGORITHMS:
        fail(
            origins,
            ("collectives", "algorithm"),
            f"expected one of {', '.join(ALGORITHMS)}, got {c.algorithm!r}",
        )
    if c.mesh_max > c.rdh_max:
        fail(
            origins,
            latest(origins, ("collectives", "mesh_max"), ("collectives", "rdh_max")),
            f"collectives.mesh_max ({c.mesh_max:,} B) exceeds collectives.rdh_max "
            f"({c.rdh_max:,} B)",
        )


def _check_links(topo: TopologyConfig, chip: ChipConfig, origins: Origins) -> None:
    """The system file owns the link figures, the chip config the published per-chip totals
    (`chip_links`): a chip's in-node links (a torus's X and Y links; a switch's levels) may not
    add up to more links or more bandwidth than those. A torus's Z links cross instances (the
    UltraServer's), outside the chip's in-instance figure, and are not counted."""
    total_key = ("chip", "chip_links", "bandwidth")
    total = chip.chip_links.bandwidth
    if topo.kind == "torus":
        links = sum(topo.links_per_dim(d) for d in range(min(2, len(topo.dims))))
        count_key = ("chip", "chip_links", "links")
        if links > chip.chip_links.links:
            fail(
                origins,
                latest(origins, ("topology", "dims"), count_key),
                f"dims {list(topo.dims)} give each chip {links} X and Y links, more than "
                f"chip.chip_links.links ({chip.chip_links.links}, {where_of(origins, count_key)})",
            )
        key, what = ("topology", "link", "bandwidth"), f"{links} X and Y links x "
        used = links * topo.link.bandwidth
        what += f"{fmt_rate(topo.link.bandwidth)} = {fmt_rate(used)}"
    else:
        used = sum(level.bandwidth for level in topo.levels)
        key = latest(origins, *(("topology", "levels", lv.name, "bandwidth") for lv in topo.levels))
        what = " + ".join(fmt_rate(level.bandwidth) for level in topo.levels)
        what = f"the levels' {what} = {fmt_rate(used)}"
    if used > total * _SLACK:
        loc = latest(origins, key, total_key)
        if loc == key:
            what = (
                f"{what} per chip exceeds chip.chip_links.bandwidth ({fmt_rate(total)}, "
                f"{where_of(origins, total_key)})"
            )
        else:
            what = (
                f"chip.chip_links.bandwidth ({fmt_rate(total)}) is less than {what} per chip "
                f"({'.'.join(key)}, {where_of(origins, key)})"
            )
        fail(
            origins,
            loc,
            f"{what}: the system file owns each link's figures, the chip config the per-chip "
            "total (docs/systems.md)",
        )
