"""Chip configuration: a frozen dataclass tree loaded from `configs/*.yaml`.

This module is the only reader of chip YAML. Every field carries its unit kind and a one-line
description in its metadata (`unit`, `help`); the loader uses them to parse quantities with units
(`2.4GHz`, `224KiB`, `2.9TB/s`, `1.3us`) into base units (Hz, bytes, bytes/s, seconds).

Unit kinds: `count` (int), `ratio` (float), `bool`, `str`, `bytes` (int), `Hz` (int), `B/s`
(float, bytes per second), `s` (float, seconds), `cycles` (int, engine cycles), `FLOP/s` (float).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trnsim.errors import TrnsimError
from trnsim.units import UnitError, expected, parse_quantity
from trnsim.yamlpos import load_yaml


def q(unit: str, help: str, **kw):
    """A config field with a unit kind and a description (gem5's `Param.X(default, help)`)."""
    return field(metadata={"unit": unit, "help": help}, **kw)


# ----------------------------------------------------------------------------------------------
# per NeuronCore


@dataclass(frozen=True)
class TensorEngineConfig:
    """The PE array: a systolic matmul/transpose engine reading SBUF and writing PSUM."""

    clock_hz: int = q("Hz", "TensorE clock")
    rows: int = q("count", "PE array rows = contraction (partition) size per matmul")
    cols: int = q("count", "PE array columns = max stationary free size (M)")
    moving_free_max: int = q("count", "max moving free size N with an fp32 PSUM destination")
    moving_free_max_bf16_dst: int = q("count", "max moving free size N with a bf16 PSUM dst")
    bf16_dst: bool = q("bool", "matmul may write bf16 into PSUM (NC-v4)")
    stationary_min_cycles: int = q("cycles", "the 64 in max(min(64, N_stat), N_moving)")
    mm_init_latency_cycles: int = q("cycles", "MM_INIT_LATENCY: minimum matmul initiation")
    load_stationary_cycles: int = q("cycles", "LoadStationary II, hidden when in background")
    fp32_rate: float = q("ratio", "fp32 throughput relative to bf16 (1/4)")
    fp8_double_row: bool = q("bool", "fp8 double-row mode: K=256 per pass at bf16 speed")
    fp8_rate: float = q("ratio", "fp8 throughput relative to bf16 (2 with double-row)")
    mx_rate: float = q("ratio", "MX (mxfp8/mxfp4) throughput relative to bf16; 0 if absent")
    transpose_fp32_rate: float = q("ratio", "fp32 transpose-mode throughput relative to bf16")


@dataclass(frozen=True)
class VectorEngineConfig:
    """VectorE (DVE): two-input elementwise ops, reductions, copies, memset, select."""

    clock_hz: int = q("Hz", "VectorE clock")
    min_ii_cycles: int = q("cycles", "MIN_II: minimum initiation interval")
    fixed_overhead_cycles: int = q("cycles", "static overhead added to a dependent instruction")
    perf_mode: bool = q("bool", "bf16/fp16 fast modes (NC-v3+)")
    copy_fast_factor: float = q("ratio", "tensor_copy/tensor_scalar speedup, SBUF->SBUF 16-bit")
    copy_fast_factor_strided: float = q("ratio", "same, non-contiguous or one side in PSUM")
    tt_fast_factor: float = q("ratio", "tensor_tensor speedup, both SBUF, all 16-bit")
    max_free_elements: int = q("count", "max elements per partition per instruction")
    psum_max_free_elements: int = q("count", "max elements per partition when in PSUM")


@dataclass(frozen=True)
class ScalarEngineConfig:
    """ScalarE (ACT): func(x * scale + bias) with an optional free-axis reduction."""

    clock_hz: int = q("Hz", "ScalarE clock")
    min_ii_cycles: int = q("cycles", "MIN_II")
    fixed_overhead_cycles: int = q("cycles", "static overhead added to a dependent instruction")
    reduce_cycles: int = q("cycles", "ActReadAccumulator: extra cycles to read the reduction")
    perf_mode_factor: float = q("ratio", "16-bit tensor_copy/tensor_scalar speedup (1 if none)")


@dataclass(frozen=True)
class GpSimdEngineConfig:
    """GpSimd (Pool): eight SIMD cores, 16 partitions each; iota, masks, integer-exact ops."""

    clock_hz: int = q("Hz", "GpSimd clock")
    min_ii_cycles: int = q("cycles", "MIN_II")
    start_cycles: int = q("cycles", "GPSIMD_START: fixed start cost of iota/affine_select")
    fixed_overhead_cycles: int = q("cycles", "static overhead added to a dependent instruction")


@dataclass(frozen=True)
class SbufConfig:
    """State buffer: on-chip SRAM, partitions x bytes, read and written by all engines."""

    partitions: int = q("count", "partitions (lanes)")
    partition_bytes: int = q("bytes", "bytes per partition")


@dataclass(frozen=True)
class PsumConfig:
    """Partial-sum buffer: fp32 accumulators, partitions x banks x bytes."""

    partitions: int = q("count", "partitions")
    banks: int = q("count", "banks per partition (accumulation groups)")
    bank_bytes: int = q("bytes", "bytes per bank per partition")


@dataclass(frozen=True)
class DmaConfig:
    """The core's DMA engines: each serves a slice of partitions and has its own queues."""

    engines: int = q("count", "DMA engines per NeuronCore")
    queues_per_engine: int = q("count", "hardware queues per DMA engine")
    engine_bandwidth: float = q("B/s", "sustained bytes/s of one DMA engine")
    fixed_cost: float = q("s", "per-transfer fixed cost (descriptor setup, semaphore)")
    descriptor_cost: float = q("s", "processing cost of each descriptor")
    max_descriptor_bytes: int = q("bytes", "largest contiguous run one descriptor moves")
    packet_bytes: int = q("bytes", "round-robin arbitration granularity between queues")
    transpose_hbm_rate: float = q("ratio", "DMA transpose HBM->SBUF throughput vs copy")
    transpose_sbuf_rate: float = q("ratio", "DMA transpose SBUF->SBUF throughput vs copy")


@dataclass(frozen=True)
class CoreConfig:
    """One physical NeuronCore."""

    version: str = q("str", "NeuronCore version (NC-v2, NC-v3, NC-v4)")
    tensor: TensorEngineConfig = q("section", "Tensor engine")
    vector: VectorEngineConfig = q("section", "Vector engine")
    scalar: ScalarEngineConfig = q("section", "Scalar engine")
    gpsimd: GpSimdEngineConfig = q("section", "GpSimd engine")
    sbuf: SbufConfig = q("section", "SBUF")
    psum: PsumConfig = q("section", "PSUM")
    dma: DmaConfig = q("section", "DMA engines")
    semaphores: int = q("count", "hardware semaphores per core")
    vector_gpsimd_share_sbuf: bool = q("bool", "Vector and GpSimd cannot access SBUF at once")
    vector_scalar_share_psum: bool = q("bool", "Vector and Scalar cannot access PSUM at once")


# ----------------------------------------------------------------------------------------------
# per chip


@dataclass(frozen=True)
class HbmConfig:
    """Device memory: stacks, each shared by a group of physical cores."""

    stacks: int = q("count", "HBM stacks")
    stack_capacity: int = q("bytes", "capacity of one stack")
    bandwidth: float = q("B/s", "total chip HBM bandwidth (shared equally by the stacks)")
    cores_per_stack: int = q("count", "physical NeuronCores served by one stack")
    alignment: int = q("bytes", "allocation alignment of device tensors")


@dataclass(frozen=True)
class HostLinkConfig:
    """The host <-> device link (PCIe)."""

    bandwidth: float = q("B/s", "host<->device bandwidth per chip")
    latency: float = q("s", "one-way latency of a host transfer")
    launch_overhead: float = q("s", "host time to launch one kernel")


@dataclass(frozen=True)
class ChipLinkConfig:
    """Chip-to-chip links (NeuronLink)."""

    links: int = q("count", "links per chip")
    bandwidth: float = q("B/s", "total chip-to-chip bandwidth per chip")
    topology: str = q("str", "topology description")


@dataclass(frozen=True)
class PeakFlopsConfig:
    """Published dense peak FLOP/s of the whole chip, per input dtype (0 = not published)."""

    bfloat16: float = q("FLOP/s", "dense bf16/fp16")
    float8: float = q("FLOP/s", "dense fp8")
    float32: float = q("FLOP/s", "dense fp32")
    mx: float = q("FLOP/s", "dense MX (mxfp8/mxfp4)")


@dataclass(frozen=True)
class ChipConfig:
    """A Trainium chip: N physical NeuronCores sharing HBM, grouped into logical cores."""

    name: str = q("str", "chip name")
    description: str = q("str", "one-line description")
    cores: int = q("count", "physical NeuronCores per chip")
    lnc: int = q("count", "default logical NeuronCore size (physical cores per logical)")
    lnc_allowed: tuple[int, ...] = q("list", "allowed logical NeuronCore sizes")
    core: CoreConfig = q("section", "per-NeuronCore parameters")
    hbm: HbmConfig = q("section", "HBM")
    dma_bandwidth: float = q("B/s", "published chip DMA bandwidth")
    host_link: HostLinkConfig = q("section", "host link")
    chip_links: ChipLinkConfig = q("section", "chip-to-chip links")
    peak_flops: PeakFlopsConfig = q("section", "published chip peaks")
    source: str = q("str", "path of the YAML file this config was loaded from", default="")


# ----------------------------------------------------------------------------------------------
# loading

MAX_PARTITIONS = 128  # every NeuronCore generation has 128 SBUF/PSUM partitions (N-A2, N-T2, N-T3)

_POSITIVE = {"count", "bytes", "Hz", "B/s"}  # kinds that must be > 0; the others must be >= 0
_ZERO_MEANS_ABSENT = {"mx_rate", "transpose_hbm_rate", "transpose_sbuf_rate"}  # ratios; else > 0
_LOADER_SET = {"source"}  # fields the loader fills, not the YAML
_OVERRIDE_KEY = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")

Origins = dict  # key path -> (where: file or "--set k=v", line or None, rank)
# rank orders the sources of values: a base file < the file that extends it < each --set


class ConfigError(TrnsimError):
    """A chip config cannot be loaded: one line naming the file (and line), the key, and what
    was expected."""


def configs_dir() -> Path:
    """The directory of the bundled chip configs: `<trnsim package>/configs` when installed,
    `<repo>/configs` in a checkout."""
    package = Path(__file__).resolve().parent
    for candidate in (package / "configs", package.parent / "configs"):
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    raise ConfigError(f"cannot find the bundled chip configs in {package / 'configs'} "
                      f"or {package.parent / 'configs'}")


def list_chips() -> list[str]:
    """Names of the bundled chip configs, sorted (e.g. ['trn1', 'trn2', 'trn3'])."""
    return sorted(p.stem for p in configs_dir().glob("*.yaml"))


def load_chip(name_or_path: str, overrides: Sequence[str] = ()) -> ChipConfig:
    """Load, merge (`base:`), override and validate a chip config.

    `name_or_path` is a bundled chip name (`trn2`) or a path to a YAML file (it contains `/` or
    ends with `.yaml`). `overrides` are `key.path=value` strings (`core.sbuf.partition_bytes=
    448KiB`), applied after inheritance and parsed with the field's unit. Raises ConfigError.
    """
    path = _resolve(str(name_or_path), None, "")
    tree, origins = _read(path, ())
    for text in overrides:
        _apply_override(tree, origins, text)
    cfg = _build(ChipConfig, tree, (), origins)
    cfg = dataclasses.replace(cfg, source=str(path))
    _check(cfg, origins)
    return cfg


def _show(path: Path) -> str:
    """A path for messages: relative to the working directory when it lies below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _resolve(name_or_path: str, relative_to: Path | None, where: str) -> Path:
    if "/" in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        path = Path(name_or_path).expanduser()
        if relative_to is not None and not path.is_absolute():
            path = relative_to / path
        if not path.is_file():
            raise ConfigError(f"{where}no such config file: {_show(path)}")
        return path.resolve()
    path = configs_dir() / f"{name_or_path}.yaml"
    if not path.is_file():
        chips = list_chips()
        close = difflib.get_close_matches(name_or_path, chips, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ConfigError(f"{where}unknown chip '{name_or_path}'; {hint}available: "
                          f"{', '.join(chips)} (or a path to a YAML file)")
    return path


def _read(path: Path, chain: tuple[Path, ...]) -> tuple[dict, Origins]:
    """One file and its bases, merged: (tree, origins of every key path)."""
    shown = _show(path)
    if path in chain:
        cycle = " -> ".join(_show(p) for p in (*chain, path))
        raise ConfigError(f"{_show(chain[-1])}: base: inheritance cycle {cycle}")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{shown}: cannot read: {e.strerror}") from None
    tree = load_yaml(text, shown, error=ConfigError)
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise ConfigError(f"{shown}: expected a mapping of keys at the top level, got {tree!r}")
    rank = -len(chain)
    origins: Origins = {(): (shown, None, rank)}
    _record(tree, (), (shown, rank), origins)
    if "base" not in tree:
        return tree, origins
    base = tree.pop("base")
    line = tree.line_of("base")
    where = f"{shown}:{line}: base: "
    if not isinstance(base, str):
        raise ConfigError(f"{where}expected a chip name or a path to a YAML file, got {base!r}")
    base_tree, base_origins = _read(_resolve(base, path.parent, where), (*chain, path))
    origins.pop(("base",), None)
    base_origins.update(origins)
    return _merge(base_tree, tree), base_origins


def _record(tree: dict, prefix: tuple, source: tuple, origins: Origins) -> None:
    shown, rank = source
    for key, value in tree.items():
        origins[(*prefix, key)] = (shown, getattr(tree, "key_lines", {}).get(key), rank)
        if isinstance(value, dict):
            _record(value, (*prefix, key), source, origins)


def _merge(base: dict, child: dict) -> dict:
    """`child` over `base`: mappings merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in child.items():
        if isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _fail(origins: Origins, path: tuple, what: str) -> typing.NoReturn:
    """Raise a ConfigError located at the nearest recorded origin of `path`."""
    for n in range(len(path), -1, -1):
        if path[:n] in origins:
            where, line, _ = origins[path[:n]]
            break
    else:
        where, line = "config", None
    location = f"{where}:{line}" if line else where
    key = f" {'.'.join(map(str, path))}:" if path else ""
    raise ConfigError(f"{location}:{key} {what}")


def _latest(origins: Origins, *paths: tuple) -> tuple:
    """Of keys that conflict, the one set last (a --set, else the most derived file): the one
    the user most likely just changed, so the error points there."""
    return max(paths, key=lambda path: origins.get(path, ("", None, -(10**9)))[2])


@functools.cache
def _hints(cls: type) -> dict:
    """Field name -> resolved type (the nested dataclass of a section)."""
    return typing.get_type_hints(cls)


def _leaf_paths(cls: type, prefix: str = "") -> list[str]:
    """Every settable key path below `cls`, dotted."""
    out = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in _LOADER_SET:
            continue
        if f.metadata["unit"] == "section":
            out += _leaf_paths(hints[f.name], f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


def _apply_override(tree: dict, origins: Origins, text: str) -> None:
    key, eq, raw = (part.strip() for part in str(text).partition("="))
    where = f"--set {text}"
    if not eq or not raw or not _OVERRIDE_KEY.fullmatch(key):
        raise ConfigError(f"{where}: expected key.path=value, "
                          f"e.g. core.sbuf.partition_bytes=448KiB")
    path = tuple(key.split("."))
    cls, f = ChipConfig, None
    for i, part in enumerate(path):
        fields = {g.name: g for g in dataclasses.fields(cls) if g.name not in _LOADER_SET}
        f = fields.get(part)
        if f is None or (i < len(path) - 1 and f.metadata["unit"] != "section"):
            close = difflib.get_close_matches(key, _leaf_paths(ChipConfig), n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"{where}: unknown key '{key}'{hint}")
        if f.metadata["unit"] == "section":
            cls = _hints(cls)[part]
    if f.metadata["unit"] == "section":
        example = _leaf_paths(cls, key + ".")[0]
        raise ConfigError(f"{where}: '{key}' is a section; set one of its keys, e.g. {example}")
    value = raw if f.metadata["unit"] == "str" else _yaml_value(raw)
    node = tree
    for part in path[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[path[-1]] = value
    origins[path] = (where, None, len(origins))


def _yaml_value(raw: str) -> object:
    """An override value as a config file would read it (true -> bool, [1, 2] -> list,
    448KiB -> str); text that is not YAML stays text, for the field's parser to judge."""
    try:
        return load_yaml(raw, "--set", error=ConfigError)
    except ConfigError:
        return raw


def _build(cls: type, tree: dict, path: tuple, origins: Origins):
    """Construct dataclass `cls` from mapping `tree`, parsing each field with its unit kind."""
    fields = [f for f in dataclasses.fields(cls) if f.name not in _LOADER_SET]
    names = [f.name for f in fields]
    for key in tree:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; valid: {', '.join(names)}"
            _fail(origins, (*path, key), f"unknown key '{key}'{hint}")
    hints = _hints(cls)
    kwargs = {}
    for f in fields:
        unit = f.metadata["unit"]
        if f.name not in tree:
            form = "a section" if unit == "section" else _expected(unit)
            _fail(origins, path, f"missing key '{f.name}' ({f.metadata['help']}; {form})")
        kwargs[f.name] = _value(f, hints[f.name], tree[f.name], (*path, f.name), origins)
    return cls(**kwargs)


def _expected(unit: str) -> str:
    return {
        "section": "a mapping of keys",
        "list": "a list of whole numbers like [1, 2]",
        "bool": "true or false",
        "str": "text",
    }.get(unit) or expected(unit)


def _value(f: dataclasses.Field, hint: type, raw: object, path: tuple, origins: Origins):
    unit = f.metadata["unit"]
    ok = {
        "section": isinstance(raw, dict),
        "list": isinstance(raw, list) and len(raw) > 0,
        "bool": isinstance(raw, bool),
        "str": isinstance(raw, str),
    }.get(unit, True)
    if not ok:
        _fail(origins, path, f"expected {_expected(unit)}, got {raw!r}")
    if unit == "section":
        return _build(hint, raw, path, origins)
    if unit == "list":
        return tuple(_number("count", item, f.name, path, origins) for item in raw)
    if unit in ("bool", "str"):
        return raw
    return _number(unit, raw, f.name, path, origins)


def _number(unit: str, raw: object, name: str, path: tuple, origins: Origins) -> int | float:
    try:
        value = parse_quantity(unit, raw)
    except UnitError as e:
        _fail(origins, path, str(e))
    if unit in _POSITIVE or (unit == "ratio" and name not in _ZERO_MEANS_ABSENT):
        if value <= 0:
            _fail(origins, path, f"must be greater than 0, got {raw!r}")
    elif value < 0:
        _fail(origins, path, f"must not be negative, got {raw!r}")
    return value


def _check(cfg: ChipConfig, origins: Origins) -> None:
    """Rules that involve more than one field."""
    core = cfg.core
    for section in ("sbuf", "psum"):
        n = getattr(core, section).partitions
        if n > MAX_PARTITIONS:
            _fail(origins, ("core", section, "partitions"),
                  f"must be 1..{MAX_PARTITIONS} partitions, got {n}")
    rows, cols = ("core", "tensor", "rows"), ("core", "tensor", "cols")
    if core.tensor.rows > core.sbuf.partitions:
        _fail(origins, _latest(origins, rows, ("core", "sbuf", "partitions")),
              f"core.tensor.rows ({core.tensor.rows}) exceeds core.sbuf.partitions "
              f"({core.sbuf.partitions})")
    if core.tensor.cols > core.psum.partitions:
        _fail(origins, _latest(origins, cols, ("core", "psum", "partitions")),
              f"core.tensor.cols ({core.tensor.cols}) exceeds core.psum.partitions "
              f"({core.psum.partitions})")
    if cfg.lnc not in cfg.lnc_allowed:
        _fail(origins, _latest(origins, ("lnc",), ("lnc_allowed",)),
              f"lnc ({cfg.lnc}) is not in lnc_allowed {list(cfg.lnc_allowed)}")
    if cfg.cores % cfg.lnc:
        _fail(origins, _latest(origins, ("lnc",), ("cores",)),
              f"cores ({cfg.cores}) is not divisible by lnc ({cfg.lnc})")
    hbm = cfg.hbm
    if hbm.stacks * hbm.cores_per_stack != cfg.cores:
        _fail(origins, _latest(origins, ("hbm", "stacks"), ("hbm", "cores_per_stack"), ("cores",)),
              f"hbm.stacks x hbm.cores_per_stack ({hbm.stacks} x {hbm.cores_per_stack}) "
              f"must equal cores ({cfg.cores})")


# ----------------------------------------------------------------------------------------------
# views of a loaded config


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
    "bfloat16": "bf16", "float16": "bf16", "tfloat32": "bf16",
    "float32": "fp32",
    "float8": "fp8", "float8_e4m3": "fp8", "float8_e5m2": "fp8", "float8_e4m3fn": "fp8",
    "mx": "mx", "float8_e4m3fn_x4": "mx", "float8_e5m2_x4": "mx", "float4_e2m1fn_x4": "mx",
}


def peak_flops_per_core(cfg: ChipConfig, dtype_name: str) -> float:
    """Dense matmul peak FLOP/s of one physical NeuronCore for inputs of `dtype_name`:
    rows x cols x 2 x clock x rate, where rate is 1 for bfloat16/float16/tfloat32, fp32_rate for
    float32, fp8_rate for the float8 types and mx_rate for the MX x4 types (0.0 if the core has
    no MX). Raises ValueError for a dtype the tensor engine does not take."""
    kind = _DTYPE_RATE.get(dtype_name)
    if kind is None:
        raise ValueError(f"no tensor-engine peak for dtype '{dtype_name}'; "
                         f"known: {', '.join(_DTYPE_RATE)}")
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
    core = {name: peak_flops_per_core(cfg, name)
            for name in ("bfloat16", "float16", "float8", "float32", "mx")
            if name != "mx" or t.mx_rate > 0}
    chip = {name: value * cfg.cores for name, value in core.items()}
    published = {name: getattr(cfg.peak_flops, "bfloat16" if name == "float16" else name) or None
                 for name in chip}
    gap = {name: published[name] / chip[name] - 1 if published[name] else None for name in chip}
    sbuf = cfg.core.sbuf.partitions * cfg.core.sbuf.partition_bytes
    psum = cfg.core.psum.partitions * cfg.core.psum.banks * cfg.core.psum.bank_bytes
    dma = cfg.core.dma.engines * cfg.core.dma.engine_bandwidth
    return {
        "peak_flops": {"core": core, "chip": chip, "published": published, "gap": gap},
        "sbuf_bytes": {"core": sbuf, "chip": sbuf * cfg.cores},
        "psum_bytes": {"core": psum, "chip": psum * cfg.cores},
        "dma_bandwidth": {"core": dma, "chip": dma * cfg.cores, "published": cfg.dma_bandwidth,
                          "gap": cfg.dma_bandwidth / (dma * cfg.cores) - 1},
        "hbm": {"capacity": cfg.hbm.stacks * cfg.hbm.stack_capacity,
                "bandwidth": cfg.hbm.bandwidth,
                "bandwidth_per_stack": cfg.hbm.bandwidth / cfg.hbm.stacks},
        "logical_cores": cfg.cores // cfg.lnc,
    }
