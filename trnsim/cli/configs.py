"""`trnsim configs list` and `show`: the bundled chip configs and their derived figures."""

from __future__ import annotations

import dataclasses
import json

import click

from trnsim.cli.app import echo, main, set_option
from trnsim.config import ChipConfig, derived, list_chips, load_chip, to_dict
from trnsim.units import fmt_bytes, fmt_flops, fmt_hz, fmt_rate, fmt_time_ns


@main.group(short_help="List and inspect the chip configs (configs/*.yaml).")
def configs() -> None:
    """List and inspect the chip configs (configs/*.yaml).

    \b
    Examples:
      trnsim configs list
      trnsim configs show trn3 --json
    """


@configs.command("list", short_help="One line per bundled chip config.")
def configs_list() -> None:
    """One line per bundled chip: name, cores x NeuronCore version, description.

    \b
    Example:
      trnsim configs list
    """
    for name in list_chips():
        cfg = load_chip(name)
        echo(f"{name:<6} {cfg.cores} x {cfg.core.version:<6} {cfg.description}")


@configs.command(
    "show", short_help="Show one chip config with units, and the figures derived from it."
)
@click.argument("chip", metavar="CHIP")
@set_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON: every key in base units (bytes, Hz, bytes/s, s), plus 'derived'.",
)
def configs_show(chip: str, overrides: tuple[str, ...], as_json: bool) -> None:
    """Show chip config CHIP (a name or a YAML path) with units, and the figures derived from
    it (peak FLOP/s per dtype, SBUF/PSUM/DMA/HBM totals) beside the published ones.

    \b
    Examples:
      trnsim configs show trn2
      trnsim configs show trn2 --set core.sbuf.partition_bytes=448KiB --set hbm.bandwidth=4TB/s
      trnsim configs show my-chip.yaml --json
    """
    cfg = load_chip(chip, overrides)
    if as_json:
        echo(json.dumps({**to_dict(cfg), "derived": derived(cfg)}, indent=2))
        return
    for line in _describe(cfg):
        echo(line)


# ---------------------------------------------------------------------------------------------
# the readable view

_FORMAT = {
    "bytes": fmt_bytes,
    "Hz": fmt_hz,
    "B/s": fmt_rate,
    "s": lambda s: fmt_time_ns(s * 1e9),
    "FLOP/s": lambda x: fmt_flops(x) if x else "not published",
    "cycles": lambda c: f"{c} cycles",
    "bool": lambda b: "true" if b else "false",
    "list": lambda xs: ", ".join(str(x) for x in xs),
    "ratio": lambda r: f"{r:g}",
}


def _describe(cfg: ChipConfig) -> list[str]:
    lines = [f"{cfg.name}: {cfg.description}", f"source: {cfg.source}"]
    lines += _section(cfg, "chip")
    lines += ["", "derived"] + _derived_lines(cfg)
    return lines


def _section(obj, title: str) -> list[str]:
    """A titled block of `key  value  # help`, followed by its subsections."""
    rows, subsections = [], []
    for f in dataclasses.fields(obj):
        unit, value = f.metadata["unit"], getattr(obj, f.name)
        if unit == "section":
            subsections += _section(value, f"{title}.{f.name}" if title != "chip" else f.name)
        elif f.name not in ("name", "description", "source"):
            text = _FORMAT.get(unit, str)(value)
            rows.append(f"  {f.name:<26} {text:<16} # {f.metadata['help']}")
    return ["", title, *rows, *subsections]


def _derived_lines(cfg: ChipConfig) -> list[str]:
    d = derived(cfg)
    flops = d["peak_flops"]
    lines = [f"  {'peak FLOP/s':<12} {'core':>15} {'chip':>15} {'published':>15} {'gap':>8}"]
    for dtype, chip in flops["chip"].items():
        published, gap = flops["published"][dtype], flops["gap"][dtype]
        lines.append(
            f"  {dtype:<12} {fmt_flops(flops['core'][dtype]):>15} {fmt_flops(chip):>15} "
            f"{fmt_flops(published) if published else '-':>15} "
            f"{f'{gap:+.1%}' if gap is not None else '-':>8}"
        )
    dma = d["dma_bandwidth"]
    hbm = d["hbm"]
    lines += [
        f"  {'sbuf':<12} {fmt_bytes(d['sbuf_bytes']['core'])} per core, "
        f"{fmt_bytes(d['sbuf_bytes']['chip'])} per chip",
        f"  {'psum':<12} {fmt_bytes(d['psum_bytes']['core'])} per core, "
        f"{fmt_bytes(d['psum_bytes']['chip'])} per chip",
        f"  {'dma':<12} {fmt_rate(dma['core'])} per core ({cfg.core.dma.engines} engines x "
        f"{fmt_rate(cfg.core.dma.engine_bandwidth)}), {fmt_rate(dma['chip'])} per chip "
        f"(published {fmt_rate(dma['published'])}, gap {dma['gap']:+.1%})",
        f"  {'hbm':<12} {fmt_bytes(hbm['capacity'])} in {cfg.hbm.stacks} stacks, "
        f"{fmt_rate(hbm['bandwidth_per_stack'])} per stack",
        f"  {'logical':<12} {d['logical_cores']} logical cores at lnc={cfg.lnc}",
    ]
    return lines
