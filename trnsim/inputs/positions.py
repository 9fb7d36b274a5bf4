"""Positioned data, and the reference loader that defines it: YAML whose mappings and lists
remember the line of every key and item.

`reference_load(text, source, error)` parses one YAML document with PyYAML's pure-Python safe
loader into plain Python data, except that mappings are `PosDict` and sequences are `PosList`:
dict and list subclasses that carry `.line` (1-based line where they start) and
`.line_of(key or index)`. Validators (`trnsim.inputs.validate`) use these to point errors at the
exact line of the offending key or item. `trnsim.inputs.load.load_yaml` is the entry point: it
builds the same result faster from libyaml's events (`trnsim.inputs.yaml_events`) when it can.

Every problem (syntax, duplicate keys, unhashable keys, bad explicit tags, recursive aliases,
nesting too deep) raises `error` (default `TraceError`) with a one-line message
`<source>:<line>: <key path>: <what is wrong>; expected <what>`; never a bare PyYAML exception.

Scalars follow YAML 1.2's core schema where YAML 1.1 surprises people: only `true`/`false` are
booleans (so `on: host` keeps its key `on`, and `yes` stays a string); `1e-5` is a float; `010`
is ten (not octal) and `1:30` a string (not sexagesimal); dates and a bare `=` stay strings.
Null, `.inf`/`.nan`, `0x`/`0o`/`0b` integers, anchors, aliases and `<<` merge keys work as usual.
Documents may nest lists and mappings at most MAX_DEPTH (100) levels deep, and aliases may add at
most MAX_ALIAS_NODES nodes: each use of an anchor counts every node of the anchored subtree
(aliases inside it included), so a "billion laughs" of nested aliases is refused while it is
read, at the alias that crosses the limit, before anything walks it. Both loaders count the same
way (`too_many_aliased`).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from trnsim.errors import TraceError

__all__ = [
    "PosDict",
    "PosList",
    "MAX_DEPTH",
    "MAX_ALIAS_NODES",
    "reference_load",
    "too_many_aliased",
    "too_deep",
    "Resolver",
    "construct_int",
    "INT",
    "FLOAT",
    "BOOL",
]

MAX_DEPTH = 100
"""The most levels of nested lists and mappings a document may have."""
MAX_ALIAS_NODES = 10_000_000
"""The most nodes aliases may add to a document, each use counting all the nodes of the subtree
it names (a trace written out in full needs none; 10 million is ~1 GB of Python objects)."""

BOOL = "tag:yaml.org,2002:bool"
INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"
_DROPPED = (BOOL, INT, FLOAT, "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value")
_EXP = r"[eE][-+]?[0-9]+"
_INT_RE = re.compile(
    r"^[-+]?(?:[0-9][0-9_]*|0x[0-9a-fA-F][0-9a-fA-F_]*|0o[0-7][0-7_]*|0b[01][01_]*)$"
)
_FLOAT_RE = re.compile(
    rf"^[-+]?(?:\.[0-9][0-9_]*(?:{_EXP})?|[0-9][0-9_]*(?:\.[0-9_]*(?:{_EXP})?|{_EXP}))$"
    r"|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"
)


class PosDict(dict):
    """A mapping that knows the line it starts on and the line of each of its keys."""

    def __init__(self, *args, line: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.line = line
        self.key_lines: dict[Any, int] = {}

    def line_of(self, key: Any) -> int:
        """The line of `key` (the mapping's own line when unknown)."""
        return self.key_lines.get(key, self.line)


class PosList(list):
    """A list that knows the line it starts on and the line of each of its items."""

    def __init__(self, *args, line: int = 0):
        super().__init__(*args)
        self.line = line
        self.item_lines: list[int] = []

    def line_of(self, index: int) -> int:
        """The line of item `index` (the list's own line when unknown)."""
        if 0 <= index < len(self.item_lines):
            return self.item_lines[index]
        return self.line


def _path(parts: list) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "top level"


class Resolver(yaml.resolver.Resolver):
    """PyYAML's resolver with YAML 1.2 core-schema booleans, ints and floats (see above)."""

    yaml_implicit_resolvers = {
        ch: [r for r in resolvers if r[0] not in _DROPPED]
        for ch, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
    }


class _Loader(
    yaml.reader.Reader,
    yaml.scanner.Scanner,
    yaml.parser.Parser,
    yaml.composer.Composer,
    yaml.constructor.SafeConstructor,
    Resolver,
):
    """The reference loader: PyYAML's pure-Python SafeLoader with `Resolver`, building
    PosDict/PosList and rejecting duplicate keys."""

    def __init__(self, text: str, source: str, error: type[Exception]):
        yaml.reader.Reader.__init__(self, text)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.source = source
        self.error = error
        self.keys: list = []  # the key path of the node under construction
        self.depth = 0  # collections open in compose_node
        self.nodes = 0  # nodes composed so far (the root excluded), aliases expanded
        self.aliased = 0  # of which aliases added
        self.sizes: dict[str, int] = {}  # anchor -> nodes below the node it names

    def compose_node(self, parent, index):
        """Compose as PyYAML does, but refuse more than MAX_DEPTH nested collections and more
        than MAX_ALIAS_NODES nodes added by aliases (as the fast path does, with the same
        messages)."""
        event = self.peek_event()
        if parent is not None:
            self.nodes += 1
        if event.__class__ is yaml.AliasEvent:
            size = self.sizes.get(event.anchor, 0)  # 0: undefined or recursive (PyYAML says)
            self.nodes += size
            self.aliased += size
            if self.aliased > MAX_ALIAS_NODES:
                raise self.error(too_many_aliased(self.source, event.start_mark))
            return super().compose_node(parent, index)
        collection = self.check_event(yaml.MappingStartEvent, yaml.SequenceStartEvent)
        if collection:
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise self.error(too_deep(self.source, event.start_mark))
        before = self.nodes
        try:
            return super().compose_node(parent, index)
        finally:
            if collection:
                self.depth -= 1
            if event.anchor is not None:
                self.sizes[event.anchor] = self.nodes - before

    def fail(self, node: yaml.Node, what: str, expected: str):
        line = node.start_mark.line + 1
        msg = f"{self.source}:{line}: {_path(self.keys)}: {what}; expected {expected}"
        raise self.error(" ".join(msg.splitlines()))

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (self.error, yaml.YAMLError):
            raise
        except Exception as e:  # e.g. `!!int abc` or `!!timestamp 2020-13-45` -> ValueError
            self.fail(node, f"cannot read {node.tag!r} value: {e}", "a valid value for the tag")

    def construct_pos_map(self, node: yaml.MappingNode) -> PosDict:
        explicit = sum(1 for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge")
        self.flatten_mapping(node)
        first_explicit = len(node.value) - explicit
        result = PosDict(line=node.start_mark.line + 1)
        seen = set()
        for i, (key_node, value_node) in enumerate(node.value):
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                self.fail(key_node, "a mapping key must be a plain value", "a name as the key")
            if i >= first_explicit:
                if key in seen:
                    self.fail(key_node, f"duplicate key {key!r}", "each key at most once")
                seen.add(key)
            self.keys.append(key)
            result[key] = self.construct_object(value_node, deep=True)
            self.keys.pop()
            result.key_lines[key] = key_node.start_mark.line + 1
        return result

    def construct_pos_seq(self, node: yaml.SequenceNode) -> PosList:
        result = PosList(line=node.start_mark.line + 1)
        for i, item in enumerate(node.value):
            self.keys.append(i)
            result.append(self.construct_object(item, deep=True))
            self.keys.pop()
            result.item_lines.append(item.start_mark.line + 1)
        return result


def too_deep(source: str, mark: Any) -> str:
    return (
        f"{source}:{mark.line + 1}: syntax: nesting is too deep; expected at most "
        f"{MAX_DEPTH} levels of nested lists and mappings"
    )


def too_many_aliased(source: str, mark: Any) -> str:
    return (
        f"{source}:{mark.line + 1}: syntax: aliases expand the document by more than "
        f"{MAX_ALIAS_NODES} nodes; expected at most {MAX_ALIAS_NODES} nodes added by aliases "
        "(each use of an anchor counts every node below it)"
    )


def construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    """Decimal (leading zeros allowed, not octal), 0x, 0o, 0b; underscores ignored."""
    text = loader.construct_scalar(node).replace("_", "")
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-")
    return sign * int(digits, 0 if digits[:2] in ("0x", "0o", "0b") else 10)


Resolver.add_implicit_resolver(
    BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
Resolver.add_implicit_resolver(FLOAT, _FLOAT_RE, list("-+0123456789."))
Resolver.add_implicit_resolver(INT, _INT_RE, list("-+0123456789"))
_Loader.add_constructor(INT, construct_int)
_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_pos_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _Loader.construct_pos_seq)


def _syntax_message(e: yaml.YAMLError, text: str, source: str) -> str:
    """One line for a PyYAML error: `<source>:<line>: syntax: <problem>; expected valid YAML`."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    if mark is not None:
        line = mark.line + 1
        what = (
            ", ".join(x for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x)
            or "invalid YAML"
        )
        what += f" (column {mark.column + 1})"
    elif isinstance(e, yaml.reader.ReaderError):
        line = text[: e.position].count("\n") + 1
        char = chr(e.character) if isinstance(e.character, int) else e.character
        what = f"character {char!r} is not allowed in YAML"
    else:
        line, what = 1, str(e)
    return " ".join(f"{source}:{line}: syntax: {what}; expected valid YAML".splitlines())


def reference_load(text: str, source: str = "<string>", error: type[Exception] = TraceError) -> Any:
    """Parse one YAML document from `text` into PosDict/PosList/scalars (None if empty) with
    PyYAML's pure-Python parser and `_Loader`'s constructors: the reference for every result and
    message. `source` names the text in error messages; `error` is the exception class raised."""
    loader = None
    try:
        loader = _Loader(text, source, error)
        node = loader.get_single_node()
        return None if node is None else loader.construct_document(node)
    except yaml.YAMLError as e:
        raise error(_syntax_message(e, text, source)) from None
    except UnicodeError as e:  # e.g. a lone surrogate in a str handed to loads()
        raise error(
            f"{source}:1: syntax: the text cannot be encoded ({e.reason}); expected "
            f"valid Unicode text"
        ) from None
    except RecursionError:  # a caller already deep in the stack
        raise error(
            f"{source}:1: syntax: nesting is too deep; expected at most {MAX_DEPTH} "
            "levels of nested lists and mappings"
        ) from None
    finally:
        if loader is not None:
            loader.dispose()
