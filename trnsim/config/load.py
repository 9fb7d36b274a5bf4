"""Chip YAML -> a validated dataclass tree (the only reader of chip YAML).

A config file is found by chip name (bundled, in `configs_dir()`) or path, merged over its
`base:` (recursively; mappings merge key by key, anything else replaces), overridden by
`key.path=value` strings (`--set`), and built into the dataclass tree, each field parsed with its
unit kind (`trnsim.config.tree`). Every key path remembers where its value came from
(`Origins`), so that each error is one line naming the file and line, the key, and what was
expected. Rules that involve several fields live with `load_chip` in `trnsim.config`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import typing
from pathlib import Path

from trnsim.errors import TrnsimError
from trnsim.inputs.load import load_yaml
from trnsim.units import UnitError, expected, parse_quantity

__all__ = [
    "ConfigError",
    "Origins",
    "configs_dir",
    "list_chips",
    "resolve",
    "read_tree",
    "apply_override",
    "build",
    "fail",
    "latest",
]

_POSITIVE = {"count", "bytes", "Hz", "B/s"}  # kinds that must be > 0; the others must be >= 0
_ZERO_MEANS_ABSENT = {"mx_rate", "transpose_hbm_rate", "transpose_sbuf_rate"}  # ratios; else > 0
_LOADER_SET = {"source"}  # fields the loader fills, not the YAML
_OVERRIDE_KEY = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")

NOT_A_CONFIG = "not a chip config (expected a YAML mapping of config keys)"
BRIEF = 60
"""The most characters of a value an error message shows (a value may be a whole file)."""

Origins = dict  # key path -> (where: file or "--set k=v", line or None, rank)
# rank orders the sources of values: a base file < the file that extends it < each --set


class ConfigError(TrnsimError):
    """A chip config cannot be loaded: one line naming the file (and line), the key, and what
    was expected."""


def configs_dir() -> Path:
    """The directory of the bundled chip configs: `<trnsim package>/configs` when installed,
    `<repo>/configs` in a checkout."""
    package = Path(__file__).resolve().parents[1]  # trnsim/
    for candidate in (package / "configs", package.parent / "configs"):
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    raise ConfigError(
        f"cannot find the bundled chip configs in {package / 'configs'} "
        f"or {package.parent / 'configs'}"
    )


def list_chips() -> list[str]:
    """Names of the bundled chip configs, sorted (e.g. ['trn1', 'trn2', 'trn3'])."""
    return sorted(p.stem for p in configs_dir().glob("*.yaml"))


def _brief(value: object) -> str:
    """`repr(value)`, cut to BRIEF characters."""
    text = repr(value)
    return text if len(text) <= BRIEF else text[: BRIEF - 3] + "..."


def _show(path: Path) -> str:
    """A path for messages: relative to the working directory when it lies below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def resolve(name_or_path: str, relative_to: Path | None, where: str) -> Path:
    """The file of a bundled chip name, or of a path (relative paths against `relative_to` when
    given); `where` prefixes the error message."""
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
        raise ConfigError(
            f"{where}unknown chip '{name_or_path}'; {hint}available: "
            f"{', '.join(chips)} (or a path to a YAML file)"
        )
    return path


def read_tree(path: Path, chain: tuple[Path, ...] = (), where: str = "") -> tuple[dict, Origins]:
    """One file and its bases, merged: (tree, origins of every key path). `chain` holds the
    files that extend this one (to report inheritance cycles); `where` (the `base:` that names
    this file) prefixes the error when the file is no config."""
    shown = _show(path)
    if path in chain:
        cycle = " -> ".join(_show(p) for p in (*chain, path))
        raise ConfigError(f"{_show(chain[-1])}: base: inheritance cycle {cycle}")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{shown}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"{where}{shown}: not a chip config (not UTF-8 text; expected a YAML mapping of "
            "config keys)"
        ) from None
    tree = load_yaml(text, shown, error=ConfigError)
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):  # never echo the file: it may be any file (/etc/passwd)
        raise ConfigError(f"{where}{shown}: {NOT_A_CONFIG}")
    rank = -len(chain)
    origins: Origins = {(): (shown, None, rank)}
    _record(tree, (), (shown, rank), origins)
    if "base" not in tree:
        return tree, origins
    base = tree.pop("base")
    line = tree.line_of("base")
    where = f"{shown}:{line}: base: "
    if not isinstance(base, str):
        raise ConfigError(
            f"{where}expected a chip name or a path to a YAML file, got {_brief(base)}"
        )
    base_tree, base_origins = read_tree(resolve(base, path.parent, where), (*chain, path), where)
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


def fail(origins: Origins, path: tuple, what: str) -> typing.NoReturn:
    """Raise a ConfigError located at the nearest recorded origin of `path`."""
    for n in range(len(path), -1, -1):
        if path[:n] in origins:
            where, line, _ = origins[path[:n]]
            break
    else:
        where, line = "config", None
    location = f"{where}:{line}" if line else where
    key = f" {'.'.join(str(p) if len(str(p)) <= BRIEF else _brief(p) for p in path)}:"
    key = key if path else ""
    raise ConfigError(f"{location}:{key} {what}")


def latest(origins: Origins, *paths: tuple) -> tuple:
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


def apply_override(tree: dict, origins: Origins, text: str, root: type) -> None:
    """Set the `key.path=value` of `text` in `tree` (recording it in `origins`), after checking
    the key path against the dataclass tree of `root`; the value is read as YAML."""
    key, eq, raw = (part.strip() for part in str(text).partition("="))
    where = f"--set {text}"
    if not eq or not raw or not _OVERRIDE_KEY.fullmatch(key):
        raise ConfigError(
            f"{where}: expected key.path=value, e.g. core.sbuf.partition_bytes=448KiB"
        )
    path = tuple(key.split("."))
    cls, f = root, None
    for i, part in enumerate(path):
        fields = {g.name: g for g in dataclasses.fields(cls) if g.name not in _LOADER_SET}
        f = fields.get(part)
        if f is None or (i < len(path) - 1 and f.metadata["unit"] != "section"):
            close = difflib.get_close_matches(key, _leaf_paths(root), n=1, cutoff=0.6)
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


def build(cls: type, tree: dict, path: tuple, origins: Origins):
    """Construct dataclass `cls` from mapping `tree`, parsing each field with its unit kind."""
    fields = [f for f in dataclasses.fields(cls) if f.name not in _LOADER_SET]
    names = [f.name for f in fields]
    for key in tree:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; valid: {', '.join(names)}"
            fail(origins, (*path, key), f"unknown key {_brief(key)}{hint}")
    hints = _hints(cls)
    kwargs = {}
    for f in fields:
        unit = f.metadata["unit"]
        if f.name not in tree:
            form = "a section" if unit == "section" else _expected(unit)
            fail(origins, path, f"missing key '{f.name}' ({f.metadata['help']}; {form})")
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
        fail(origins, path, f"expected {_expected(unit)}, got {_brief(raw)}")
    if unit == "section":
        return build(hint, raw, path, origins)
    if unit == "list":
        return tuple(_number("count", item, f.name, path, origins) for item in raw)
    if unit in ("bool", "str"):
        return raw
    return _number(unit, raw, f.name, path, origins)


def _number(unit: str, raw: object, name: str, path: tuple, origins: Origins) -> int | float:
    try:
        value = parse_quantity(unit, raw)
    except UnitError as e:
        fail(origins, path, str(e))
    if unit in _POSITIVE or (unit == "ratio" and name not in _ZERO_MEANS_ABSENT):
        if value <= 0:
            fail(origins, path, f"must be greater than 0, got {_brief(raw)}")
    elif value < 0:
        fail(origins, path, f"must not be negative, got {_brief(raw)}")
    return value
