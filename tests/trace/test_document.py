"""trace.document: the TRACE_FORMAT.md examples, the top level and kernels (shorthands,
per_core), and one exact error per way the top level or a kernel can be wrong; plus a fuzz test:
any mutation of a valid trace gives a Program or a one-line TraceError."""

import copy
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.trace.helpers import (
    GEMM,
    GEMM_TENSORS,
    MLP,
    STREAMS,
    TILE,
    TOP,
    K,
    T,
    error,
    line,
    parse,
)
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.inputs import load as load_module
from trnsim.isa import Activation, Ap, DmaCopy, Engine, Matmul, TensorCopy
from trnsim.trace import load, loads
from trnsim.trace.program import (
    CoreProgram,
    KernelSpec,
    OpSpec,
    Program,
    Step,
    StreamSpec,
    TensorSpec,
    TileSpec,
)

BF16, F32 = dtype("bfloat16"), dtype("float32")


def test_example_top_level_and_tensors():
    p = parse(TOP)
    t = {n: line(TOP, f"  {n}:") for n in ("x", "w", "y", "host_x", "q", "q3")}
    assert p == Program(
        name="gemm-bf16",
        chip="trn2",
        seed=0,
        mode="functional",
        lnc=2,
        outputs=["y"],
        tensors={
            "x": TensorSpec("x", (4096, 8192), BF16, "normal", "hbm", None, t["x"]),
            "w": TensorSpec("w", (8192, 8192), BF16, "normal", "hbm", None, t["w"]),
            "y": TensorSpec("y", (4096, 8192), BF16, None, "hbm", None, t["y"]),
            "host_x": TensorSpec("host_x", (4096, 8192), BF16, "normal", "host", None, t["host_x"]),
            "q": TensorSpec("q", (2048, 8192), BF16, None, "hbm", None, t["q"]),
            "q3": TensorSpec("q3", (2048, 64, 128), BF16, None, "hbm", "q", t["q3"]),
        },
        kernels={},
        streams=[StreamSpec("default", 0, [])],
        timing=[],
        source="t.yaml",
    )
    assert list(p.tensors) == ["x", "w", "y", "host_x", "q", "q3"]


def test_example_high_level_kernel():
    text = "trnsim: 1\n" + MLP
    p = parse(text)
    assert p.kernels == {
        "mlp": KernelSpec(
            "mlp",
            ops=[
                OpSpec("matmul", {"a": "x", "b": "w", "out": "h"}, line(text, "matmul")),
                OpSpec("gelu", {"x": "h", "out": "h"}, line(text, "gelu")),
                OpSpec("add", {"a": "h", "b": "bias", "out": "h"}, line(text, "add:")),
                OpSpec("softmax", {"x": "h", "out": "p", "dim": -1}, line(text, "softmax")),
            ],
            line=3,
        )
    }
    assert not p.kernels["mlp"].low_level
    assert type(p.kernels["mlp"].ops[0].args) is dict
    assert p.streams == [StreamSpec("default", 0, [Step("launch", "mlp")])]


def test_example_low_level_kernel():
    text = GEMM_TENSORS + GEMM
    p = parse(text)
    k = p.kernels["tile_gemm"]
    assert k.low_level and k.line == line(text, "tile_gemm:") and len(k.per_core) == 1
    tl = {n: line(text, f"{n}:  {{memory") for n in ("x_t", "w_t", "acc", "o_t")}
    first = line(text, "op: dma_copy")
    assert k.per_core[0] == CoreProgram(
        tiles={
            "x_t": TileSpec("x_t", "sbuf", (128, 128), BF16, None, tl["x_t"]),
            "w_t": TileSpec("w_t", "sbuf", (128, 512), BF16, None, tl["w_t"]),
            "acc": TileSpec("acc", "psum", (128, 512), F32, None, tl["acc"]),
            "o_t": TileSpec("o_t", "sbuf", (128, 512), BF16, None, tl["o_t"]),
        },
        instructions=[
            DmaCopy(
                index=0,
                line=first,
                engine=Engine.DMA,
                signal=(("ld", 1),),
                src=Ap("xT", ((0, 128, None), (0, 128, None)), "xT[0:128, 0:128]"),
                dst=Ap("x_t", (), "x_t"),
                queue=0,
            ),
            DmaCopy(
                index=1,
                line=first + 1,
                engine=Engine.DMA,
                signal=(("ld", 1),),
                src=Ap("w", ((0, 128, None), (0, 512, None)), "w[0:128, 0:512]"),
                dst=Ap("w_t", (), "w_t"),
                queue=1,
            ),
            Matmul(
                index=2,
                line=first + 2,
                engine=Engine.TENSOR,
                wait=(("ld", 2),),
                signal=(("mm", 1),),
                stationary=Ap("x_t", (), "x_t"),
                moving=Ap("w_t", (), "w_t"),
                dst=Ap("acc", (), "acc"),
                accumulate=False,
            ),
            Activation(
                index=3,
                line=first + 3,
                engine=Engine.SCALAR,
                wait=(("mm", 1),),
                signal=(("act", 1),),
                func="gelu",
                src=Ap("acc", (), "acc"),
                dst=Ap("o_t", (), "o_t"),
            ),
            DmaCopy(
                index=4,
                line=first + 4,
                engine=Engine.DMA,
                wait=(("act", 1),),
                src=Ap("o_t", (), "o_t"),
                dst=Ap("y", ((0, 128, None), (0, 512, None)), "y[0:128, 0:512]"),
                queue=0,
            ),
        ],
    )


def test_example_streams_and_timing():
    text = (
        TOP.replace(
            "  q:",
            "  xT: {shape: [8192, 4096], dtype: bfloat16}\n"
            "  host_y: {shape: [4096, 8192], dtype: bfloat16, on: host}\n  q:",
        )
        + MLP
        + GEMM
        + STREAMS
    )
    p = parse(text)
    assert list(p.kernels) == ["mlp", "tile_gemm"]
    L = lambda needle: line(text, needle)  # noqa: E731
    assert p.streams == [
        StreamSpec(
            "compute",
            0,
            [
                Step("record", "start_step", L("record: start_step")),
                Step("copy", (Ap("host_x", (), "host_x"), Ap("x", (), "x")), L("src: host_x")),
                Step("launch", "mlp", L("launch: mlp")),
                Step("record", "done_mlp", L("record: done_mlp")),
            ],
            L("name: compute"),
        ),
        StreamSpec(
            "side",
            1,
            [
                Step("wait", "done_mlp", L("wait: done_mlp")),
                Step("launch", "tile_gemm", L("launch: tile_gemm")),
                Step("copy", (Ap("y", (), "y"), Ap("host_y", (), "host_y")), L("src: y,")),
                Step("synchronize", None, L("- synchronize")),
            ],
            L("name: side"),
        ),
    ]
    assert p.timing == [("start_step", "done_mlp")]


# ----------------------------------------------------------------------------------------------
# shorthands and per_core


def test_ops_shorthand_is_kernel_main_launched_after_named_kernels():
    p = parse("""\
        trnsim: 1
        kernels:
          first: {ops: [{relu: {x: a, out: a}}]}
        ops:
          - exp: {x: a, out: b}
        """)
    assert list(p.kernels) == ["first", "main"]
    assert p.kernels["main"] == KernelSpec(
        "main", ops=[OpSpec("exp", {"x": "a", "out": "b"}, 5)], line=4
    )
    assert p.streams == [
        StreamSpec("default", 0, [Step("launch", "first"), Step("launch", "main")])
    ]


def test_instructions_shorthand_with_tiles():
    p = parse("""\
        trnsim: 1
        tiles:
          t: {memory: sbuf, shape: [128, 4], dtype: float32, init: ones}
        instructions:
          - {op: memset, dst: t, value: 2}
          - op: tensor_copy
            engine: scalar
            src: t
            dst: "t[:, 0:2]"
        """)
    (core,) = p.kernels["main"].per_core
    assert core.tiles == {"t": TileSpec("t", "sbuf", (128, 4), F32, "ones", 3)}
    assert core.instructions[1] == TensorCopy(
        index=1,
        line=6,
        engine=Engine.SCALAR,
        src=Ap("t", (), "t"),
        dst=Ap("t", ((None, None, None), (0, 2, None)), "t[:, 0:2]"),
    )
    assert p.streams[0].steps == [Step("launch", "main")]


PER_CORE = """\
trnsim: 1
lnc: 2
tensors:
  y: {shape: [256, 64], dtype: float32}
kernels:
  k:
    tiles:
      t: {memory: sbuf, shape: [128, 64], dtype: float32}
    per_core:
      - - {op: memset, dst: t, value: 1, signal: {s: 1}}
        - {op: dma_copy, src: t, dst: "y[0:128, :]", wait: {s: 1}}
      - tiles:
          u: {memory: sbuf, shape: [128, 64], dtype: float32}
        instructions:
          - {op: memset, dst: u, value: 2}
          - {op: dma_copy, src: u, dst: "y[128:256, :]"}
"""


def test_per_core_lists_and_mappings_with_private_tile_copies():
    p = parse(PER_CORE)
    c0, c1 = p.kernels["k"].per_core
    assert list(c0.tiles) == ["t"] and list(c1.tiles) == ["t", "u"]
    assert c0.tiles["t"] == c1.tiles["t"] and c0.tiles["t"] is not c1.tiles["t"]
    assert [i.OP for i in c0.instructions] == ["memset", "dma_copy"]
    assert c1.instructions[1].dst == Ap(
        "y", ((128, 256, None), (None, None, None)), "y[128:256, :]"
    )
    assert c1.instructions[1].index == 1 and c1.instructions[1].line == 16


# ----------------------------------------------------------------------------------------------
# errors of the top level and of kernels

ERRORS = [
    # top level
    ("name: x\n", "t.yaml:1: top level: missing key 'trnsim'; expected trnsim: 1"),
    ("- 1\n", "t.yaml:1: top level: got a list; expected a mapping of top-level keys"),
    ("", "t.yaml:1: top level: got null; expected a mapping"),
    ("trnsim: 2\n", "t.yaml:1: trnsim: unsupported format version 2; expected 1"),
    ("trnsim: true\n", "t.yaml:1: trnsim: unsupported format version true; expected 1"),
    (
        T + "tensor: {}\n",
        "t.yaml:2: tensor: unknown key 'tensor' (did you mean 'tensors'?); "
        "expected one of trnsim, name,",
    ),
    (T + "mode: fast\n", "t.yaml:2: mode: got 'fast'; expected one of functional, timing"),
    (T + "lnc: 0\n", "t.yaml:2: lnc: got 0; expected an integer >= 1"),
    (T + "seed: -1\n", "t.yaml:2: seed: got -1; expected an integer >= 0"),
    (T + "seed: 1.5\n", "t.yaml:2: seed: got 1.5; expected an integer >= 0"),
    (T + "chip: [trn2]\n", "t.yaml:2: chip: got a list; expected a chip name"),
    (T + "name: {a: 1}\n", "t.yaml:2: name: got a mapping with key a; expected free text"),
    (T + "a: b: c\n", "t.yaml:2: syntax: mapping values are not allowed here (column 5)"),
    (T + "seed: 1\nseed: 2\n", "t.yaml:3: top level: duplicate key 'seed'"),
    # kernels
    (
        K + "    ops: [{relu: {x: a, out: a}}]\n    instructions: []\n",
        "t.yaml:5: kernels.k.instructions: a kernel with ops: cannot also have instructions:",
    ),
    (K + "    tiles: {}\n", "t.yaml:3: kernels.k: a kernel needs ops:, instructions: or per_core:"),
    (
        K + "    instructions: []\n    per_core: [[]]\n",
        "t.yaml:5: kernels.k.per_core: a kernel cannot have both instructions: and per_core:",
    ),
    (K + "    op: []\n", "t.yaml:4: kernels.k.op: unknown key 'op' (did you mean 'ops'?)"),
    (T + "kernels:\n  k: [1]\n", "t.yaml:3: kernels.k: got a list; expected {ops: [...]}"),
    (K + "    ops: []\n", "t.yaml:4: kernels.k.ops: got an empty list; expected a list of ops"),
    (
        K + "    ops:\n      - relu: {x: a}\n        exp: {x: a}\n",
        "t.yaml:5: kernels.k.ops[0]: got a mapping with keys relu, exp; "
        "expected a single-key mapping",
    ),
    (
        K + "    ops:\n      - relu\n",
        "t.yaml:5: kernels.k.ops[0]: got 'relu'; expected a single-key mapping",
    ),
    (
        K + "    ops:\n      - relu: [a]\n",
        "t.yaml:5: kernels.k.ops[0].relu: got a list; expected a mapping of the op's arguments",
    ),
    (K + "    ops:\n      - 3: {x: a}\n", "t.yaml:5: kernels.k.ops[0]: got 3; expected a op name"),
    (
        T + "kernels:\n  main: {ops: [{relu: {x: a, out: a}}]}\nops: [{exp: {x: a, out: a}}]\n",
        "t.yaml:4: ops: the ops: shorthand is kernel 'main', which kernels: also defines",
    ),
    (
        T + "ops: [{exp: {x: a}}]\ninstructions: []\n",
        "t.yaml:3: instructions: both ops: and instructions: at the top level",
    ),
    (
        T + "lnc: 2\nkernels: {k: {per_core: [[], [], []]}}\n",
        "t.yaml:3: kernels.k.per_core: 3 entries; expected 1 to 2 entries",
    ),
    (
        T + "lnc: 1\nkernels: {k: {per_core: [[], []]}}\n",
        "t.yaml:3: kernels.k.per_core: 2 entries; expected 1 to 1 entries",
    ),
    (
        K + "    tiles: {t: {memory: sbuf, shape: [1], dtype: int8}}\n    per_core:\n"
        "      - tiles: {t: {memory: sbuf, shape: [1], dtype: int8}}\n        instructions: []\n",
        "t.yaml:6: kernels.k.per_core[0].tiles.t: tile 't' is also in the kernel's shared tiles:",
    ),
    (
        K + "    per_core:\n      - tiles: {}\n",
        "t.yaml:5: kernels.k.per_core[0]: missing key 'instructions'",
    ),
    (
        K + "    per_core:\n      - {instruction: []}\n",
        "t.yaml:5: kernels.k.per_core[0].instruction: unknown key 'instruction' "
        "(did you mean 'instructions'?)",
    ),
    (
        K + "    tiles: {t: {memory: sbuf, shape: [1], dtype: int8}}\n    per_core:\n"
        "      - [{op: memset, dst: t, signal: {s: 1}}]\n"
        "      - [{op: memset, dst: t, wait: {s: 1}}]\n",
        "t.yaml:7: kernels.k.per_core[1][0].wait.s: semaphore 's' is waited on but never signalled; "
        "expected an instruction of this core with signal: {s: 1}",
    ),
    (
        TILE + "  - {op: memset, dst: t}\ninstructions: []\n",
        "t.yaml:8: top level: duplicate key 'instructions'",
    ),
]


@pytest.mark.parametrize("text, start", ERRORS)
def test_errors_name_file_line_and_key(text, start):
    assert error(text).startswith(start)


def test_the_example_message_of_the_brief():
    text = GEMM_TENSORS + GEMM.replace("stationary: x_t", "stationary: x_tt")
    assert error(text) == (
        f"t.yaml:{line(text, 'x_tt')}: kernels.tile_gemm.instructions[2].stationary: unknown "
        "tile or tensor 'x_tt' (did you mean 'x_t'?); expected one of x_t, w_t, acc, o_t, xT, w, y"
    )


def test_null_sections_count_as_absent():
    p = parse("trnsim: 1\ntensors:\nkernels: ~\nstreams:\ntiming:\noutputs:\n")
    assert p.tensors == {} and p.kernels == {} and p.timing == [] and p.outputs == []
    assert p.streams == [StreamSpec("default", 0, [])]


def _alias_bomb(levels: int) -> str:
    text = "trnsim: 1\nops:\n  - softmax:\n      x: a\n      out: a\n      dim:\n"
    text += "        - &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
    for i in range(1, levels):
        text += f"        - &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n"
    return text


def test_aliases_in_op_arguments_stay_shared():
    dim = loads(_alias_bomb(5)).kernels["main"].ops[0].args["dim"]  # 10**5 nodes when expanded
    assert dim[4][0] is dim[3] and type(dim[4]) is list


@pytest.mark.parametrize("libyaml", [True, False])
def test_alias_bombs_are_refused_while_reading(monkeypatch, libyaml):
    """Level k's anchor has s_k = 10 + 10 s_(k-1) nodes below it (s_0 = 10, s_5 = 1,111,110);
    levels 1-5 add 1,234,500 nodes, and the 8th use of level 5 in level 6 (line 13) crosses
    10,000,000."""
    monkeypatch.setattr(load_module, "LIBYAML", libyaml)
    with pytest.raises(TraceError) as e:
        loads(_alias_bomb(9))
    assert str(e.value) == (
        "<string>:13: syntax: aliases expand the document by more than 10000000 nodes; "
        "expected at most 10000000 nodes added by aliases (each use of an anchor counts every "
        "node below it)"
    )


def test_load_errors(tmp_path):
    with pytest.raises(TraceError, match=r"nope\.yaml:1: trace: cannot read the file"):
        load(tmp_path / "nope.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(TraceError, match=r"bin\.yaml:1: trace: cannot read the file"):
        load(tmp_path / "bin.yaml")


# ----------------------------------------------------------------------------------------------
# fuzz: any mutation of a valid trace gives a Program or a one-line TraceError

BASE = yaml.safe_load(
    TOP.replace(
        "  q:",
        "  xT: {shape: [8192, 4096], dtype: bfloat16}\n"
        "  host_y: {shape: [4096, 8192], dtype: bfloat16, on: host}\n"
        "  q:",
    )
    + MLP
    + GEMM
    + STREAMS
)
BASE["tensors"]["host_x"]["on"] = "host"  # safe_load reads the key `on` as True
BASE["tensors"]["host_y"]["on"] = "host"
for _name in ("host_x", "host_y"):
    BASE["tensors"][_name].pop(True)
BASE["kernels"]["pc"] = {
    "tiles": {"t": {"memory": "sbuf", "shape": [4, 4], "dtype": "int8"}},
    "per_core": [
        [
            {"op": "iota", "dst": "t", "signal": {"s": 1}},
            {
                "op": "tensor_copy",
                "src": "t",
                "dst": "t[:, 0:2]",
                "engine": "gpsimd",
                "wait": {"s": 1},
            },
        ],
        {"instructions": [{"op": "memset", "dst": "t"}]},
    ],
}

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-3, 2**70)
    | st.floats()
    | st.sampled_from(
        [
            "x",
            "t",
            "x[0:1]",
            "x[",
            "normal",
            "sbuf",
            "matmul",
            "synchronize",
            "done_mlp",
            "mlp",
            "",
            "1e3",
            "main",
        ]
    )
    | st.text(max_size=8)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=6) | st.integers(), inner, max_size=3)
    ),
    max_leaves=6,
)


def _containers(node, path=()):
    yield path, node
    children = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, child in children:
        yield from _containers(child, (*path, key))


@st.composite
def mutated_traces(draw):
    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 4))):
        spots = [(p, n) for p, n in _containers(doc) if isinstance(n, (dict, list)) and n]
        _, node = draw(st.sampled_from(spots))
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        key = draw(st.sampled_from(keys))
        action = draw(st.sampled_from(["drop", "replace", "duplicate"]))
        if action == "drop":
            del node[key]
        elif action == "replace":
            node[key] = draw(VALUES)
        elif isinstance(node, list):
            node.insert(key, copy.deepcopy(node[key]))
        else:
            node[draw(st.sampled_from(["x", "shape", "op", "name", "do", str(key) + "2"]))] = (
                copy.deepcopy(node[key])
            )
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    lines = text.splitlines()
    edit = draw(st.sampled_from(["none", "none", "dup_line", "cut", "insert"]))
    i = draw(st.integers(0, len(lines) - 1))
    if edit == "dup_line":
        lines.insert(i, lines[i])
    elif edit == "cut":
        lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
    elif edit == "insert":
        lines.insert(i, draw(st.text(max_size=10)))
    return "\n".join(lines) + "\n"


def test_base_of_the_fuzz_is_valid():
    text = yaml.safe_dump(BASE, sort_keys=False)
    p = loads(text)
    assert set(p.kernels) == {"mlp", "tile_gemm", "pc"} and len(p.streams) == 2


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_traces())
def test_fuzz_any_input_gives_program_or_trace_error(text):
    try:
        result = loads(text, source="f.yaml")
    except TraceError as e:
        msg = str(e)
        assert re.match(r"^f\.yaml:\d+: \S", msg), msg
        assert len(msg.splitlines()) == 1 and "; expected " in msg, msg
    else:
        assert isinstance(result, Program)
