"""One core's instruction list -> its instructions, with `repeat` blocks expanded.

Extension (documented in `docs/trace_extensions.md`): `repeat` blocks. Wherever an instruction list
appears (`instructions:`, each `per_core` list, the body of another repeat), an item may be
`{repeat: N, instructions: [...]}` (both keys required, plus an optional `as: <name>`; N an int >=
1, the body a non-empty list of instructions and/or repeat blocks). It unrolls to N copies of the
body, where copy i (0-based) turns every `wait: {s: v}` into `v + i * k_s`, k_s being the sum of
the increments the body (one copy of it, nested repeats expanded) signals on `s`; waits on
semaphores the body does not signal keep their value. So in a body `wait: {s: 0}` waits for the
previous iterations' signals on s (a software pipeline), and `wait: {ld: 1}` with the body
signalling `ld: 1` waits for this iteration's own load. Nested repeats compose (the inner one is
expanded first). Expanded instructions are numbered consecutively (`index`) and keep the `line` of
the body instruction they come from. With `as: k` the body's string fields may hold `{expression}`s
of the loop variable (integer arithmetic), replaced in each iteration, so a loop can walk over a
tensor. Errors inside a body name its key path, such as `instructions[1].instructions[0].wait.mm`.
A core's program may expand to at most MAX_INSTRUCTIONS (10,000,000) instructions. The semaphore
check runs on the expanded program.

Speed: identical instruction mappings (and a repeat body in all its copies) are parsed once, and
the copies are cloned without re-running the dataclasses' `__init__`.
"""

from __future__ import annotations

import ast
import operator
import re
from collections import defaultdict
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from trnsim.inputs.positions import PosList
from trnsim.inputs.validate import Loc, check_keys, want_int, want_list
from trnsim.isa import Instr
from trnsim.trace.instructions import NO_INIT, build_instruction
from trnsim.trace.semaphores import check_semaphores_at

__all__ = ["core_instructions", "MAX_INSTRUCTIONS", "REPEAT_KEYS"]

MAX_INSTRUCTIONS = 10_000_000
"""The most instructions one core's program may have once repeat blocks are expanded."""
REPEAT_KEYS = ("repeat", "as", "instructions")

# An expanded instruction before it gets its index: (parsed instruction, line, wait, where),
# `where` = (list, position, Loc of the list) of the mapping it came from (for errors only).
_Template = tuple[Instr, int, tuple[tuple[str, int], ...], tuple[list, int, Loc]]


def core_instructions(value: Any, loc: Loc, names: Collection[str]) -> list[Instr]:
    """One core's instruction list `value` (found at `loc`) -> its instructions, repeat blocks
    expanded, numbered from 0, each its own object, semaphores checked (`check_semaphores`).
    Operands must name one of `names`. Raises TraceError."""
    templates = _Expander(names).expand(value, loc)
    instrs = _materialize(templates)

    def wait_loc(ins: Instr, sem: str) -> tuple[Loc, Any]:
        items, i, list_loc = templates[ins.index][3]
        d = items[i]
        wloc = list_loc.item(items, i).key(d, "wait")
        return wloc.key(d["wait"], sem), d["wait"][sem]

    check_semaphores_at(instrs, wait_loc)
    return instrs


class _Expander:
    """Parses one core's instruction list, expanding repeat blocks, into templates.

    Identical instruction mappings are parsed once (a repeat body once in all)."""

    MEMO_TRIAL = 512  # stop memoising when fewer than 1 in 8 of this many mappings repeat

    def __init__(self, names: Collection[str]):
        self.names = names
        self.memo: dict[Any, Instr] | None = {}
        self.hits = self.misses = 0

    def expand(self, value: Any, loc: Loc, body: bool = False,
               env: dict[str, int] | None = None) -> list[_Template]:
        """Templates of the list `value`; `env` holds the loop variables of enclosing repeat
        blocks (`as:`), substituted into `{expression}`s in the instructions' strings."""
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
                self._repeat(items, i, loc, out, env)
                continue
            line = (lines[i] if i < len(lines) else 0) or loc.line
            if env and isinstance(d, dict):
                d = _substitute(d, env, loc.item(items, i))
            key = proto = None
            if memo is not None:
                try:
                    key = _freeze(d)
                    proto = memo.get(key)
                except TypeError:
                    pass
            if proto is None:
                proto = build_instruction(d, 0, 0, names, lambda i=i: loc.item(items, i))
                if key is not None:
                    memo[key] = proto
                    self.misses += 1
                    if self.misses == self.MEMO_TRIAL and self.hits < self.misses // 8:
                        memo = self.memo = None  # mostly distinct mappings: not worth it
            else:
                self.hits += 1
            out.append((proto, line, proto.wait, (items, i, loc)))
        return out

    def _repeat(self, items: list, i: int, loc: Loc, out: list[_Template],
                env: dict[str, int] | None) -> None:
        """Append the expansion of the repeat block `items[i]` to `out`."""
        d = items[i]
        rloc = loc.item(items, i)
        check_keys(d, rloc, REPEAT_KEYS,
                   expected="repeat: <count>, instructions: [<body>] and optionally as: <name>")
        if d.get("repeat") is None:
            rloc.fail("missing key 'repeat'", "repeat: <count, an integer >= 1> next to "
                      "instructions: [<body>]")
        count_loc = rloc.key(d, "repeat")
        n = want_int(d["repeat"], count_loc, "a repeat count (an integer >= 1)", minimum=1)
        if d.get("instructions") is None:
            rloc.fail("missing key 'instructions'", "instructions: [...], the body to repeat")
        var = None
        if d.get("as") is not None:
            var = d["as"]
            if not (isinstance(var, str) and var.isidentifier()):
                rloc.key(d, "as").fail(f"loop variable {var!r} is not a name",
                                       "a name like k (letters, digits, _)")
        bloc = rloc.key(d, "instructions")
        if var is None:  # the body is the same in every iteration: expand it once
            bodies = [self.expand(d["instructions"], bloc, body=True, env=env)] * n
        else:
            bodies = [self.expand(d["instructions"], bloc, body=True, env={**(env or {}), var: it})
                      for it in range(n)]
        total = len(out) + n * len(bodies[0])
        if total > MAX_INSTRUCTIONS:
            count_loc.fail(f"repeat: {n} of a body of {len(bodies[0])} instructions makes {total} "
                           "instructions", f"at most {MAX_INSTRUCTIONS} instructions per core "
                           "once repeats are expanded")
        # iteration `it` waits for `v + it * k[s]`: k[s] is what one iteration signals on s
        k: dict[str, int] = defaultdict(int)
        for proto, _, _, _ in bodies[0]:
            for sem, inc in proto.signal:
                k[sem] += inc
        for it, body in enumerate(bodies):
            shifted = [(j, proto, line, where, [(s, v, k.get(s, 0)) for s, v in wait])
                       for j, (proto, line, wait, where) in enumerate(body)
                       if any(s in k for s, _ in wait)]
            if not shifted:
                out += body
                continue
            chunk = body.copy()
            for j, proto, line, where, spec in shifted:
                chunk[j] = (proto, line, tuple([(s, v + it * ks) for s, v, ks in spec]), where)
            out += chunk


_EXPR = re.compile(r"\{([^{}]*)\}")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


def _substitute(d: dict, env: dict[str, int], loc: Loc) -> dict:
    """`d` with every `{expression}` in its string values replaced by the expression's value
    (integer arithmetic on the loop variables in `env`: + - * // % and parentheses). A value
    that is one whole expression (`queue: "{k % 4}"`) becomes an integer."""
    changed = None
    for key, value in d.items():
        if isinstance(value, str) and "{" in value:
            whole = _EXPR.fullmatch(value.strip())
            if whole:
                new = _evaluate(whole.group(1), env, loc.key(d, key))
            else:
                def value_of(m, key=key):
                    return str(_evaluate(m.group(1), env, loc.key(d, key)))
                new = _EXPR.sub(value_of, value)
            if changed is None:
                changed = dict(d)
            changed[key] = new
    return d if changed is None else changed


def _evaluate(text: str, env: dict[str, int], loc: Loc) -> int:
    expected = (f"an integer expression of {', '.join(env)} with + - * // % and parentheses, "
                "like {k*128}")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        loc.fail(f"cannot read {{{text}}}", expected)

    def ev(node) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and b == 0:
                loc.fail(f"{{{text}}} divides by zero", expected)
            return _OPS[type(node.op)](a, b)
        what = node.id if isinstance(node, ast.Name) else ast.dump(node)[:40]
        loc.fail(f"cannot evaluate {what!r} in {{{text}}}", expected)

    return ev(tree)


def _materialize(templates: list[_Template]) -> list[Instr]:
    """The instructions of `templates`, numbered from 0, each its own object: the first template
    of a parsed instruction takes it over (its index, line and wait set in place), later ones get
    copies."""
    if not NO_INIT:
        return [replace(proto, index=index, line=line, wait=wait)
                for index, (proto, line, wait, _) in enumerate(templates)]
    out = []
    append, new = out.append, object.__new__
    taken: set[int] = set()
    for index, (proto, line, wait, _) in enumerate(templates):
        if id(proto) in taken:
            ins = new(proto.__class__)
            fields = ins.__dict__  # same as dataclasses.replace, without re-running __init__
            fields.update(proto.__dict__)
        else:
            taken.add(id(proto))
            ins, fields = proto, proto.__dict__
        fields["index"] = index
        fields["line"] = line
        fields["wait"] = wait
        append(ins)
    return out


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

