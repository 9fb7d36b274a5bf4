"""`load_chip`: read, merge, override and build a chip config, then check the rules that
involve more than one field (`trnsim.config` re-exports `load_chip`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from trnsim.config.build import apply_override, build
from trnsim.config.load import Origins, fail, latest, read_tree, resolve
from trnsim.config.tree import ChipConfig, CoreConfig
from trnsim.dtypes import DTYPES


def load_chip(name_or_path: str, overrides: Sequence[str] = ()) -> ChipConfig:
    """Load, merge (`base:`), override and validate a chip config.

    `name_or_path` is a bundled chip name (`trn2`) or a path to a YAML file (it contains `/` or
    ends with `.yaml`). `overrides` are `key.path=value` strings (`core.sbuf.partition_bytes=
    448KiB`), applied after inheritance and parsed with the field's unit. Raises ConfigError.
    """
    path = resolve(str(name_or_path), None, "")
    tree, origins = read_tree(path)
    for text in overrides:
        apply_override(tree, origins, text, ChipConfig)
    return finish_chip(build(ChipConfig, tree, (), origins), path, origins)


def finish_chip(cfg: ChipConfig, path: Path, origins: Origins, at: tuple = ()) -> ChipConfig:
    """A built chip config with the fields the loader fills (`source`, the compute packet of
    `cc`), checked by the rules that involve more than one field. `at` is the key path of the
    chip in the tree `origins` describes (`("chip",)` inside a system)."""
    cc = dataclasses.replace(cfg.cc, compute_packet_bytes=cfg.core.dma.packet_bytes)
    cfg = dataclasses.replace(cfg, source=str(path), cc=cc)
    _check(cfg, origins, at)
    return cfg


def _check(cfg: ChipConfig, origins: Origins, at: tuple) -> None:
    """Rules that involve more than one field (key paths below `at`)."""

    def k(*path: str) -> tuple:
        return (*at, *path)

    _check_partitions(cfg.core, origins, at)
    core = cfg.core
    rows, cols = k("core", "tensor", "rows"), k("core", "tensor", "cols")
    if core.tensor.rows > core.sbuf.partitions:
        fail(
            origins,
            latest(origins, rows, k("core", "sbuf", "partitions")),
            f"core.tensor.rows ({core.tensor.rows}) exceeds core.sbuf.partitions "
            f"({core.sbuf.partitions})",
        )
    if core.tensor.cols > core.psum.partitions:
        fail(
            origins,
            latest(origins, cols, k("core", "psum", "partitions")),
            f"core.tensor.cols ({core.tensor.cols}) exceeds core.psum.partitions "
            f"({core.psum.partitions})",
        )
    if cfg.lnc not in cfg.lnc_allowed:
        fail(
            origins,
            latest(origins, k("lnc"), k("lnc_allowed")),
            f"lnc ({cfg.lnc}) is not in lnc_allowed {list(cfg.lnc_allowed)}",
        )
    if cfg.cores % cfg.lnc:
        fail(
            origins,
            latest(origins, k("lnc"), k("cores")),
            f"cores ({cfg.cores}) is not divisible by lnc ({cfg.lnc})",
        )
    hbm = cfg.hbm
    if hbm.stacks * hbm.cores_per_stack != cfg.cores:
        fail(
            origins,
            latest(origins, k("hbm", "stacks"), k("hbm", "cores_per_stack"), k("cores")),
            f"hbm.stacks x hbm.cores_per_stack ({hbm.stacks} x {hbm.cores_per_stack}) "
            f"must equal cores ({cfg.cores})",
        )
    if cfg.cc.reduce_dtype not in DTYPES or not DTYPES[cfg.cc.reduce_dtype].is_float:
        floats = ", ".join(name for name, dt in DTYPES.items() if dt.is_float)
        fail(
            origins,
            k("cc", "reduce_dtype"),
            f"expected one of {floats}, got {cfg.cc.reduce_dtype!r}",
        )


def _check_partitions(core: CoreConfig, origins: Origins, at: tuple) -> None:
    """The partition-start steps nest (each divides the next, as quadrants, halves and the
    whole do), and no memory has more partitions than the largest step: the start rule places
    an access of n partitions only if some step is >= n."""
    steps, where = core.partition_start_steps, (*at, "core", "partition_start_steps")
    for a, b in zip(steps, steps[1:]):
        if b <= a or b % a:
            fail(
                origins,
                where,
                f"each step must be a larger multiple of the one before, got {list(steps)}",
            )
    for section in ("sbuf", "psum"):
        n = getattr(core, section).partitions
        if n > steps[-1]:
            fail(
                origins,
                latest(origins, (*at, "core", section, "partitions"), where),
                f"core.{section}.partitions ({n}) exceeds the largest of "
                f"core.partition_start_steps ({steps[-1]})",
            )
