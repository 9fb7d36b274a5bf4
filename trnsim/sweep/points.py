"""A sweep's points: the cross product of traces, chips and grid values, each with the row
that identifies it and the task that runs it (or the error that stops it before running), and
resuming from a table that already holds some of them (see `trnsim.sweep.runner`)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trnsim import __version__
from trnsim.config import ChipConfig, SystemConfig, load_chip, load_system
from trnsim.config.load import SYSTEMS, resolve
from trnsim.errors import TrnsimError
from trnsim.report.provenance import config_hash
from trnsim.sweep import table
from trnsim.sweep.bundle import TraceBundle
from trnsim.sweep.grid import PARAM, Axis
from trnsim.sweep.worker import one_line
from trnsim.trace.ranks import trace_system

__all__ = ["Point", "config_hash", "points", "resume"]


@dataclass
class Point:
    row: dict
    key: tuple
    task: tuple | None = None  # (bundle, params, chip or system config, mode) when it runs
    old: dict | None = field(default=None)  # its row in the table resumed, when done there
    done: bool = False  # its row is complete: figures or an error


def points(
    traces: list[str],
    chips: list[str],
    axes: list[Axis],
    fixed: list[tuple],
    mode: str | None,
    loading: Mapping[str, Any] | None = None,
    systems: Sequence[str] = (),
) -> list[Point]:
    """Every point in grid order (traces, then chips or systems, then each axis's values, the
    last axis fastest), each with its row's identifying columns and its task, or its error.
    `loading` holds the trace loader's options (`allow_outside_files`, `max_instructions`).

    A point runs on one chip (a `ChipConfig`: the grid's and --set's config keys are the
    chip's) or on a system of chips (a `SystemConfig`: they are the system file's keys, the
    chip's as chip.KEY, as `trnsim run --system --set` takes them): on each of `systems` when
    given (`chips` must then be empty), else on the system its trace names (`system:`)."""
    fixed_params = {k[len(PARAM) :]: v for k, v in fixed if k.startswith(PARAM)}
    fixed_cfg = [f"{k}={v}" for k, v in fixed if not k.startswith(PARAM)]
    set_text = " ".join(f"{k}={v}" for k, v in fixed)
    combos = list(itertools.product(*[a.values for a in axes]))

    def params_of(values: tuple) -> dict[str, str]:
        swept = {a.key[len(PARAM) :]: v for a, v in zip(axes, values) if a.key.startswith(PARAM)}
        return {**fixed_params, **swept}

    configs: dict[tuple, ChipConfig | SystemConfig | TrnsimError] = {}
    out = []
    targets = [(None, s) for s in systems] or [(c, None) for c in chips or [None]]
    for trace in traces:
        try:
            bundle, found = TraceBundle.read(
                trace, [params_of(v) for v in combos], **(loading or {})
            )
        except TrnsimError as e:
            bundle, found = None, {}
            unreadable = one_line(e)
        for (chip_given, system_given), values in itertools.product(targets, combos):
            params = params_of(values)
            doc = found.get(tuple(sorted(params.items())))
            error = (
                unreadable
                if bundle is None
                else (one_line(doc) if isinstance(doc, TrnsimError) else None)
            )
            system = system_given or (doc[2] if not error else None)
            if system and chip_given:
                error = (
                    f"--chip {chip_given} with a trace naming system: {system}: the system's "
                    f"chip runs; expected --system {system} (and --set chip=NAME to change it)"
                )
            chip = chip_given or (doc[0] if not error else "")
            point_mode = mode or (doc[1] if not error else "")
            swept = [f"{a.key}={v}" for a, v in zip(axes, values) if not a.key.startswith(PARAM)]
            overrides = fixed_cfg + swept
            cfg = None
            if system and not error:
                name = system if system_given else trace_system(system, trace)
                cfg, error = _config(configs, "system", name, overrides, swept)
                chip = cfg.chip.name if cfg is not None else ""
            elif chip and (chip_given or not error):
                cfg, msg = _config(configs, "chip", chip, overrides, swept)
                error = error or msg
            row = dict.fromkeys(table.columns([a.key for a in axes], system=True))
            row |= {
                "trace": trace,
                "system": system or "",
                "chip": chip,
                **{a.key: v for a, v in zip(axes, values)},
                "error": error,
                "mode": point_mode,
                "set": set_text,
                "trace_hash": bundle.digest if bundle else "",
                "config_hash": config_hash(cfg) if cfg else "",
                "trnsim_version": __version__,
            }
            task = None if error else (bundle, params, cfg, point_mode)
            out.append(Point(row, _key(row, axes), task))
    return out


def _config(configs: dict, kind: str, name: str, overrides: list[str], swept: list[str]):
    """(config, None) or (None, its one-line error) of chip or system `name` with
    `overrides`, built once (`configs` caches them). In an error the overrides swept are
    named `--grid`; an unknown key's names the config file too."""
    ck = (kind, name, tuple(overrides))
    if ck not in configs:
        try:
            load = load_system if kind == "system" else load_chip
            configs[ck] = load(name, overrides)
        except TrnsimError as e:
            configs[ck] = e
    got = configs[ck]
    if not isinstance(got, TrnsimError):
        return got, None
    msg = one_line(got)
    for text in swept:  # the config names every override --set
        msg = msg.replace(f"--set {text}", f"--grid {text}")
    if kind == "system" and ": unknown key '" in msg:
        try:
            path = resolve(name, None, "", SYSTEMS)
        except TrnsimError:
            path = name
        head, _, tail = msg.partition(": unknown key '")
        key, _, rest = tail.partition("'")
        msg = f"{head}: unknown key '{key}' in system {Path(name).stem} ({path}){rest}"
    return None, msg


def _key(row: dict, axes: Sequence[Axis]) -> tuple:
    """What identifies a point (see the module's doc)."""
    return (
        row["trace_hash"],
        row.get("system") or "",
        row["chip"],
        *[row[a.key] for a in axes],
        row["set"],
        row["mode"],
        row["trnsim_version"],
        row["config_hash"],
    )


def resume(out, cols: list[str], points: list[Point]) -> list[dict]:
    """Mark the points already in table `out` without an error; return its other rows."""
    old_cols, old_rows = table.read(out)
    if old_cols != cols:
        missing = [c for c in cols if c not in old_cols]
        extra = [c for c in old_cols if c not in cols]
        what = "; ".join(
            s
            for s in (
                missing and f"it lacks {', '.join(missing)}",
                extra and f"it has {', '.join(extra)}",
            )
            if s
        )
        raise TrnsimError(
            f"{out}: the table's columns are not this sweep's "
            f"({what or 'another order'}); expected a table of a sweep with the "
            "same --grid keys, or a new --out file"
        )
    axes = [Axis(c, ()) for c in table.grid_keys(cols)]
    by_key = {
        _key({**r, **{c: _str(r.get(c)) for c in table.TAIL if c != "error"}}, axes): r
        for r in old_rows
    }
    mine = {p.key for p in points}
    for p in points:
        old = by_key.get(p.key)
        if (
            old is not None
            and not old.get("error")
            and old.get(table.FIGURES[0]) is not None
            and p.task is not None
        ):
            p.old = {
                **old,
                **{
                    c: p.row[c]
                    for c in p.row
                    if c not in table.FIGURES and c not in table.SYSTEM_FIGURES and c != "error"
                },
            }
    return [r for k, r in by_key.items() if k not in mine]


def _str(value) -> str:
    return "" if value is None else str(value)
