"""inputs.load: load_yaml with the reference loader forced, the GC pause, and load_json."""

import gc

import pytest

from tests.inputs.helpers import DOC, err
from trnsim.errors import TraceError
from trnsim.inputs import load as loading
from trnsim.inputs import yaml_events
from trnsim.inputs.load import load_json, load_yaml


@pytest.mark.parametrize(
    "text, message",
    [
        ("a: 1\nb: 2\na: 3\n", "t.yaml:3: top level: duplicate key 'a'"),
        ("a:\n  b: [1, {c: 1,\n   c: 2}]\n", "t.yaml:3: a.b[1]: duplicate key 'c'"),
        ("a: 1\nb: [\n", "t.yaml:3: syntax: while parsing a flow node"),
        ("x:\n  y: !!int abc\n", "t.yaml:2: x.y: cannot read 'tag:yaml.org,2002:int' value"),
    ],
)
def test_line_numbers_with_the_pure_python_loader_forced(monkeypatch, text, message):
    monkeypatch.setattr(loading, "LIBYAML", False)
    assert err(text).startswith(message)
    monkeypatch.setattr(yaml_events, "fast_load", None)  # would fail if it were still called
    assert err(text).startswith(message)
    d = load_yaml(DOC, "t.yaml")
    assert d.key_lines == {"a": 1, "b": 2, "f": 7} and d["b"].item_lines == [3, 4, 6]


def test_loading_pauses_the_gc_and_restores_it():
    assert gc.isenabled()
    load_yaml(DOC)
    assert gc.isenabled()
    with pytest.raises(TraceError):
        load_yaml("a: [")
    assert gc.isenabled()
    gc.disable()
    try:
        load_yaml(DOC)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_load_json_gives_plain_data():
    d = load_json('{"a": [1, 2.5, true, null, "x"],\n "b": {"c": NaN, "d": -Infinity}}')
    assert d == {"a": [1, 2.5, True, None, "x"], "b": {"c": "NaN", "d": "-Infinity"}}
    assert type(d) is dict and type(d["a"]) is list and type(d["a"][0]) is int


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '{"a": 1,\n "b": [1 2]}',
            "t.json:2: syntax: Expecting ',' delimiter (column 10); expected valid JSON",
        ),
        ('{"a": 1}\n{"b": 2}\n', "t.json:2: syntax: Extra data (column 1); expected valid JSON"),
        ("", "t.json:1: syntax: Expecting value (column 1); expected valid JSON"),
        ("[" * 100_000, "t.json:1: syntax: nesting is too deep; expected valid JSON"),
    ],
)
def test_load_json_errors_name_line_and_column(text, message):
    with pytest.raises(TraceError) as info:
        load_json(text, "t.json")
    assert str(info.value).startswith(message)
