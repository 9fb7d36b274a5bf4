"""trace.instructions: instruction fields and their kinds, operands (`parse_ap`), the builder
API, one exact error per way an instruction can be wrong, and a property test: any mapping gives
an instruction or a one-line TraceError."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.trace.helpers import TILE, error, parse
from trnsim.errors import TraceError
from trnsim.isa import INSTRUCTIONS, Ap, Engine, Matmul, TensorReduce, TensorScalar
from trnsim.trace import parse_ap, parse_instruction


def test_instruction_field_kinds_and_defaults():
    p = parse("""\
        trnsim: 1
        tiles:
          a: {memory: sbuf, shape: [128, 8, 4], dtype: float32}
          s: {memory: sbuf, shape: [128, 1], dtype: float32}
        instructions:
          - {op: tensor_scalar, src: a, dst: a, op0: multiply, operand0: -2, op1: add, operand1: s}
          - {op: tensor_reduce, alu: max, src: "a[:, -1, ::2]", dst: s, axis: [1, 2]}
          - {op: tensor_reduce, alu: add, src: a, dst: s, axis: 1, engine: null}
          - {op: tensor_scalar, src: a, dst: a, op0: add, operand0: 1.5, op1: null, signal: {z: 2, b: 1}}
        """)  # noqa: E501
    i0, i1, i2, i3 = p.kernels["main"].per_core[0].instructions
    assert i0 == TensorScalar(
        index=0,
        line=6,
        engine=Engine.VECTOR,
        src=Ap("a", (), "a"),
        dst=Ap("a", (), "a"),
        op0="multiply",
        operand0=-2,
        op1="add",
        operand1=Ap("s", (), "s"),
    )
    assert i1 == TensorReduce(
        index=1,
        line=7,
        engine=Engine.VECTOR,
        alu="max",
        src=Ap("a", ((None, None, None), -1, (None, None, 2)), "a[:, -1, ::2]"),
        dst=Ap("s", (), "s"),
        axis=(1, 2),
    )
    assert i2.axis == 1 and i2.engine == Engine.VECTOR
    assert i3.op1 is None and i3.operand0 == 1.5
    assert i3.signal == (("z", 2), ("b", 1))  # YAML order, not sorted


@pytest.mark.parametrize(
    "text, expected",
    [
        ("x", Ap("x", (), "x")),
        ("  x_1  ", Ap("x_1", (), "x_1")),
        ("x[3]", Ap("x", (3,), "x[3]")),
        ("x[-1]", Ap("x", (-1,), "x[-1]")),
        ("x[0:128, 0:64]", Ap("x", ((0, 128, None), (0, 64, None)), "x[0:128, 0:64]")),
        ("x[:, 0:64]", Ap("x", ((None, None, None), (0, 64, None)), "x[:, 0:64]")),
        ("x[0:128:2, :]", Ap("x", ((0, 128, 2), (None, None, None)), "x[0:128:2, :]")),
        ("x [ -4 : , ::-1 ]", Ap("x", ((-4, None, None), (None, None, -1)), "x [ -4 : , ::-1 ]")),
    ],
)
def test_parse_ap(text, expected):
    assert parse_ap(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "x[0:a]",
        "x[1:2:3:4]",
        "x[0:1",
        "x]",
        "x[]",
        "x[0,,1]",
        "1x",
        "x y",
        "x[0][1]",
        "x[[0]]",
        "",
        "x[1.5]",
        "x.y",
        "x[0:128]extra",
        "x[0_0]",
        "x[*]",
        "x[*0]",
        "x[*-2]",
    ],
)
def test_parse_ap_errors(text):
    with pytest.raises(TraceError) as info:
        parse_ap(text, "instructions[0].src", source="t.yaml", line=7)
    msg = str(info.value)
    assert msg.startswith("t.yaml:7: instructions[0].src: bad ")
    assert msg.endswith(
        "; expected name or name[start:stop, ...] with integer start, stop, step (each optional),"
        " or *n for a broadcast dim of n"
    )


def test_parse_instruction_for_builders():
    d = {"op": "matmul", "stationary": "a", "moving": "b[0:128, :]", "dst": "c"}
    ins = parse_instruction(d, 3, "kernels.k.instructions[3]", line=9)
    assert ins == Matmul(
        index=3,
        line=9,
        engine=Engine.TENSOR,
        stationary=Ap("a", (), "a"),
        moving=Ap("b", ((0, 128, None), (None, None, None)), "b[0:128, :]"),
        dst=Ap("c", (), "c"),
    )
    dma = parse_instruction({"op": "dma_copy", "src": "a", "dst": "b", "engine": "dma"}, 0, "")
    assert dma.engine == Engine.DMA and dma.line == 0
    with pytest.raises(TraceError) as info:
        parse_instruction(d, 3, "kernels.k.instructions[3]", names={"c", "a"}, source="api")
    assert str(info.value) == (
        "api:0: kernels.k.instructions[3].moving: unknown tile or tensor 'b'; expected one of a, c"
    )


ERRORS = [
    # instructions
    (
        TILE + "  - {op: matmull, stationary: t, moving: t, dst: t}\n",
        "t.yaml:7: instructions[0].op: unknown op 'matmull' (did you mean 'matmul'?); "
        "expected one of dma_copy, matmul,",
    ),
    (TILE + "  - {dst: t}\n", "t.yaml:7: instructions[0]: missing key 'op'; expected one of"),
    (TILE + "  - [op, memset]\n", "t.yaml:7: instructions[0]: got a list; expected an instruction"),
    (
        TILE + "  - {op: memset, dst: t, valu: 1}\n",
        "t.yaml:7: instructions[0].valu: unknown field 'valu' (did you mean 'value'?); "
        "expected fields of memset: dst, value (and engine, wait, signal)",
    ),
    (
        TILE + "  - {op: matmul, stationary: t, dst: t}\n",
        "t.yaml:7: instructions[0]: matmul is missing its field 'moving'; "
        "expected the required fields stationary, moving, dst",
    ),
    (
        TILE + "  - {op: matmul, stationary: x_tt, moving: t, dst: t}\n",
        "t.yaml:7: instructions[0].stationary: unknown tile or tensor 'x_tt'; expected one of t, x",
    ),
    (
        TILE + "  - {op: matmul, stationary: t, moving: t, dst: 't[0:a]'}\n",
        "t.yaml:7: instructions[0].dst: bad index '0:a' in 't[0:a]'; expected name or "
        "name[start:stop, ...]",
    ),
    (
        TILE + "  - {op: matmul, stationary: t, moving: t, dst: 't[0:1'}\n",
        "t.yaml:7: instructions[0].dst: bad operand 't[0:1'; expected name or name[start:stop",
    ),
    (
        TILE + "  - {op: matmul, stationary: 3, moving: t, dst: t}\n",
        "t.yaml:7: instructions[0].stationary: got 3; expected a tile or tensor name",
    ),
    (
        TILE + "  - {op: matmul, stationary: t, moving: t, dst: t, accumulate: 'yes'}\n",
        "t.yaml:7: instructions[0].accumulate: got 'yes'; expected true or false",
    ),
    (
        TILE + "  - {op: activation, func: gleu, src: t, dst: t}\n",
        "t.yaml:7: instructions[0].func: got 'gleu' (did you mean 'gelu'?); expected one of",
    ),
    (
        TILE + "  - {op: activation, func: exp, src: t, dst: t, scale: true}\n",
        "t.yaml:7: instructions[0].scale: got true; expected a number or a tile or tensor name",
    ),
    (
        TILE + "  - {op: memset, dst: t, value: '1'}\n",
        "t.yaml:7: instructions[0].value: got '1'; expected a number",
    ),
    (
        TILE + "  - {op: dma_copy, src: x, dst: t, queue: -1}\n",
        "t.yaml:7: instructions[0].queue: got -1; expected an integer >= 0",
    ),
    (
        TILE + "  - {op: tensor_reduce, alu: add, src: t, dst: t, axis: [1, x]}\n",
        "t.yaml:7: instructions[0].axis[1]: got 'x'; expected an axis (integer)",
    ),
    (
        TILE + "  - {op: matmul, stationary: t, moving: t, dst: t, engine: vector}\n",
        "t.yaml:7: instructions[0].engine: matmul cannot run on engine 'vector'; "
        "expected one of tensor",
    ),
    (
        TILE + "  - {op: tensor_copy, src: t, dst: t, engine: scalr}\n",
        "t.yaml:7: instructions[0].engine: tensor_copy cannot run on engine 'scalr' (did you mean "
        "'scalar'?); expected one of vector, scalar, gpsimd",
    ),
    (
        TILE + "  - {op: memset, dst: t, signal: {s: 0}}\n",
        "t.yaml:7: instructions[0].signal.s: got 0; expected an increment (an integer >= 1)",
    ),
    (
        TILE + "  - {op: memset, dst: t, signal: {s: true}}\n",
        "t.yaml:7: instructions[0].signal.s: got true; expected an increment",
    ),
    (
        TILE + "  - {op: memset, dst: t, wait: {s: -1}}\n",
        "t.yaml:7: instructions[0].wait.s: got -1; expected a value to wait for (an integer >= 0)",
    ),
    (
        TILE + "  - {op: memset, dst: t, wait: [s]}\n",
        "t.yaml:7: instructions[0].wait: got a list; expected {semaphore: a value to wait for}",
    ),
]


@pytest.mark.parametrize("text, start", ERRORS)
def test_errors_name_file_line_and_key(text, start):
    assert error(text).startswith(start)


def test_block_style_instruction_errors_point_at_the_key_line():
    text = TILE + "  - op: activation\n    func: exp\n    src: t\n    dst: t\n    bias: 'u[0]'\n"
    assert error(text).startswith("t.yaml:11: instructions[0].bias: unknown tile or tensor 'u'")


FIELD_VALUES = st.sampled_from(
    [
        None,
        0,
        1,
        -1,
        2.5,
        True,
        False,
        "",
        " ",
        "t",
        "x",
        "u",
        "t[0:2]",
        "t[0:a]",
        "add",
        "gelu",
        "max",
        "scalar",
        "gpsimd",
        [1],
        [],
        [1, "a"],
        {"s": 1},
        {"s": 0},
        {"s": True},
        {"": 1},
        {"s": -1},
        {1: 1},
    ]
)
FIELDS = st.sampled_from(
    [
        "src",
        "dst",
        "src0",
        "src1",
        "alu",
        "func",
        "scale",
        "value",
        "axis",
        "queue",
        "engine",
        "wait",
        "signal",
        "accumulate",
        "stationary",
        "moving",
        "op0",
        "operand0",
        "predicate",
        "on_true",
        "on_false",
        "bogus",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(INSTRUCTIONS)), st.dictionaries(FIELDS, FIELD_VALUES, max_size=6))
def test_any_mapping_gives_an_instruction_or_one_line_error(op, fields):
    d = {"op": op, **fields}
    try:
        ins = parse_instruction(d, 3, "i", names={"t", "x"}, source="f", line=9)
    except TraceError as e:
        msg = str(e)
        assert msg.startswith("f:9: i") and "\n" not in msg and "; expected " in msg, msg
        return
    assert isinstance(ins, INSTRUCTIONS[op]) and (ins.index, ins.line) == (3, 9)
    for key, value in fields.items():
        got = getattr(ins, key, None)
        if key == "engine":
            assert value is None or got.label == value
        elif key in ("wait", "signal"):
            assert got == tuple(value.items())
        elif isinstance(got, Ap):
            assert got == parse_ap(value)
        elif value is not None:
            assert got == (tuple(value) if isinstance(value, list) else value)


def test_new_instruction_is_the_dataclass_built_by_its_init():
    from trnsim.isa import TensorCopy
    from trnsim.trace.instructions import new_instruction

    p, a, b = Ap("p", ((0, 128, None),)), Ap("a"), Ap("b")
    fields = {"dst": p, "stationary": a, "moving": b, "index": 4, "engine": Engine.TENSOR}
    assert new_instruction(Matmul, dict(fields)) == Matmul(**fields)
    del fields["engine"]  # a field left out takes the parser's default: engine, the class's own
    assert new_instruction(Matmul, fields).engine is Engine.TENSOR
    copy = {"dst": Ap("x"), "src": Ap("y"), "wait": (("s", 1),), "engine": Engine.SCALAR}
    assert new_instruction(TensorCopy, dict(copy)) == TensorCopy(**copy)
    with pytest.raises(TypeError, match="Matmul has no field nope"):
        new_instruction(Matmul, {**fields, "nope": 1})


def test_with_fields_is_dataclasses_replace():
    import dataclasses

    from trnsim.trace.instructions import with_fields

    ins = Matmul(index=2, dst=Ap("p"), stationary=Ap("a"), moving=Ap("b"), wait=(("s", 1),))
    new = with_fields(ins, {"moving": Ap("c"), "index": 7})
    assert new == dataclasses.replace(ins, moving=Ap("c"), index=7) and new is not ins
    assert ins.moving == Ap("b") and ins.index == 2  # the original is left as it was
