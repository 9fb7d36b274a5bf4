"""Config YAML files -> one merged tree (the only reader of chip and system YAML).

A config file is found by name (a bundled chip in `configs_dir()`, a bundled system in
`systems_dir()`: a `Bundle`) or path, merged over its `base:` (recursively; mappings merge key
by key, anything else replaces); `trnsim.config.build` then applies the `key.path=value`
overrides (`--set`) and builds the dataclass tree, each field parsed with its unit kind
(`trnsim.config.tree`). Every key path remembers where its value came from (`Origins`), so that
each error is one line naming the file and line, the key, and what was expected. Rules that
involve several fields live with `load_chip` (`rules`) and `load_system` (`system_rules`).
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from pathlib import Path

from trnsim.errors import TrnsimError
from trnsim.inputs.load import load_yaml

__all__ = [
    "ConfigError",
    "Origins",
    "Bundle",
    "CHIPS",
    "SYSTEMS",
    "configs_dir",
    "list_chips",
    "resolve",
    "read_tree",
    "fail",
    "latest",
    "merge",
    "where_of",
]


NOT_A_CONFIG = "not a chip config (expected a YAML mapping of config keys)"
BRIEF = 60
"""The most characters of a value an error message shows (a value may be a whole file)."""

Origins = dict  # key path -> (where: file or "--set k=v", line or None, rank)
# rank orders the sources of values: a base file < the file that extends it < each --set


class ConfigError(TrnsimError):
    """A chip config cannot be loaded: one line naming the file (and line), the key, and what
    was expected."""


@dataclasses.dataclass(frozen=True)
class Bundle:
    """A kind of config file that ships with trnsim: the noun its messages use and the folder
    it is bundled in (`<trnsim package>/<folder>` when installed, `<repo>/<folder>` in a
    checkout)."""

    noun: str
    folder: str

    def directory(self) -> Path:
        """The folder of the bundled files."""
        package = Path(__file__).resolve().parents[1]  # trnsim/
        for candidate in (package / self.folder, package.parent / self.folder):
            if candidate.is_dir() and any(candidate.glob("*.yaml")):
                return candidate
        raise ConfigError(
            f"cannot find the bundled {self.noun} configs in {package / self.folder} "
            f"or {package.parent / self.folder}"
        )

    def names(self) -> list[str]:
        """Names of the bundled files, sorted."""
        return sorted(p.stem for p in self.directory().glob("*.yaml"))


CHIPS = Bundle("chip", "configs")
SYSTEMS = Bundle("system", "systems")


def configs_dir() -> Path:
    """The directory of the bundled chip configs: `<trnsim package>/configs` when installed,
    `<repo>/configs` in a checkout."""
    return CHIPS.directory()


def list_chips() -> list[str]:
    """Names of the bundled chip configs, sorted (e.g. ['trn1', 'trn2', 'trn3'])."""
    return CHIPS.names()


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


def resolve(
    name_or_path: str, relative_to: Path | None, where: str, bundle: Bundle = CHIPS
) -> Path:
    """The file of a bundled name (of `bundle`: a chip, by default), or of a path (relative
    paths against `relative_to` when given); `where` prefixes the error message."""
    if "/" in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        path = Path(name_or_path).expanduser()
        if relative_to is not None and not path.is_absolute():
            path = relative_to / path
        if not path.is_file():
            raise ConfigError(f"{where}no such config file: {_show(path)}")
        return path.resolve()
    path = bundle.directory() / f"{name_or_path}.yaml"
    if not path.is_file():
        names = bundle.names()
        close = difflib.get_close_matches(name_or_path, names, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ConfigError(
            f"{where}unknown {bundle.noun} '{name_or_path}'; {hint}available: "
            f"{', '.join(names)} (or a path to a YAML file)"
        )
    return path


def read_tree(
    path: Path, chain: tuple[Path, ...] = (), where: str = "", bundle: Bundle = CHIPS
) -> tuple[dict, Origins]:
    """One file and its bases, merged: (tree, origins of every key path). `chain` holds the
    files that extend this one (to report inheritance cycles); `where` (the `base:` that names
    this file) prefixes the error when the file is no config; a `base:` name is one of
    `bundle`'s (a chip's, by default)."""
    noun = bundle.noun
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
            f"{where}{shown}: not a {noun} config (not UTF-8 text; expected a YAML mapping of "
            "config keys)"
        ) from None
    tree = load_yaml(text, shown, error=ConfigError)
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):  # never echo the file: it may be any file (/etc/passwd)
        raise ConfigError(f"{where}{shown}: {NOT_A_CONFIG.replace('chip', noun, 1)}")
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
            f"{where}expected a {noun} name or a path to a YAML file, got {_brief(base)}"
        )
    base_path = resolve(base, path.parent, where, bundle)
    base_tree, base_origins = read_tree(base_path, (*chain, path), where, bundle)
    origins.pop(("base",), None)
    base_origins.update(origins)
    return merge(base_tree, tree), base_origins


def _record(tree: dict, prefix: tuple, source: tuple, origins: Origins) -> None:
    shown, rank = source
    for key, value in tree.items():
        origins[(*prefix, key)] = (shown, getattr(tree, "key_lines", {}).get(key), rank)
        if isinstance(value, dict):
            _record(value, (*prefix, key), source, origins)


def merge(base: dict, child: dict) -> dict:
    """`child` over `base`: mappings merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in child.items():
        if isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = merge(out[key], value)
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


def where_of(origins: Origins, path: tuple) -> str:
    """Where the value at `path` came from, for messages: `file:line`, or `--set k=v`."""
    where, line, _ = origins.get(path, ("config", None, 0))
    return f"{where}:{line}" if line else where


def latest(origins: Origins, *paths: tuple) -> tuple:
    """Of keys that conflict, the one set last (a --set, else the most derived file): the one
    the user most likely just changed, so the error points there."""
    return max(paths, key=lambda path: origins.get(path, ("", None, -(10**9)))[2])
