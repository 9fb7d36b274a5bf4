"""trace.params: a trace's `params:` with defaults, `{expressions}` of them in string values,
`--param` overrides, and one exact error per way they can be wrong."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from trnsim.config import load_chip
from trnsim.errors import TraceError
from trnsim.runtime.session import run_program
from trnsim.trace import load, loads
from trnsim.trace.params import apply_params, parse_param_args

ROOT = Path(__file__).resolve().parents[2]

TRACE = """\
trnsim: 1
name: "stream-{tiles}"
params:
  batch: 8
  tiles: 4
  cols: "{512 * tiles}"
tensors:
  w: {shape: [128, "{cols}"], dtype: bfloat16}
tiles:
  x: {memory: sbuf, shape: [128, "{batch}"], dtype: bfloat16}
  wt: {memory: sbuf, shape: [128, 512], dtype: bfloat16}
  acc: {memory: psum, shape: ["{batch}", 512], dtype: float32}
instructions:
  - repeat: "{tiles}"
    as: k
    instructions:
      - {op: dma_copy, queue: "{k % 2}", src: "w[:, {k*512}:{(k+1)*512}]", dst: wt,
         wait: {mm: 0}, signal: {ld: 1}}
      - {op: matmul, stationary: "x[:, 0:{batch}]", moving: wt, dst: acc, wait: {ld: 1},
         signal: {mm: 1}}
"""


def parse(text: str = TRACE, params=None):
    return loads(textwrap.dedent(text), source="t.yaml", params=params)


def error(text: str = TRACE, params=None) -> str:
    with pytest.raises(TraceError) as info:
        parse(text, params)
    msg = str(info.value)
    assert "\n" not in msg and "; expected " in msg, msg
    return msg


def instrs(prog):
    return prog.kernels["main"].per_core[0].instructions


def test_defaults_fill_shapes_slices_repeat_counts_and_names():
    prog = parse()
    assert prog.name == "stream-4"
    assert prog.tensors["w"].shape == (128, 2048)
    tiles = prog.kernels["main"].per_core[0].tiles
    assert tiles["x"].shape == (128, 8) and tiles["acc"].shape == (8, 512)
    ins = instrs(prog)
    assert len(ins) == 8  # repeat: "{tiles}" of 2 instructions
    assert [i.src.text for i in ins[::2]] == [f"w[:, {k * 512}:{(k + 1) * 512}]" for k in range(4)]
    assert [i.queue for i in ins[::2]] == [0, 1, 0, 1]
    assert ins[1].stationary.text == "x[:, 0:8]"


def test_overrides_set_params_and_derived_defaults_follow():
    prog = parse(params={"tiles": "6", "batch": 16})
    assert prog.name == "stream-6"
    assert prog.tensors["w"].shape == (128, 3072)  # cols = 512 * tiles, evaluated after it
    assert len(instrs(prog)) == 12
    assert instrs(prog)[1].stationary.text == "x[:, 0:16]"
    assert parse(params={"cols": "1024"}).tensors["w"].shape == (128, 1024)


def test_mixed_expression_keeps_the_loop_variable_and_a_loop_variable_hides_a_param():
    text = TRACE.replace('src: "w[:, {k*512}:', 'src: "w[:, {k*batch*64}:')
    assert instrs(parse(text))[2].src.text == "w[:, 512:1024]"  # k=1: 1 * 8 * 64
    hidden = (
        "trnsim: 1\nparams: {tiles: 100}\ntensors:\n  w: {shape: [128, 512], dtype: "
        "bfloat16}\ntiles:\n  t: {memory: sbuf, shape: [128, 512], dtype: bfloat16}\n"
        "instructions:\n  - repeat: 3\n    as: tiles\n    instructions:\n"
        '      - {op: dma_copy, queue: "{tiles}", src: w, dst: t}\n'
        '  - {op: dma_copy, queue: "{tiles - 98}", src: w, dst: t}\n'
    )
    assert [i.queue for i in instrs(parse(hidden))] == [0, 1, 2, 2]


def test_a_trace_without_params_is_untouched():
    text = (
        "trnsim: 1\ntiles:\n  a: {memory: sbuf, shape: [128, 64], dtype: float32}\n"
        "instructions:\n  - {op: activation, func: copy, src: a, dst: a}\n"
    )
    assert loads(text).kernels["main"].per_core[0].instructions[0].src.text == "a"
    with pytest.raises(
        TraceError,
        match=r"^t.yaml:1: params: --param n=3: the trace declares "
        r"no params; expected",
    ):
        loads(text, "t.yaml", params={"n": "3"})


@pytest.mark.parametrize(
    "params, message",
    [
        (
            {"bach": "4"},
            "t.yaml:3: params: --param bach=4: unknown param 'bach' (did you mean "
            "'batch'?); expected one of batch, tiles, cols",
        ),
        (
            {"batch": "4x"},
            "t.yaml:3: params: --param batch=4x: got '4x'; expected an integer, like batch=64",
        ),
        ({"batch": "1.5"}, "t.yaml:3: params: --param batch=1.5: got '1.5'; expected an integer"),
    ],
)
def test_override_errors(params, message):
    assert error(params=params).startswith(message)


@pytest.mark.parametrize(
    "old, new, message",
    [
        (
            "tiles: 4",
            "tiles: four",
            "t.yaml:5: params.tiles: got 'four'; expected an integer "
            "default, or an expression of the params above it",
        ),
        (
            'cols: "{512 * tiles}"',
            'cols: "{512 * rows}"',
            "t.yaml:6: params.cols: unknown param 'rows' in {512 * rows}; expected an integer "
            "expression of the params batch, tiles",
        ),
        ("batch: 8", "8b: 8", "t.yaml:4: params.8b: param name '8b' is not an identifier"),
        (
            '"{cols}"]',
            '"{colss}"]',
            "t.yaml:8: tensors.w.shape[1]: unknown param 'colss' in {colss} (did you mean 'cols'?)",
        ),
        (
            '"{k % 2}"',
            '"{j % 2}"',
            "t.yaml:17: instructions[0].instructions[0].queue: unknown "
            "param 'j' in {j % 2}; expected an integer expression of the "
            "params batch, tiles, cols and loop variables k",
        ),
        (
            '"x[:, 0:{batch}]"',
            '"x[:, 0:{batch*}]"',
            "t.yaml:19: instructions[0].instructions[1].stationary: cannot read {batch*}",
        ),
        (
            '"x[:, 0:{batch}]"',
            '"x[:, 0:{batch // (tiles - 4)}]"',
            "t.yaml:19: instructions[0].instructions[1].stationary: {batch // (tiles - 4)} divides "
            "by zero",
        ),
        (
            '"x[:, 0:{batch}]"',
            '"x[:, 0:{batch ** 2}]"',
            "t.yaml:19: instructions[0]"
            ".instructions[1].stationary: cannot "
            "evaluate ** in {batch ** 2}; expected an "
            "integer expression",
        ),
        (
            "params:\n",
            "params: [batch]\nx:\n",
            "t.yaml:3: params: got a list; expected a mapping of param name -> default",
        ),
    ],
)
def test_errors_name_the_key(old, new, message):
    assert old in TRACE
    assert error(TRACE.replace(old, new, 1)).startswith(message)


def test_yaml_aliases_are_substituted_once_and_stay_shared():
    text = (
        'trnsim: 1\nparams: {n: 256}\ntensors:\n  a: &s {shape: [128, "{n}"], '
        "dtype: float32}\n  b: *s\n"
    )
    doc = {"trnsim": 1}
    prog = loads(text)
    assert prog.tensors["a"].shape == prog.tensors["b"].shape == (128, 256)
    assert apply_params(doc, "x") is doc  # no params: the same document back


def test_parse_param_args():
    assert parse_param_args(["batch=64", " seq = 512 "]) == {"batch": "64", "seq": "512"}
    for bad, what in [
        ("batch", "expected NAME=VALUE"),
        ("=3", "expected NAME=VALUE"),
        ("b-x=3", "expected NAME=VALUE"),
        ("batch=", "expected NAME=VALUE"),
    ]:
        with pytest.raises(TraceError, match=f"^--param {bad}: {what}"):
            parse_param_args([bad])
    with pytest.raises(TraceError, match="param 'a' is set twice"):
        parse_param_args(["a=1", "a=2"])


@pytest.mark.parametrize(
    "params", [{}, {"batch": "3", "tiles": "4"}, {"batch": "128", "tiles": "2"}]
)
def test_bundled_weight_stream_computes_x_at_w_for_its_params(params):
    prog = load(ROOT / "traces" / "weight_stream.yaml", params)
    batch, tiles = int(params.get("batch", 8)), int(params.get("tiles", 16))
    r = run_program(prog, load_chip("trn2"))
    x = r.tensor("xT").astype(np.float32).T
    w = r.tensor("w").astype(np.float32)
    y = r.tensor("y").astype(np.float32)
    assert y.shape == (batch, 512 * tiles)
    np.testing.assert_allclose(y, x @ w, rtol=2.0**-8, atol=1e-3)
    assert r.summary["flops"] == 2 * batch * 512 * 512 * tiles


def test_json_traces_take_params_and_report_errors_with_lines():
    doc = (
        '{"trnsim": 1, "params": {"n": 256},\n'
        ' "tensors": {"w": {"shape": [128, "{n}"], "dtype": "float32"}}}\n'
    )
    assert loads(doc, "t.json").tensors["w"].shape == (128, 256)
    assert loads(doc, "t.json", params={"n": "64"}).tensors["w"].shape == (128, 64)
    with pytest.raises(TraceError, match=r"^t.json:2: tensors.w.shape\[1\]: unknown param 'm' "):
        loads(doc.replace("{n}", "{m}"), "t.json")
