"""docs/runtime.md's example runs, and prints what the page's formulas give."""

import contextlib
import io
import re
from pathlib import Path

from tests.runtime.helpers import GRAPH_LAUNCH, LAUNCH, memset_ps

DOC = (Path(__file__).resolve().parents[2] / "docs" / "runtime.md").read_text(encoding="utf-8")


def test_the_example_runs_and_matches_the_formulas():
    code, _communicator = re.findall(r"^```python\n(.*?)^```$", DOC, re.M | re.S)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/runtime.md", "exec"), {})
    eager = 100 * LAUNCH + memset_ps(64)
    graph = LAUNCH + 100 * GRAPH_LAUNCH + memset_ps(64)  # one start a GRAPH_LAUNCH
    assert out.getvalue().splitlines() == [
        f"eager {eager / 1e6:.1f} us, graph {graph / 1e6:.1f} us",
        "(64, 1) 4096",
    ]


def test_the_communicator_example_runs():
    _, code = re.findall(r"^```python\n(.*?)^```$", DOC, re.M | re.S)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/runtime.md", "exec"), {})
    time_ps, algorithm, busbw = out.getvalue().split()
    assert int(time_ps) > 10_000_000 and algorithm in ("mesh", "rdh") and float(busbw) > 0
