"""The vocabulary of one-line input errors: `Loc` (where a value sits: file, line, key path) and
the checks that fail with `<source>:<line>: <key path>: <what is wrong>; expected <what>`.

`Loc.key` / `Loc.item` step into the positioned data of `trnsim.inputs.positions` (a PosDict or
PosList gives the child's own line; plain dicts and lists, as the Python API builds them, keep the
parent's). `show`, `hint`, `unknown` and `one_of` word the message; `want_*` and `check_keys`
check one value each and return it. Used by the trace loader and the chip config loader.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from trnsim.errors import TraceError
from trnsim.inputs.positions import PosDict, PosList

__all__ = [
    "Loc",
    "show",
    "hint",
    "unknown",
    "one_of",
    "is_int",
    "want_map",
    "want_list",
    "want_str",
    "want_int",
    "want_choice",
    "want_name",
    "check_keys",
    "IDENTIFIER",
]


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
        return replace(
            self, line=line or self.line, path=f"{self.path}.{key}" if self.path else str(key)
        )

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
        loc.fail(
            f"{what} name {show(value)} is not an identifier",
            f"a {what} name made of letters, digits and _ (not starting with a digit)",
        )
    name = want_str(value, loc, f"a {what} name (a string)")
    if not name.isprintable():  # names appear in one-line error messages
        loc.fail(
            f"{what} name {show(value)} has a line break or control character",
            f"a {what} name of printable characters",
        )
    return name


def check_keys(
    mapping: dict, loc: Loc, allowed: Iterable[str], what: str = "key", expected: str | None = None
) -> None:
    """Fail on the first key of `mapping` that is not in `allowed`, at that key's line."""
    allowed = list(allowed)
    for key in mapping:
        if key not in allowed:
            loc.key(mapping, key).fail(
                f"unknown {what} {show(key)}{hint(key, allowed)}", expected or one_of(allowed)
            )
