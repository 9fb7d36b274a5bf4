"""Trace YAML -> Program (the format is the contract in `design/TRACE_FORMAT.md`).

`load(path)` / `loads(text)` validate everything a trace can get wrong without simulating: types,
unknown keys, names (tensors, tiles, kernels, events, semaphores), shapes, dtypes, init files,
operand slices, engines, and semaphores that can never reach the value waited for. Every problem
raises a `TraceError` with one line: `<file>:<line>: <key path>: <what is wrong>; expected <what>`.

Decisions the contract leaves open:
- A top-level key whose value is null counts as absent (`tensors:` with every entry commented
  out is an empty trace, `streams: ~` gives the default stream).
- `name` defaults to the trace file's stem. Tensors and tiles need `shape` and `dtype`; a view
  inherits both from the tensor it views when omitted.
- Low-level kernels take `instructions:` (one core) or `per_core:`, whose entries are either
  instruction lists or `{tiles: ..., instructions: [...]}` mappings. A kernel's `tiles:` are
  shared: every core gets its own copy of them, plus the tiles its own entry declares.
- An optional instruction field given as null takes its default.
- Names of tensors and tiles are identifiers (`[A-Za-z_][A-Za-z0-9_]*`), so that operands like
  `x[0:128, :]` can refer to them; kernels, streams, events and semaphores may be any string.
- A wait value may be 0 (trivially met; useful in repeat bodies, below).

Extension (documented in `docs/trace_extensions.md`): `repeat` blocks. Wherever an instruction
list appears (`instructions:`, each `per_core` list, the body of another repeat), an item may be
`{repeat: N, instructions: [...]}` (both keys required, no others; N an int >= 1, the body a
non-empty list of instructions and/or repeat blocks). It unrolls to N copies of the body, where
copy i (0-based) turns every `wait: {s: v}` into `v + i * k_s`, k_s being the sum of the
increments the body (one copy of it, nested repeats expanded) signals on `s`; waits on
semaphores the body does not signal keep their value. So in a body `wait: {s: 0}` waits for the
previous iterations' signals on s (a software pipeline), and `wait: {ld: 1}` with the body
signalling `ld: 1` waits for this iteration's own load. Nested repeats compose (the inner one is
expanded first). Expanded instructions are numbered consecutively (`index`) and keep the `line` of
the body instruction they come from; errors inside a body name its key path, such as
`instructions[1].instructions[0].wait.mm`. A core's program may expand to at most
MAX_INSTRUCTIONS (10,000,000) instructions. The semaphore check runs on the expanded program.

Speed: the YAML is read by libyaml's event parser when available (`yamlpos`), identical
instruction mappings (and a repeat body in all its copies) are parsed once, and the cyclic GC is
paused while loading.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from trnsim.dtypes import ALIASES, DTYPES, DType, dtype
from trnsim.errors import TraceError
from trnsim.isa import COMMON_KEYS, INSTRUCTIONS, Ap, Engine, Instr
from trnsim.program import (
    CoreProgram,
    KernelSpec,
    OpSpec,
    Program,
    Step,
    StreamSpec,
    TensorSpec,
    TileSpec,
)
from trnsim.yamlpos import (
    Loc,
    PosList,
    check_keys,
    hint,
    is_int,
    load_yaml,
    no_gc,
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

__all__ = ["load", "loads", "parse_instruction", "parse_ap", "check_semaphores"]

TOP_KEYS = ("trnsim", "name", "chip", "seed", "mode", "lnc", "outputs", "tensors", "kernels",
            "streams", "ops", "instructions", "tiles", "timing")
TENSOR_KEYS = ("shape", "dtype", "init", "on", "view")
TILE_KEYS = ("memory", "shape", "dtype", "init")
KERNEL_KEYS = ("ops", "tiles", "instructions", "per_core")
INITS = ("zeros", "ones", "random", "normal", "arange")
MODES = ("functional", "timing")
PLACES = ("hbm", "host")
MEMORIES = ("sbuf", "psum")
MAX_PARTITIONS = 128
STEP_KINDS = ("record", "copy", "launch", "wait", "synchronize")
_ENGINE_BY_LABEL = {e.label: e for e in Engine}
SHORTHAND = "main"


def load(path: str | Path) -> Program:
    """Read and validate the trace file at `path`; init files resolve against its directory."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{path}:1: trace: cannot read the file ({e.__class__.__name__}: "
                         f"{e}); expected a readable UTF-8 YAML file") from None
    return loads(text, source=str(path), base_dir=path.parent)


def loads(text: str, source: str = "<string>", base_dir: str | Path = ".") -> Program:
    """Validate trace YAML `text`; `source` names it in errors, `base_dir` anchors init files."""
    with no_gc():
        doc = load_yaml(text, source)
        return _TraceParser(source, Path(base_dir)).parse(doc)


def parse_instruction(d: dict, index: int, where: str, *, names: Collection[str] | None = None,
                      source: str = "<api>", line: int = 0) -> Instr:
    """Build one instruction from its mapping (`{op: matmul, stationary: x_t, ...}`).

    `index` is its position in the kernel's list, `where` its key path for error messages
    (e.g. `kernels.k.instructions[3]`). Operand names are checked against `names` (the tiles of
    the core and the tensors; a set is listed sorted in errors) unless it is None. The line
    comes from `d.line` (a PosDict) or `line`. Raises TraceError.
    """
    line = getattr(d, "line", 0) or line
    ins = _instruction_fast(d, index, line, names)
    return ins if ins is not None else _instruction(d, index, Loc(source, line, where), names)


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


def check_semaphores(instructions: list[Instr],
                     where: str | Callable[[int, str], Loc] = "instructions",
                     source: str = "<api>") -> None:
    """Fail when a semaphore one core's `instructions` wait on is never signalled, or when its
    signal increments add up to less than the largest value waited for (a certain deadlock).

    `where` is the key path of the list (errors point at `<where>[i].wait.<sem>` on the
    instruction's line), or a function (index, semaphore) -> Loc."""

    def loc_of(ins: Instr, sem: str) -> tuple[Loc, Any]:
        if callable(where):
            return where(ins.index, sem), None
        return Loc(source, ins.line, f"{where}[{ins.index}].wait.{sem}"), None

    _check_semaphores(instructions, loc_of)


def _check_semaphores(instructions: list[Instr],
                      loc_of: Callable[[Instr, str], tuple[Loc, Any]]) -> None:
    """`check_semaphores`; `loc_of(ins, sem)` gives the Loc of the wait and the value written
    in the trace (which differs from `ins.wait` in repeated instructions; None if unknown)."""
    total: dict[str, int] = defaultdict(int)
    for ins in instructions:
        for sem, n in ins.signal:
            total[sem] += n
    for ins in instructions:
        for sem, value in ins.wait:
            if total.get(sem, 0) >= value:
                continue
            loc, written = loc_of(ins, sem)
            if sem not in total:
                loc.fail(f"semaphore {sem!r} is waited on but never signalled",
                         f"an instruction of this core with signal: {{{sem}: 1}}")
            shown = str(value)
            if written is not None and written != value:
                shown += f" ({written} as written plus the increments of earlier repeat iterations)"
            loc.fail(f"semaphore {sem!r} is waited on for {shown} but its signals add up to "
                     f"only {total[sem]}", f"signal increments of {sem!r} summing to >= {value}")


# ----------------------------------------------------------------------------------------------
# instructions


def _instruction(d: Any, index: int, loc: Loc, names: Collection[str] | None) -> Instr:
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


def _instruction_fast(d: Any, index: int, line: int,
                      names: Collection[str] | None) -> Instr | None:
    """`_instruction` for a valid mapping without building any Loc; None when anything is off
    (then `_instruction` reports the error). Accepts exactly what `_instruction` accepts."""
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
        if name.__class__ is not str or not name.strip() or n.__class__ is not int or n < minimum:
            return None
        out.append((name, n))
    return tuple(out)


def _freeze(value: Any) -> Any:
    """A hashable key that tells apart every two instruction mappings that could parse
    differently (so 1, 1.0 and true differ); raises TypeError for unhashable scalars."""
    c = value.__class__
    if c is str:
        return value
    if isinstance(value, dict):
        key: list = [dict]
        for k, v in value.items():
            key.append(k)
            key.append(v if v.__class__ is str else _freeze(v))
        return tuple(key)
    if isinstance(value, list):
        return (list, *[_freeze(v) for v in value])
    hash(value)
    return (c, value)


# ----------------------------------------------------------------------------------------------
# instruction lists and repeat blocks

MAX_INSTRUCTIONS = 10_000_000
"""The most instructions one core's program may have once repeat blocks are expanded."""
REPEAT_KEYS = ("repeat", "instructions")
_FAST_CLONE = all("__dict__" in dir(cls) and not hasattr(cls, "__post_init__")
                  for cls in INSTRUCTIONS.values())

# An expanded instruction before it gets its index: (parsed instruction, line, wait, where),
# `where` = (list, position, Loc of the list) of the mapping it came from (for errors only).
_Template = tuple[Instr, int, tuple[tuple[str, int], ...], tuple[list, int, Loc]]


class _Expander:
    """Parses one core's instruction list, expanding repeat blocks, into templates.

    Identical instruction mappings are parsed once (a repeat body once in all)."""

    MEMO_TRIAL = 512  # stop memoising when fewer than 1 in 8 of this many mappings repeat

    def __init__(self, names: Collection[str]):
        self.names = names
        self.memo: dict[Any, Instr] | None = {}
        self.hits = self.misses = 0

    def expand(self, value: Any, loc: Loc, body: bool = False) -> list[_Template]:
        expected = ("a list of instructions like {op: matmul, ...} or repeat blocks like "
                    "{repeat: 4, instructions: [...]}")
        items = want_list(value, loc, expected)
        if body and not items:
            loc.fail("got an empty list", "a body of at least one instruction")
        lines = items.item_lines if isinstance(items, PosList) else ()
        out: list[_Template] = []
        memo, names = self.memo, self.names
        for i, d in enumerate(items):
            if isinstance(d, dict) and ("repeat" in d or ("instructions" in d and "op" not in d)):
                self._repeat(items, i, loc, out)
                continue
            line = (lines[i] if i < len(lines) else 0) or loc.line
            key = proto = None
            if memo is not None:
                try:
                    key = _freeze(d)
                    proto = memo.get(key)
                except TypeError:
                    pass
            if proto is None:
                proto = _instruction_fast(d, 0, 0, names)
                if proto is None:
                    proto = _instruction(d, 0, loc.item(items, i), names)
                if key is not None:
                    memo[key] = proto
                    self.misses += 1
                    if self.misses == self.MEMO_TRIAL and self.hits < self.misses // 8:
                        memo = self.memo = None  # mostly distinct mappings: not worth it
            else:
                self.hits += 1
            out.append((proto, line, proto.wait, (items, i, loc)))
        return out

    def _repeat(self, items: list, i: int, loc: Loc, out: list[_Template]) -> None:
        """Append the expansion of the repeat block `items[i]` to `out`."""
        d = items[i]
        rloc = loc.item(items, i)
        check_keys(d, rloc, REPEAT_KEYS, expected="repeat: <count> and instructions: [<body>]")
        if d.get("repeat") is None:
            rloc.fail("missing key 'repeat'", "repeat: <count, an integer >= 1> next to "
                      "instructions: [<body>]")
        count_loc = rloc.key(d, "repeat")
        n = want_int(d["repeat"], count_loc, "a repeat count (an integer >= 1)", minimum=1)
        if d.get("instructions") is None:
            rloc.fail("missing key 'instructions'", "instructions: [...], the body to repeat")
        body = self.expand(d["instructions"], rloc.key(d, "instructions"), body=True)
        total = len(out) + n * len(body)
        if total > MAX_INSTRUCTIONS:
            count_loc.fail(f"repeat: {n} of a body of {len(body)} instructions makes {total} "
                           "instructions", f"at most {MAX_INSTRUCTIONS} instructions per core "
                           "once repeats are expanded")
        # iteration `it` waits for `v + it * k[s]`: k[s] is what one iteration signals on s
        k: dict[str, int] = defaultdict(int)
        for proto, _, _, _ in body:
            for sem, inc in proto.signal:
                k[sem] += inc
        shifted = [(j, proto, line, where, [(s, v, k.get(s, 0)) for s, v in wait])
                   for j, (proto, line, wait, where) in enumerate(body)
                   if any(s in k for s, _ in wait)]
        if not shifted:
            out += body * n
            return
        for it in range(n):
            chunk = body.copy()
            for j, proto, line, where, spec in shifted:
                chunk[j] = (proto, line, tuple([(s, v + it * ks) for s, v, ks in spec]), where)
            out += chunk


def _materialize(templates: list[_Template]) -> list[Instr]:
    """The instructions of `templates`, numbered from 0, each its own object."""
    if not _FAST_CLONE:
        return [replace(proto, index=index, line=line, wait=wait)
                for index, (proto, line, wait, _) in enumerate(templates)]
    out = []
    append, new = out.append, object.__new__
    for index, (proto, line, wait, _) in enumerate(templates):
        ins = new(proto.__class__)
        fields = ins.__dict__  # same as dataclasses.replace, without re-running __init__
        fields.update(proto.__dict__)
        fields["index"] = index
        fields["line"] = line
        fields["wait"] = wait
        append(ins)
    return out


# ----------------------------------------------------------------------------------------------
# the whole trace


class _TraceParser:
    """One trace document -> Program. Methods parse one section each, in dependency order."""

    def __init__(self, source: str, base_dir: Path):
        self.source = source
        self.base_dir = base_dir
        self.tensors: dict[str, TensorSpec] = {}

    def parse(self, doc: Any) -> Program:
        root = Loc(self.source, getattr(doc, "line", 1) or 1, "")
        doc = want_map(doc, root, "a mapping of top-level keys, starting with trnsim: 1")
        check_keys(doc, root, TOP_KEYS)
        get = {k: doc[k] for k in TOP_KEYS if doc.get(k) is not None}
        at = {k: root.key(doc, k) for k in TOP_KEYS}
        if "trnsim" not in get:
            root.fail("missing key 'trnsim'", "trnsim: 1 (the format version) at the top")
        if not is_int(get["trnsim"]) or get["trnsim"] != 1:
            at["trnsim"].fail(f"unsupported format version {show(get['trnsim'])}", "1")
        prog = Program(source=self.source, base_dir=str(self.base_dir))
        prog.name = self._name(get, at)
        if "chip" in get:
            prog.chip = want_str(get["chip"], at["chip"], "a chip name such as trn2")
        if "seed" in get:
            prog.seed = want_int(get["seed"], at["seed"], "an integer >= 0", minimum=0)
        if "mode" in get:
            prog.mode = want_choice(get["mode"], at["mode"], MODES)
        if "lnc" in get:
            if not is_int(get["lnc"]) or get["lnc"] not in (1, 2):
                at["lnc"].fail(f"got {show(get['lnc'])}", "1 or 2")
            prog.lnc = get["lnc"]
        self.tensors = prog.tensors = self._tensors(get.get("tensors", {}), at["tensors"])
        prog.kernels = self._kernels(get, at, prog.lnc)
        if "streams" in get:
            prog.streams = self._streams(get["streams"], at["streams"], prog.kernels)
        else:
            steps = [Step("launch", name) for name in prog.kernels]
            prog.streams = [StreamSpec("default", 0, steps)]
        recorded = {s.arg for st in prog.streams for s in st.steps if s.kind == "record"}
        if "timing" in get:
            prog.timing = self._timing(get["timing"], at["timing"], recorded)
        if "outputs" in get:
            prog.outputs = self._outputs(get["outputs"], at["outputs"])
        return prog

    def _name(self, get: dict, at: dict) -> str:
        if "name" not in get:
            return "" if self.source.startswith("<") else Path(self.source).stem
        name = get["name"]
        if isinstance(name, (int, float)) and not isinstance(name, bool):
            return str(name)
        return want_str(name, at["name"], "free text naming the trace")

    # -- tensors and tiles ------------------------------------------------------------------

    def _tensors(self, section: Any, loc: Loc) -> dict[str, TensorSpec]:
        section = want_map(section, loc, "a mapping of tensor name -> {shape, dtype, ...}")
        entries, specs = {}, {}
        for name, entry in section.items():
            tloc = loc.key(section, name)
            want_name(name, tloc, "tensor", ident=True)
            entry = want_map(entry, tloc, "{shape: [...], dtype: ..., init: ...}")
            check_keys(entry, tloc, TENSOR_KEYS)
            entries[name] = (entry, tloc)
            if entry.get("view") is None:
                shape = self._shape(entry, tloc)
                on = entry["on"] if entry.get("on") is not None else "hbm"
                on = want_choice(on, tloc.key(entry, "on"), PLACES)
                specs[name] = TensorSpec(name, shape, self._dtype(entry, tloc),
                                         self._init(entry, tloc, shape), on, line=tloc.line)
        for name in entries:
            self._view(name, entries, specs, ())
        return {name: specs[name] for name in section}

    def _view(self, name: str, entries: dict, specs: dict, chain: tuple) -> TensorSpec:
        """Resolve tensor `name` (a view of a view resolves to the root tensor)."""
        if name in specs:
            return specs[name]
        entry, loc = entries[name]
        vloc = loc.key(entry, "view")
        target = entry["view"]
        if not isinstance(target, str) or target not in entries:
            vloc.fail(unknown("tensor", target, entries), one_of(entries))
        if target in chain or target == name:
            vloc.fail(f"views form a cycle: {' -> '.join((*chain, name, target))}",
                      "a view of a tensor with its own memory")
        root = self._view(target, entries, specs, (*chain, name))
        if entry.get("init") is not None:
            loc.key(entry, "init").fail("a view cannot have init", "init on the viewed tensor")
        shape = self._shape(entry, loc) if entry.get("shape") is not None else root.shape
        if math.prod(shape) != math.prod(root.shape):
            loc.key(entry, "shape").fail(
                f"{math.prod(shape)} elements in a view of {root.name!r} with "
                f"{math.prod(root.shape)}", "the same number of elements as the viewed tensor")
        if entry.get("dtype") is not None and self._dtype(entry, loc) != root.dtype:
            loc.key(entry, "dtype").fail(f"{entry['dtype']} differs from {root.name!r}",
                                         f"{root.dtype.name} (or no dtype)")
        if entry.get("on") is not None and entry["on"] != root.on:
            loc.key(entry, "on").fail(f"got {show(entry['on'])}", f"{root.on} (as {root.name})")
        specs[name] = TensorSpec(name, shape, root.dtype, None, root.on, root.view or root.name,
                                 loc.line)
        return specs[name]

    def _shape(self, entry: dict, loc: Loc) -> tuple[int, ...]:
        if entry.get("shape") is None:
            loc.fail("missing key 'shape'", "shape: a list of positive integers")
        sloc = loc.key(entry, "shape")
        shape = want_list(entry["shape"], sloc, "a list of positive integers like [128, 512]")
        if not shape:
            sloc.fail("got an empty list", "a list of positive integers like [128, 512]")
        return tuple(want_int(n, sloc.item(shape, i), "a positive integer", minimum=1)
                     for i, n in enumerate(shape))

    def _dtype(self, entry: dict, loc: Loc) -> DType:
        if entry.get("dtype") is None:
            loc.fail("missing key 'dtype'", one_of(DTYPES))
        name = entry["dtype"]
        try:
            return dtype(name)
        except (KeyError, TypeError):
            names = [*DTYPES, *ALIASES]
            loc.key(entry, "dtype").fail(unknown("dtype", name, names), one_of(DTYPES))

    def _init(self, entry: dict, loc: Loc, shape: tuple[int, ...]) -> Any:
        """`init:` -> None | one of INITS | ('file', path); a file's shape must be `shape`."""
        value = entry.get("init")
        if value is None:
            return None
        iloc = loc.key(entry, "init")
        expected = f"{one_of(INITS)}, or {{file: name.npy}}"
        if isinstance(value, str):
            return want_choice(value, iloc, INITS)
        if not isinstance(value, dict):
            iloc.fail(f"got {show(value)}", expected)
        check_keys(value, iloc, ("file",))
        if value.get("file") is None:
            iloc.fail("missing key 'file'", "{file: name.npy}")
        floc = iloc.key(value, "file")
        path = self.base_dir / want_str(value["file"], floc, "a path to a .npy file")
        if not path.is_file():
            floc.fail(f"no file {str(path)!r}", "a .npy file (relative to the trace's folder)")
        try:
            array = np.load(path, mmap_mode="r")
            file_shape = tuple(array.shape)
        except Exception as e:  # not .npy, pickled objects, a .npz archive, truncated ...
            floc.fail(f"cannot read {str(path)!r} ({e.__class__.__name__}: {e})",
                      "a .npy file saved by numpy.save")
        if file_shape != shape:
            floc.fail(f"the file holds shape {list(file_shape)}", f"shape {list(shape)}")
        return ("file", str(path))

    def _tiles(self, section: Any, loc: Loc) -> dict[str, TileSpec]:
        section = want_map(section, loc, "a mapping of tile name -> {memory, shape, dtype}")
        tiles = {}
        for name, entry in section.items():
            tloc = loc.key(section, name)
            want_name(name, tloc, "tile", ident=True)
            if name in self.tensors:
                tloc.fail(f"tile {name!r} has the name of a tensor", "a name no tensor uses")
            entry = want_map(entry, tloc, "{memory: sbuf, shape: [128, 512], dtype: ...}")
            check_keys(entry, tloc, TILE_KEYS)
            if entry.get("memory") is None:
                tloc.fail("missing key 'memory'", one_of(MEMORIES))
            memory = want_choice(entry["memory"], tloc.key(entry, "memory"), MEMORIES)
            shape = self._shape(entry, tloc)
            if shape[0] > MAX_PARTITIONS:
                tloc.key(entry, "shape").fail(f"{shape[0]} partitions",
                                              f"a first dim of 1..{MAX_PARTITIONS}")
            tiles[name] = TileSpec(name, memory, shape, self._dtype(entry, tloc),
                                   self._init(entry, tloc, shape), tloc.line)
        return tiles

    # -- kernels --------------------------------------------------------------------------------

    def _kernels(self, get: dict, at: dict, lnc: int | None) -> dict[str, KernelSpec]:
        section = want_map(get.get("kernels", {}), at["kernels"],
                           "a mapping of kernel name -> {ops: [...]} or {tiles, instructions}")
        kernels = {}
        for name, entry in section.items():
            kloc = at["kernels"].key(section, name)
            want_name(name, kloc, "kernel")
            kernels[name] = self._kernel(name, want_map(entry, kloc, "{ops: [...]} or "
                                                        "{tiles: ..., instructions: [...]}"),
                                         kloc, lnc)
        if "ops" in get and "instructions" in get:
            at["instructions"].fail("both ops: and instructions: at the top level",
                                    "one shorthand kernel (use kernels: for more)")
        if "tiles" in get and "instructions" not in get:
            at["tiles"].fail("top-level tiles: without instructions:",
                             "tiles: together with instructions: (or inside a kernel)")
        for key in ("ops", "instructions"):
            if key in get:
                if SHORTHAND in kernels:
                    at[key].fail(f"the {key}: shorthand is kernel {SHORTHAND!r}, which kernels: "
                                 "also defines", f"another name in kernels: or no {key}: here")
                shorthand = {k: get[k] for k in ("ops", "tiles", "instructions") if k in get}
                kloc = Loc(self.source, at[key].line, "")
                kernels[SHORTHAND] = self._kernel(SHORTHAND, shorthand, kloc, lnc, at)
        return kernels

    def _kernel(self, name: str, entry: dict, loc: Loc, lnc: int | None,
                at: dict | None = None) -> KernelSpec:
        """One kernel; `at` holds the key locations when `entry` is the top-level shorthand."""
        check_keys(entry, loc, KERNEL_KEYS)
        at = at or {k: loc.key(entry, k) for k in KERNEL_KEYS}
        given = [k for k in KERNEL_KEYS if entry.get(k) is not None]
        if "ops" in given and len(given) > 1:
            at[given[1]].fail(f"a kernel with ops: cannot also have {given[1]}:",
                              "either ops: (high level) or tiles: + instructions: (low level)")
        if "instructions" in given and "per_core" in given:
            at["per_core"].fail("a kernel cannot have both instructions: and per_core:",
                                "instructions: for one core or per_core: for each core")
        if "ops" in given:
            return KernelSpec(name, ops=self._ops(entry["ops"], at["ops"]), line=loc.line)
        shared = self._tiles(entry["tiles"], at["tiles"]) if "tiles" in given else {}
        if "instructions" in given:
            cores = [self._core(shared, entry["instructions"], at["instructions"])]
        elif "per_core" in given:
            cores = self._per_core(shared, entry["per_core"], at["per_core"], lnc)
        else:
            loc.fail("a kernel needs ops:, instructions: or per_core:",
                     "ops: [...] or tiles: + instructions: [...]")
        return KernelSpec(name, per_core=cores, line=loc.line)

    def _per_core(self, shared: dict, value: Any, loc: Loc, lnc: int | None) -> list:
        expected = "one instruction list (or {tiles, instructions} mapping) per physical core"
        entries = want_list(value, loc, expected)
        if not 1 <= len(entries) <= (lnc or 2):
            loc.fail(f"{len(entries)} entries", f"1 to {lnc or 2} entries: {expected}")
        cores = []
        for i, entry in enumerate(entries):
            iloc = loc.item(entries, i)
            if not isinstance(entry, dict):
                cores.append(self._core(shared, entry, iloc))
                continue
            check_keys(entry, iloc, ("tiles", "instructions"))
            own = {}
            if entry.get("tiles") is not None:
                own = self._tiles(entry["tiles"], iloc.key(entry, "tiles"))
            for tile in own:
                if tile in shared:
                    iloc.key(entry, "tiles").key(entry["tiles"], tile).fail(
                        f"tile {tile!r} is also in the kernel's shared tiles:", "a new name")
            if entry.get("instructions") is None:
                iloc.fail("missing key 'instructions'", "instructions: [...] for this core")
            cores.append(self._core({**shared, **own}, entry["instructions"],
                                    iloc.key(entry, "instructions")))
        return cores

    def _core(self, tiles: dict[str, TileSpec], value: Any, loc: Loc) -> CoreProgram:
        """One physical core's program (repeats expanded); each core gets its own copies of
        the tiles."""
        templates = _Expander(dict.fromkeys([*tiles, *self.tensors])).expand(value, loc)
        instrs = _materialize(templates)

        def wait_loc(ins: Instr, sem: str) -> tuple[Loc, Any]:
            items, i, list_loc = templates[ins.index][3]
            d = items[i]
            wloc = list_loc.item(items, i).key(d, "wait")
            return wloc.key(d["wait"], sem), d["wait"][sem]

        _check_semaphores(instrs, wait_loc)
        return CoreProgram({n: replace(t) for n, t in tiles.items()}, instrs)

    def _ops(self, value: Any, loc: Loc) -> list[OpSpec]:
        expected = "a list of ops like - matmul: {a: x, b: w, out: h}"
        items = want_list(value, loc, expected)
        if not items:
            loc.fail("got an empty list", expected)
        ops = []
        for i, item in enumerate(items):
            iloc = loc.item(items, i)
            if not isinstance(item, dict) or len(item) != 1:
                iloc.fail(f"got {show(item)}", "a single-key mapping like matmul: {a: x, b: w}")
            (op, args), = item.items()
            want_name(op, iloc, "op")
            aloc = iloc.key(item, op)
            args = want_map(args, aloc, "a mapping of the op's arguments like {x: h, out: h}")
            for key in args:
                if not isinstance(key, str):
                    aloc.fail(f"argument name {show(key)}", "argument names that are strings")
            ops.append(OpSpec(op, _plain(args), aloc.line))
        return ops

    # -- the host schedule --------------------------------------------------------------------

    def _streams(self, value: Any, loc: Loc, kernels: dict) -> list[StreamSpec]:
        items = want_list(value, loc, "a list of streams like - {name: s, core: 0, do: [...]}")
        streams, waits = [], []
        for i, entry in enumerate(items):
            sloc = loc.item(items, i)
            entry = want_map(entry, sloc, "{name: ..., core: 0, do: [...]}")
            check_keys(entry, sloc, ("name", "core", "do"))
            for key in ("name", "do"):
                if entry.get(key) is None:
                    sloc.fail(f"missing key {key!r}", "name:, do: and optionally core:")
            name = want_name(entry["name"], sloc.key(entry, "name"), "stream")
            if any(s.name == name for s in streams):
                sloc.key(entry, "name").fail(f"duplicate stream name {name!r}", "unique names")
            core = 0
            if entry.get("core") is not None:
                core = want_int(entry["core"], sloc.key(entry, "core"),
                                "a logical core index >= 0", minimum=0)
            dloc = sloc.key(entry, "do")
            steps = want_list(entry["do"], dloc, "a list of steps")
            spec = StreamSpec(name, core, line=sloc.line)
            for j, step in enumerate(steps):
                spec.steps.append(self._step(step, dloc.item(steps, j), kernels, waits))
            streams.append(spec)
        recorded = {s.arg for st in streams for s in st.steps if s.kind == "record"}
        for event, wloc in waits:
            if event not in recorded:
                wloc.fail(f"event {event!r} is never recorded{hint(event, recorded)}",
                          "an event some stream records (record: name)")
        return streams

    def _step(self, step: Any, loc: Loc, kernels: dict, waits: list) -> Step:
        if step == "synchronize":
            return Step("synchronize", None, loc.line)
        expected = "record: ev, wait: ev, launch: kernel, copy: {src, dst}, or synchronize"
        if not isinstance(step, dict) or len(step) != 1:
            loc.fail(f"got {show(step)}{hint(step, STEP_KINDS)}", expected)
        (kind, arg), = step.items()
        kloc = loc.key(step, kind)
        if kind not in STEP_KINDS or kind == "synchronize":
            what = ("synchronize takes no argument" if kind == "synchronize"
                    else unknown("step", kind, STEP_KINDS))
            kloc.fail(what, expected)
        if kind in ("record", "wait"):
            arg = want_name(arg, kloc, "event")
            if kind == "wait":
                waits.append((arg, kloc))
        elif kind == "launch":
            if not isinstance(arg, str) or arg not in kernels:
                kloc.fail(unknown("kernel", arg, kernels), one_of(kernels))
        else:
            copy = want_map(arg, kloc, "{src: tensor, dst: tensor}")
            check_keys(copy, kloc, ("src", "dst"))
            arg = tuple(self._tensor_ap(copy, key, kloc) for key in ("src", "dst"))
        return Step(kind, arg, kloc.line)

    def _tensor_ap(self, mapping: dict, key: str, loc: Loc):
        if mapping.get(key) is None:
            loc.fail(f"missing key {key!r}", "{src: tensor, dst: tensor}")
        kloc = loc.key(mapping, key)
        ap = parse_ap(want_str(mapping[key], kloc, "a tensor name, optionally sliced"), kloc)
        if ap.name not in self.tensors:
            kloc.fail(unknown("tensor", ap.name, self.tensors), one_of(self.tensors))
        return ap

    def _timing(self, value: Any, loc: Loc, recorded: set) -> list[tuple[str, str]]:
        items = want_list(value, loc, "a list like - {from: ev1, to: ev2}")
        out = []
        for i, entry in enumerate(items):
            iloc = loc.item(items, i)
            entry = want_map(entry, iloc, "{from: ev1, to: ev2}")
            check_keys(entry, iloc, ("from", "to"))
            pair = []
            for key in ("from", "to"):
                if entry.get(key) is None:
                    iloc.fail(f"missing key {key!r}", "{from: ev1, to: ev2}")
                kloc = iloc.key(entry, key)
                event = want_name(entry[key], kloc, "event")
                if event not in recorded:
                    kloc.fail(f"event {event!r} is never recorded{hint(event, recorded)}",
                              "an event some stream records (record: name)")
                pair.append(event)
            out.append((pair[0], pair[1]))
        return out

    def _outputs(self, value: Any, loc: Loc) -> list[str]:
        items = want_list(value, loc, "a list of tensor names like [y]")
        out = []
        for i, name in enumerate(items):
            iloc = loc.item(items, i)
            if not isinstance(name, str) or name not in self.tensors:
                iloc.fail(unknown("tensor", name, self.tensors), one_of(self.tensors))
            if name in out:
                iloc.fail(f"{name!r} is listed twice", "each output once")
            out.append(name)
        return out


def _plain(value: Any, done: dict | None = None) -> Any:
    """PosDict/PosList -> plain dict/list, recursively (op arguments are handed on as-is).
    Containers shared through YAML aliases stay shared, so `&a`/`*a` bombs cannot blow up."""
    done = {} if done is None else done
    if not isinstance(value, (dict, list)):
        return value
    if id(value) not in done:
        if isinstance(value, dict):
            done[id(value)] = {k: _plain(v, done) for k, v in value.items()}
        else:
            done[id(value)] = [_plain(v, done) for v in value]
    return done[id(value)]

