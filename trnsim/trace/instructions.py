"""Instruction mappings -> `Instr`, and operand text -> `Ap` (the trace format's instruction
fields, shared by the trace loader and the Python API).

`parse_instruction` checks one mapping (`{op: matmul, stationary: x_t, ...}`) against the
instruction's fields in `isa.py`: keys, required fields, field kinds, the engine, and the `wait` /
`signal` semaphore maps. `parse_ap` reads an operand (`x[0:128, :]`).

Speed: `fast_instruction` accepts exactly what `full_instruction` accepts but builds no `Loc`
and raises nothing; it answers None for anything off, and the full parser then reports the
error. Parsed operands are remembered (up to `_AP_CACHE_SIZE` distinct texts).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any, NamedTuple

from trnsim.inputs.validate import (
    Loc,
    check_keys,
    hint,
    is_int,
    one_of,
    show,
    unknown,
    want_choice,
    want_int,
    want_list,
    want_map,
    want_name,
    want_str,
)
from trnsim.isa import COMMON_KEYS, INSTRUCTIONS, Ap, Engine, Instr

__all__ = ["parse_instruction", "parse_ap", "full_instruction", "fast_instruction"]

_ENGINE_BY_LABEL = {e.label: e for e in Engine}


def parse_instruction(d: dict, index: int, where: str, *, names: Collection[str] | None = None,
                      source: str = "<api>", line: int = 0) -> Instr:
    """Build one instruction from its mapping (`{op: matmul, stationary: x_t, ...}`).

    `index` is its position in the kernel's list, `where` its key path for error messages
    (e.g. `kernels.k.instructions[3]`). Operand names are checked against `names` (the tiles of
    the core and the tensors; a set is listed sorted in errors) unless it is None. The line
    comes from `d.line` (a PosDict) or `line`. Raises TraceError.
    """
    line = getattr(d, "line", 0) or line
    ins = fast_instruction(d, index, line, names)
    if ins is not None:
        return ins
    return full_instruction(d, index, Loc(source, line, where), names)


def parse_ap(text: Any, where: str | Loc = "operand", *, source: str = "<api>",
             line: int = 0) -> Ap:
    """Parse an operand: `name`, `name[3]`, `name[a:b, :, 0:128:2]` (ints may be negative,
    bounds and steps may be omitted, whitespace is free). `where` is the key path for errors
    (or a `Loc`). Raises TraceError showing the text and the expected form."""
    if isinstance(text, str):
        ap = _AP_CACHE.get(text) or _parse_ap(text)
        if ap is not None:
            return ap
    loc = where if isinstance(where, Loc) else Loc(source, line, where)
    if not isinstance(text, str):
        loc.fail(f"got {show(text)}", "an operand like name or name[start:stop, ...]")
    m = _AP.fullmatch(text)
    if m is None:
        loc.fail(f"bad operand {show(text)}", _AP_FORM)
    if m["index"] is None:
        return Ap(m["name"], (), m["name"])
    index = []
    for part in m["index"].split(","):
        bounds = [b.strip() for b in part.split(":")]
        if len(bounds) > 3 or not all(_INT.fullmatch(b) or (b == "" and len(bounds) > 1)
                                      for b in bounds):
            loc.fail(f"bad index {part.strip()!r} in {show(text)}", _AP_FORM)
        ints = [int(b) if b else None for b in bounds]
        index.append(ints[0] if len(ints) == 1 else tuple(ints + [None] * (3 - len(ints))))
    return Ap(m["name"], tuple(index), text.strip())


_AP = re.compile(r"\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?:\[(?P<index>[^\[\]]*)\]\s*)?")
_INT = re.compile(r"[+-]?[0-9]+")
_AP_FORM = "name or name[start:stop, ...] with integer start, stop, step (each optional)"
_AP_CACHE: dict[str, Ap] = {}
_AP_CACHE_SIZE = 1 << 16


def _parse_ap(text: str) -> Ap | None:
    """`parse_ap` without errors: the Ap (remembered), or None when `text` is no operand."""
    m = _AP.fullmatch(text)
    if m is None:
        return None
    if m["index"] is None:
        ap = Ap(m["name"], (), m["name"])
    else:
        index = []
        for part in m["index"].split(","):
            bounds = [b.strip() for b in part.split(":")]
            if len(bounds) > 3 or not all(_INT.fullmatch(b) or (b == "" and len(bounds) > 1)
                                          for b in bounds):
                return None
            ints = [int(b) if b else None for b in bounds]
            index.append(ints[0] if len(ints) == 1 else tuple(ints + [None] * (3 - len(ints))))
        ap = Ap(m["name"], tuple(index), text.strip())
    if len(_AP_CACHE) < _AP_CACHE_SIZE:
        _AP_CACHE[text] = ap
    return ap


def full_instruction(d: Any, index: int, loc: Loc, names: Collection[str] | None) -> Instr:
    """`parse_instruction` with every check spelled out: the instruction at `loc`, or a
    TraceError naming the first thing wrong."""
    d = want_map(d, loc, "an instruction mapping like {op: matmul, stationary: x_t, ...}")
    if "op" not in d or d["op"] is None:
        loc.fail("missing key 'op'", one_of(INSTRUCTIONS))
    op_loc = loc.key(d, "op")
    op = d["op"]
    if not isinstance(op, str) or op not in INSTRUCTIONS:
        op_loc.fail(unknown("op", op, INSTRUCTIONS), one_of(INSTRUCTIONS))
    cls = INSTRUCTIONS[op]
    fields = cls.op_fields()
    field_names = [x.name for x in fields]
    check_keys(d, loc, [*COMMON_KEYS, *field_names],
               what="field", expected=f"fields of {op}: {', '.join(field_names)} "
               f"(and {', '.join(COMMON_KEYS[1:])})")
    values = {}
    for fld in fields:
        value = d.get(fld.name)
        if value is None:
            if fld.metadata["required"]:
                required = [x.name for x in fields if x.metadata["required"]]
                loc.fail(f"{op} is missing its field {fld.name!r}",
                         f"the required fields {', '.join(required)}")
            continue
        values[fld.name] = _field(value, fld.metadata, loc.key(d, fld.name), names)
    return cls(index=index, line=loc.line, engine=_engine(d, cls, loc),
               wait=_semaphores(d, "wait", loc), signal=_semaphores(d, "signal", loc), **values)


def _engine(d: dict, cls: type[Instr], loc: Loc) -> Engine:
    allowed = (cls.ENGINE, *cls.ENGINES)
    if d.get("engine") is None:
        return cls.ENGINE
    eloc = loc.key(d, "engine")
    labels = [e.label for e in allowed]
    name = d["engine"]
    if not isinstance(name, str) or name not in labels:
        eloc.fail(f"{cls.OP} cannot run on engine {show(name)}{hint(name, labels)}",
                  one_of(labels))
    return _ENGINE_BY_LABEL[name]


def _semaphores(d: dict, key: str, loc: Loc) -> tuple[tuple[str, int], ...]:
    if d.get(key) is None:
        return ()
    kloc = loc.key(d, key)
    verb = "a value to wait for" if key == "wait" else "an increment"
    sems = want_map(d[key], kloc, f"{{semaphore: {verb}}}, e.g. {{ld: 1}}")
    out = []
    for name, value in sems.items():
        sloc = kloc.key(sems, name)
        want_name(name, sloc, "semaphore")
        minimum = 0 if key == "wait" else 1
        out.append((name, want_int(value, sloc, f"{verb} (an integer >= {minimum})",
                                   minimum=minimum)))
    return tuple(out)


def _field(value: Any, meta: dict, loc: Loc, names: Collection[str] | None) -> Any:
    kind = meta["kind"]
    is_num = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "ap" or (kind == "ap_or_num" and not is_num):
        expected = "a tile or tensor name, optionally sliced like \"x[0:128, :]\""
        if kind == "ap_or_num":
            expected = "a number or " + expected
        ap = parse_ap(want_str(value, loc, expected), loc)
        if names is not None and ap.name not in names:
            listed = sorted(names) if isinstance(names, (set, frozenset)) else names
            loc.fail(unknown("tile or tensor", ap.name, listed), one_of(listed))
        return ap
    if kind in ("num", "ap_or_num"):
        if not is_num:
            loc.fail(f"got {show(value)}", "a number")
        return value
    if kind == "int":
        return want_int(value, loc, "an integer >= 0", minimum=0)
    if kind == "bool":
        if not isinstance(value, bool):
            loc.fail(f"got {show(value)}", "true or false")
        return value
    if kind == "str":
        return want_str(value, loc, "a string")
    if kind == "choice":
        return want_choice(value, loc, meta["choices"])
    if kind == "axes":
        if is_int(value):
            return value
        axes = want_list(value, loc, "an axis (integer) or a list of axes")
        if not axes:
            loc.fail("got an empty list", "at least one axis")
        return tuple(want_int(a, loc.item(axes, i), "an axis (integer)")
                     for i, a in enumerate(axes))
    raise AssertionError(f"unknown field kind {kind!r}")  # a bug in isa.py, not in the trace


class _Spec(NamedTuple):
    """What the fast path needs to know about one instruction class."""

    cls: type[Instr]
    allowed: frozenset
    fields: tuple[tuple[str, str, bool, tuple], ...]  # (name, kind, required, choices)
    engines: dict[str, Engine]


_SPECS = {
    op: _Spec(cls, frozenset((*COMMON_KEYS, *(x.name for x in cls.op_fields()))),
              tuple((x.name, x.metadata["kind"], x.metadata["required"], x.metadata["choices"])
                    for x in cls.op_fields()),
              {e.label: e for e in (cls.ENGINE, *cls.ENGINES)})
    for op, cls in INSTRUCTIONS.items()
}
_BAD = object()


def fast_instruction(d: Any, index: int, line: int,
                      names: Collection[str] | None) -> Instr | None:
    """`full_instruction` for a valid mapping without building any Loc; None when anything is
    off (then `full_instruction` reports the error). Accepts exactly what `full_instruction`
    accepts."""
    if not isinstance(d, dict):
        return None
    op = d.get("op")
    spec = _SPECS.get(op) if op.__class__ is str else None
    if spec is None:
        return None
    allowed = spec.allowed
    for key in d:
        if key not in allowed:
            return None
    values = {}
    for name, kind, required, choices in spec.fields:
        value = d.get(name)
        if value is None:
            if required:
                return None
            continue
        value = _field_fast(value, kind, choices, names)
        if value is _BAD:
            return None
        values[name] = value
    engine = d.get("engine")
    if engine is None:
        engine = spec.cls.ENGINE
    elif engine.__class__ is not str or (engine := spec.engines.get(engine)) is None:
        return None
    wait = _semaphores_fast(d.get("wait"), 0)
    signal = _semaphores_fast(d.get("signal"), 1)
    if wait is None or signal is None:
        return None
    return spec.cls(index=index, line=line, engine=engine, wait=wait, signal=signal, **values)


def _field_fast(value: Any, kind: str, choices: tuple, names: Collection[str] | None) -> Any:
    """`_field` for a valid value, else _BAD."""
    c = value.__class__
    if c is str:
        if kind == "ap" or kind == "ap_or_num":
            ap = _AP_CACHE.get(value) or _parse_ap(value)
            if ap is None or (names is not None and ap.name not in names):
                return _BAD
            return ap
        if kind == "choice":
            return value if value in choices else _BAD
        if kind == "str":
            return value if value.strip() else _BAD
        return _BAD
    if c is int or c is float:
        if kind == "num" or kind == "ap_or_num":
            return value
        if c is int and (kind == "axes" or (kind == "int" and value >= 0)):
            return value
        return _BAD
    if c is bool:
        return value if kind == "bool" else _BAD
    if kind == "axes" and isinstance(value, list) and value:
        if all(a.__class__ is int for a in value):
            return tuple(value)
    return _BAD


def _semaphores_fast(value: Any, minimum: int) -> tuple[tuple[str, int], ...] | None:
    """`_semaphores` for a valid mapping (or null), else None."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        return None
    out = []
    for name, n in value.items():
        if (name.__class__ is not str or not name.strip() or not name.isprintable()
                or n.__class__ is not int or n < minimum):
            return None
        out.append((name, n))
    return tuple(out)
