"""JSON traces: read by Python's json module, the same Program as the YAML twin (without lines);
a failed check is reported from the YAML reader, naming the line; JSON syntax errors name line
and column."""

import dataclasses
import json

import pytest

from tests.trace import test_buffers, test_document, test_instructions, test_repeat
from tests.trace.helpers import GEMM, GEMM_TENSORS, MLP, STREAMS, TOP
from trnsim.config import load_chip
from trnsim.errors import SimError, TraceError
from trnsim.inputs.load import load_yaml
from trnsim.runtime.session import check_program
from trnsim.trace import document, load, loads

EXAMPLE = (
    TOP.replace(
        "  q:",
        "  xT: {shape: [8192, 4096], dtype: bfloat16}\n"
        "  host_y: {shape: [4096, 8192], dtype: bfloat16, on: host}\n  q:",
    )
    + MLP
    + GEMM
    + STREAMS
)


def without_lines(value):
    """`value` with every dataclass's `line` set to 0, recursively."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: without_lines(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if "line" in changes:
            changes["line"] = 0
        return dataclasses.replace(value, **changes)
    if isinstance(value, dict):
        return {k: without_lines(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_lines(v) for v in value]
    return value


def as_json(yaml_text: str, indent: int | None = 1) -> str:
    return json.dumps(load_yaml(yaml_text), indent=indent)


def test_a_json_trace_is_its_yaml_twin_without_lines(tmp_path):
    (tmp_path / "t.yaml").write_text(EXAMPLE)
    (tmp_path / "t.json").write_text(as_json(EXAMPLE))
    from_yaml, from_json = load(tmp_path / "t.yaml"), load(tmp_path / "t.json")
    assert from_json.source == str(tmp_path / "t.json") and from_json.name == "gemm-bf16"
    assert without_lines(from_json) == dataclasses.replace(
        without_lines(from_yaml), source=from_json.source
    )
    ins = from_json.kernels["tile_gemm"].per_core[0].instructions
    assert [i.line for i in ins] == [0] * 5 and from_json.tensors["x"].line == 0
    assert from_yaml.kernels["tile_gemm"].per_core[0].instructions[0].line > 0


def test_json_is_read_by_the_json_module(monkeypatch):
    calls = []
    monkeypatch.setattr(document, "load_yaml", lambda *a: calls.append(a) or load_yaml(*a))
    loads(as_json(EXAMPLE), "t.json")
    loads(as_json(EXAMPLE, indent=None), "t.yaml")  # by content: text starting with {
    assert calls == []
    loads(EXAMPLE, "t.yaml")
    assert len(calls) == 1


def yaml_error(text: str, source: str, monkeypatch) -> str:
    """The error of `text` read as YAML only."""
    with monkeypatch.context() as m:
        m.setattr(document, "_json", lambda text, source: document._NOT_JSON)
        with pytest.raises(TraceError) as info:
            loads(text, source)
    return str(info.value)


ERRORS = [
    text
    for text, _ in (
        test_document.ERRORS
        + test_buffers.ERRORS
        + test_instructions.ERRORS
        + test_repeat.REPEAT_ERRORS
    )
]


@pytest.mark.parametrize("text", ERRORS, ids=range(len(ERRORS)))
def test_a_failed_check_names_the_line_as_in_yaml(text, monkeypatch):
    try:
        data = load_yaml(text, "t.json")
    except TraceError:
        return  # a YAML syntax error or a duplicate key: no JSON twin
    text = json.dumps(data, indent=1)
    if json.loads(text) != data:
        return  # not JSON data (a key that is no string)
    want = yaml_error(text, "t.json", monkeypatch)
    assert want.startswith("t.json:") and not want.startswith("t.json:0:")
    with pytest.raises(TraceError) as info:
        loads(text, "t.json")
    assert str(info.value) == want


def test_an_error_inside_a_json_instruction_names_its_line():
    text = as_json(GEMM_TENSORS + GEMM.replace("stationary: x_t", "stationary: x_tt"))
    with pytest.raises(TraceError) as info:
        loads(text, "t.json")
    at = next(i + 1 for i, s in enumerate(text.splitlines()) if '"x_tt"' in s)
    assert str(info.value).startswith(
        f"t.json:{at}: kernels.tile_gemm.instructions[2].stationary: unknown tile or tensor "
        "'x_tt' (did you mean 'x_t'?)"
    )


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '{"trnsim": 1,\n "tensors": {]}',
            "t.json:2: syntax: Expecting property name enclosed in "
            "double quotes (column 14); expected valid JSON",
        ),
        ("trnsim: 1\n", "t.json:1: syntax: Expecting value (column 1); expected valid JSON"),
        ('{"trnsim": 1}\n,', "t.json:2: syntax: Extra data (column 1); expected valid JSON"),
    ],
)
def test_json_syntax_errors_name_line_and_column(text, message):
    with pytest.raises(TraceError) as info:
        loads(text, "t.json")
    assert str(info.value) == message


def test_a_yaml_flow_mapping_is_still_yaml():
    p = loads("{trnsim: 1, tensors: {x: {shape: [2], dtype: int8, on: host}}}", "t.yaml")
    assert p.tensors["x"].on == "host" and p.tensors["x"].line == 1
    with pytest.raises(TraceError, match=r"^t\.yaml:1: tensors\.x\.on: got 'gpu'"):
        loads("{trnsim: 1, tensors: {x: {shape: [2], dtype: int8, on: gpu}}}", "t.yaml")


def test_planning_errors_of_a_json_trace_name_kernel_and_instruction():
    text = json.dumps(
        {
            "trnsim": 1,
            "tensors": {"x": {"shape": [128, 64], "dtype": "float32"}},
            "tiles": {"t": {"memory": "sbuf", "shape": [128, 64], "dtype": "float32"}},
            "instructions": [
                {"op": "memset", "dst": "t"},
                {"op": "dma_copy", "src": "x[0:128, 0:65]", "dst": "t"},
            ],
        },
        indent=1,
    )
    with pytest.raises(SimError) as info:
        check_program(loads(text, "t.json"), load_chip("trn2"))
    assert str(info.value).startswith(
        "t.json: kernel main, core 0: instruction 1 (dma_copy) src: slice 0:65 is out of bounds"
    )
