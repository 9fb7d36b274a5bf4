"""YAML with positions: mappings and lists that remember the line of every key and item.

`load_yaml(text, source)` parses one YAML document with PyYAML's safe loader and returns plain
Python data, except that mappings are `PosDict` and sequences are `PosList`: dict and list
subclasses that carry `.line` (1-based line where they start) and `.line_of(key or index)`.
Validators use these to point errors at the exact line of the offending key or item.

Every problem (syntax, duplicate keys, unhashable keys, bad explicit tags, recursive aliases,
nesting too deep) raises `error` (default `TraceError`) with a one-line message
`<source>:<line>: <key path>: <what is wrong>; expected <what>`; never a bare PyYAML exception.

`Loc` and the `want_*` / `check_keys` helpers validate such data with those messages.

Scalars follow YAML 1.2's core schema where YAML 1.1 surprises people: only `true`/`false` are
booleans (so `on: host` keeps its key `on`, and `yes` stays a string); `1e-5` is a float; `010`
is ten (not octal) and `1:30` a string (not sexagesimal); dates and a bare `=` stay strings.
Null, `.inf`/`.nan`, `0x`/`0o`/`0b` integers, anchors, aliases and `<<` merge keys work as usual.
Documents may nest lists and mappings at most MAX_DEPTH (100) levels deep.

Speed: when PyYAML has libyaml, documents in the common subset (untagged scalars, mappings,
lists, anchors, aliases) are built straight from libyaml's events, many times faster than the
pure-Python loader; anything else -- tags, merge keys, every error -- goes to the pure-Python
reference loader, so results and messages are the same either way (`LIBYAML = False` forces the
reference loader). The cyclic GC is paused while loading (`no_gc`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import yaml

from trnsim.errors import TraceError
from trnsim.gcpause import no_gc

MAX_DEPTH = 100
"""The most levels of nested lists and mappings a document may have."""

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_DROPPED = (_BOOL, _INT, _FLOAT, "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value")
_EXP = r"[eE][-+]?[0-9]+"
_INT_RE = re.compile(
    r"^[-+]?(?:[0-9][0-9_]*|0x[0-9a-fA-F][0-9a-fA-F_]*|0o[0-7][0-7_]*|0b[01][01_]*)$")
_FLOAT_RE = re.compile(
    rf"^[-+]?(?:\.[0-9][0-9_]*(?:{_EXP})?|[0-9][0-9_]*(?:\.[0-9_]*(?:{_EXP})?|{_EXP}))$"
    r"|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$")


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


class _Resolver(yaml.resolver.Resolver):
    """PyYAML's resolver with YAML 1.2 core-schema booleans, ints and floats (see above)."""

    yaml_implicit_resolvers = {
        ch: [r for r in resolvers if r[0] not in _DROPPED]
        for ch, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
    }


class _Loader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser,
              yaml.composer.Composer, yaml.constructor.SafeConstructor, _Resolver):
    """The reference loader: PyYAML's pure-Python SafeLoader with `_Resolver`, building
    PosDict/PosList and rejecting duplicate keys."""

    def __init__(self, text: str, source: str, error: type[Exception]):
        yaml.reader.Reader.__init__(self, text)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        _Resolver.__init__(self)
        self.source = source
        self.error = error
        self.keys: list = []  # the key path of the node under construction
        self.depth = 0  # collections open in compose_node

    def compose_node(self, parent, index):
        """Compose as PyYAML does, but refuse more than MAX_DEPTH nested collections (as the
        fast path does, with the same message)."""
        collection = self.check_event(yaml.MappingStartEvent, yaml.SequenceStartEvent)
        if collection:
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise self.error(_too_deep(self.source, self.peek_event().start_mark))
        try:
            return super().compose_node(parent, index)
        finally:
            if collection:
                self.depth -= 1

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


def _too_deep(source: str, mark: Any) -> str:
    return (f"{source}:{mark.line + 1}: syntax: nesting is too deep; expected at most "
            f"{MAX_DEPTH} levels of nested lists and mappings")


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    """Decimal (leading zeros allowed, not octal), 0x, 0o, 0b; underscores ignored."""
    text = loader.construct_scalar(node).replace("_", "")
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-")
    return sign * int(digits, 0 if digits[:2] in ("0x", "0o", "0b") else 10)


_Resolver.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Resolver.add_implicit_resolver(_FLOAT, _FLOAT_RE, list("-+0123456789."))
_Resolver.add_implicit_resolver(_INT, _INT_RE, list("-+0123456789"))
_Loader.add_constructor(_INT, _construct_int)
_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_pos_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _Loader.construct_pos_seq)


def _syntax_message(e: yaml.YAMLError, text: str, source: str) -> str:
    """One line for a PyYAML error: `<source>:<line>: syntax: <problem>; expected valid YAML`."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    if mark is not None:
        line = mark.line + 1
        what = ", ".join(x for x in (getattr(e, "context", None), getattr(e, "problem", None))
                         if x) or "invalid YAML"
        what += f" (column {mark.column + 1})"
    elif isinstance(e, yaml.reader.ReaderError):
        line = text[: e.position].count("\n") + 1
        char = chr(e.character) if isinstance(e.character, int) else e.character
        what = f"character {char!r} is not allowed in YAML"
    else:
        line, what = 1, str(e)
    return " ".join(f"{source}:{line}: syntax: {what}; expected valid YAML".splitlines())


def load_yaml(text: str, source: str = "<string>", error: type[Exception] = TraceError) -> Any:
    """Parse one YAML document from `text` into PosDict/PosList/scalars (None if empty).

    `source` names the text in error messages; `error` is the exception class raised.
    """
    with no_gc():
        if LIBYAML:
            try:
                return _fast_load(text, source, error)
            except (_Fallback, yaml.YAMLError, RecursionError, ValueError, UnicodeError):
                pass  # not the common subset, or an error: the reference loader decides
        return _slow_load(text, source, error)


def _slow_load(text: str, source: str, error: type[Exception]) -> Any:
    """The reference loader: PyYAML's pure-Python parser and `_Loader`'s constructors."""
    loader = None
    try:
        loader = _Loader(text, source, error)
        node = loader.get_single_node()
        return None if node is None else loader.construct_document(node)
    except yaml.YAMLError as e:
        raise error(_syntax_message(e, text, source)) from None
    except UnicodeError as e:  # e.g. a lone surrogate in a str handed to loads()
        raise error(f"{source}:1: syntax: the text cannot be encoded ({e.reason}); expected "
                    f"valid Unicode text") from None
    except RecursionError:  # a caller already deep in the stack
        raise error(f"{source}:1: syntax: nesting is too deep; expected at most {MAX_DEPTH} "
                    "levels of nested lists and mappings") from None
    finally:
        if loader is not None:
            loader.dispose()


# ----------------------------------------------------------------------------------------------
# the fast path: libyaml's event parser, built into PosDict/PosList without yaml.Node objects

LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))
"""Whether `load_yaml` tries the libyaml fast path first (tests set it False to force the
reference loader)."""


class _Fallback(Exception):
    """The fast path met something outside its subset; use the reference loader."""


_NULL = "tag:yaml.org,2002:null"
_STR = "tag:yaml.org,2002:str"
_RESOLVER = _Resolver()
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_PLAIN_CONSTRUCTORS = {
    _INT: _construct_int,
    _FLOAT: yaml.constructor.SafeConstructor.construct_yaml_float,
    _BOOL: yaml.constructor.SafeConstructor.construct_yaml_bool,
    _NULL: yaml.constructor.SafeConstructor.construct_yaml_null,
}
_MISSING = object()


def _plain(value: str) -> Any:
    """The value of an untagged plain scalar, resolved and constructed like `_Loader` does."""
    if value.isdigit() and value.isascii():  # the common case of an int: 0-9 only
        return int(value)
    tag = _RESOLVER.resolve(yaml.ScalarNode, value, (True, False))
    if tag == _STR:
        return value
    construct = _PLAIN_CONSTRUCTORS.get(tag)
    if construct is None:  # `<<` (merge) and the like
        raise _Fallback
    try:
        return construct(_CONSTRUCTOR, yaml.ScalarNode(tag, value))
    except Exception:
        raise _Fallback from None


def _fast_load(text: str, source: str = "<string>", error: type[Exception] = TraceError) -> Any:
    """Build the document from libyaml's events, for the common subset: untagged scalars,
    mappings and lists, anchors and aliases. Raises `_Fallback` (or a YAMLError) on anything
    else -- tags, merge keys, duplicate or unhashable keys, recursive or undefined aliases,
    several documents -- so that the reference loader handles (or rejects) it with its exact
    messages. On success the result equals the reference loader's. Only nesting deeper than
    MAX_DEPTH it rejects itself (as the reference loader does; PyYAML's scanner takes seconds
    for a few thousand unclosed brackets)."""
    from yaml._yaml import CParser  # noqa: PLC0415  (present when yaml.__with_libyaml__)

    get = CParser(text).get_event
    plain_cache: dict[str, Any] = {}
    anchors: dict[str, tuple[Any, int]] = {}
    scalar_event, alias_event = yaml.ScalarEvent, yaml.AliasEvent
    mapping_start, mapping_end = yaml.MappingStartEvent, yaml.MappingEndEvent
    sequence_start, sequence_end = yaml.SequenceStartEvent, yaml.SequenceEndEvent

    def scalar(event: yaml.ScalarEvent) -> Any:
        if event.tag is not None:
            raise _Fallback
        value = event.value
        if not event.implicit[0]:
            return value
        obj = plain_cache.get(value, _MISSING)
        if obj is _MISSING:
            obj = plain_cache[value] = _plain(value)
        return obj

    def node(event: yaml.Event, depth: int) -> tuple[Any, int]:
        """The value of the node `event` starts, and its line."""
        kind = event.__class__
        anchor = event.anchor
        if kind is alias_event:
            obj, line = anchors.get(anchor, (_MISSING, 0))
            if obj is _MISSING:  # undefined, or recursive (aliased inside its own node)
                raise _Fallback
            return obj, line
        if anchor is not None and anchor in anchors:
            raise _Fallback
        line = event.start_mark.line + 1
        if kind is scalar_event:
            obj = scalar(event)
        elif kind is mapping_start or kind is sequence_start:
            if event.tag is not None:
                raise _Fallback
            if depth >= MAX_DEPTH:  # the reference loader would say the same, but slowly
                raise error(_too_deep(source, event.start_mark))
            if anchor is not None:
                anchors[anchor] = (_MISSING, line)
            obj = (mapping if kind is mapping_start else sequence)(line, depth + 1)
        else:
            raise _Fallback
        if anchor is not None:
            anchors[anchor] = (obj, line)
        return obj, line

    def mapping(line: int, depth: int) -> PosDict:
        result = PosDict(line=line)
        key_lines = result.key_lines
        while True:
            event = get()
            kind = event.__class__
            if kind is scalar_event and event.anchor is None:
                key = scalar(event)
                key_line = event.start_mark.line + 1
                if key is None and not event.value:  # libyaml may place `{?\n: v}`'s empty
                    raise _Fallback                  # key on the next line
            elif kind is mapping_end:
                return result
            else:
                key, key_line = node(event, depth)
            if key.__class__ is not str:
                try:
                    hash(key)
                except TypeError:
                    raise _Fallback from None
            if key in result:
                raise _Fallback
            event = get()
            if event.__class__ is scalar_event and event.anchor is None:
                result[key] = scalar(event)
            else:
                result[key] = node(event, depth)[0]
            key_lines[key] = key_line

    def sequence(line: int, depth: int) -> PosList:
        result = PosList(line=line)
        append, append_line = result.append, result.item_lines.append
        while True:
            event = get()
            kind = event.__class__
            if kind is scalar_event and event.anchor is None:
                append(scalar(event))
                append_line(event.start_mark.line + 1)
            elif kind is sequence_end:
                return result
            else:
                obj, item_line = node(event, depth)
                append(obj)
                append_line(item_line)

    if get().__class__ is not yaml.StreamStartEvent:
        raise _Fallback
    event = get()
    if event.__class__ is yaml.StreamEndEvent:
        return None
    if event.__class__ is not yaml.DocumentStartEvent:
        raise _Fallback
    root = node(get(), 0)[0]
    if get().__class__ is not yaml.DocumentEndEvent or \
            get().__class__ is not yaml.StreamEndEvent:
        raise _Fallback
    return root


# ----------------------------------------------------------------------------------------------
# validating positioned data


@dataclass(frozen=True)
class Loc:
    """Where a value sits: source, line and key path (`kernels.k.instructions[2].src`).

    `key`/`item` step into a PosDict/PosList (taking the child's line when known); `fail`
    raises the one-line error `<source>:<line>: <key path>: <what is wrong>; expected <what>`.
    """

    source: str
    line: int
    path: str
    error: type[Exception] = TraceError

    def key(self, mapping: Any, key: Any) -> Loc:
        """The location of `mapping[key]`."""
        line = mapping.line_of(key) if isinstance(mapping, PosDict) else self.line
        return replace(self, line=line or self.line,
                       path=f"{self.path}.{key}" if self.path else str(key))

    def item(self, seq: Any, index: int) -> Loc:
        """The location of `seq[index]`."""
        line = seq.line_of(index) if isinstance(seq, PosList) else self.line
        return replace(self, line=line or self.line, path=f"{self.path}[{index}]")

    def fail(self, what: str, expected: str) -> NoReturn:
        msg = f"{self.source}:{self.line}: {self.path or 'top level'}: {what}; expected {expected}"
        raise self.error(" ".join(msg.splitlines()))


def show(value: Any, limit: int = 60) -> str:
    """A short one-line description of a user value for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        keys = [str(k) for k in list(value)[:4]]
        more = ", ..." if len(value) > 3 else ""
        noun = "key" if len(value) == 1 else "keys"
        text = f"a mapping with {noun} {', '.join(keys[:3])}{more}" if value else "an empty mapping"
        return text if len(text) <= limit else text[: limit - 3] + "..."
    if isinstance(value, (list, tuple)):
        return "a list" if value else "an empty list"
    text = repr(value) if isinstance(value, (str, int, float)) else type(value).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def hint(value: Any, choices: Iterable[Any]) -> str:
    """` (did you mean 'x'?)` for the closest string in `choices`, or ''."""
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, [c for c in choices if isinstance(c, str)], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown(what: str, value: Any, choices: Iterable[Any]) -> str:
    """`unknown <what> 'name' (did you mean ...?)`, or `got <value>` when it is no string."""
    if not isinstance(value, str):
        return f"got {show(value)}"
    return f"unknown {what} {show(value)}{hint(value, choices)}"


def one_of(choices: Iterable[Any], limit: int = 24) -> str:
    """`one of a, b, c` (shortened after `limit` names); `nothing defined` when empty."""
    names = [str(c) for c in choices]
    if not names:
        return "a name, but none is defined"
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return "one of " + ", ".join(names[:limit]) + more


def is_int(value: Any) -> bool:
    """An int that is not a bool (YAML `true` must not pass as 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def want_map(value: Any, loc: Loc, expected: str) -> dict:
    """`value` if it is a mapping, else fail with `got <value>; expected <expected>`."""
    if not isinstance(value, dict):
        loc.fail(f"got {show(value)}", expected)
    return value


def want_list(value: Any, loc: Loc, expected: str) -> list:
    """`value` if it is a list, else fail."""
    if not isinstance(value, list):
        loc.fail(f"got {show(value)}", expected)
    return value


def want_str(value: Any, loc: Loc, expected: str) -> str:
    """`value` if it is a non-blank string, else fail."""
    if not isinstance(value, str) or not value.strip():
        loc.fail(f"got {show(value)}", expected)
    return value


def want_int(value: Any, loc: Loc, expected: str, minimum: int | None = None) -> int:
    """`value` if it is an int (not a bool) >= `minimum`, else fail."""
    if not is_int(value) or (minimum is not None and value < minimum):
        loc.fail(f"got {show(value)}", expected)
    return value


def want_choice(value: Any, loc: Loc, choices: Iterable[str]) -> str:
    """`value` if it is one of `choices`, else fail suggesting the closest."""
    choices = list(choices)
    if not isinstance(value, str) or value not in choices:
        loc.fail(f"got {show(value)}{hint(value, choices)}", one_of(choices))
    return value


IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def want_name(value: Any, loc: Loc, what: str, ident: bool = False) -> str:
    """A name of a `what` (tensor, event, ...): a non-empty string; an identifier if `ident`."""
    if ident and not (isinstance(value, str) and IDENTIFIER.fullmatch(value)):
        loc.fail(f"{what} name {show(value)} is not an identifier",
                 f"a {what} name made of letters, digits and _ (not starting with a digit)")
    name = want_str(value, loc, f"a {what} name (a string)")
    if not name.isprintable():  # names appear in one-line error messages
        loc.fail(f"{what} name {show(value)} has a line break or control character",
                 f"a {what} name of printable characters")
    return name


def check_keys(mapping: dict, loc: Loc, allowed: Iterable[str], what: str = "key",
               expected: str | None = None) -> None:
    """Fail on the first key of `mapping` that is not in `allowed`, at that key's line."""
    allowed = list(allowed)
    for key in mapping:
        if key not in allowed:
            loc.key(mapping, key).fail(f"unknown {what} {show(key)}{hint(key, allowed)}",
                                       expected or one_of(allowed))
