"""Instruction mappings -> `Instr`, and operand text -> `Ap` (the trace format's instruction
fields, shared by the trace loader and the Python API).

`parse_instruction` checks one mapping (`{op: matmul, stationary: x_t, ...}`) against the
instruction's fields in `isa.py`: keys, required fields, field kinds, the engine, and the `wait` /
`signal` semaphore maps. `parse_ap` reads an operand (`x[0:128, :]`).

One parser, fast on the valid path: each field kind has one checker, which returns the parsed
value or raises `_Bad` (what is wrong, what was expected); only then is the error's `Loc` built
(`where`, a function) and the message worded. Parsed operands are remembered (up to
`_AP_CACHE_SIZE` distinct texts).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection
from typing import Any, NamedTuple, NoReturn

from trnsim.inputs.validate import Loc, hint, is_int, one_of, show, unknown
from trnsim.isa import COMMON_KEYS, INSTRUCTIONS, Ap, Engine, Instr

__all__ = [
    "parse_instruction",
    "parse_ap",
    "build_instruction",
    "new_instruction",
    "with_fields",
    "NO_INIT",
]


def parse_instruction(
    d: dict,
    index: int,
    where: str,
    *,
    names: Collection[str] | None = None,
    source: str = "<api>",
    line: int = 0,
) -> Instr:
    """Build one instruction from its mapping (`{op: matmul, stationary: x_t, ...}`).

    `index` is its position in the kernel's list, `where` its key path for error messages
    (e.g. `kernels.k.instructions[3]`). Operand names are checked against `names` (the tiles of
    the core and the tensors; a set is listed sorted in errors) unless it is None. The line
    comes from `d.line` (a PosDict) or `line`. Raises TraceError.
    """
    line = getattr(d, "line", 0) or line
    return build_instruction(d, index, line, names, lambda: Loc(source, line, where))


def parse_ap(
    text: Any, where: str | Loc = "operand", *, source: str = "<api>", line: int = 0
) -> Ap:
    """Parse an operand: `name`, `name[3]`, `name[a:b, :, 0:128:2]` (ints may be negative,
    bounds and steps may be omitted, whitespace is free). `where` is the key path for errors
    (or a `Loc`). Raises TraceError showing the text and the expected form."""
    try:
        if not isinstance(text, str):
            raise _Bad(f"got {show(text)}", "an operand like name or name[start:stop, ...]")
        return _AP_CACHE.get(text) or _ap(text)
    except _Bad as bad:
        bad.report(where if isinstance(where, Loc) else Loc(source, line, where))


class _Bad(Exception):
    """A value is wrong: what is wrong and what was expected, and optionally the step from the
    value's location into it (`(mapping, key)` or `(list, index)`) where the problem is."""

    def __init__(self, what: str, expected: str, step: tuple[Any, Any] | None = None):
        super().__init__(what)
        self.what, self.expected, self.step = what, expected, step

    def report(self, loc: Loc) -> NoReturn:
        if self.step is not None:
            inside, at = self.step
            loc = (
                loc.item(inside, at)
                if isinstance(at, int) and isinstance(inside, list)
                else loc.key(inside, at)
            )
        loc.fail(self.what, self.expected)


# -- operands ------------------------------------------------------------------------------------

_AP = re.compile(r"\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?:\[(?P<index>[^\[\]]*)\]\s*)?")
_INT = re.compile(r"[+-]?[0-9]+")
_AP_FORM = (
    "name or name[start:stop, ...] with integer start, stop, step (each optional), or *n for "
    "a broadcast dim of n"
)
_BCAST = re.compile(r"\*\s*([0-9]+)")
_AP_CACHE: dict[str, Ap] = {}
_AP_CACHE_SIZE = 1 << 16


def _ap(text: str) -> Ap:
    """The operand grammar: the Ap of `text` (remembered), or _Bad."""
    m = _AP.fullmatch(text)
    if m is None:
        raise _Bad(f"bad operand {show(text)}", _AP_FORM)
    if m["index"] is None:
        ap = Ap(m["name"], (), m["name"])
    else:
        index, bcast = [], []
        for part in m["index"].split(","):
            star = _BCAST.fullmatch(part.strip())
            if star:  # a broadcast dim: after the index entries so far
                if int(star[1]) < 1:
                    raise _Bad(f"bad broadcast {part.strip()!r} in {show(text)}", _AP_FORM)
                bcast.append((len(index), int(star[1])))
                continue
            bounds = [b.strip() for b in part.split(":")]
            if len(bounds) > 3 or not all(
                _INT.fullmatch(b) or (b == "" and len(bounds) > 1) for b in bounds
            ):
                raise _Bad(f"bad index {part.strip()!r} in {show(text)}", _AP_FORM)
            ints = [int(b) if b else None for b in bounds]
            index.append(ints[0] if len(ints) == 1 else tuple(ints + [None] * (3 - len(ints))))
        ap = Ap(m["name"], tuple(index), text.strip(), tuple(bcast))
    if len(_AP_CACHE) < _AP_CACHE_SIZE:
        _AP_CACHE[text] = ap
    return ap


# -- field kinds: value (and the operand names) -> parsed value, or _Bad ---------------------------

_OPERAND = 'a tile or tensor name, optionally sliced like "x[0:128, :]"'


def _operand(value: Any, names: Collection[str] | None, expected: str = _OPERAND) -> Ap:
    ap = _AP_CACHE.get(value) if value.__class__ is str else None  # only valid texts are in it
    if ap is None:
        if not isinstance(value, str) or not value.strip():
            raise _Bad(f"got {show(value)}", expected)
        ap = _ap(value)
    if names is not None and ap.name not in names:
        listed = sorted(names) if isinstance(names, (set, frozenset)) else names
        raise _Bad(unknown("tile or tensor", ap.name, listed), one_of(listed))
    return ap


def _is_num(value: Any) -> bool:
    c = value.__class__
    return (
        c is int or c is float or (isinstance(value, (int, float)) and not isinstance(value, bool))
    )


def _operand_or_num(value: Any, names: Collection[str] | None) -> Any:
    return value if _is_num(value) else _operand(value, names, "a number or " + _OPERAND)


def _num(value: Any, names: Collection[str] | None) -> Any:
    if not _is_num(value):
        raise _Bad(f"got {show(value)}", "a number")
    return value


def _count(value: Any, names: Collection[str] | None) -> int:
    if value.__class__ is int and value >= 0:
        return value
    if not is_int(value) or value < 0:
        raise _Bad(f"got {show(value)}", "an integer >= 0")
    return value


def _bool(value: Any, names: Collection[str] | None) -> bool:
    if value is not True and value is not False:
        raise _Bad(f"got {show(value)}", "true or false")
    return value


def _text(value: Any, names: Collection[str] | None) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Bad(f"got {show(value)}", "a string")
    return value


def _choice(choices: tuple[str, ...]) -> Callable[[Any, Any], str]:
    def check(value: Any, names: Collection[str] | None) -> str:
        if value.__class__ is not str or value not in choices:
            if not isinstance(value, str) or value not in choices:
                raise _Bad(f"got {show(value)}{hint(value, choices)}", one_of(choices))
        return value

    return check


def _axes(value: Any, names: Collection[str] | None) -> Any:
    if is_int(value):
        return value
    if not isinstance(value, list):
        raise _Bad(f"got {show(value)}", "an axis (integer) or a list of axes")
    if not value:
        raise _Bad("got an empty list", "at least one axis")
    for i, a in enumerate(value):
        if not is_int(a):
            raise _Bad(f"got {show(a)}", "an axis (integer)", (value, i))
    return tuple(value)


def _cores(value: Any, names: Collection[str] | None) -> tuple:
    """A core_barrier's `cores`: the two physical cores of the logical core, [0, 1] (isa.md 8.6:
    the only pair the ISA allows)."""
    if not isinstance(value, list) or sorted(map(repr, value)) != ["0", "1"]:
        got = f"[{', '.join(map(show, value))}]" if isinstance(value, list) else show(value)
        raise _Bad(f"got {got}", "[0, 1] (the only pair core_barrier takes)")
    return (0, 1)


_KINDS: dict[str, Callable[[Any, Any], Any]] = {
    "ap": _operand,
    "ap_or_num": _operand_or_num,
    "num": _num,
    "int": _count,
    "bool": _bool,
    "str": _text,
    "axes": _axes,
    "cores": _cores,
}


_GOOD_NAMES: set[str] = set()  # semaphore names found valid (up to _AP_CACHE_SIZE)


def _semaphores(value: Any, minimum: int) -> tuple[tuple[str, int], ...]:
    """A `wait:` (values >= 0, `minimum` 0) or `signal:` (increments >= 1, `minimum` 1) map ->
    ((name, n), ...)."""
    if value.__class__ is not dict and not isinstance(value, dict):
        verb = "a value to wait for" if minimum == 0 else "an increment"
        raise _Bad(f"got {show(value)}", f"{{semaphore: {verb}}}, e.g. {{ld: 1}}")
    out = tuple(value.items())
    for name, n in out:
        if name not in _GOOD_NAMES or n.__class__ is not int or n < minimum:
            _check_semaphore(value, name, n, minimum)
    return out


def _check_semaphore(sems: dict, name: Any, n: Any, minimum: int) -> None:
    """Raise the _Bad of the entry `name: n` of a semaphore map if it is wrong (a name, then a
    count, worded as `validate.want_name` and `want_int` word them); remember a valid name."""
    step = (sems, name)
    if not isinstance(name, str) or not name.strip():
        raise _Bad(f"got {show(name)}", "a semaphore name (a string)", step)
    if not name.isprintable():
        raise _Bad(
            f"semaphore name {show(name)} has a line break or control character",
            "a semaphore name of printable characters",
            step,
        )
    if not is_int(n) or n < minimum:
        verb = "a value to wait for" if minimum == 0 else "an increment"
        raise _Bad(f"got {show(n)}", f"{verb} (an integer >= {minimum})", step)
    if len(_GOOD_NAMES) < _AP_CACHE_SIZE and name.__class__ is str:
        _GOOD_NAMES.add(name)


# -- instructions --------------------------------------------------------------------------------


class _Spec(NamedTuple):
    """What the parser needs to know about one instruction class."""

    cls: type[Instr]
    allowed: frozenset
    fields: tuple[tuple[str, Callable[[Any, Any], Any], bool], ...]  # (name, check, required)
    engines: dict[str, Engine]
    defaults: dict[str, Any]  # every field's default (engine: the class's own)


def _spec(cls: type[Instr]) -> _Spec:
    checks = tuple(
        (
            x.name,
            _choice(x.metadata["choices"])
            if x.metadata["kind"] == "choice"
            else _KINDS[x.metadata["kind"]],
            x.metadata["required"],
        )
        for x in cls.op_fields()
    )
    defaults = {x.name: x.default for x in dataclasses.fields(cls)}
    defaults["engine"] = cls.ENGINE
    return _Spec(
        cls,
        frozenset((*COMMON_KEYS, *(x.name for x in cls.op_fields()))),
        checks,
        {e.label: e for e in (cls.ENGINE, *cls.ENGINES)},
        defaults,
    )


_SPECS = {op: _spec(cls) for op, cls in INSTRUCTIONS.items()}
_new = object.__new__
NO_INIT = all(
    not hasattr(cls, "__post_init__")
    and not hasattr(cls, "__slots__")
    and dataclasses.MISSING not in _SPECS[cls.OP].defaults.values()
    for cls in INSTRUCTIONS.values()
)
"""Whether instructions may be built (and copied) without running the dataclasses' `__init__`
(a frozen dataclass sets each field through object.__setattr__): no class needs `__init__` or
`__post_init__` to run, and every field has a plain default."""


def build_instruction(
    d: Any, index: int, line: int, names: Collection[str] | None, where: Callable[[], Loc]
) -> Instr:
    """The instruction of mapping `d`, numbered `index`, on `line`; operands must name one of
    `names` (unless None). `where()` gives the mapping's Loc, asked for only to report a
    TraceError naming the first thing wrong."""
    op = d.get("op") if d.__class__ is dict or isinstance(d, dict) else None
    spec = _SPECS.get(op) if op.__class__ is str or isinstance(op, str) else None
    if spec is None:
        _bad_op(d, where())
    if not d.keys() <= spec.allowed:
        _bad_key(d, spec, where())
    if NO_INIT:  # fill the new object's own __dict__: no copy of the fields afterwards
        ins = _new(spec.cls)
        fields = ins.__dict__
        fields.update(spec.defaults)
    else:
        fields = spec.defaults.copy()
    name = ""
    try:
        for name, check, required in spec.fields:
            value = d.get(name)
            if value is not None:
                fields[name] = check(value, names)
            elif required:
                _missing(d, name, spec, where())
        name = "engine"
        if (value := d.get("engine")) is not None:
            fields["engine"] = _engine(value, spec)
        name = "wait"
        if (value := d.get("wait")) is not None:
            fields["wait"] = _semaphores(value, 0)
        name = "signal"
        if (value := d.get("signal")) is not None:
            fields["signal"] = _semaphores(value, 1)
    except _Bad as bad:
        bad.report(where().key(d, name))
    fields["index"] = index
    fields["line"] = line
    return ins if NO_INIT else spec.cls(**fields)


_FIELDS = {cls: frozenset(_SPECS[cls.OP].defaults) for cls in INSTRUCTIONS.values()}


def new_instruction(cls: type[Instr], fields: dict[str, Any]) -> Instr:
    """`cls(**fields)` for code that builds instructions (the kernel library), without the
    frozen dataclass's `__init__` where `NO_INIT` allows (it sets each field through
    object.__setattr__: a tenth of lowering time); an unknown field is a TypeError, as there.
    A field left out takes the parser's default (`engine`: the class's own engine)."""
    if not NO_INIT:
        return cls(**{**_SPECS[cls.OP].defaults, **fields})
    if not fields.keys() <= _FIELDS[cls]:
        raise TypeError(f"{cls.__name__} has no field {sorted(fields.keys() - _FIELDS[cls])[0]}")
    ins = _new(cls)
    d = ins.__dict__
    d.update(_SPECS[cls.OP].defaults)
    d.update(fields)
    return ins


def with_fields(ins: Instr, changes: dict[str, Any]) -> Instr:
    """`dataclasses.replace(ins, **changes)` without the frozen dataclass's `__init__` where
    `NO_INIT` allows (the planner binds every distinct instruction's operands this way)."""
    if not NO_INIT:
        return dataclasses.replace(ins, **changes)
    new = _new(ins.__class__)
    d = new.__dict__
    d.update(ins.__dict__)
    d.update(changes)
    return new


def _engine(label: Any, spec: _Spec) -> Engine:
    engine = spec.engines.get(label) if isinstance(label, str) else None
    if engine is None:
        labels = list(spec.engines)
        raise _Bad(
            f"{spec.cls.OP} cannot run on engine {show(label)}{hint(label, labels)}", one_of(labels)
        )
    return engine


def _bad_op(d: Any, loc: Loc) -> NoReturn:
    if not isinstance(d, dict):
        loc.fail(f"got {show(d)}", "an instruction mapping like {op: matmul, stationary: x_t, ...}")
    if d.get("op") is None:
        loc.fail("missing key 'op'", one_of(INSTRUCTIONS))
    loc.key(d, "op").fail(unknown("op", d["op"], INSTRUCTIONS), one_of(INSTRUCTIONS))


def _bad_key(d: dict, spec: _Spec, loc: Loc) -> NoReturn:
    fields = [x.name for x in spec.cls.op_fields()]
    allowed = [*COMMON_KEYS, *fields]
    key = next(k for k in d if k not in spec.allowed)
    loc.key(d, key).fail(
        f"unknown field {show(key)}{hint(key, allowed)}",
        f"fields of {spec.cls.OP}: {', '.join(fields)} (and {', '.join(COMMON_KEYS[1:])})",
    )


def _missing(d: dict, name: str, spec: _Spec, loc: Loc) -> NoReturn:
    required = [x.name for x in spec.cls.op_fields() if x.metadata["required"]]
    loc.fail(
        f"{spec.cls.OP} is missing its field {name!r}", f"the required fields {', '.join(required)}"
    )
