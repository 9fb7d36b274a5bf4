"""yamlpos: YAML that remembers lines, one-line errors, YAML 1.2 scalars, validation helpers."""

import gc

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trnsim.errors import TraceError
from trnsim.inputs import positions as yamlpos
from trnsim.inputs.positions import (
    Loc,
    PosDict,
    PosList,
    check_keys,
    hint,
    load_yaml,
    one_of,
    show,
    want_int,
    want_name,
)

DOC = """\
a: 1
b:
  - x
  - {c: 2, d: [3, 4]}
  -
    e: 5
f: {g: 6}
"""


def err(text: str, source: str = "t.yaml") -> str:
    with pytest.raises(TraceError) as info:
        load_yaml(text, source)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


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
    d = load_yaml("on: host\nyes: no\nt: [true, False, TRUE]\n"
                  "n: [1e-5, 1e3, .5, 010, 0x1F, 0o17, 0b11, 1_000, -3, +4, 1:30, 2020-01-01, =]\n"
                  "z: [~, null, .inf, -.inf]\n")
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


@pytest.mark.parametrize("text, message", [
    ("a: 1\nb: 2\na: 3\n",
     "t.yaml:3: top level: duplicate key 'a'; expected each key at most once"),
    ("a:\n  b: [1, {c: 1,\n   c: 2}]\n",
     "t.yaml:3: a.b[1]: duplicate key 'c'; expected each key at most once"),
    ("a: 1\nb: [\n", "t.yaml:3: syntax: while parsing a flow node, expected the node content, "
                     "but found '<stream end>' (column 1); expected valid YAML"),
    ("a: b: c\n", "t.yaml:1: syntax: mapping values are not allowed here (column 5); "
                  "expected valid YAML"),
    ("x:\n  y: !!int abc\n", "t.yaml:2: x.y: cannot read 'tag:yaml.org,2002:int' value: invalid "
                             "literal for int() with base 10: 'abc'; expected a valid value for "
                             "the tag"),
    ("a: &x [*x]\n", "t.yaml:1: syntax: found unconstructable recursive node (column 4); "
                     "expected valid YAML"),
    ("{[1]: 2}\n", "t.yaml:1: top level: a mapping key must be a plain value; "
                   "expected a name as the key"),
    ("a: !foo 1\n", "t.yaml:1: syntax: could not determine a constructor for the tag '!foo' "
                    "(column 4); expected valid YAML"),
    ("a: 1\nb: \x01\n", "t.yaml:2: syntax: character '\\x01' is not allowed in YAML; "
                        "expected valid YAML"),
    ("- a\n---\n- b\n", "t.yaml:2: syntax: expected a single document in the stream, but found "
                        "another document (column 1); expected valid YAML"),
    ("[" * 3000, "t.yaml:1: syntax: nesting is too deep; expected at most 100 levels of nested "
                 "lists and mappings"),
    ("a:\n" + "".join(f"{'  ' * i}- \n" for i in range(101)),
     "t.yaml:101: syntax: nesting is too deep; expected at most 100 levels of nested lists and "
     "mappings"),
], ids=lambda v: v[:20] if isinstance(v, str) else None)
def test_errors_are_one_line_with_the_line(text, message):
    assert err(text) == message


def test_custom_error_class():
    class MyError(Exception):
        pass

    with pytest.raises(MyError, match=r"^c\.yaml:1: "):
        load_yaml("a: [", "c.yaml", error=MyError)


def test_loc_steps_into_positioned_data():
    d = load_yaml(DOC, "t.yaml")
    root = Loc("t.yaml", 1, "")
    loc = root.key(d, "b").item(d["b"], 1).key(d["b"][1], "d").item(d["b"][1]["d"], 0)
    assert loc == Loc("t.yaml", 4, "b[1].d[0]")
    with pytest.raises(TraceError) as info:
        loc.fail("bad\nthing", "a good one")
    assert str(info.value) == "t.yaml:4: b[1].d[0]: bad thing; expected a good one"
    with pytest.raises(TraceError, match=r"^t\.yaml:1: top level: x; expected y$"):
        root.fail("x", "y")
    # plain dicts (the builder API) keep the parent's line
    assert root.key({"k": 1}, "k") == Loc("t.yaml", 1, "k")


def test_check_keys_names_the_key_and_suggests():
    d = load_yaml("x: 1\nshpe: 2\n")
    with pytest.raises(TraceError) as info:
        check_keys(d, Loc("t.yaml", 1, "tensors.a"), ["x", "shape", "dtype"])
    assert str(info.value) == ("t.yaml:2: tensors.a.shpe: unknown key 'shpe' (did you mean "
                               "'shape'?); expected one of x, shape, dtype")


def test_small_helpers():
    assert show(None) == "null" and show(True) == "true" and show([1]) == "a list"
    assert show({}) == "an empty mapping" and show({"a": 1, 2: 3}) == "a mapping with keys a, 2"
    assert show({"a": 1}) == "a mapping with key a"
    assert show([]) == "an empty list"
    assert show(dict.fromkeys("abcdef")) == "a mapping with keys a, b, c, ..."
    assert show("ab") == "'ab'" and show(3) == "3"
    assert len(show("x" * 500)) == 60
    assert hint("x_tt", ["x_t", "acc"]) == " (did you mean 'x_t'?)"
    assert hint(3, ["x"]) == "" and hint("zzz", ["abc"]) == ""
    assert one_of(["a", "b"]) == "one of a, b"
    assert one_of(str(i) for i in range(30)).endswith(", 23, ... (6 more)")
    assert one_of([]) == "a name, but none is defined"
    loc = Loc("t.yaml", 5, "seed")
    assert want_int(3, loc, "int") == 3
    with pytest.raises(TraceError, match="got true; expected an int"):
        want_int(True, loc, "an int")
    with pytest.raises(TraceError, match="got -1; expected >= 0"):
        want_int(-1, loc, ">= 0", minimum=0)
    with pytest.raises(TraceError, match="tensor name '1x' is not an identifier"):
        want_name("1x", loc, "tensor", ident=True)
    assert want_name("done-1", loc, "event") == "done-1"


# ----------------------------------------------------------------------------------------------
# the libyaml fast path and the pure-Python reference loader agree


def positioned(value):
    """`value` with every line made explicit, for comparing two loads exactly."""
    if isinstance(value, PosDict):
        return ("map", value.line, [(k, type(k).__name__, value.line_of(k), positioned(v))
                                    for k, v in value.items()])
    if isinstance(value, PosList):
        return ("seq", value.line, list(value.item_lines), [positioned(v) for v in value])
    return (type(value).__name__, repr(value))


def reference(text: str):
    """`load_yaml` with the pure-Python loader forced: the value, or the error message."""
    try:
        return positioned(yamlpos._slow_load(text, "t.yaml", TraceError))
    except TraceError as e:
        return str(e)


def fast(text: str):
    """The libyaml fast path alone: the value or error message, or None when it hands over to
    the reference loader."""
    try:
        return positioned(yamlpos._fast_load(text, "t.yaml", TraceError))
    except TraceError as e:
        return str(e)
    except (yamlpos._Fallback, yaml.YAMLError, RecursionError):
        return None


SAME = [
    DOC,
    "",
    "# only a comment\n",
    "---\n",
    "--- 3\n...\n",
    "plain\n",
    "a: &x {b: [1, 2.5, true, ~, '3', \"q\", |\n    block\n  ]}\nc: *x\nd: [*x, *x]\n",
    "&k key: &v value\n*v : *k\n",
    "{'on': [-10000], ?\n  : null, 0: null}\n",
    "? complex key\n: value\n? [not, hashable]\n",
    "- - - deep\n    - x\n  - y\n-\n  - z\n",
    "a:\n- x\n- y\nb:\n  c:\n    d: e\n",
    "a: 1\r\nb:\r\n  - 2\r\n",
    "x: !!str 3\n",
    "x: ! 3\n",
    "<<: {a: 1}\nb: 2\n",
    "a: 1\na: 2\n",
    "{1: a, 1.0: b}\n",
    "[.nan, .inf, -.inf, 0x1F, 0o17, 0b11, 1_000, 010, 1e3, +1, -0, '', ~, null, Null]\n",
    "on: yes\noff: no\nt: True\nf: FALSE\n",
    "a: *undefined\n",
    "a: &x [*x]\n",
    "a: &x 1\nb: &x 2\n",
    "- a\n---\n- b\n",
    "a: [\n",
    "a: b: c\n",
    "a: \x01\n",
    "[" * 100 + "]" * 100 + "\n",
    "[" * 101 + "]" * 101 + "\n",
    "a:\n" + "".join(f"{'  ' * i}- \n" for i in range(101)),
    "k: 'multi\n  line'\nl: >\n  folded\n  text\nm: x\n",
]


@pytest.mark.parametrize("text", SAME, ids=range(len(SAME)))
def test_fast_path_equals_the_reference(text):
    want = reference(text)
    got = fast(text)
    assert got is None or got == want
    assert (positioned(load_yaml(text, "t.yaml")) if not isinstance(want, str)
            else err(text)) == want


def test_fast_path_covers_the_common_subset():
    for text in (DOC, "a: &x {b: 1}\nc: *x\n", "- [1, 2.5, true, ~, 'x']\n", ""):
        assert fast(text) is not None or not yamlpos.LIBYAML


def test_deep_nesting_does_not_crash_libyaml():
    # libyaml's own composer recurses in C and overflows the stack on this; ours must not
    assert err("[" * 100_000).startswith("t.yaml:1: syntax: nesting is too deep; expected at most")
    nested = load_yaml("[" * 100 + "]" * 100)
    for _ in range(99):
        nested = nested[0]
    assert nested == []


@pytest.mark.parametrize("text, message", [
    ("a: 1\nb: 2\na: 3\n", "t.yaml:3: top level: duplicate key 'a'"),
    ("a:\n  b: [1, {c: 1,\n   c: 2}]\n", "t.yaml:3: a.b[1]: duplicate key 'c'"),
    ("a: 1\nb: [\n", "t.yaml:3: syntax: while parsing a flow node"),
    ("x:\n  y: !!int abc\n", "t.yaml:2: x.y: cannot read 'tag:yaml.org,2002:int' value"),
])
def test_line_numbers_with_the_pure_python_loader_forced(monkeypatch, text, message):
    monkeypatch.setattr(yamlpos, "LIBYAML", False)
    assert err(text).startswith(message)
    monkeypatch.setattr(yamlpos, "_fast_load", None)  # would fail if it were still called
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


KEYS = st.sampled_from(["a", "b", "op", "on", "1", "<<", "x y", "-", "?", ""]) | st.integers(-2, 2)
LEAVES = (st.none() | st.booleans() | st.integers() | st.floats()
          | st.sampled_from(["x", "1:30", "0x1F", "1e3", ".5", "~", "yes", "=", "2020-01-01", "*a",
                             "&a", "! x", "!!str 1", "|", "- x", "a: b", "[", "#", "'", '"'])
          | st.text(max_size=6))
TREES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(KEYS, inner, max_size=3), max_leaves=12)


@st.composite
def yaml_texts(draw):
    """Dumped trees in either style, then maybe one line damaged or an anchor/alias added."""
    text = yaml.safe_dump(draw(TREES), default_flow_style=draw(st.sampled_from([None, False,
                                                                                   True])),
                          allow_unicode=True, width=draw(st.sampled_from([20, 80])))
    lines = text.splitlines()
    i = draw(st.integers(0, len(lines) - 1))
    edit = draw(st.sampled_from(["none", "cut", "dup", "insert", "indent", "anchor"]))
    if edit == "cut":
        lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
    elif edit == "dup":
        lines.insert(i, lines[i])
    elif edit == "insert":
        lines.insert(i, draw(st.text(max_size=8)))
    elif edit == "indent":
        lines[i] = " " * draw(st.integers(1, 3)) + lines[i]
    elif edit == "anchor":
        lines[0] = "&a " + lines[0] if draw(st.booleans()) else lines[0] + " *a"
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n...\n", "\n---\n"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(yaml_texts())
def test_fuzz_fast_path_equals_the_reference(text):
    got = fast(text)
    if got is not None:
        assert got == reference(text)
