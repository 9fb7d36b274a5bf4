"""Workload parameters: a trace's `params:` and `{expressions}` of them, applied to the raw
document before anything else reads it (documented in `docs/trace_extensions.md`).

A trace may declare integer parameters with their defaults, in order:

    params:
      batch: 128
      seq: 2048
      tokens: "{batch * seq}"     # a default may be an expression of the params before it

and use them as `{expressions}` in any string value of the document (never in keys): shapes,
slices, repeat counts, queues, file names. A value that is one whole expression (`"{batch}"`)
becomes an integer; anything else gets each `{...}` replaced by its value's digits. Expressions
are integer arithmetic (+ - * // % and parentheses, of limited size:
`trnsim.trace.expressions`), the language of `repeat:`'s loop variables (`trnsim.trace.repeat`),
and may mix params with the loop variables of enclosing repeat blocks: `{k * batch}` inside
`repeat: ..., as: k` keeps `k` for the repeat block, with `batch` replaced. A loop variable
hides a param of the same name.

`apply_params(doc, source, overrides)` sets params from `--param name=value` strings (or ints)
and substitutes them. A trace without `params:` is returned untouched (and any override is an
error). Every problem raises a one-line TraceError naming the key.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from typing import Any

from trnsim.errors import TraceError
from trnsim.inputs.validate import (
    Loc,
    hint,
    is_int,
    one_of,
    show,
    want_map,
    want_name,
)
from trnsim.trace.expressions import GRAMMAR, ExpressionError, parse_expression
from trnsim.trace.repeat import _EXPR, _evaluate

__all__ = ["apply_params", "parse_param_args", "PARAMS_KEY"]

PARAMS_KEY = "params"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT = re.compile(r"[-+]?[0-9][0-9_]*")


def parse_param_args(texts: Iterable[str], option: str = "--param") -> dict[str, str]:
    """`("batch=64", "seq=512")` -> {"batch": "64", "seq": "512"} (values checked later, by
    `apply_params`). Raises TraceError for a malformed or repeated one."""
    out: dict[str, str] = {}
    for text in texts:
        name, eq, value = text.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not _NAME.fullmatch(name) or not value:
            raise TraceError(f"{option} {text}: expected NAME=VALUE, like {option} batch=64")
        if name in out:
            raise TraceError(
                f"{option} {text}: param {name!r} is set twice; expected each param once"
            )
        out[name] = value
    return out


def apply_params(doc: Any, source: str, overrides: Mapping[str, Any] | None = None) -> Any:
    """`doc` (a loaded YAML document) with its `params:` set from `overrides` (name -> an int or
    its text) and every `{expression}` of them replaced. Modifies `doc` in place."""
    overrides = dict(overrides or {})
    if not isinstance(doc, dict) or doc.get(PARAMS_KEY) is None:
        if overrides:
            name = next(iter(overrides))
            raise TraceError(
                f"{source}:1: params: --param {name}={overrides[name]}: the trace "
                "declares no params; expected a param declared under params: in "
                "the trace"
            )
        return doc
    root = Loc(source, getattr(doc, "line", 1) or 1, "")
    values = _values(doc[PARAMS_KEY], root.key(doc, PARAMS_KEY), overrides)
    seen: set[int] = set()
    for key, value in doc.items():
        if key != PARAMS_KEY:
            doc[key] = _walk(value, root.key(doc, key), values, frozenset(), seen)
    return doc


def _values(section: Any, loc: Loc, overrides: dict[str, Any]) -> dict[str, int]:
    """The params' values: the overrides, else the defaults, evaluated in order."""
    section = want_map(
        section, loc, "a mapping of param name -> default, like {batch: 128, seq: 2048}"
    )
    for name, value in overrides.items():
        if name not in section:
            loc.fail(
                f"--param {name}={value}: unknown param {show(name)}{hint(name, section)}",
                one_of(section),
            )
    values: dict[str, int] = {}
    for name, default in section.items():
        ploc = loc.key(section, name)
        want_name(name, ploc, "param", ident=True)
        if name in overrides:
            values[name] = _override(name, overrides[name], loc)
        elif is_int(default):
            values[name] = default
        elif isinstance(default, str) and _EXPR.fullmatch(default.strip()):
            values[name] = _expression(
                _EXPR.fullmatch(default.strip()).group(1), values, frozenset(), ploc
            )
        else:
            ploc.fail(
                f"got {show(default)}",
                'an integer default, or an expression of the params above it like "{batch * seq}"',
            )
    return values


def _override(name: str, value: Any, loc: Loc) -> int:
    if is_int(value):
        return value
    if isinstance(value, str) and _INT.fullmatch(value.strip()):
        return int(value.strip().replace("_", ""))
    loc.fail(f"--param {name}={value}: got {show(value)}", f"an integer, like {name}=64")


def _walk(
    value: Any, loc: Loc, params: dict[str, int], scope: frozenset[str], seen: set[int]
) -> Any:
    """`value` with its strings substituted; containers are changed in place, each once (YAML
    aliases share them). `scope` holds the loop variables of enclosing repeat blocks."""
    if isinstance(value, str):
        return _substitute(value, loc, params, scope) if "{" in value else value
    if not isinstance(value, (dict, list)) or id(value) in seen:
        return value
    seen.add(id(value))
    if isinstance(value, dict):
        if "repeat" in value and isinstance(value.get("as"), str):
            scope = scope | {value["as"]}
        for key, item in value.items():
            value[key] = _walk(item, loc.key(value, key), params, scope, seen)
    else:
        for i, item in enumerate(value):
            value[i] = _walk(item, loc.item(value, i), params, scope, seen)
    return value


def _substitute(text: str, loc: Loc, params: dict[str, int], scope: frozenset[str]) -> Any:
    whole = _EXPR.fullmatch(text.strip())
    if whole:
        value = _expression(whole.group(1), params, scope, loc)
        return value if isinstance(value, int) else "{" + value + "}"
    return _EXPR.sub(lambda m: _braced(_expression(m.group(1), params, scope, loc)), text)


def _braced(value: int | str) -> str:
    return str(value) if isinstance(value, int) else "{" + value + "}"


def _expression(text: str, params: dict[str, int], scope: frozenset[str], loc: Loc) -> int | str:
    """The value of `{text}`; or, when it uses loop variables, its text with the params
    replaced (the repeat block evaluates the rest)."""
    known = [p for p in params if p not in scope]
    expected = (
        f"an integer expression of the params {', '.join(params)}"
        + (f" and loop variables {', '.join(sorted(scope))}" if scope else "")
        + f" with {GRAMMAR}"
    )
    try:
        tree = parse_expression(text)
    except ExpressionError as e:
        loc.fail(str(e), expected)
    names = [node.id for node in ast.walk(tree) if isinstance(node, ast.Name)]
    for name in names:
        if name not in params and name not in scope:
            loc.fail(
                f"unknown param {name!r} in {{{text}}}{hint(name, [*params, *scope])}", expected
            )
    if not any(name in scope for name in names):
        return _evaluate(text, {p: params[p] for p in known}, lambda: loc)

    def value_of(m: re.Match) -> str:
        name = m.group(0)
        if name not in params or name in scope:
            return name
        v = params[name]
        return str(v) if v >= 0 else f"({v})"

    return _NAME.sub(value_of, text)
