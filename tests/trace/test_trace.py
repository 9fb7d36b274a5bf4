"""trace: the TRACE_FORMAT.md examples, shorthands, per_core, views, and one exact error per way a
trace can be wrong (file, line, key path), plus a fuzz test: any input -> Program or TraceError."""

import copy
import re
import textwrap
from dataclasses import replace

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.inputs.validate import Loc
from trnsim.isa import (
    INSTRUCTIONS,
    Activation,
    Ap,
    DmaCopy,
    Engine,
    Matmul,
    TensorCopy,
    TensorReduce,
    TensorScalar,
)
from trnsim.trace import check_semaphores, load, loads, parse_ap, parse_instruction, repeat
from trnsim.trace.instructions import fast_instruction, full_instruction
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


def line(text: str, needle: str) -> int:
    """The 1-based line of the first occurrence of `needle` in `text`."""
    return next(i + 1 for i, s in enumerate(text.splitlines()) if needle in s)


def parse(text: str, **kw) -> Program:
    return loads(textwrap.dedent(text), source="t.yaml", **kw)


def error(text: str, **kw) -> str:
    with pytest.raises(TraceError) as info:
        parse(text, **kw)
    msg = str(info.value)
    assert "\n" not in msg and "; expected " in msg
    return msg


def ap(text: str) -> Ap:
    return parse_ap(text)


# ----------------------------------------------------------------------------------------------
# the examples of TRACE_FORMAT.md

TOP = """\
trnsim: 1                 # format version (required)
name: gemm-bf16           # free text
chip: trn2                # default chip config; `--chip` on the command line overrides
seed: 0                   # seeds every random init
mode: functional          # functional (compute values) | timing (shapes only, no values)
lnc: 2                    # optional: logical NeuronCore size (1 or 2); default from the chip config
outputs: [y]              # optional: tensors that `--out-dir DIR` saves
tensors:
  x:   {shape: [4096, 8192], dtype: bfloat16, init: normal}   # zeros | ones | random | normal
  w:   {shape: [8192, 8192], dtype: bfloat16, init: normal}
  y:   {shape: [4096, 8192], dtype: bfloat16}                  # no init: zeros
  host_x: {shape: [4096, 8192], dtype: bfloat16, init: normal, on: host}   # host memory
  q:   {shape: [2048, 8192], dtype: bfloat16}
  q3: {view: q, shape: [2048, 64, 128]}
"""

MLP = """\
kernels:
  mlp:
    ops:
      - matmul: {a: x, b: w, out: h}              # h = x @ w ; batched when ranks > 2
      - gelu:   {x: h, out: h}
      - add:    {a: h, b: bias, out: h}           # numpy broadcasting rules
      - softmax: {x: h, out: p, dim: -1}
"""

GEMM = """\
  tile_gemm:                                       # one 128 x 512 tile of y = x @ w
    tiles:                                         # on-chip buffers of this kernel
      x_t:  {memory: sbuf, shape: [128, 128], dtype: bfloat16}   # first dim = partitions
      w_t:  {memory: sbuf, shape: [128, 512], dtype: bfloat16}
      acc:  {memory: psum, shape: [128, 512], dtype: float32}
      o_t:  {memory: sbuf, shape: [128, 512], dtype: bfloat16}
    instructions:                                  # one list; each goes to its engine's queue
      - {op: dma_copy, src: "xT[0:128, 0:128]", dst: x_t, queue: 0, signal: {ld: 1}}
      - {op: dma_copy, src: "w[0:128, 0:512]", dst: w_t, queue: 1, signal: {ld: 1}}
      - {op: matmul, stationary: x_t, moving: w_t, dst: acc, accumulate: false, wait: {ld: 2}, signal: {mm: 1}}
      - {op: activation, func: gelu, src: acc, dst: o_t, wait: {mm: 1}, signal: {act: 1}}
      - {op: dma_copy, src: o_t, dst: "y[0:128, 0:512]", queue: 0, wait: {act: 1}}
"""  # noqa: E501

GEMM_TENSORS = """\
trnsim: 1
tensors:
  xT: {shape: [8192, 4096], dtype: bfloat16}
  w:  {shape: [8192, 8192], dtype: bfloat16}
  y:  {shape: [4096, 8192], dtype: bfloat16}
kernels:
"""

STREAMS = """\
streams:
  - name: compute
    core: 0                                   # logical NeuronCore (0 .. chip cores / lnc - 1)
    do:
      - record: start_step                    # an event
      - copy: {src: host_x, dst: x}           # host -> device
      - launch: mlp
      - record: done_mlp
  - name: side
    core: 1
    do:
      - wait: done_mlp                        # this stream waits for the event
      - launch: tile_gemm
      - copy: {src: y, dst: host_y}           # device -> host
      - synchronize                           # the host waits here for this stream
timing:                                        # optional: report elapsed time between events
  - {from: start_step, to: done_mlp}
"""


def test_example_top_level_and_tensors():
    p = parse(TOP)
    t = {n: line(TOP, f"  {n}:") for n in ("x", "w", "y", "host_x", "q", "q3")}
    assert p == Program(
        name="gemm-bf16", chip="trn2", seed=0, mode="functional", lnc=2, outputs=["y"],
        tensors={
            "x": TensorSpec("x", (4096, 8192), BF16, "normal", "hbm", None, t["x"]),
            "w": TensorSpec("w", (8192, 8192), BF16, "normal", "hbm", None, t["w"]),
            "y": TensorSpec("y", (4096, 8192), BF16, None, "hbm", None, t["y"]),
            "host_x": TensorSpec("host_x", (4096, 8192), BF16, "normal", "host", None,
                                 t["host_x"]),
            "q": TensorSpec("q", (2048, 8192), BF16, None, "hbm", None, t["q"]),
            "q3": TensorSpec("q3", (2048, 64, 128), BF16, None, "hbm", "q", t["q3"]),
        },
        kernels={}, streams=[StreamSpec("default", 0, [])], timing=[], source="t.yaml",
        base_dir=".")
    assert list(p.tensors) == ["x", "w", "y", "host_x", "q", "q3"]


def test_example_high_level_kernel():
    text = "trnsim: 1\n" + MLP
    p = parse(text)
    assert p.kernels == {"mlp": KernelSpec("mlp", ops=[
        OpSpec("matmul", {"a": "x", "b": "w", "out": "h"}, line(text, "matmul")),
        OpSpec("gelu", {"x": "h", "out": "h"}, line(text, "gelu")),
        OpSpec("add", {"a": "h", "b": "bias", "out": "h"}, line(text, "add:")),
        OpSpec("softmax", {"x": "h", "out": "p", "dim": -1}, line(text, "softmax")),
    ], line=3)}
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
            DmaCopy(index=0, line=first, engine=Engine.DMA, signal=(("ld", 1),),
                    src=Ap("xT", ((0, 128, None), (0, 128, None)), "xT[0:128, 0:128]"),
                    dst=Ap("x_t", (), "x_t"), queue=0),
            DmaCopy(index=1, line=first + 1, engine=Engine.DMA, signal=(("ld", 1),),
                    src=Ap("w", ((0, 128, None), (0, 512, None)), "w[0:128, 0:512]"),
                    dst=Ap("w_t", (), "w_t"), queue=1),
            Matmul(index=2, line=first + 2, engine=Engine.TENSOR, wait=(("ld", 2),),
                   signal=(("mm", 1),), stationary=Ap("x_t", (), "x_t"),
                   moving=Ap("w_t", (), "w_t"), dst=Ap("acc", (), "acc"), accumulate=False),
            Activation(index=3, line=first + 3, engine=Engine.SCALAR, wait=(("mm", 1),),
                       signal=(("act", 1),), func="gelu", src=Ap("acc", (), "acc"),
                       dst=Ap("o_t", (), "o_t")),
            DmaCopy(index=4, line=first + 4, engine=Engine.DMA, wait=(("act", 1),),
                    src=Ap("o_t", (), "o_t"),
                    dst=Ap("y", ((0, 128, None), (0, 512, None)), "y[0:128, 0:512]"), queue=0),
        ])


def test_example_streams_and_timing():
    text = (TOP.replace("  q:", "  xT: {shape: [8192, 4096], dtype: bfloat16}\n"
                        "  host_y: {shape: [4096, 8192], dtype: bfloat16, on: host}\n  q:")
            + MLP + GEMM + STREAMS)
    p = parse(text)
    assert list(p.kernels) == ["mlp", "tile_gemm"]
    L = lambda needle: line(text, needle)  # noqa: E731
    assert p.streams == [
        StreamSpec("compute", 0, [
            Step("record", "start_step", L("record: start_step")),
            Step("copy", (Ap("host_x", (), "host_x"), Ap("x", (), "x")), L("src: host_x")),
            Step("launch", "mlp", L("launch: mlp")),
            Step("record", "done_mlp", L("record: done_mlp")),
        ], L("name: compute")),
        StreamSpec("side", 1, [
            Step("wait", "done_mlp", L("wait: done_mlp")),
            Step("launch", "tile_gemm", L("launch: tile_gemm")),
            Step("copy", (Ap("y", (), "y"), Ap("host_y", (), "host_y")), L("src: y,")),
            Step("synchronize", None, L("- synchronize")),
        ], L("name: side")),
    ]
    assert p.timing == [("start_step", "done_mlp")]


# ----------------------------------------------------------------------------------------------
# shorthands, per_core, views, init files, instruction fields


def test_ops_shorthand_is_kernel_main_launched_after_named_kernels():
    p = parse("""\
        trnsim: 1
        kernels:
          first: {ops: [{relu: {x: a, out: a}}]}
        ops:
          - exp: {x: a, out: b}
        """)
    assert list(p.kernels) == ["first", "main"]
    assert p.kernels["main"] == KernelSpec("main", ops=[OpSpec("exp", {"x": "a", "out": "b"}, 5)],
                                           line=4)
    assert p.streams == [StreamSpec("default", 0, [Step("launch", "first"),
                                                   Step("launch", "main")])]


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
    assert core.instructions[1] == TensorCopy(index=1, line=6, engine=Engine.SCALAR,
                                              src=Ap("t", (), "t"),
                                              dst=Ap("t", ((None, None, None), (0, 2, None)),
                                                     "t[:, 0:2]"))
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
    assert c1.instructions[1].dst == Ap("y", ((128, 256, None), (None, None, None)),
                                        "y[128:256, :]")
    assert c1.instructions[1].index == 1 and c1.instructions[1].line == 16


def test_views_resolve_to_the_root_and_inherit():
    p = parse("""\
        trnsim: 1
        tensors:
          v2: {view: v1, shape: [4, 2, 8]}
          v1: {view: q, shape: [8, 8], dtype: bf16}
          q: {shape: [64], dtype: bfloat16, on: host}
          same: {view: q}
        """)
    assert p.tensors["v2"] == TensorSpec("v2", (4, 2, 8), BF16, None, "host", "q", 3)
    assert p.tensors["v1"].view == "q" and p.tensors["v1"].dtype == BF16
    assert p.tensors["same"].shape == (64,)
    assert list(p.tensors) == ["v2", "v1", "q", "same"]


def test_init_file_relative_to_the_trace(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(6, dtype=np.float64).reshape(2, 3))
    (tmp_path / "t.yaml").write_text(
        "trnsim: 1\ntensors:\n  x: {shape: [2, 3], dtype: bfloat16, init: {file: x.npy}}\n")
    p = load(tmp_path / "t.yaml")
    assert p.tensors["x"].init == ("file", str(tmp_path / "x.npy"))
    assert p.name == "t" and p.base_dir == str(tmp_path) and p.source == str(tmp_path / "t.yaml")


def test_init_file_errors(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((2, 3)))
    (tmp_path / "bad.npy").write_text("not numpy")
    head = "trnsim: 1\ntensors:\n  x: {shape: [3, 2], dtype: float32, init: {file: %s}}\n"
    assert error(head % "x.npy", base_dir=tmp_path) == (
        "t.yaml:3: tensors.x.init.file: the file holds shape [2, 3]; expected shape [3, 2]")
    assert error(head % "nope.npy", base_dir=tmp_path).startswith(
        f"t.yaml:3: tensors.x.init.file: no file '{tmp_path / 'nope.npy'}'; expected a .npy")
    assert error(head % "bad.npy", base_dir=tmp_path).startswith(
        f"t.yaml:3: tensors.x.init.file: cannot read '{tmp_path / 'bad.npy'}' (")
    assert error(head % "[1]", base_dir=tmp_path) == (
        "t.yaml:3: tensors.x.init.file: got a list; expected a path to a .npy file")


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
    assert i0 == TensorScalar(index=0, line=6, engine=Engine.VECTOR, src=Ap("a", (), "a"),
                              dst=Ap("a", (), "a"), op0="multiply", operand0=-2, op1="add",
                              operand1=Ap("s", (), "s"))
    assert i1 == TensorReduce(index=1, line=7, engine=Engine.VECTOR, alu="max",
                              src=Ap("a", ((None, None, None), -1, (None, None, 2)),
                                     "a[:, -1, ::2]"),
                              dst=Ap("s", (), "s"), axis=(1, 2))
    assert i2.axis == 1 and i2.engine == Engine.VECTOR
    assert i3.op1 is None and i3.operand0 == 1.5
    assert i3.signal == (("z", 2), ("b", 1))  # YAML order, not sorted


@pytest.mark.parametrize("text, expected", [
    ("x", Ap("x", (), "x")),
    ("  x_1  ", Ap("x_1", (), "x_1")),
    ("x[3]", Ap("x", (3,), "x[3]")),
    ("x[-1]", Ap("x", (-1,), "x[-1]")),
    ("x[0:128, 0:64]", Ap("x", ((0, 128, None), (0, 64, None)), "x[0:128, 0:64]")),
    ("x[:, 0:64]", Ap("x", ((None, None, None), (0, 64, None)), "x[:, 0:64]")),
    ("x[0:128:2, :]", Ap("x", ((0, 128, 2), (None, None, None)), "x[0:128:2, :]")),
    ("x [ -4 : , ::-1 ]", Ap("x", ((-4, None, None), (None, None, -1)), "x [ -4 : , ::-1 ]")),
])
def test_parse_ap(text, expected):
    assert parse_ap(text) == expected


@pytest.mark.parametrize("text", [
    "x[0:a]", "x[1:2:3:4]", "x[0:1", "x]", "x[]", "x[0,,1]", "1x", "x y", "x[0][1]", "x[[0]]",
    "", "x[1.5]", "x.y", "x[0:128]extra", "x[0_0]",
])
def test_parse_ap_errors(text):
    with pytest.raises(TraceError) as info:
        parse_ap(text, "instructions[0].src", source="t.yaml", line=7)
    msg = str(info.value)
    assert msg.startswith("t.yaml:7: instructions[0].src: bad ")
    assert msg.endswith("; expected name or name[start:stop, ...] with integer start, stop, "
                        "step (each optional)")


def test_parse_instruction_for_builders():
    d = {"op": "matmul", "stationary": "a", "moving": "b[0:128, :]", "dst": "c"}
    ins = parse_instruction(d, 3, "kernels.k.instructions[3]", line=9)
    assert ins == Matmul(index=3, line=9, engine=Engine.TENSOR, stationary=Ap("a", (), "a"),
                         moving=Ap("b", ((0, 128, None), (None, None, None)), "b[0:128, :]"),
                         dst=Ap("c", (), "c"))
    dma = parse_instruction({"op": "dma_copy", "src": "a", "dst": "b", "engine": "dma"}, 0, "")
    assert dma.engine == Engine.DMA and dma.line == 0
    with pytest.raises(TraceError) as info:
        parse_instruction(d, 3, "kernels.k.instructions[3]", names={"c", "a"}, source="api")
    assert str(info.value) == ("api:0: kernels.k.instructions[3].moving: unknown tile or tensor "
                               "'b'; expected one of a, c")


def test_check_semaphores_for_builders():
    ins = [parse_instruction({"op": "memset", "dst": "t", "signal": {"s": 1}}, 0, "", line=1),
           parse_instruction({"op": "memset", "dst": "t", "wait": {"s": 2}}, 1, "", line=2)]
    with pytest.raises(TraceError) as info:
        check_semaphores(ins, "kernels.k.instructions", source="api")
    assert str(info.value) == (
        "api:2: kernels.k.instructions[1].wait.s: semaphore 's' is waited on for 2 but its "
        "signals add up to only 1; expected signal increments of 's' summing to >= 2")
    check_semaphores(ins[:1])


# ----------------------------------------------------------------------------------------------
# errors: file, line, key path, message

T = "trnsim: 1\n"
TENS = T + "tensors:\n  x: {shape: [128, 64], dtype: float32}\n"
TILE = TENS + "tiles:\n  t: {memory: sbuf, shape: [128, 64], dtype: float32}\ninstructions:\n"
K = T + "kernels:\n  k:\n"

ERRORS = [
    # top level
    ("name: x\n", "t.yaml:1: top level: missing key 'trnsim'; expected trnsim: 1"),
    ("- 1\n", "t.yaml:1: top level: got a list; expected a mapping of top-level keys"),
    ("", "t.yaml:1: top level: got null; expected a mapping"),
    ("trnsim: 2\n", "t.yaml:1: trnsim: unsupported format version 2; expected 1"),
    ("trnsim: true\n", "t.yaml:1: trnsim: unsupported format version true; expected 1"),
    (T + "tensor: {}\n", "t.yaml:2: tensor: unknown key 'tensor' (did you mean 'tensors'?); "
                         "expected one of trnsim, name,"),
    (T + "mode: fast\n", "t.yaml:2: mode: got 'fast'; expected one of functional, timing"),
    (T + "lnc: 4\n", "t.yaml:2: lnc: got 4; expected 1 or 2"),
    (T + "seed: -1\n", "t.yaml:2: seed: got -1; expected an integer >= 0"),
    (T + "seed: 1.5\n", "t.yaml:2: seed: got 1.5; expected an integer >= 0"),
    (T + "chip: [trn2]\n", "t.yaml:2: chip: got a list; expected a chip name"),
    (T + "name: {a: 1}\n", "t.yaml:2: name: got a mapping with key a; expected free text"),
    (T + "a: b: c\n", "t.yaml:2: syntax: mapping values are not allowed here (column 5)"),
    (T + "seed: 1\nseed: 2\n", "t.yaml:3: top level: duplicate key 'seed'"),
    # tensors
    (T + "tensors: [x]\n", "t.yaml:2: tensors: got a list; expected a mapping of tensor name"),
    (T + "tensors:\n  x: [1, 2]\n", "t.yaml:3: tensors.x: got a list; expected {shape: [...]"),
    (T + "tensors:\n  x: {shape: [0], dtype: int8}\n",
     "t.yaml:3: tensors.x.shape[0]: got 0; expected a positive integer"),
    (T + "tensors:\n  x:\n    dtype: int8\n    shape:\n      - 4\n      - 2.0\n",
     "t.yaml:7: tensors.x.shape[1]: got 2.0; expected a positive integer"),
    (T + "tensors:\n  x: {shape: [true], dtype: int8}\n",
     "t.yaml:3: tensors.x.shape[0]: got true; expected a positive integer"),
    (T + "tensors:\n  x: {shape: '128', dtype: int8}\n",
     "t.yaml:3: tensors.x.shape: got '128'; expected a list of positive integers"),
    (T + "tensors:\n  x: {shape: [], dtype: int8}\n",
     "t.yaml:3: tensors.x.shape: got an empty list; expected a list of positive integers"),
    (T + "tensors:\n  x: {dtype: int8}\n",
     "t.yaml:3: tensors.x: missing key 'shape'; expected shape: a list of positive integers"),
    (T + "tensors:\n  x: {shape: [2]}\n",
     "t.yaml:3: tensors.x: missing key 'dtype'; expected one of float32, bfloat16"),
    (T + "tensors:\n  x: {shape: [2], dtype: bfloat61}\n",
     "t.yaml:3: tensors.x.dtype: unknown dtype 'bfloat61' (did you mean 'bfloat16'?); "
     "expected one of float32, bfloat16,"),
    (T + "tensors:\n  x: {shape: [2], dtype: [int8]}\n",
     "t.yaml:3: tensors.x.dtype: got a list; expected one of float32"),
    (T + "tensors:\n  x:\n    shape: [2]\n    dtype: int8\n    init: normall\n",
     "t.yaml:6: tensors.x.init: got 'normall' (did you mean 'normal'?); "
     "expected one of zeros, ones, random, normal, arange"),
    (T + "tensors:\n  x: {shape: [2], dtype: int8, init: 3}\n",
     "t.yaml:3: tensors.x.init: got 3; expected one of zeros, ones, random, normal, arange, or "
     "{file: name.npy}"),
    (T + "tensors:\n  x: {shape: [2], dtype: int8, init: {path: a.npy}}\n",
     "t.yaml:3: tensors.x.init.path: unknown key 'path'; expected one of file"),
    (T + "tensors:\n  x: {shape: [2], dtype: int8, on: gpu}\n",
     "t.yaml:3: tensors.x.on: got 'gpu'; expected one of hbm, host"),
    (T + "tensors:\n  x: {shape: [2], dtype: int8, shpe: 1}\n",
     "t.yaml:3: tensors.x.shpe: unknown key 'shpe' (did you mean 'shape'?); "
     "expected one of shape, dtype, init, on, view"),
    (T + "tensors:\n  1x: {shape: [2], dtype: int8}\n",
     "t.yaml:3: tensors.1x: tensor name '1x' is not an identifier"),
    (T + "tensors:\n  7: {shape: [2], dtype: int8}\n",
     "t.yaml:3: tensors.7: tensor name 7 is not an identifier"),
    # views
    (TENS + "  v: {view: xx, shape: [8192]}\n",
     "t.yaml:4: tensors.v.view: unknown tensor 'xx' (did you mean 'x'?); expected one of x, v"),
    (T + "tensors:\n  a: {view: b}\n  b: {view: a}\n",
     "t.yaml:4: tensors.b.view: views form a cycle: a -> b -> a; expected a view of a tensor"),
    (TENS + "  v: {view: x, shape: [100]}\n",
     "t.yaml:4: tensors.v.shape: 100 elements in a view of 'x' with 8192; "
     "expected the same number of elements as the viewed tensor"),
    (TENS + "  v: {view: x, dtype: bfloat16}\n",
     "t.yaml:4: tensors.v.dtype: bfloat16 differs from 'x'; expected float32 (or no dtype)"),
    (TENS + "  v: {view: x, init: ones}\n",
     "t.yaml:4: tensors.v.init: a view cannot have init; expected init on the viewed tensor"),
    # tiles
    (TENS + "tiles:\n  t: {shape: [128, 2], dtype: float32}\ninstructions: []\n",
     "t.yaml:5: tiles.t: missing key 'memory'; expected one of sbuf, psum"),
    (TENS + "tiles:\n  t: {memory: dram, shape: [128, 2], dtype: float32}\ninstructions: []\n",
     "t.yaml:5: tiles.t.memory: got 'dram'; expected one of sbuf, psum"),
    (TENS + "tiles:\n  t: {memory: sbuf, shape: [129, 2], dtype: float32}\ninstructions: []\n",
     "t.yaml:5: tiles.t.shape: 129 partitions; expected a first dim of 1..128"),
    (TENS + "tiles:\n  x: {memory: sbuf, shape: [128, 2], dtype: float32}\ninstructions: []\n",
     "t.yaml:5: tiles.x: tile 'x' has the name of a tensor; expected a name no tensor uses"),
    (TENS + "tiles:\n  t: {memory: sbuf, shape: [1], dtype: float32}\n",
     "t.yaml:4: tiles: top-level tiles: without instructions:"),
    # kernels
    (K + "    ops: [{relu: {x: a, out: a}}]\n    instructions: []\n",
     "t.yaml:5: kernels.k.instructions: a kernel with ops: cannot also have instructions:"),
    (K + "    tiles: {}\n", "t.yaml:3: kernels.k: a kernel needs ops:, instructions: or per_core:"),
    (K + "    instructions: []\n    per_core: [[]]\n",
     "t.yaml:5: kernels.k.per_core: a kernel cannot have both instructions: and per_core:"),
    (K + "    op: []\n", "t.yaml:4: kernels.k.op: unknown key 'op' (did you mean 'ops'?)"),
    (T + "kernels:\n  k: [1]\n", "t.yaml:3: kernels.k: got a list; expected {ops: [...]}"),
    (K + "    ops: []\n", "t.yaml:4: kernels.k.ops: got an empty list; expected a list of ops"),
    (K + "    ops:\n      - relu: {x: a}\n        exp: {x: a}\n",
     "t.yaml:5: kernels.k.ops[0]: got a mapping with keys relu, exp; "
     "expected a single-key mapping"),
    (K + "    ops:\n      - relu\n",
     "t.yaml:5: kernels.k.ops[0]: got 'relu'; expected a single-key mapping"),
    (K + "    ops:\n      - relu: [a]\n",
     "t.yaml:5: kernels.k.ops[0].relu: got a list; expected a mapping of the op's arguments"),
    (K + "    ops:\n      - 3: {x: a}\n", "t.yaml:5: kernels.k.ops[0]: got 3; expected a op name"),
    (T + "kernels:\n  main: {ops: [{relu: {x: a}}]}\nops: [{exp: {x: a}}]\n",
     "t.yaml:4: ops: the ops: shorthand is kernel 'main', which kernels: also defines"),
    (T + "ops: [{exp: {x: a}}]\ninstructions: []\n",
     "t.yaml:3: instructions: both ops: and instructions: at the top level"),
    (T + "kernels: {k: {per_core: [[], [], []]}}\n",
     "t.yaml:2: kernels.k.per_core: 3 entries; expected 1 to 2 entries"),
    (T + "lnc: 1\nkernels: {k: {per_core: [[], []]}}\n",
     "t.yaml:3: kernels.k.per_core: 2 entries; expected 1 to 1 entries"),
    (K + "    tiles: {t: {memory: sbuf, shape: [1], dtype: int8}}\n    per_core:\n"
     "      - tiles: {t: {memory: sbuf, shape: [1], dtype: int8}}\n        instructions: []\n",
     "t.yaml:6: kernels.k.per_core[0].tiles.t: tile 't' is also in the kernel's shared tiles:"),
    (K + "    per_core:\n      - tiles: {}\n",
     "t.yaml:5: kernels.k.per_core[0]: missing key 'instructions'"),
    (K + "    per_core:\n      - {instruction: []}\n",
     "t.yaml:5: kernels.k.per_core[0].instruction: unknown key 'instruction' "
     "(did you mean 'instructions'?)"),
    (K + "    tiles: {t: {memory: sbuf, shape: [1], dtype: int8}}\n    per_core:\n"
     "      - [{op: memset, dst: t, signal: {s: 1}}]\n"
     "      - [{op: memset, dst: t, wait: {s: 1}}]\n",
     "t.yaml:7: kernels.k.per_core[1][0].wait.s: semaphore 's' is waited on but never signalled; "
     "expected an instruction of this core with signal: {s: 1}"),
    # instructions
    (TILE + "  - {op: matmull, stationary: t, moving: t, dst: t}\n",
     "t.yaml:7: instructions[0].op: unknown op 'matmull' (did you mean 'matmul'?); "
     "expected one of dma_copy, matmul,"),
    (TILE + "  - {dst: t}\n", "t.yaml:7: instructions[0]: missing key 'op'; expected one of"),
    (TILE + "  - [op, memset]\n", "t.yaml:7: instructions[0]: got a list; expected an instruction"),
    (TILE + "  - {op: memset, dst: t, valu: 1}\n",
     "t.yaml:7: instructions[0].valu: unknown field 'valu' (did you mean 'value'?); "
     "expected fields of memset: dst, value (and engine, wait, signal)"),
    (TILE + "  - {op: matmul, stationary: t, dst: t}\n",
     "t.yaml:7: instructions[0]: matmul is missing its field 'moving'; "
     "expected the required fields stationary, moving, dst"),
    (TILE + "  - {op: matmul, stationary: x_tt, moving: t, dst: t}\n",
     "t.yaml:7: instructions[0].stationary: unknown tile or tensor 'x_tt'; "
     "expected one of t, x"),
    (TILE + "  - {op: matmul, stationary: t, moving: t, dst: 't[0:a]'}\n",
     "t.yaml:7: instructions[0].dst: bad index '0:a' in 't[0:a]'; expected name or "
     "name[start:stop, ...]"),
    (TILE + "  - {op: matmul, stationary: t, moving: t, dst: 't[0:1'}\n",
     "t.yaml:7: instructions[0].dst: bad operand 't[0:1'; expected name or name[start:stop"),
    (TILE + "  - {op: matmul, stationary: 3, moving: t, dst: t}\n",
     "t.yaml:7: instructions[0].stationary: got 3; expected a tile or tensor name"),
    (TILE + "  - {op: matmul, stationary: t, moving: t, dst: t, accumulate: 'yes'}\n",
     "t.yaml:7: instructions[0].accumulate: got 'yes'; expected true or false"),
    (TILE + "  - {op: activation, func: gleu, src: t, dst: t}\n",
     "t.yaml:7: instructions[0].func: got 'gleu' (did you mean 'gelu'?); expected one of"),
    (TILE + "  - {op: activation, func: exp, src: t, dst: t, scale: true}\n",
     "t.yaml:7: instructions[0].scale: got true; expected a number or a tile or tensor name"),
    (TILE + "  - {op: memset, dst: t, value: '1'}\n",
     "t.yaml:7: instructions[0].value: got '1'; expected a number"),
    (TILE + "  - {op: dma_copy, src: x, dst: t, queue: -1}\n",
     "t.yaml:7: instructions[0].queue: got -1; expected an integer >= 0"),
    (TILE + "  - {op: tensor_reduce, alu: add, src: t, dst: t, axis: [1, x]}\n",
     "t.yaml:7: instructions[0].axis[1]: got 'x'; expected an axis (integer)"),
    (TILE + "  - {op: matmul, stationary: t, moving: t, dst: t, engine: vector}\n",
     "t.yaml:7: instructions[0].engine: matmul cannot run on engine 'vector'; "
     "expected one of tensor"),
    (TILE + "  - {op: tensor_copy, src: t, dst: t, engine: scalr}\n",
     "t.yaml:7: instructions[0].engine: tensor_copy cannot run on engine 'scalr' (did you mean "
     "'scalar'?); expected one of vector, scalar, gpsimd"),
    (TILE + "  - {op: memset, dst: t, signal: {s: 0}}\n",
     "t.yaml:7: instructions[0].signal.s: got 0; expected an increment (an integer >= 1)"),
    (TILE + "  - {op: memset, dst: t, signal: {s: true}}\n",
     "t.yaml:7: instructions[0].signal.s: got true; expected an increment"),
    (TILE + "  - {op: memset, dst: t, wait: {s: -1}}\n",
     "t.yaml:7: instructions[0].wait.s: got -1; expected a value to wait for (an integer >= 0)"),
    (TILE + "  - {op: memset, dst: t, wait: [s]}\n",
     "t.yaml:7: instructions[0].wait: got a list; expected {semaphore: a value to wait for}"),
    (TILE + "  - {op: memset, dst: t, signal: {ld: 1}}\n  - op: memset\n    dst: t\n"
     "    wait: {ldd: 1}\n",
     "t.yaml:10: instructions[1].wait.ldd: semaphore 'ldd' is waited on but never signalled"),
    (TILE + "  - {op: memset, dst: t, signal: {ld: 1}}\n  - {op: memset, dst: t, signal: {ld: 1}}\n"
     "  - {op: memset, dst: t, wait: {ld: 3}}\n",
     "t.yaml:9: instructions[2].wait.ld: semaphore 'ld' is waited on for 3 but its signals add "
     "up to only 2; expected signal increments of 'ld' summing to >= 3"),
    (TILE + "  - {op: memset, dst: t}\ninstructions: []\n",
     "t.yaml:8: top level: duplicate key 'instructions'"),
    # streams
    (T + "streams: {name: s}\n",
     "t.yaml:2: streams: got a mapping with key name; expected a list of streams"),
    (T + "streams:\n  - {do: []}\n", "t.yaml:3: streams[0]: missing key 'name'"),
    (T + "streams:\n  - {name: s, do: []}\n  - {name: s, do: []}\n",
     "t.yaml:4: streams[1].name: duplicate stream name 's'; expected unique names"),
    (T + "streams:\n  - {name: s, core: -1, do: []}\n",
     "t.yaml:3: streams[0].core: got -1; expected a logical core index >= 0"),
    (T + "streams:\n  - {name: s, cores: 1, do: []}\n",
     "t.yaml:3: streams[0].cores: unknown key 'cores' (did you mean 'core'?)"),
    (K + "    ops: [{relu: {x: a}}]\nstreams:\n  - name: s\n    do:\n      - launch: kk\n",
     "t.yaml:8: streams[0].do[0].launch: unknown kernel 'kk' (did you mean 'k'?); "
     "expected one of k"),
    (T + "streams:\n  - name: s\n    do:\n      - record: a\n  - name: u\n    do:\n"
     "      - wait: b\n",
     "t.yaml:8: streams[1].do[0].wait: event 'b' is never recorded; expected an event"),
    (T + "streams:\n  - name: s\n    do:\n      - synchronise\n",
     "t.yaml:5: streams[0].do[0]: got 'synchronise' (did you mean 'synchronize'?)"),
    (T + "streams:\n  - name: s\n    do:\n      - {record: a, wait: a}\n",
     "t.yaml:5: streams[0].do[0]: got a mapping with keys record, wait; "
     "expected record: ev, wait: ev,"),
    (T + "streams:\n  - name: s\n    do:\n      - launh: k\n",
     "t.yaml:5: streams[0].do[0].launh: unknown step 'launh' (did you mean 'launch'?)"),
    (T + "streams:\n  - name: s\n    do:\n      - synchronize: now\n",
     "t.yaml:5: streams[0].do[0].synchronize: synchronize takes no argument"),
    (T + "streams:\n  - name: s\n    do:\n      - record: [a]\n",
     "t.yaml:5: streams[0].do[0].record: got a list; expected a event name"),
    (TENS + "streams:\n  - name: s\n    do:\n      - copy: {src: x, dst: 'y[0:2]'}\n",
     "t.yaml:7: streams[0].do[0].copy.dst: unknown tensor 'y'; expected one of x"),
    (TENS + "streams:\n  - name: s\n    do:\n      - copy: {src: x}\n",
     "t.yaml:7: streams[0].do[0].copy: missing key 'dst'"),
    # timing and outputs
    (T + "streams:\n  - {name: s, do: [record: done_a]}\ntiming:\n  - {from: done_a, to: done_b}\n",
     "t.yaml:5: timing[0].to: event 'done_b' is never recorded (did you mean 'done_a'?); "
     "expected an event some stream records (record: name)"),
    (T + "timing:\n  - {from: a}\n", "t.yaml:3: timing[0].from: event 'a' is never recorded"),
    (T + "streams:\n  - {name: s, do: [record: a]}\ntiming:\n  - {from: a}\n",
     "t.yaml:5: timing[0]: missing key 'to'; expected {from: ev1, to: ev2}"),
    (T + "timing:\n  - {start: a}\n", "t.yaml:3: timing[0].start: unknown key 'start'"),
    (TENS + "outputs: [x, y]\n", "t.yaml:4: outputs[1]: unknown tensor 'y'; expected one of x"),
    (TENS + "outputs: [x, x]\n", "t.yaml:4: outputs[1]: 'x' is listed twice"),
    (TENS + "outputs: x\n", "t.yaml:4: outputs: got 'x'; expected a list of tensor names"),
]


@pytest.mark.parametrize("text, start", ERRORS)
def test_errors_name_file_line_and_key(text, start):
    assert error(text).startswith(start)


def test_the_example_message_of_the_brief():
    text = GEMM_TENSORS + GEMM.replace("stationary: x_t", "stationary: x_tt")
    assert error(text) == (
        f"t.yaml:{line(text, 'x_tt')}: kernels.tile_gemm.instructions[2].stationary: unknown "
        "tile or tensor 'x_tt' (did you mean 'x_t'?); expected one of x_t, w_t, acc, o_t, xT, w, y")


def test_null_sections_count_as_absent():
    p = parse("trnsim: 1\ntensors:\nkernels: ~\nstreams:\ntiming:\noutputs:\n")
    assert p.tensors == {} and p.kernels == {} and p.timing == [] and p.outputs == []
    assert p.streams == [StreamSpec("default", 0, [])]


def test_alias_bombs_in_op_arguments_stay_cheap():
    text = "trnsim: 1\nops:\n  - relu:\n      a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
    for i in range(1, 9):
        text += f"      a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n"
    args = loads(text).kernels["main"].ops[0].args
    assert args["a8"][0] is args["a7"] and type(args["a8"]) is list


def test_block_style_instruction_errors_point_at_the_key_line():
    text = TILE + "  - op: activation\n    func: exp\n    src: t\n    dst: t\n    bias: 'u[0]'\n"
    assert error(text).startswith("t.yaml:11: instructions[0].bias: unknown tile or tensor 'u'")


def test_load_errors(tmp_path):
    with pytest.raises(TraceError, match=r"nope\.yaml:1: trace: cannot read the file"):
        load(tmp_path / "nope.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(TraceError, match=r"bin\.yaml:1: trace: cannot read the file"):
        load(tmp_path / "bin.yaml")


def test_huge_shapes_are_accepted():
    p = parse(T + "tensors:\n  x: {shape: [1000000000, 1000000000], dtype: bfloat16}\n")
    assert p.tensors["x"].shape == (10**9, 10**9)


# ----------------------------------------------------------------------------------------------
# fuzz: any mutation of a valid trace gives a Program or a one-line TraceError

BASE = yaml.safe_load(TOP.replace("  q:", "  xT: {shape: [8192, 4096], dtype: bfloat16}\n"
                                  "  host_y: {shape: [4096, 8192], dtype: bfloat16, on: host}\n"
                                  "  q:") + MLP + GEMM + STREAMS)
BASE["tensors"]["host_x"]["on"] = "host"  # safe_load reads the key `on` as True
BASE["tensors"]["host_y"]["on"] = "host"
for _name in ("host_x", "host_y"):
    BASE["tensors"][_name].pop(True)
BASE["kernels"]["pc"] = {"tiles": {"t": {"memory": "sbuf", "shape": [4, 4], "dtype": "int8"}},
                         "per_core": [[{"op": "iota", "dst": "t", "signal": {"s": 1}},
                                       {"op": "tensor_copy", "src": "t", "dst": "t[:, 0:2]",
                                        "engine": "gpsimd", "wait": {"s": 1}}],
                                      {"instructions": [{"op": "memset", "dst": "t"}]}]}

SCALARS = (st.none() | st.booleans() | st.integers(-3, 2**70) | st.floats()
           | st.sampled_from(["x", "t", "x[0:1]", "x[", "normal", "sbuf", "matmul", "synchronize",
                              "done_mlp", "mlp", "", "1e3", "main"])
           | st.text(max_size=8))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=6) | st.integers(), inner, max_size=3),
                      max_leaves=6)


def _containers(node, path=()):
    yield path, node
    children = node.items() if isinstance(node, dict) else enumerate(node) \
        if isinstance(node, list) else ()
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
            node[draw(st.sampled_from(["x", "shape", "op", "name", "do", str(key) + "2"]))] = \
                copy.deepcopy(node[key])
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


# ----------------------------------------------------------------------------------------------
# repeat blocks (docs/trace_extensions.md)

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


def instructions(text: str, core: int = 0, kernel: str = "main") -> list:
    return parse(text).kernels[kernel].per_core[core].instructions


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
    assert first == Matmul(index=1, line=mm_line, engine=Engine.TENSOR,
                           wait=(("ld", 1), ("act", 0)), signal=(("mm", 1),),
                           stationary=Ap("x_t", (), "x_t"), moving=Ap("w_t", (), "w_t"),
                           dst=Ap("acc", (), "acc"))
    assert len({id(i) for i in ins}) == len(ins)  # every instruction its own object


def test_repeat_matches_writing_the_loop_out():
    body = ["{op: memset, dst: t, wait: {s: 0, u: 1}, signal: {s: 2}}",
            "{op: tensor_copy, src: t, dst: t, wait: {s: 2}, signal: {u: 1}}"]
    head = TENS + "tiles:\n  t: {memory: sbuf, shape: [128, 64], dtype: float32}\ninstructions:\n"
    first = head + "  - {op: memset, dst: t, signal: {u: 1}}\n"
    looped = first + "  - repeat: 3\n    instructions:\n" + "".join(f"      - {b}\n" for b in body)
    written = first + "".join(
        f"  - {{op: memset, dst: t, wait: {{s: {2 * i}, u: {1 + i}}}, signal: {{s: 2}}}}\n"
        f"  - {{op: tensor_copy, src: t, dst: t, wait: {{s: {2 + 2 * i}}}, signal: {{u: 1}}}}\n"
        for i in range(3))
    strip = lambda xs: [replace(x, line=0) for x in xs]  # noqa: E731
    assert strip(instructions(looped)) == strip(instructions(written))


def test_nested_repeats_compose():
    text = TILE + """\
  - repeat: 2
    instructions:
      - {op: memset, dst: t, signal: {a: 1}}
      - repeat: 3
        instructions:
          - {op: memset, dst: t, wait: {a: 1, b: 0}, signal: {b: 2}}
  - {op: memset, dst: t, wait: {b: 12}}
"""
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
    text = K + """\
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
    c0, c1 = parse(text).kernels["k"].per_core
    assert [(i.index, i.wait) for i in c0.instructions] == [(0, (("s", 0),)), (1, (("s", 1),))]
    assert [i.OP for i in c1.instructions] == ["memset"] + ["iota"] * 6
    assert [i.index for i in c1.instructions] == list(range(7))
    assert {i.line for i in c1.instructions[1:]} == {line(text, "op: iota")}


def test_wait_for_zero_is_allowed_everywhere():
    ins = instructions(TILE + "  - {op: memset, dst: t, wait: {never: 0}}\n")
    assert ins[0].wait == (("never", 0),)


REPEAT_ERRORS = [
    (TILE + "  - {repeat: 0, instructions: [{op: memset, dst: t}]}\n",
     "t.yaml:7: instructions[0].repeat: got 0; expected a repeat count (an integer >= 1)"),
    (TILE + "  - {repeat: 2.0, instructions: [{op: memset, dst: t}]}\n",
     "t.yaml:7: instructions[0].repeat: got 2.0; expected a repeat count"),
    (TILE + "  - {repeat: true, instructions: [{op: memset, dst: t}]}\n",
     "t.yaml:7: instructions[0].repeat: got true; expected a repeat count"),
    (TILE + "  - {repeat: many, instructions: [{op: memset, dst: t}]}\n",
     "t.yaml:7: instructions[0].repeat: got 'many'; expected a repeat count"),
    (TILE + "  - repeat: 2\n    instructions: [{op: memset, dst: t}]\n    times: 3\n",
     "t.yaml:9: instructions[0].times: unknown key 'times'; expected repeat: <count>, "
     "instructions: [<body>]"),
    (TILE + "  - repeat: 2\n    instruction: [{op: memset, dst: t}]\n",
     "t.yaml:8: instructions[0].instruction: unknown key 'instruction' (did you mean "
     "'instructions'?)"),
    (TILE + "  - {repeat: 2, op: memset, dst: t}\n",
     "t.yaml:7: instructions[0].op: unknown key 'op'; expected repeat: <count>,"),
    (TILE + "  - repeat: 2\n",
     "t.yaml:7: instructions[0]: missing key 'instructions'; expected instructions: [...], the "
     "body to repeat"),
    (TILE + "  - {repeat: 2, instructions: }\n",
     "t.yaml:7: instructions[0]: missing key 'instructions'"),
    (TILE + "  - {instructions: [{op: memset, dst: t}]}\n",
     "t.yaml:7: instructions[0]: missing key 'repeat'; expected repeat: <count, an integer >= 1>"),
    (TILE + "  - {repeat: 2, instructions: []}\n",
     "t.yaml:7: instructions[0].instructions: got an empty list; expected a body of at least one "
     "instruction"),
    (TILE + "  - {repeat: 2, instructions: {op: memset, dst: t}}\n",
     "t.yaml:7: instructions[0].instructions: got a mapping with keys op, dst; expected a list of "
     "instructions"),
    (TILE + "  - {repeat: 10000001, instructions: [{op: memset, dst: t}]}\n",
     "t.yaml:7: instructions[0].repeat: repeat: 10000001 of a body of 1 instructions makes "
     "10000001 instructions; expected at most 10000000 instructions per core once repeats are "
     "expanded"),
    (TILE + "  - {op: memset, dst: t}\n  - repeat: 100000\n    instructions:\n"
     "      - {op: memset, dst: t}\n      - {repeat: 1000, instructions: [{op: iota, dst: t}]}\n",
     "t.yaml:8: instructions[1].repeat: repeat: 100000 of a body of 1001 instructions makes "
     "100100001 instructions; expected at most 10000000"),
    # errors inside bodies: the body's line and key path
    (TILE + "  - {op: memset, dst: t, signal: {ld: 1}}\n  - repeat: 4\n    instructions:\n"
     "      - {op: memset, dst: t}\n      - {op: tensor_copy, src: u, dst: t}\n",
     "t.yaml:11: instructions[1].instructions[1].src: unknown tile or tensor 'u'"),
    (TILE + "  - repeat: 4\n    instructions:\n      - {op: memset, dst: t, signal: {ld: 1}}\n"
     "      - repeat: 2\n        instructions:\n          - {op: memset, dst: t, wait: {mm: 1}}\n",
     "t.yaml:12: instructions[0].instructions[1].instructions[0].wait.mm: semaphore 'mm' is "
     "waited on but never signalled; expected an instruction of this core with signal: {mm: 1}"),
    (TILE + "  - repeat: 3\n    instructions:\n"
     "      - {op: memset, dst: t, wait: {s: 2}, signal: {s: 1}}\n",
     "t.yaml:9: instructions[0].instructions[0].wait.s: semaphore 's' is waited on for 4 (2 as "
     "written plus the increments of earlier repeat iterations) but its signals add up to only 3; "
     "expected signal increments of 's' summing to >= 4"),
    (K + "    tiles: {t: {memory: sbuf, shape: [1], dtype: int8}}\n    per_core:\n"
     "      - []\n      - - repeat: 2\n          instructions: [{op: memset, dst: x}]\n",
     "t.yaml:8: kernels.k.per_core[1][0].instructions[0].dst: unknown tile or tensor 'x'"),
]


@pytest.mark.parametrize("text, start", REPEAT_ERRORS, ids=range(len(REPEAT_ERRORS)))
def test_repeat_errors(text, start):
    assert error(text).startswith(start)


# ----------------------------------------------------------------------------------------------
# speed: identical mappings parse once; the fast instruction parser agrees with the full one


def test_identical_instructions_are_parsed_once_but_are_distinct_objects(monkeypatch):
    calls = []
    original = repeat.fast_instruction
    monkeypatch.setattr(repeat, "fast_instruction", lambda *a: calls.append(1) or original(*a))
    text = TILE + "  - {op: memset, dst: t, value: 1}\n" * 50 + "  - {op: memset, dst: t}\n"
    ins = instructions(text)
    assert len(calls) == 2 and len(ins) == 51 and len({id(i) for i in ins}) == 51
    assert [(i.index, i.line) for i in ins] == [(n, 7 + n) for n in range(51)]
    assert ins[0] == replace(ins[49], index=0, line=7) and ins[50].value == 0.0


def test_memo_tells_numbers_and_booleans_apart():
    text = TILE + ("  - {op: memset, dst: t, value: 1}\n  - {op: memset, dst: t, value: 1.0}\n"
                   "  - {op: memset, dst: t, value: 1}\n")
    values = [i.value for i in instructions(text)]
    assert values == [1, 1.0, 1] and [type(v) for v in values] == [int, float, int]
    assert error(text + "  - {op: memset, dst: t, value: true}\n").startswith(
        "t.yaml:10: instructions[3].value: got true; expected a number")


def test_memo_gives_up_on_distinct_mappings_and_stays_correct():
    n = repeat._Expander.MEMO_TRIAL + 100
    text = TILE + "".join(f"  - {{op: memset, dst: 't[0:{i % 128 + 1}]', value: {i}}}\n"
                          for i in range(n)) + "  - {op: memset, dst: 't[0:1]', value: 0}\n" * 3
    ins = instructions(text)
    assert [i.value for i in ins] == [*range(n), 0, 0, 0] and ins[-1].index == n + 2
    assert ins[5].dst == Ap("t", ((0, 6, None),), "t[0:6]")


FIELD_VALUES = st.sampled_from([None, 0, 1, -1, 2.5, True, False, "", " ", "t", "x", "u",
                                "t[0:2]", "t[0:a]", "add", "gelu", "max", "scalar", "gpsimd",
                                [1], [], [1, "a"], {"s": 1}, {"s": 0}, {"s": True}, {"": 1},
                                {"s": -1}, {1: 1}])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(INSTRUCTIONS)),
       st.dictionaries(st.sampled_from(["src", "dst", "src0", "src1", "alu", "func", "scale",
                                        "value", "axis", "queue", "engine", "wait", "signal",
                                        "accumulate", "stationary", "moving", "op0", "operand0",
                                        "predicate", "on_true", "on_false", "bogus"]),
                       FIELD_VALUES, max_size=6))
def test_fast_instruction_parser_agrees_with_the_full_one(op, fields):
    d = {"op": op, **fields}
    names = {"t", "x"}
    fast = fast_instruction(d, 3, 9, names)
    try:
        full = full_instruction(d, 3, Loc("f", 9, "i"), names)
    except TraceError:
        assert fast is None
    else:
        assert fast is None or fast == full


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
    assert [c.src.text for c in copies[:3]] == ["w[0:128, 0:128]", "w[0:128, 128:256]",
                                                 "w[128:256, 0:128]"]
    assert copies[-1].src.index == ((384, 512, None), (128, 256, None))
    # the outer body signals ld twice per iteration: memset k waits for ld >= 2 (k + 1)
    assert [i.wait for i in ins if i.OP == "memset"] == [(("ld", 2 * (k + 1)),) for k in range(4)]
    assert [i.index for i in ins] == list(range(12))
    assert [c.queue for c in copies] == [(2 * k + n) % 16 for k in range(4) for n in range(2)]


@pytest.mark.parametrize("body, message", [
    ('{op: memset, dst: "t[{j}:{j+1}, :]"}', "cannot evaluate 'j' in {j}"),
    ('{op: memset, dst: "t[{k/2}:1, :]"}', "cannot evaluate"),
    ('{op: memset, dst: "t[{k//0}:1, :]"}', "divides by zero"),
    ('{op: memset, dst: "t[{k*}:1, :]"}', "cannot read {k*}"),
])
def test_repeat_loop_variable_errors(body, message):
    text = ("trnsim: 1\ntiles:\n  t: {memory: sbuf, shape: [128, 128], dtype: bfloat16}\n"
            f"instructions:\n  - repeat: 2\n    as: k\n    instructions: [{body}]\n")
    with pytest.raises(TraceError, match=re.escape(message)):
        loads(text, "t.yaml")
    with pytest.raises(TraceError, match="loop variable"):
        loads(text.replace("as: k", "as: 3k"), "t.yaml")
