"""A sweep's grid: `--grid KEY=V1,V2` axes and the fixed `--set` / `--param` settings, parsed
and checked (a key swept twice, a reserved column, an empty or repeated value) before anything
runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trnsim.errors import TrnsimError
from trnsim.sweep import table
from trnsim.trace.params import parse_param_args

__all__ = ["PARAM", "Axis", "parse_grid", "settings", "plain"]

PARAM = "param."
"""Grid and --set keys with this prefix set one of the trace's params; the others are config
keys: the chip's, or on a system of chips the system's (the chip's as chip.KEY)."""


@dataclass(frozen=True)
class Axis:
    """One --grid option: a key and its values, as given."""

    key: str
    values: tuple[str, ...]


def parse_grid(specs: Sequence[str] | Mapping[str, Sequence[Any]]) -> list[Axis]:
    """`["hbm.bandwidth=2TB/s,4TB/s", ...]` (or a mapping key -> values) -> axes. Values split
    at commas outside brackets, so a list value like `[1,2]` stays whole."""
    if isinstance(specs, Mapping):
        pairs = [(str(k), [plain(v) for v in vs]) for k, vs in specs.items()]
        where = {k: f"grid {k}" for k, _ in pairs}
    else:
        pairs, where = [], {}
        for text in specs:
            key, eq, values = str(text).partition("=")
            key = key.strip()
            if not eq or not key or not values.strip():
                raise TrnsimError(
                    f"--grid {text}: expected KEY=V1,V2,... like --grid hbm.bandwidth=2TB/s,4TB/s"
                )
            pairs.append((key, _split(values)))
            where[key] = f"--grid {text}"
    axes: list[Axis] = []
    reserved = table.columns([], system=True)
    for key, values in pairs:
        if key in reserved:
            raise TrnsimError(
                f"{where[key]}: {key} is a column of the table; expected a chip "
                "config key like hbm.bandwidth, a system key like topology.link.bandwidth "
                "(with --system) or a param like param.batch"
            )
        if any(a.key == key for a in axes):
            raise TrnsimError(
                f"{where[key]}: key {key} is swept twice; expected each key in one --grid"
            )
        if not values or any(v == "" for v in values):
            raise TrnsimError(
                f"{where[key]}: an empty value; expected values separated by "
                "commas, like 2TB/s,4TB/s"
            )
        if len(set(values)) != len(values):
            raise TrnsimError(f"{where[key]}: a value is given twice; expected distinct values")
        axes.append(Axis(key, tuple(values)))
    return axes


def plain(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _split(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch in "[{(") - (ch in "]})")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()]


def settings(sets: Sequence[str], params: Sequence[str] | Mapping[str, Any]) -> list[tuple]:
    """The fixed settings as (key, value): --set KEY=V, then --param NAME=V as param.NAME."""
    out = []
    for text in sets:
        key, eq, value = str(text).partition("=")
        if not eq or not key.strip():
            raise TrnsimError(f"--set {text}: expected KEY=VALUE like --set hbm.bandwidth=4TB/s")
        out.append((key.strip(), value.strip()))
    if isinstance(params, Mapping):
        params = [f"{k}={plain(v)}" for k, v in params.items()]
    out += [(PARAM + k, v) for k, v in parse_param_args(params).items()]
    for i, (key, _) in enumerate(out):
        if any(k == key for k, _ in out[:i]):
            raise TrnsimError(f"--set {key}: set twice; expected each key once")
    return out
