"""`trnsim systems list` and `show`: the bundled system configs (chips, links, EFA, collective
settings) and the figures derived from them."""

from __future__ import annotations

import dataclasses
import json

import click

from trnsim.cli.app import echo, main
from trnsim.cli.configs import _FORMAT
from trnsim.config import (
    SystemConfig,
    list_systems,
    load_system,
    system_derived,
    system_dict,
    topology_text,
)
from trnsim.units import fmt_bytes, fmt_flops, fmt_rate

system_set_option = click.option(
    "--set",
    "overrides",
    metavar="KEY=VALUE",
    multiple=True,
    help="Override one system config key, with its unit (repeatable): a system key "
    "(--set nodes=4, --set topology.link.bandwidth=128GB/s, --set "
    "topology.levels.server.bandwidth=300GB/s), the chip (--set chip=trn3) or one of its keys "
    "(--set chip.hbm.bandwidth=4TB/s).",
)


@main.group(short_help="List and inspect the system configs (systems/*.yaml).")
def systems() -> None:
    """List and inspect the system configs (systems/*.yaml): chips joined by a torus of links
    or by switches, nodes joined by EFA, and the collective settings. The format, the rank
    numbering and the assumptions: docs/systems.md.

    \b
    Examples:
      trnsim systems list
      trnsim systems show trn2-48xl
      trnsim systems show trn2-48xl --set nodes=4 --json
    """


@systems.command("list", short_help="One line per bundled system config.")
def systems_list() -> None:
    """One line per bundled system: name, chips x chip, topology, ranks at the chip's LNC,
    description.

    \b
    Example:
      trnsim systems list
    """
    configs = [load_system(name) for name in list_systems()]
    width = max(len(cfg.name) for cfg in configs)
    for name, cfg in zip(list_systems(), configs):
        chips = f"{cfg.chips} x {cfg.chip.name}"
        ranks = f"{cfg.ranks} ranks at lnc {cfg.lnc}"
        echo(f"{name:<{width}}  {chips:<10} {topology_text(cfg):<26} {ranks:<20} {cfg.description}")


@systems.command(
    "show", short_help="Show one system config with units, and the figures derived from it."
)
@click.argument("system", metavar="SYSTEM")
@system_set_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON: every key in base units (bytes, bytes/s, s), the chip's whole config "
    "under 'chip', plus 'derived'.",
)
def systems_show(system: str, overrides: tuple[str, ...], as_json: bool) -> None:
    """Show system config SYSTEM (a name or a YAML path) with units, and the figures derived
    from it: chips and ranks, each chip's link bandwidth, the bisection bandwidth, EFA per
    chip, rank and node. The chip's own keys: trnsim configs show CHIP.

    \b
    Examples:
      trnsim systems show trn2-ultraserver
      trnsim systems show trn2-48xl --set nodes=8 --set lnc=1
      trnsim systems show trn2-48xl --set topology.link.bandwidth=128GB/s
      trnsim systems show trn3-ultraserver --set topology.levels.rack.bandwidth=640GB/s
      trnsim systems show trn2-48xl --set chip.hbm.bandwidth=4TB/s --json
      trnsim systems show my-cluster.yaml
    """
    cfg = load_system(system, overrides)
    if as_json:
        echo(json.dumps({**system_dict(cfg), "derived": system_derived(cfg)}, indent=2))
        return
    for line in _describe(cfg):
        echo(line)


# ---------------------------------------------------------------------------------------------
# the readable view


def _size(n: int) -> str:
    """A size as written: binary units when a whole number of KiB ('64 KiB'), else decimal
    ('1 MB', '56 MB': R-CC's thresholds)."""
    if n % 1024 == 0:
        return fmt_bytes(n)
    for scale, unit in ((10**9, "GB"), (10**6, "MB"), (10**3, "KB")):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"


_SYSTEM_FORMAT = {**_FORMAT, "bytes": _size}


def _row(key: str, text: str, help: str) -> str:
    return f"  {key:<26} {text:<16} # {help}"


def _rows(obj, skip: tuple[str, ...] = ()) -> list[str]:
    """`key  value  # help` for the plain fields of dataclass `obj`."""
    rows = []
    for f in dataclasses.fields(obj):
        unit = f.metadata["unit"]
        if f.name in skip or unit in ("section", "named"):
            continue
        value = getattr(obj, f.name)
        rows.append(_row(f.name, _SYSTEM_FORMAT.get(unit, str)(value), f.metadata["help"]))
    return rows


def _describe(cfg: SystemConfig) -> list[str]:
    chip, topo = cfg.chip, cfg.topology
    fields = {f.name: f.metadata["help"] for f in dataclasses.fields(cfg)}
    lines = [f"{cfg.name}: {cfg.description}", f"source: {cfg.source}", "", "system"]
    lines.append(_row("chip", chip.name, f"{chip.description} ({chip.source})"))
    for key in ("nodes", "lnc", "ranks_per_chip", "chips_per_node", "chips", "ranks"):
        lines.append(_row(key, str(getattr(cfg, key)), fields[key]))
    lines += ["", "topology", *_rows(topo, skip=("dims",) if topo.kind == "switch" else ())]
    if topo.kind == "torus":
        lines += ["", "topology.link", *_rows(topo.link)]
        if len(topo.dims) == 3:
            lines += ["", "topology.z_link", *_rows(topo.z_link)]
    for level in topo.levels:
        lines += ["", f"topology.levels.{level.name}", *_rows(level, skip=("name",))]
    lines += ["", "efa", *_rows(cfg.efa), "", "collectives", *_rows(cfg.collectives)]
    lines += ["", "chip.chip_links", *_rows(chip.chip_links), "", "chip.cc", *_rows(chip.cc)]
    return lines + ["", "derived", *_derived_lines(cfg)]


def _derived_lines(cfg: SystemConfig) -> list[str]:
    d = system_derived(cfg)
    links = d["links"]
    if cfg.topology.kind == "torus":
        parts = [f"{links['xy']['count']} X/Y x {fmt_rate(links['xy']['bandwidth'])}"]
        if links["z"]["count"]:
            parts.append(f"{links['z']['count']} Z x {fmt_rate(links['z']['bandwidth'])}")
    else:
        parts = [f"{level.name} {fmt_rate(level.bandwidth)}" for level in cfg.topology.levels]
    bisection = d["bisection_bandwidth"]
    efa = d["efa"]
    chip_total = cfg.chip.chip_links.bandwidth
    lines = [
        f"  {'chips':<12} {d['chips']} ({cfg.nodes} x {d['chips_per_node']} per node), "
        f"{d['ranks']} ranks ({d['ranks_per_chip']} per chip of {d['logical_cores_per_chip']} "
        f"logical cores at lnc {cfg.lnc})",
        f"  {'links':<12} {fmt_rate(links['total'])} per chip per direction "
        f"({' + '.join(parts)}); chip.chip_links.bandwidth {fmt_rate(chip_total)}",
        f"  {'bisection':<12} {fmt_rate(bisection['node'])} per direction across one node"
        + (f", {fmt_rate(bisection['system'])} across the system (EFA)" if cfg.nodes > 1 else ""),
        f"  {'efa':<12} {fmt_rate(efa['chip'])} per chip, {fmt_rate(efa['rank'])} per rank, "
        f"{fmt_rate(efa['node'])} per node",
        f"  {'hbm':<12} {fmt_bytes(d['hbm_capacity'])} in all",
        f"  {'peak bf16':<12} {fmt_flops(d['peak_flops_bfloat16'])} published, in all",
    ]
    return lines
