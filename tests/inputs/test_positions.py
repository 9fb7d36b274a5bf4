"""inputs.positions via load_yaml: YAML that remembers lines, YAML 1.2 scalars, and one-line
errors naming the line."""

import pytest

from tests.inputs.helpers import DOC, err
from trnsim.inputs.load import load_yaml
from trnsim.inputs.positions import PosDict, PosList


def test_lines_of_keys_and_items():
    d = load_yaml(DOC, "t.yaml")
    assert d == {"a": 1, "b": ["x", {"c": 2, "d": [3, 4]}, {"e": 5}], "f": {"g": 6}}
    assert isinstance(d, PosDict) and isinstance(d["b"], PosList)
    assert d.line == 1
    assert d.key_lines == {"a": 1, "b": 2, "f": 7}
    assert d["b"].item_lines == [3, 4, 6]
    assert d["b"][1].line_of("d") == 4
    assert d["b"][1]["d"].line_of(1) == 4
    assert d["b"][2].line == 6 and d["b"][2].line_of("e") == 6
    assert d.line_of("missing") == 1
    assert d["b"].line == 3 and d["b"].line_of(99) == 3


def test_yaml_12_scalars():
    d = load_yaml(
        "on: host\nyes: no\nt: [true, False, TRUE]\n"
        "n: [1e-5, 1e3, .5, 010, 0x1F, 0o17, 0b11, 1_000, -3, +4, 1:30, 2020-01-01, =]\n"
        "z: [~, null, .inf, -.inf]\n"
    )
    assert d["on"] == "host"
    assert d["yes"] == "no"
    assert d["t"] == [True, False, True]
    assert d["n"] == [1e-5, 1000.0, 0.5, 10, 31, 15, 3, 1000, -3, 4, "1:30", "2020-01-01", "="]
    assert all(isinstance(v, int) for v in d["n"][3:10])
    assert d["z"][:2] == [None, None] and d["z"][2] == float("inf") and d["z"][3] < 0


def test_merge_keys_may_be_overridden():
    d = load_yaml("base: &b {p: 1, q: 2}\nm:\n  <<: *b\n  q: 3\n")
    assert d["m"] == {"p": 1, "q": 3}


def test_empty_document_is_none():
    assert load_yaml("") is None
    assert load_yaml("# only a comment\n") is None


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "a: 1\nb: 2\na: 3\n",
            "t.yaml:3: top level: duplicate key 'a'; expected each key at most once",
        ),
        (
            "a:\n  b: [1, {c: 1,\n   c: 2}]\n",
            "t.yaml:3: a.b[1]: duplicate key 'c'; expected each key at most once",
        ),
        (
            "a: 1\nb: [\n",
            "t.yaml:3: syntax: while parsing a flow node, expected the node content, "
            "but found '<stream end>' (column 1); expected valid YAML",
        ),
        (
            "a: b: c\n",
            "t.yaml:1: syntax: mapping values are not allowed here (column 5); expected valid YAML",
        ),
        (
            "x:\n  y: !!int abc\n",
            "t.yaml:2: x.y: cannot read 'tag:yaml.org,2002:int' value: invalid "
            "literal for int() with base 10: 'abc'; expected a valid value for "
            "the tag",
        ),
        (
            "a: &x [*x]\n",
            "t.yaml:1: syntax: found unconstructable recursive node (column 4); "
            "expected valid YAML",
        ),
        (
            "{[1]: 2}\n",
            "t.yaml:1: top level: a mapping key must be a plain value; expected a name as the key",
        ),
        (
            "a: !foo 1\n",
            "t.yaml:1: syntax: could not determine a constructor for the tag '!foo' "
            "(column 4); expected valid YAML",
        ),
        (
            "a: 1\nb: \x01\n",
            "t.yaml:2: syntax: character '\\x01' is not allowed in YAML; expected valid YAML",
        ),
        (
            "- a\n---\n- b\n",
            "t.yaml:2: syntax: expected a single document in the stream, but found "
            "another document (column 1); expected valid YAML",
        ),
        (
            "[" * 3000,
            "t.yaml:1: syntax: nesting is too deep; expected at most 100 levels of nested "
            "lists and mappings",
        ),
        (
            "a:\n" + "".join(f"{'  ' * i}- \n" for i in range(101)),
            "t.yaml:101: syntax: nesting is too deep; expected at most 100 levels of nested lists and "
            "mappings",
        ),
    ],
    ids=lambda v: v[:20] if isinstance(v, str) else None,
)
def test_errors_are_one_line_with_the_line(text, message):
    assert err(text) == message


def test_custom_error_class():
    class MyError(Exception):
        pass

    with pytest.raises(MyError, match=r"^c\.yaml:1: "):
        load_yaml("a: [", "c.yaml", error=MyError)
