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
The semaphore check runs on the expanded program.

Size: `count_instructions` gives what a list expands to from the repeat counts alone, before
anything is unrolled (a body shared through a YAML alias is counted at every use, computed once):
the trace loader refuses a trace whose kernels expand to more than its limit (MAX_INSTRUCTIONS
by default, `--max-instructions`) before expanding any of them.

Speed: a body without a loop variable is parsed once for all its iterations, whose instructions
are copies made without re-running the dataclasses' `__init__`; each `{expression}` text is
compiled once.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any

from trnsim.inputs.positions import PosList
from trnsim.inputs.validate import Loc, check_keys, is_int, want_int, want_list
from trnsim.isa import Instr
from trnsim.trace.expressions import GRAMMAR, OPS, ExpressionError, parse_expression
from trnsim.trace.instructions import NO_INIT, build_instruction
from trnsim.trace.semaphores import check_semaphores_at

__all__ = ["core_instructions", "count_instructions", "MAX_INSTRUCTIONS", "REPEAT_KEYS"]

MAX_INSTRUCTIONS = 5_000_000
"""The default limit on the instructions a trace's low-level kernels expand to, all kernels and
cores together (repeat blocks unrolled; not what `ops:` lower to). Loading takes ~400 bytes an
instruction and running in timing mode about as much again, so 5 million is ~4 GB
(docs/trace_extensions.md, "Size limits")."""
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
    """Parses one core's instruction list, expanding repeat blocks, into templates (a repeat
    body without a loop variable is parsed once for all its iterations)."""

    def __init__(self, names: Collection[str]):
        self.names = names

    def expand(
        self, value: Any, loc: Loc, body: bool = False, env: dict[str, int] | None = None
    ) -> list[_Template]:
        """Templates of the list `value`; `env` holds the loop variables of enclosing repeat
        blocks (`as:`), substituted into `{expression}`s in the instructions' strings."""
        expected = (
            "a list of instructions like {op: matmul, ...} or repeat blocks like "
            "{repeat: 4, instructions: [...]}"
        )
        items = want_list(value, loc, expected)
        if body and not items:
            loc.fail("got an empty list", "a body of at least one instruction")
        lines = items.item_lines if isinstance(items, PosList) else ()
        out: list[_Template] = []
        names = self.names
        for i, d in enumerate(items):
            if _is_repeat(d):
                self._repeat(items, i, loc, out, env)
                continue
            line = (lines[i] if i < len(lines) else 0) or loc.line
            if env and isinstance(d, dict):
                d = _substitute(d, env, lambda i=i: loc.item(items, i))
            ins = build_instruction(d, -1, 0, names, lambda i=i: loc.item(items, i))
            out.append((ins, line, ins.wait, (items, i, loc)))
        return out

    def _repeat(
        self, items: list, i: int, loc: Loc, out: list[_Template], env: dict[str, int] | None
    ) -> None:
        """Append the expansion of the repeat block `items[i]` to `out`."""
        d = items[i]
        rloc = loc.item(items, i)
        check_keys(
            d,
            rloc,
            REPEAT_KEYS,
            expected="repeat: <count>, instructions: [<body>] and optionally as: <name>",
        )
        if d.get("repeat") is None:
            rloc.fail(
                "missing key 'repeat'",
                "repeat: <count, an integer >= 1> next to instructions: [<body>]",
            )
        n = want_int(
            d["repeat"], rloc.key(d, "repeat"), "a repeat count (an integer >= 1)", minimum=1
        )
        if d.get("instructions") is None:
            rloc.fail("missing key 'instructions'", "instructions: [...], the body to repeat")
        var = None
        if d.get("as") is not None:
            var = d["as"]
            if not (isinstance(var, str) and var.isidentifier()):
                rloc.key(d, "as").fail(
                    f"loop variable {var!r} is not a name", "a name like k (letters, digits, _)"
                )
        bloc = rloc.key(d, "instructions")
        if var is None:  # the body is the same in every iteration: expand it once
            bodies = [self.expand(d["instructions"], bloc, body=True, env=env)] * n
        else:
            bodies = [
                self.expand(d["instructions"], bloc, body=True, env={**(env or {}), var: it})
                for it in range(n)
            ]
        # iteration `it` waits for `v + it * k[s]`: k[s] is what one iteration signals on s
        k: dict[str, int] = defaultdict(int)
        for proto, _, _, _ in bodies[0]:
            for sem, inc in proto.signal:
                k[sem] += inc
        for it, body in enumerate(bodies):
            shifted = [
                (j, proto, line, where, [(s, v, k.get(s, 0)) for s, v in wait])
                for j, (proto, line, wait, where) in enumerate(body)
                if any(s in k for s, _ in wait)
            ]
            if not shifted:
                out += body
                continue
            chunk = body.copy()
            for j, proto, line, where, spec in shifted:
                chunk[j] = (proto, line, tuple([(s, v + it * ks) for s, v, ks in spec]), where)
            out += chunk


def _is_repeat(d: Any) -> bool:
    """Whether the list item `d` is read as a repeat block (else as an instruction)."""
    return isinstance(d, dict) and ("repeat" in d or ("instructions" in d and "op" not in d))


def count_instructions(value: Any, memo: dict[int, int]) -> int:
    """The instructions the list `value` expands to, from its repeat counts alone (nothing is
    unrolled). `memo` (id of a list -> its count) makes a body shared through YAML aliases cost
    one walk while counting at every use. A malformed item counts as one instruction (or its
    body once): the expander reports it."""
    if not isinstance(value, list):
        return 0
    known = memo.get(id(value))
    if known is not None:
        return known
    n = 0
    for d in value:
        n += _block_size(d, memo) if _is_repeat(d) else 1
    memo[id(value)] = n
    return n


def check_size(value: Any, loc: Loc, used: int, limit: int, memo: dict[int, int]) -> int:
    """`used` plus what the instruction list `value` (at `loc`) expands to; fails at the first
    item that takes the total past `limit`, before anything is expanded."""
    if not isinstance(value, list):
        return used
    for i, d in enumerate(value):
        used += _block_size(d, memo) if _is_repeat(d) else 1
        if used > limit:
            where = loc.item(value, i)
            if _is_repeat(d) and is_int(d.get("repeat")):
                body = count_instructions(d.get("instructions"), memo)
                what = f"repeat: {d['repeat']} of a body of {body} instructions brings"
                where = where.key(d, "repeat")
            else:
                what = "this instruction brings"
            where.fail(
                f"{what} the trace to {used} instructions",
                f"at most {limit} instructions from its low-level kernels and repeat: blocks "
                "(raise the limit with --max-instructions N)",
            )
    return used


def _block_size(d: dict, memo: dict[int, int]) -> int:
    body = count_instructions(d.get("instructions"), memo)
    count = d.get("repeat")
    return count * body if is_int(count) and count >= 1 else body


_EXPR = re.compile(r"\{([^{}]*)\}")


def _substitute(d: dict, env: dict[str, int], where: Callable[[], Loc]) -> dict:
    """`d` with every `{expression}` in its string values replaced by the expression's value
    (integer arithmetic on the loop variables in `env`: + - * // % and parentheses). A value
    that is one whole expression (`queue: "{k % 4}"`) becomes an integer. `where()` is the Loc
    of `d`, for errors."""
    changed = None
    for key, value in d.items():
        if isinstance(value, str) and "{" in value:

            def at(key=key):
                return where().key(d, key)

            whole = _EXPR.fullmatch(value.strip())
            if whole:
                new = _evaluate(whole.group(1), env, at)
            else:

                def value_of(m, at=at):
                    return str(_evaluate(m.group(1), env, at))

                new = _EXPR.sub(value_of, value)
            if changed is None:
                changed = dict(d)
            changed[key] = new
    return d if changed is None else changed


_NO_BUILTINS: dict[str, Any] = {"__builtins__": {}}


def _evaluate(text: str, env: dict[str, int], where: Callable[[], Loc]) -> int:
    """The value of the expression `text`; each text is compiled once (`_compiled`), and only a
    failure walks it again, with `_explain`, for the message."""
    code = _compiled(text)
    if code is not None:
        try:
            value = eval(code, _NO_BUILTINS, env)  # only ints, names, + - * // % (_compiled)
        except Exception:  # an unknown name, a division by zero: _explain words it
            value = None
        if type(value) is int:
            return value
    return _explain(text, env, where())


@functools.lru_cache(maxsize=1 << 12)
def _compiled(text: str) -> Any:
    """The code of the expression `text` if it is in the language (`parse_expression`: integer
    constants, names, + - * // % and parentheses, within its size limits); else None."""
    try:
        return compile(parse_expression(text), "<expression>", "eval")
    except ExpressionError:
        return None


def _explain(text: str, env: dict[str, int], loc: Loc) -> int:
    """Evaluate `text` node by node, failing at `loc` on the first node that cannot be
    evaluated (the reference for `_evaluate`'s compiled path)."""
    expected = f"an integer expression of {', '.join(env)} with {GRAMMAR}, like {{k*128}}"
    try:
        tree = parse_expression(text).body
    except ExpressionError as e:
        loc.fail(str(e), expected)

    def ev(node) -> int:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                loc.fail(f"cannot evaluate {node.id!r} in {{{text}}}", expected)
            return env[node.id]
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        a, b = ev(node.left), ev(node.right)  # a BinOp of OPS: parse_expression checked
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and b == 0:
            loc.fail(f"{{{text}}} divides by zero", expected)
        return OPS[type(node.op)](a, b)

    return ev(tree)


def _materialize(templates: list[_Template]) -> list[Instr]:
    """The instructions of `templates`, numbered from 0, each its own object: a template's
    first use takes its parsed instruction over (built with index -1), later uses copy it."""
    if not NO_INIT:
        return [
            replace(proto, index=index, line=line, wait=wait)
            for index, (proto, line, wait, _) in enumerate(templates)
        ]
    out = []
    append, new = out.append, object.__new__
    for index, (proto, line, wait, _) in enumerate(templates):
        fields = proto.__dict__
        if fields["index"] == -1:  # first use
            ins = proto
        else:  # same as dataclasses.replace, without re-running __init__
            ins = new(proto.__class__)
            fields = ins.__dict__
            fields.update(proto.__dict__)
        fields["index"] = index
        fields["line"] = line
        fields["wait"] = wait
        append(ins)
    return out
