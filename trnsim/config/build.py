"""The merged YAML tree of a config -> its dataclass tree: each field parsed with its unit kind
(`build`), and `key.path=value` overrides checked against the tree and set (`apply_override`).

Besides the unit kinds of `trnsim.units`, a field's unit may be `section` (a nested dataclass),
`list` (a tuple of counts), `bool`, `str`, or `named` (a mapping of names to sections, built into
a tuple of the element dataclass, each element's `name` field taken from its key). A field with a
default value is optional in the YAML; a field whose metadata has `loader` (or `init=False`) is
never read from the YAML: the loader or the dataclass fills it.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import typing

from trnsim.config.load import ConfigError, Origins, _brief, fail
from trnsim.inputs.load import load_yaml
from trnsim.units import UnitError, expected, parse_quantity

__all__ = ["build", "apply_override", "OVERRIDE_EXAMPLE"]

_POSITIVE = {"count", "bytes", "Hz", "B/s"}  # kinds that must be > 0; the others must be >= 0
_ZERO_MEANS_ABSENT = {"mx_rate", "transpose_hbm_rate", "transpose_sbuf_rate"}  # ratios; else > 0
_LOADER_SET = {"source"}  # fields the loader fills, not the YAML
_OVERRIDE_KEY = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


@functools.cache
def _hints(cls: type) -> dict:
    """Field name -> resolved type (the nested dataclass of a section)."""
    return typing.get_type_hints(cls)


@functools.cache
def _dataclass_of(hint: object) -> type:
    """The dataclass a section's (or a named mapping's) type names: `LinkConfig`,
    `LinkConfig | None`, `tuple[SwitchLevelConfig, ...]`."""
    if dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        if arg is not type(None) and arg is not Ellipsis:
            return _dataclass_of(arg)
    raise TypeError(f"no dataclass in {hint!r}")


def _settable(cls: type) -> list[dataclasses.Field]:
    """The fields of `cls` a YAML file (or a --set) gives; the others the loader or the
    dataclass fills (`source`, fields with `loader` metadata, `init=False` fields)."""
    return [
        f
        for f in dataclasses.fields(cls)
        if f.init and f.name not in _LOADER_SET and not f.metadata.get("loader")
    ]


def _optional(f: dataclasses.Field) -> bool:
    """Whether the YAML may leave `f` out (it has a default)."""
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _leaf_paths(cls: type, prefix: str = "", tree: object = None) -> list[str]:
    """Every settable key path below `cls`, dotted (the names of a `named` mapping are those
    of `tree`, the YAML below `cls`, when given)."""
    out = []
    tree = tree if isinstance(tree, dict) else {}
    for f in _settable(cls):
        unit = f.metadata["unit"]
        if unit == "section":
            out += _leaf_paths(
                _dataclass_of(_hints(cls)[f.name]), f"{prefix}{f.name}.", tree.get(f.name)
            )
        elif unit == "named":
            items = tree.get(f.name)
            for name in items if isinstance(items, dict) else ():
                elem = _dataclass_of(_hints(cls)[f.name])
                out += _leaf_paths(elem, f"{prefix}{f.name}.{name}.", items[name])
        else:
            out.append(prefix + f.name)
    return out


OVERRIDE_EXAMPLE = "core.sbuf.partition_bytes=448KiB"


def apply_override(
    tree: dict, origins: Origins, text: str, root: type, example: str = OVERRIDE_EXAMPLE
) -> None:
    """Set the `key.path=value` of `text` in `tree` (recording it in `origins`), after checking
    the key path against the dataclass tree of `root` (and, below a `named` mapping, against
    the names in `tree`: a --set changes a named element, it does not add one); the value is
    read as YAML. `example` is the form shown when `text` is no `key.path=value`."""
    key, eq, raw = (part.strip() for part in str(text).partition("="))
    where = f"--set {text}"
    if not eq or not raw or not _OVERRIDE_KEY.fullmatch(key):
        raise ConfigError(f"{where}: expected key.path=value, e.g. {example}")
    path = tuple(key.split("."))

    def unknown() -> typing.NoReturn:
        close = difflib.get_close_matches(key, _leaf_paths(root, "", tree), n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"{where}: unknown key '{key}'{hint}")

    cls, node, i, unit = root, tree, 0, ""
    while i < len(path):
        f = {g.name: g for g in _settable(cls)}.get(path[i])
        if f is None or (i < len(path) - 1 and f.metadata["unit"] not in ("section", "named")):
            unknown()
        unit = f.metadata["unit"]
        node = node.get(path[i]) if isinstance(node, dict) else None
        if unit == "named" and i < len(path) - 1:
            i += 1
            if not isinstance(node, dict) or path[i] not in node:
                unknown()
            node, unit = node[path[i]], "section"
        if unit in ("section", "named"):
            cls = _dataclass_of(_hints(cls)[f.name])
        i += 1
    if unit in ("section", "named"):
        if unit == "named":  # a mapping of names: its first name's keys
            node = {next(iter(node), "NAME"): {}} if isinstance(node, dict) else {"NAME": {}}
            name = next(iter(node))
            leaves = _leaf_paths(cls, f"{key}.{name}.", node[name])
        else:
            leaves = _leaf_paths(cls, key + ".", node)
        example = f", e.g. {leaves[0]}" if leaves else ""
        raise ConfigError(f"{where}: '{key}' is a section; set one of its keys{example}")
    value = raw if unit == "str" else _yaml_value(raw)
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
    """Construct dataclass `cls` from mapping `tree`, parsing each field with its unit kind (a
    field with a default may be missing: it keeps its default)."""
    fields = _settable(cls)
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
            if _optional(f):
                continue
            form = "a section" if unit == "section" else _expected(unit)
            fail(origins, path, f"missing key '{f.name}' ({f.metadata['help']}; {form})")
        kwargs[f.name] = _value(f, hints[f.name], tree[f.name], (*path, f.name), origins)
    return cls(**kwargs)


def _expected(unit: str) -> str:
    return {
        "section": "a mapping of keys",
        "named": "a mapping of names (letters, digits, _) to mappings of keys",
        "list": "a list of whole numbers like [1, 2]",
        "bool": "true or false",
        "str": "text",
    }.get(unit) or expected(unit)


def _value(f: dataclasses.Field, hint: type, raw: object, path: tuple, origins: Origins):
    unit = f.metadata["unit"]
    ok = {
        "section": isinstance(raw, dict),
        "named": isinstance(raw, dict) and len(raw) > 0,
        "list": isinstance(raw, list) and len(raw) > 0,
        "bool": isinstance(raw, bool),
        "str": isinstance(raw, str),
    }.get(unit, True)
    if not ok:
        fail(origins, path, f"expected {_expected(unit)}, got {_brief(raw)}")
    if unit == "section":
        return build(_dataclass_of(hint), raw, path, origins)
    if unit == "named":
        return tuple(_named(_dataclass_of(hint), raw, path, origins))
    if unit == "list":
        return tuple(_number("count", item, f.name, path, origins) for item in raw)
    if unit in ("bool", "str"):
        return raw
    return _number(unit, raw, f.name, path, origins)


def _named(cls: type, raw: dict, path: tuple, origins: Origins):
    """The elements of a `named` mapping, in the mapping's order, each built from its mapping
    and given its key as `name`."""
    for name, value in raw.items():
        if not isinstance(name, str) or not _OVERRIDE_KEY.fullmatch(name) or "." in name:
            fail(
                origins,
                (*path, name),
                f"expected a name of letters, digits and _, got {_brief(name)}",
            )
        if not isinstance(value, dict):
            fail(origins, (*path, name), f"expected a mapping of keys, got {_brief(value)}")
        yield dataclasses.replace(build(cls, value, (*path, name), origins), name=name)


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
