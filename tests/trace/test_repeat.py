"""trace.repeat: repeat blocks (docs/trace_extensions.md): expansion, shifted waits, nesting,
loop variables, errors; and the memo of identical mappings."""

import re
from dataclasses import replace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.trace.helpers import TENS, TILE, K, error, instructions, line, parse
from trnsim.errors import TraceError
from trnsim.isa import Ap, Engine, Matmul
from trnsim.trace import loads, repeat

REPEAT = """\
trnsim: 1
tensors:
  w: {shape: [128, 512], dtype: bfloat16}
tiles:
  x_t: {memory: sbuf, shape: [128, 128], dtype: bfloat16}
  w_t: {memory: sbuf, shape: [128, 512], dtype: bfloat16}
  acc: {memory: psum, shape: [128, 512], dtype: float32}
  o_t: {memory: sbuf, shape: [128, 512], dtype: bfloat16}
instructions:
  - {op: dma_copy, src: "w[0:128, 0:512]", dst: w_t, queue: 1, signal: {ld: 1}}
  - repeat: 1000            # unroll the body 1000 times (an int >= 1)
    instructions:           # the body: a list of instructions and/or nested repeat blocks
      - {op: matmul, stationary: x_t, moving: w_t, dst: acc, wait: {ld: 1, act: 0}, signal: {mm: 1}}
      - {op: activation, func: gelu, src: acc, dst: o_t, wait: {mm: 1}, signal: {act: 1}}
"""  # noqa: E501


def test_repeat_example_expands_with_shifted_waits():
    ins = instructions(REPEAT)
    assert len(ins) == 1 + 2 * 1000
    assert [i.index for i in ins] == list(range(2001))
    mm_line, act_line = line(REPEAT, "op: matmul"), line(REPEAT, "op: activation")
    assert ins[0].line == line(REPEAT, "op: dma_copy") and ins[0].signal == (("ld", 1),)
    for it in (0, 1, 2, 999):
        mm, act = ins[1 + 2 * it], ins[2 + 2 * it]
        assert (mm.OP, mm.line, mm.index) == ("matmul", mm_line, 1 + 2 * it)
        assert mm.wait == (("ld", 1), ("act", it))  # ld: not signalled by the body; act: 1 each
        assert mm.signal == (("mm", 1),)
        assert (act.OP, act.line, act.index) == ("activation", act_line, 2 + 2 * it)
        assert act.wait == (("mm", 1 + it),) and act.signal == (("act", 1),)
    first = ins[1]
    assert first == Matmul(
        index=1,
        line=mm_line,
        engine=Engine.TENSOR,
        wait=(("ld", 1), ("act", 0)),
        signal=(("mm", 1),),
        stationary=Ap("x_t", (), "x_t"),
        moving=Ap("w_t", (), "w_t"),
        dst=Ap("acc", (), "acc"),
    )
    assert len({id(i) for i in ins}) == len(ins)  # every instruction its own object


def test_repeat_matches_writing_the_loop_out():
    body = [
        "{op: memset, dst: t, wait: {s: 0, u: 1}, signal: {s: 2}}",
        "{op: tensor_copy, src: t, dst: t, wait: {s: 2}, signal: {u: 1}}",
    ]
    head = TENS + "tiles:\n  t: {memory: sbuf, shape: [128, 64], dtype: float32}\ninstructions:\n"
    first = head + "  - {op: memset, dst: t, signal: {u: 1}}\n"
    looped = first + "  - repeat: 3\n    instructions:\n" + "".join(f"      - {b}\n" for b in body)
    written = first + "".join(
        f"  - {{op: memset, dst: t, wait: {{s: {2 * i}, u: {1 + i}}}, signal: {{s: 2}}}}\n"
        f"  - {{op: tensor_copy, src: t, dst: t, wait: {{s: {2 + 2 * i}}}, signal: {{u: 1}}}}\n"
        for i in range(3)
    )
    strip = lambda xs: [replace(x, line=0) for x in xs]  # noqa: E731
    assert strip(instructions(looped)) == strip(instructions(written))


def test_nested_repeats_compose():
    text = (
        TILE
        + """\
  - repeat: 2
    instructions:
      - {op: memset, dst: t, signal: {a: 1}}
      - repeat: 3
        instructions:
          - {op: memset, dst: t, wait: {a: 1, b: 0}, signal: {b: 2}}
  - {op: memset, dst: t, wait: {b: 12}}
"""
    )
    ins = instructions(text)
    outer, inner = line(text, "signal: {a: 1}"), line(text, "signal: {b: 2}")
    assert [(i.index, i.line, i.wait) for i in ins] == [
        (0, outer, ()),
        (1, inner, (("a", 1), ("b", 0))),
        (2, inner, (("a", 1), ("b", 2))),
        (3, inner, (("a", 1), ("b", 4))),
        (4, outer, ()),
        (5, inner, (("a", 2), ("b", 6))),  # the outer body signals a: 1 and b: 3 x 2
        (6, inner, (("a", 2), ("b", 8))),
        (7, inner, (("a", 2), ("b", 10))),
        (8, line(text, "b: 12"), (("b", 12),)),
    ]


def test_repeat_in_per_core_and_in_kernels():
    text = (
        K
        + """\
    tiles: {t: {memory: sbuf, shape: [128, 4], dtype: float32}}
    per_core:
      - - repeat: 2
          instructions: [{op: memset, dst: t, wait: {s: 0}, signal: {s: 1}}]
      - instructions:
          - {op: memset, dst: t}
          - repeat: 3
            instructions:
              - repeat: 2
                instructions: [{op: iota, dst: t}]
"""
    )
    c0, c1 = parse(text).kernels["k"].per_core
    assert [(i.index, i.wait) for i in c0.instructions] == [(0, (("s", 0),)), (1, (("s", 1),))]
    assert [i.OP for i in c1.instructions] == ["memset"] + ["iota"] * 6
    assert [i.index for i in c1.instructions] == list(range(7))
    assert {i.line for i in c1.instructions[1:]} == {line(text, "op: iota")}


def test_wait_for_zero_is_allowed_everywhere():
    ins = instructions(TILE + "  - {op: memset, dst: t, wait: {never: 0}}\n")
    assert ins[0].wait == (("never", 0),)


REPEAT_ERRORS = [
    (
        TILE + "  - {repeat: 0, instructions: [{op: memset, dst: t}]}\n",
        "t.yaml:7: instructions[0].repeat: got 0; expected a repeat count (an integer >= 1)",
    ),
    (
        TILE + "  - {repeat: 2.0, instructions: [{op: memset, dst: t}]}\n",
        "t.yaml:7: instructions[0].repeat: got 2.0; expected a repeat count",
    ),
    (
        TILE + "  - {repeat: true, instructions: [{op: memset, dst: t}]}\n",
        "t.yaml:7: instructions[0].repeat: got true; expected a repeat count",
    ),
    (
        TILE + "  - {repeat: many, instructions: [{op: memset, dst: t}]}\n",
        "t.yaml:7: instructions[0].repeat: got 'many'; expected a repeat count",
    ),
    (
        TILE + "  - repeat: 2\n    instructions: [{op: memset, dst: t}]\n    times: 3\n",
        "t.yaml:9: instructions[0].times: unknown key 'times'; expected repeat: <count>, "
        "instructions: [<body>]",
    ),
    (
        TILE + "  - repeat: 2\n    instruction: [{op: memset, dst: t}]\n",
        "t.yaml:8: instructions[0].instruction: unknown key 'instruction' (did you mean "
        "'instructions'?)",
    ),
    (
        TILE + "  - {repeat: 2, op: memset, dst: t}\n",
        "t.yaml:7: instructions[0].op: unknown key 'op'; expected repeat: <count>,",
    ),
    (
        TILE + "  - repeat: 2\n",
        "t.yaml:7: instructions[0]: missing key 'instructions'; expected instructions: [...], the "
        "body to repeat",
    ),
    (
        TILE + "  - {repeat: 2, instructions: }\n",
        "t.yaml:7: instructions[0]: missing key 'instructions'",
    ),
    (
        TILE + "  - {instructions: [{op: memset, dst: t}]}\n",
        "t.yaml:7: instructions[0]: missing key 'repeat'; expected repeat: <count, an integer >= 1>",
    ),
    (
        TILE + "  - {repeat: 2, instructions: []}\n",
        "t.yaml:7: instructions[0].instructions: got an empty list; expected a body of at least one "
        "instruction",
    ),
    (
        TILE + "  - {repeat: 2, instructions: {op: memset, dst: t}}\n",
        "t.yaml:7: instructions[0].instructions: got a mapping with keys op, dst; expected a list of "
        "instructions",
    ),
    (
        TILE + "  - {repeat: 5000001, instructions: [{op: memset, dst: t}]}\n",
        "t.yaml:7: instructions[0].repeat: repeat: 5000001 of a body of 1 instructions brings the "
        "trace to 5000001 instructions; expected at most 5000000 instructions from its low-level "
        "kernels and repeat: blocks (raise the limit with --max-instructions N)",
    ),
    (
        TILE + "  - {op: memset, dst: t}\n  - repeat: 100000\n    instructions:\n"
        "      - {op: memset, dst: t}\n      - {repeat: 1000, instructions: [{op: iota, dst: t}]}\n",
        "t.yaml:8: instructions[1].repeat: repeat: 100000 of a body of 1001 instructions brings "
        "the trace to 100100001 instructions; expected at most 5000000",
    ),
    # errors inside bodies: the body's line and key path
    (
        TILE + "  - {op: memset, dst: t, signal: {ld: 1}}\n  - repeat: 4\n    instructions:\n"
        "      - {op: memset, dst: t}\n      - {op: tensor_copy, src: u, dst: t}\n",
        "t.yaml:11: instructions[1].instructions[1].src: unknown tile or tensor 'u'",
    ),
    (
        TILE + "  - repeat: 4\n    instructions:\n      - {op: memset, dst: t, signal: {ld: 1}}\n"
        "      - repeat: 2\n        instructions:\n          - {op: memset, dst: t, wait: {mm: 1}}\n",
        "t.yaml:12: instructions[0].instructions[1].instructions[0].wait.mm: semaphore 'mm' is "
        "waited on but never signalled; expected an instruction of this core with signal: {mm: 1}",
    ),
    (
        TILE + "  - repeat: 3\n    instructions:\n"
        "      - {op: memset, dst: t, wait: {s: 2}, signal: {s: 1}}\n",
        "t.yaml:9: instructions[0].instructions[0].wait.s: semaphore 's' is waited on for 4 (2 as "
        "written plus the increments of earlier repeat iterations) but its signals add up to only 3; "
        "expected signal increments of 's' summing to >= 4",
    ),
    (
        K + "    tiles: {t: {memory: sbuf, shape: [1], dtype: int8}}\n    per_core:\n"
        "      - []\n      - - repeat: 2\n          instructions: [{op: memset, dst: x}]\n",
        "t.yaml:8: kernels.k.per_core[1][0].instructions[0].dst: unknown tile or tensor 'x'",
    ),
]


@pytest.mark.parametrize("text, start", REPEAT_ERRORS, ids=range(len(REPEAT_ERRORS)))
def test_repeat_errors(text, start):
    assert error(text).startswith(start)


# ----------------------------------------------------------------------------------------------
# speed: a body without a loop variable is parsed once; every instruction is its own object


def test_a_body_is_parsed_once_but_its_instructions_are_distinct_objects(monkeypatch):
    calls = []
    original = repeat.build_instruction
    monkeypatch.setattr(repeat, "build_instruction", lambda *a: calls.append(1) or original(*a))
    text = (
        TILE
        + "  - repeat: 50\n    instructions: [{op: memset, dst: t, value: 1}]\n"
        + "  - {op: memset, dst: t}\n"
    )
    ins = instructions(text)
    assert len(calls) == 2 and len(ins) == 51 and len({id(i) for i in ins}) == 51
    assert [(i.index, i.line) for i in ins] == [(n, 8) for n in range(50)] + [(50, 9)]
    assert ins[0] == replace(ins[49], index=0) and ins[50].value == 0.0


def test_numbers_and_booleans_stay_apart():
    text = TILE + (
        "  - {op: memset, dst: t, value: 1}\n  - {op: memset, dst: t, value: 1.0}\n"
        "  - {op: memset, dst: t, value: 1}\n"
    )
    values = [i.value for i in instructions(text)]
    assert values == [1, 1.0, 1] and [type(v) for v in values] == [int, float, int]
    assert error(text + "  - {op: memset, dst: t, value: true}\n").startswith(
        "t.yaml:10: instructions[3].value: got true; expected a number"
    )


# -- loop variables in repeat blocks (`as:`) -----------------------------------------------------

LOOP = """\
trnsim: 1
tensors:
  w: {shape: [512, 256], dtype: bfloat16}
tiles:
  t: {memory: sbuf, shape: [128, 128], dtype: bfloat16}
instructions:
  - repeat: 4
    as: k
    instructions:
      - repeat: 2
        as: n
        instructions:
          - {op: dma_copy, src: "w[{k*128}:{(k+1)*128}, {n*128}:{n*128 + 128}]", dst: t,
             queue: "{(k*2 + n) % 16}", signal: {ld: 1}}
      - {op: memset, dst: t, wait: {ld: 2}}
"""


def test_repeat_loop_variables_change_operands():
    ins = loads(LOOP, "t.yaml").kernels["main"].per_core[0].instructions
    copies = [i for i in ins if i.OP == "dma_copy"]
    assert [c.src.text for c in copies[:3]] == [
        "w[0:128, 0:128]",
        "w[0:128, 128:256]",
        "w[128:256, 0:128]",
    ]
    assert copies[-1].src.index == ((384, 512, None), (128, 256, None))
    # the outer body signals ld twice per iteration: memset k waits for ld >= 2 (k + 1)
    assert [i.wait for i in ins if i.OP == "memset"] == [(("ld", 2 * (k + 1)),) for k in range(4)]
    assert [i.index for i in ins] == list(range(12))
    assert [c.queue for c in copies] == [(2 * k + n) % 16 for k in range(4) for n in range(2)]


@pytest.mark.parametrize(
    "body, message",
    [
        ('{op: memset, dst: "t[{j}:{j+1}, :]"}', "cannot evaluate 'j' in {j}"),
        ('{op: memset, dst: "t[{k/2}:1, :]"}', "cannot evaluate"),
        ('{op: memset, dst: "t[{k//0}:1, :]"}', "divides by zero"),
        ('{op: memset, dst: "t[{k*}:1, :]"}', "cannot read {k*}"),
        ('{op: memset, dst: "t[{__builtins__}:1, :]"}', "cannot evaluate '__builtins__'"),
        ('{op: memset, dst: "t[{k.real}:1, :]"}', "cannot evaluate an attribute in {k.real}"),
        ('{op: memset, dst: "t[{2**k}:1, :]"}', "cannot evaluate ** in {2**k}; expected an "),
        ('{op: memset, dst: "t[{k+0.5}:1, :]"}', "cannot evaluate the constant 0.5 in {k+0.5}"),
        ('{op: memset, dst: "t[{min(k, 1)}:1, :]"}', "cannot evaluate a call in {min(k, 1)}"),
        # sizes: 2,000 terms would exhaust the stack; 101 names and 100 products are 201 terms
        (
            '{op: memset, dst: "t[{' + "*".join(["k"] * 2000) + '}:1, :]"}',
            "{k*k*k*k*k*k*k*k*k*k*k*k*k*k*k*k*k*k*k*k*...} is too long (3999 characters, at "
            "most 1000); expected an integer expression of k with +, -, *, //, % and "
            "parentheses (at most 200 terms and 1000 characters), like {k*128}",
        ),
        (
            '{op: memset, dst: "t[{' + "*".join(["k"] * 101) + '}:1, :]"}',
            "has more than 200 terms; expected",
        ),
    ],
)
def test_repeat_loop_variable_errors(body, message):
    text = (
        "trnsim: 1\ntiles:\n  t: {memory: sbuf, shape: [128, 128], dtype: bfloat16}\n"
        f"instructions:\n  - repeat: 2\n    as: k\n    instructions: [{body}]\n"
    )
    with pytest.raises(TraceError, match=re.escape(message)):
        loads(text, "t.yaml")
    with pytest.raises(TraceError, match="loop variable"):
        loads(text.replace("as: k", "as: 3k"), "t.yaml")


BODIES = st.recursive(
    st.just("{op: memset, dst: t}"),
    lambda inner: st.builds(
        lambda n, items: f"{{repeat: {n}, instructions: [{', '.join(items)}]}}",
        st.integers(1, 4),
        st.lists(inner, min_size=1, max_size=3),
    ),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(BODIES, min_size=1, max_size=3), st.integers(1, 200))
def test_fuzz_the_size_limit_counts_what_expansion_makes(items, limit):
    """The count taken from the repeat counts before expanding equals the instructions the
    expansion makes; a trace is refused exactly when that is more than the limit."""
    text = TILE + "".join(f"  - {item}\n" for item in items)
    made = len(instructions(text))
    assert repeat.count_instructions(yaml.safe_load(text)["instructions"], {}) == made
    if made > limit:
        assert "expected at most " + str(limit) in error(text, max_instructions=limit)
    else:
        got = parse(text, max_instructions=limit).kernels["main"].per_core[0].instructions
        assert len(got) == made
