"""Reading user files: `load_yaml` (positioned data, see `trnsim.inputs.positions`) and
`load_json` (plain data, fast).

`load_yaml` builds the document from libyaml's events when PyYAML has libyaml and the document
is in the common subset (`trnsim.inputs.yaml_events`), many times faster than the pure-Python
reference loader; anything else -- tags, merge keys, every error -- goes to the reference loader,
so results and messages are the same either way (`LIBYAML = False` forces the reference loader).

`load_json` reads JSON with Python's `json` module: dicts and lists without lines, for callers
that check the data and, when a check fails, read the text again with `load_yaml` to name the
line (JSON is YAML). A JSON syntax error names its line and column.

The cyclic GC is paused while loading (`no_gc`).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from trnsim.errors import TraceError
from trnsim.gcpause import no_gc
from trnsim.inputs import yaml_events
from trnsim.inputs.positions import reference_load

__all__ = ["load_yaml", "load_json", "LIBYAML"]

LIBYAML = yaml_events.AVAILABLE
"""Whether `load_yaml` tries the libyaml fast path first (tests set it False to force the
reference loader)."""


def load_yaml(text: str, source: str = "<string>", error: type[Exception] = TraceError) -> Any:
    """Parse one YAML document from `text` into PosDict/PosList/scalars (None if empty).

    `source` names the text in error messages; `error` is the exception class raised.
    """
    with no_gc():
        if LIBYAML:
            try:
                return yaml_events.fast_load(text, source, error)
            except (yaml_events.Fallback, yaml.YAMLError, RecursionError, ValueError, UnicodeError):
                pass  # not the common subset, or an error: the reference loader decides
        return reference_load(text, source, error)


def load_json(text: str, source: str = "<string>", error: type[Exception] = TraceError) -> Any:
    """Parse JSON `text` into plain dicts, lists and scalars. As in YAML, `NaN`, `Infinity` and
    `-Infinity` (which JSON does not have) are strings. A syntax error raises `error` with
    `<source>:<line>: syntax: <problem> (column <n>); expected valid JSON`."""
    with no_gc():
        try:
            return json.loads(text, parse_constant=str)
        except json.JSONDecodeError as e:
            raise error(
                f"{source}:{e.lineno}: syntax: {e.msg} (column {e.colno}); expected valid JSON"
            ) from None
        except RecursionError:
            raise error(
                f"{source}:1: syntax: nesting is too deep; expected valid JSON of "
                "fewer levels of nested lists and mappings"
            ) from None
