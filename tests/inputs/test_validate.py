"""inputs.validate: Loc steps into positioned data; the checks and their one-line messages."""

import pytest

from trnsim.errors import TraceError
from trnsim.inputs.load import load_yaml
from trnsim.inputs.validate import Loc, check_keys, hint, one_of, show, want_int, want_name

DOC = """\
a: 1
b:
  - x
  - {c: 2, d: [3, 4]}
  -
    e: 5
f: {g: 6}
"""


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
    assert str(info.value) == (
        "t.yaml:2: tensors.a.shpe: unknown key 'shpe' (did you mean "
        "'shape'?); expected one of x, shape, dtype"
    )


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
