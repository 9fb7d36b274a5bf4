"""inputs.yaml_events: the libyaml fast path gives what the pure-Python reference loader gives
(value, lines, or error message), or hands the text over to it."""

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.inputs.helpers import DOC, err
from trnsim.errors import TraceError
from trnsim.inputs import positions, yaml_events
from trnsim.inputs.load import load_yaml
from trnsim.inputs.positions import PosDict, PosList, reference_load


def positioned(value):
    """`value` with every line made explicit, for comparing two loads exactly."""
    if isinstance(value, PosDict):
        return (
            "map",
            value.line,
            [(k, type(k).__name__, value.line_of(k), positioned(v)) for k, v in value.items()],
        )
    if isinstance(value, PosList):
        return ("seq", value.line, list(value.item_lines), [positioned(v) for v in value])
    return (type(value).__name__, repr(value))


def reference(text: str):
    """`load_yaml` with the pure-Python loader forced: the value, or the error message."""
    try:
        return positioned(reference_load(text, "t.yaml", TraceError))
    except TraceError as e:
        return str(e)


def fast(text: str):
    """The libyaml fast path alone: the value or error message, or None when it hands over to
    the reference loader."""
    try:
        return positioned(yaml_events.fast_load(text, "t.yaml", TraceError))
    except TraceError as e:
        return str(e)
    except (yaml_events.Fallback, yaml.YAMLError, RecursionError):
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
    assert (
        positioned(load_yaml(text, "t.yaml")) if not isinstance(want, str) else err(text)
    ) == want


def test_fast_path_covers_the_common_subset():
    for text in (DOC, "a: &x {b: 1}\nc: *x\n", "- [1, 2.5, true, ~, 'x']\n", ""):
        assert fast(text) is not None or not yaml_events.AVAILABLE


def test_deep_nesting_does_not_crash_libyaml():
    # libyaml's own composer recurses in C and overflows the stack on this; ours must not
    assert err("[" * 100_000).startswith("t.yaml:1: syntax: nesting is too deep; expected at most")
    nested = load_yaml("[" * 100 + "]" * 100)
    for _ in range(99):
        nested = nested[0]
    assert nested == []


KEYS = st.sampled_from(["a", "b", "op", "on", "1", "<<", "x y", "-", "?", ""]) | st.integers(-2, 2)
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.sampled_from(
        [
            "x",
            "1:30",
            "0x1F",
            "1e3",
            ".5",
            "~",
            "yes",
            "=",
            "2020-01-01",
            "*a",
            "&a",
            "! x",
            "!!str 1",
            "|",
            "- x",
            "a: b",
            "[",
            "#",
            "'",
            '"',
        ]
    )
    | st.text(max_size=6)
)
TREES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12,
)


@st.composite
def yaml_texts(draw):
    """Dumped trees in either style, then maybe one line damaged or an anchor/alias added."""
    text = yaml.safe_dump(
        draw(TREES),
        default_flow_style=draw(st.sampled_from([None, False, True])),
        allow_unicode=True,
        width=draw(st.sampled_from([20, 80])),
    )
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
@example("0\tnull")  # libyaml reads a string, the reference a syntax error: tabs go to the latter
def test_fuzz_fast_path_equals_the_reference(text):
    got = fast(text)
    if got is not None:
        assert got == reference(text)


@st.composite
def aliased_texts(draw):
    """Flow lists and mappings whose items are scalars or aliases of the anchors before them."""
    anchors, items = [], []
    for n in range(draw(st.integers(1, 6))):
        parts = []
        for _ in range(draw(st.integers(0, 4))):
            parts.append(draw(st.sampled_from([*(f"*a{k}" for k in anchors), "1", "x", "[2, 3]"])))
        if draw(st.booleans()):
            body = "[" + ", ".join(parts) + "]"
        else:
            body = "{" + ", ".join(f"k{i}: {p}" for i, p in enumerate(parts)) + "}"
        if draw(st.booleans()):
            anchors.append(n)
            body = f"&a{n} {body}"
        items.append(body)
    return "- " + "\n- ".join(items) + "\n"


def _counts(text: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(nodes, nodes added by aliases) as the fast path and the reference loader count them."""
    from yaml._yaml import CParser  # noqa: PLC0415

    get = CParser(text).get_event
    get(), get()
    fast_builder = yaml_events._Builder(get, "t", TraceError)
    fast_builder.node(get(), 0)
    ref = positions._Loader(text, "t", TraceError)
    ref.get_single_node()
    return (fast_builder.nodes, fast_builder.aliased), (ref.nodes, ref.aliased)


@settings(max_examples=100, deadline=None)
@given(aliased_texts())
@example("- &a0 [1, 1]\n- &a1 [*a0, *a0, {k: *a0}]\n- [*a1, *a1]\n")
def test_fuzz_both_loaders_count_aliased_nodes_alike(text):
    """A document is refused for its aliases by both loaders or by neither: they count every
    key and item, and at each alias every node below its anchor."""
    fast_count, reference_count = _counts(text)
    assert fast_count == reference_count
    data = reference_load(text)

    def size(value) -> int:  # the nodes below `value`, aliases expanded
        if isinstance(value, dict):
            return sum(1 + 1 + size(v) for v in value.values())
        if isinstance(value, list):
            return sum(1 + size(v) for v in value)
        return 0

    assert fast_count[0] == size(data)
