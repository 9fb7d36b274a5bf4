"""The fast way to positioned data: a document built straight from libyaml's parser events into
PosDict/PosList, without PyYAML's node objects or its pure-Python scanner.

`fast_load` covers the common subset (untagged scalars, mappings, lists, anchors, aliases) and
gives exactly what `trnsim.inputs.positions.reference_load` gives; on anything else -- tags, merge
keys, and every error -- it raises `Fallback`, and `trnsim.inputs.load.load_yaml` hands the text
to the reference loader, so results and messages are the same either way. Needs PyYAML built
with libyaml (`AVAILABLE`).
"""

from __future__ import annotations

from typing import Any

import yaml

from trnsim.errors import TraceError
from trnsim.inputs.positions import (
    BOOL,
    FLOAT,
    INT,
    MAX_ALIAS_NODES,
    MAX_DEPTH,
    PosDict,
    PosList,
    Resolver,
    construct_int,
    too_deep,
    too_many_aliased,
)

__all__ = ["AVAILABLE", "Fallback", "fast_load"]

AVAILABLE = bool(getattr(yaml, "__with_libyaml__", False))
"""Whether PyYAML has libyaml, which `fast_load` needs."""


class Fallback(Exception):
    """The fast path met something outside its subset; use the reference loader."""


_NULL = "tag:yaml.org,2002:null"
_STR = "tag:yaml.org,2002:str"
_RESOLVER = Resolver()
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_PLAIN_CONSTRUCTORS = {
    INT: construct_int,
    FLOAT: yaml.constructor.SafeConstructor.construct_yaml_float,
    BOOL: yaml.constructor.SafeConstructor.construct_yaml_bool,
    _NULL: yaml.constructor.SafeConstructor.construct_yaml_null,
}
_MISSING = object()


def _plain(value: str) -> Any:
    """The value of an untagged plain scalar, resolved and constructed like `_Loader` does."""
    tag = _RESOLVER.resolve(yaml.ScalarNode, value, (True, False))
    if tag == _STR:
        return value
    construct = _PLAIN_CONSTRUCTORS.get(tag)
    if construct is None:  # `<<` (merge) and the like
        raise Fallback
    try:
        return construct(_CONSTRUCTOR, yaml.ScalarNode(tag, value))
    except Exception:
        raise Fallback from None


def fast_load(text: str, source: str = "<string>", error: type[Exception] = TraceError) -> Any:
    """Build the document from libyaml's events, for the common subset: untagged scalars,
    mappings and lists, anchors and aliases. Raises `Fallback` (or a YAMLError) on anything
    else -- tags, merge keys, duplicate or unhashable keys, recursive or undefined aliases,
    several documents -- so that the reference loader handles (or rejects) it with its exact
    messages. On success the result equals the reference loader's. Only nesting deeper than
    MAX_DEPTH and aliases adding more than MAX_ALIAS_NODES nodes it rejects itself (as the
    reference loader does, counting the same way; PyYAML's scanner takes seconds for a few
    thousand unclosed brackets). A text with a tab goes to the reference loader:
    libyaml and PyYAML's Python scanner disagree about tabs ('0\tnull' is a string to one, a
    syntax error to the other)."""
    from yaml._yaml import CParser  # noqa: PLC0415  (present when yaml.__with_libyaml__)

    if "\t" in text:
        raise Fallback

    get = CParser(text).get_event
    if get().__class__ is not yaml.StreamStartEvent:
        raise Fallback
    event = get()
    if event.__class__ is yaml.StreamEndEvent:
        return None
    if event.__class__ is not yaml.DocumentStartEvent:
        raise Fallback
    root = _Builder(get, source, error).node(get(), 0)[0]
    if get().__class__ is not yaml.DocumentEndEvent or get().__class__ is not yaml.StreamEndEvent:
        raise Fallback
    return root


_SCALAR, _ALIAS = yaml.ScalarEvent, yaml.AliasEvent
_MAPPING_START, _MAPPING_END = yaml.MappingStartEvent, yaml.MappingEndEvent
_SEQUENCE_START, _SEQUENCE_END = yaml.SequenceStartEvent, yaml.SequenceEndEvent


class _Builder:
    """Builds nodes from the events `get()` returns; remembers anchors and plain scalars.

    Counts nodes as the reference loader does: every key and item, and at each alias the nodes
    below its anchor (`nodes`, the root excluded; `aliased`, what aliases added). A collection
    adds its items when it closes, so the count costs nothing per item."""

    def __init__(self, get, source: str, error: type[Exception]):
        self.get, self.source, self.error = get, source, error
        self.plain_cache: dict[str, Any] = {}
        self.anchors: dict[str, tuple[Any, int, int]] = {}  # anchor -> (value, line, size)
        self.nodes = self.aliased = 0

    def scalar(self, event: yaml.ScalarEvent) -> Any:
        if event.tag is not None:
            raise Fallback
        value = event.value
        if not event.implicit[0]:
            return value
        obj = self.plain_cache.get(value, _MISSING)
        if obj is _MISSING:
            obj = self.plain_cache[value] = _plain(value)
        return obj

    def node(self, event: yaml.Event, depth: int) -> tuple[Any, int]:
        """The value of the node `event` starts, and its line."""
        kind = event.__class__
        anchor = event.anchor
        anchors = self.anchors
        if kind is _ALIAS:
            obj, line, size = anchors.get(anchor, (_MISSING, 0, 0))
            if obj is _MISSING:  # undefined, or recursive (aliased inside its own node)
                raise Fallback
            self.nodes += size
            self.aliased += size
            if self.aliased > MAX_ALIAS_NODES:
                raise self.error(too_many_aliased(self.source, event.start_mark))
            return obj, line
        if anchor is not None and anchor in anchors:
            raise Fallback
        line = event.start_mark.line + 1
        before = self.nodes
        if kind is _SCALAR:
            obj = self.scalar(event)
        elif kind is _MAPPING_START or kind is _SEQUENCE_START:
            if event.tag is not None:
                raise Fallback
            if depth >= MAX_DEPTH:  # the reference loader would say the same, but slowly
                raise self.error(too_deep(self.source, event.start_mark))
            if anchor is not None:
                anchors[anchor] = (_MISSING, line, 0)
            obj = (self.mapping if kind is _MAPPING_START else self.sequence)(line, depth + 1)
        else:
            raise Fallback
        if anchor is not None:
            anchors[anchor] = (obj, line, self.nodes - before)
        return obj, line

    def mapping(self, line: int, depth: int) -> PosDict:
        result = PosDict(line=line)
        key_lines = result.key_lines
        get, scalar, node = self.get, self.scalar, self.node
        while True:
            event = get()
            kind = event.__class__
            if kind is _SCALAR and event.anchor is None:
                key = scalar(event)
                key_line = event.start_mark.line + 1
                if key is None and not event.value:  # libyaml may place `{?\n: v}`'s empty
                    raise Fallback  # key on the next line
            elif kind is _MAPPING_END:
                self.nodes += 2 * len(result)
                return result
            else:
                key, key_line = node(event, depth)
            if key.__class__ is not str:
                try:
                    hash(key)
                except TypeError:
                    raise Fallback from None
            if key in result:
                raise Fallback
            event = get()
            if event.__class__ is _SCALAR and event.anchor is None:
                result[key] = scalar(event)
            else:
                result[key] = node(event, depth)[0]
            key_lines[key] = key_line

    def sequence(self, line: int, depth: int) -> PosList:
        result = PosList(line=line)
        append, append_line = result.append, result.item_lines.append
        get, scalar, node = self.get, self.scalar, self.node
        while True:
            event = get()
            kind = event.__class__
            if kind is _SCALAR and event.anchor is None:
                append(scalar(event))
                append_line(event.start_mark.line + 1)
            elif kind is _SEQUENCE_END:
                self.nodes += len(result)
                return result
            else:
                obj, item_line = node(event, depth)
                append(obj)
                append_line(item_line)
