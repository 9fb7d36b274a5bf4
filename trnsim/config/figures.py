"""Figures computed from a loaded chip config: plain data (`to_dict`), the tensor engine's peak
FLOP/s per dtype (`peak_flops_per_core`), and the derived totals set beside the published ones
(`derived`); and from a system config: its plain data in the shape of its YAML (`system_dict`),
its derived figures (`system_derived`) and a one-phrase topology (`topology_text`).
"""

from __future__ import annotations

import dataclasses

from trnsim.config.system import SystemConfig
from trnsim.config.tree import ChipConfig

__all__ = [
    "to_dict",
    "peak_flops_per_core",
    "derived",
    "system_dict",
    "system_derived",
    "topology_text",
]


def to_dict(cfg) -> dict:
    """The config as plain data in base units (bytes, Hz, bytes/s, seconds, FLOP/s); tuples
    become lists, so the result is JSON-ready."""
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, tuple):
        return [to_dict(x) for x in cfg]
    return cfg


# dtype name -> which tensor-engine rate applies (bf16, fp16 and tf32 share the bf16 rate)
_DTYPE_RATE = {
    "bfloat16": "bf16",
    "float16": "bf16",
    "tfloat32": "bf16",
    "float32": "fp32",
    "float8": "fp8",
    "float8_e4m3": "fp8",
    "float8_e5m2": "fp8",
    "float8_e4m3fn": "fp8",
    "mx": "mx",
    "float8_e4m3fn_x4": "mx",
    "float8_e5m2_x4": "mx",
    "float4_e2m1fn_x4": "mx",
}


def peak_flops_per_core(cfg: ChipConfig, dtype_name: str) -> float:
    """Dense matmul peak FLOP/s of one physical NeuronCore for inputs of `dtype_name`:
    rows x cols x 2 x clock x rate, where rate is 1 for bfloat16/float16/tfloat32, fp32_rate for
    float32, fp8_rate for the float8 types and mx_rate for the MX x4 types (0.0 if the core has
    no MX). Raises ValueError for a dtype the tensor engine does not take."""
    kind = _DTYPE_RATE.get(dtype_name)
    if kind is None:
        raise ValueError(
            f"no tensor-engine peak for dtype '{dtype_name}'; known: {', '.join(_DTYPE_RATE)}"
        )
    t = cfg.core.tensor
    rate = {"bf16": 1, "fp32": t.fp32_rate, "fp8": t.fp8_rate, "mx": t.mx_rate}[kind]
    return float(t.rows * t.cols * 2 * t.clock_hz * rate)


def derived(cfg: ChipConfig) -> dict:
    """Figures computed from the config, beside the published ones they should match.

    `peak_flops`: per dtype (bfloat16, float16, float8, float32, and mx when the core has MX),
    for one `core`, the `chip` (x cores), the `published` chip figure (None if not published),
    and the `gap` = published / chip - 1 (None without a published figure). Also SBUF and PSUM
    bytes, DMA bandwidth (engines x engine_bandwidth) per core and per chip, HBM capacity and
    bandwidth per stack, and the number of logical cores at the default lnc.
    """
    t = cfg.core.tensor
    core = {
        name: peak_flops_per_core(cfg, name)
        for name in ("bfloat16", "float16", "float8", "float32", "mx")
        if name != "mx" or t.mx_rate > 0
    }
    chip = {name: value * cfg.cores for name, value in core.items()}
    published = {
        name: getattr(cfg.peak_flops, "bfloat16" if name == "float16" else name) or None
        for name in chip
    }
    gap = {name: published[name] / chip[name] - 1 if published[name] else None for name in chip}
    sbuf = cfg.core.sbuf.partitions * cfg.core.sbuf.partition_bytes
    psum = cfg.core.psum.partitions * cfg.core.psum.banks * cfg.core.psum.bank_bytes
    dma = cfg.core.dma.engines * cfg.core.dma.engine_bandwidth
    return {
        "peak_flops": {"core": core, "chip": chip, "published": published, "gap": gap},
        "sbuf_bytes": {"core": sbuf, "chip": sbuf * cfg.cores},
        "psum_bytes": {"core": psum, "chip": psum * cfg.cores},
        "dma_bandwidth": {
            "core": dma,
            "chip": dma * cfg.cores,
            "published": cfg.dma_bandwidth,
            "gap": cfg.dma_bandwidth / (dma * cfg.cores) - 1,
        },
        "hbm": {
            "capacity": cfg.hbm.stacks * cfg.hbm.stack_capacity,
            "bandwidth": cfg.hbm.bandwidth,
            "bandwidth_per_stack": cfg.hbm.bandwidth / cfg.hbm.stacks,
        },
        "logical_cores": cfg.cores // cfg.lnc,
    }


# ---------------------------------------------------------------------------------------------
# systems


def system_dict(cfg: SystemConfig) -> dict:
    """The system as plain data in base units, keyed as its YAML is (a torus without `levels`,
    and without `z_link` below 3 dimensions; a switch with `levels` keyed by name and without
    `dims`/`link`/`z_link`), so that a JSON
    path is the `--set` path; the chip's whole config under `chip`."""
    data = to_dict(cfg)
    topo = data["topology"]
    if cfg.topology.kind == "torus":
        del topo["levels"]
        if len(cfg.topology.dims) < 3:  # no Z links (the field holds `link`'s figures)
            del topo["z_link"]
    else:
        for key in ("dims", "link", "z_link"):
            del topo[key]
        topo["levels"] = {level.pop("name"): level for level in topo["levels"]}
    return data


def topology_text(cfg: SystemConfig) -> str:
    """'torus 4x4', 'torus 4x4x4', 'switch 16/64' (chips per level), with ', 4 nodes (EFA)'."""
    topo = cfg.topology
    if topo.kind == "torus":
        text = "torus " + "x".join(str(d) for d in topo.dims)
    else:
        text = "switch " + "/".join(str(level.chips) for level in topo.levels)
    return text + (f", {cfg.nodes} nodes (EFA)" if cfg.nodes > 1 else "")


def system_derived(cfg: SystemConfig) -> dict:
    """Figures that follow from a system config (bandwidths in bytes/s, one direction).

    `links`: per chip, each link kind's count and bandwidth (a torus's `xy` and `z` links, a
    switch's levels) and their `total`; `bisection_bandwidth`: across the narrowest cut of one
    node (a torus cut across its dimension with the least bandwidth: 2 x chips / size links of
    that dimension; a switch: half the chips at the top level's bandwidth) and of the whole
    system (the EFA cut between halves of the nodes, when there are several); `efa`: per chip,
    per rank and per node; `ranks`, `chips`, HBM and published bf16 FLOP/s for the system.
    """
    topo, n = cfg.topology, cfg.chips_per_node
    if topo.kind == "torus":
        xy = sum(topo.links_per_dim(d) for d in range(min(2, len(topo.dims))))
        z = topo.links_per_dim(2) if len(topo.dims) == 3 else 0
        links = {
            "xy": {"count": xy, "bandwidth": topo.link.bandwidth},
            "z": {"count": z, "bandwidth": topo.z_link.bandwidth if z else 0.0},
        }
        total = xy * topo.link.bandwidth + (z * topo.z_link.bandwidth if z else 0.0)
        cuts = [
            2 * (n // size) * topo.dim_link(d).bandwidth
            for d, size in enumerate(topo.dims)
            if size >= 2
        ]
        node_bisection = min(cuts) if cuts else 0.0
    else:
        links = {level.name: {"count": 1, "bandwidth": level.bandwidth} for level in topo.levels}
        total = sum(level.bandwidth for level in topo.levels)
        node_bisection = n / 2 * topo.levels[-1].bandwidth if n > 1 else 0.0
    efa = cfg.efa.bandwidth
    system_bisection = (cfg.nodes // 2) * n * efa if cfg.nodes > 1 else node_bisection
    return {
        "chips": cfg.chips,
        "chips_per_node": n,
        "ranks": cfg.ranks,
        "ranks_per_chip": cfg.ranks_per_chip,
        "logical_cores_per_chip": cfg.logical_cores,
        "links": {**links, "total": total},
        "bisection_bandwidth": {"node": node_bisection, "system": system_bisection},
        "efa": {"chip": efa, "rank": efa / cfg.ranks_per_chip, "node": efa * n},
        "hbm_capacity": cfg.chips * cfg.chip.hbm.stacks * cfg.chip.hbm.stack_capacity,
        "peak_flops_bfloat16": cfg.chips * cfg.chip.peak_flops.bfloat16,
    }
