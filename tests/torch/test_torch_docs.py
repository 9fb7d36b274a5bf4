"""docs/torch.md's example runs and its report reads as the page says."""

import contextlib
import io
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

DOC = (Path(__file__).resolve().parents[2] / "docs" / "torch.md").read_text(encoding="utf-8")


def test_the_example_runs_and_reports_simulated_time():
    (code,) = re.findall(r"^```python\n(.*?)^```$", DOC, re.M | re.S)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/torch.md", "exec"), {})
    lines = out.getvalue().splitlines()
    ms = float(lines[0].split()[0])
    assert ms > 0 and lines[0].endswith("ms simulated")
    assert lines[1].startswith("neuron device: ")
    assert any("kernel library" in line for line in lines)


def test_the_examples_run(capsys):
    import runpy

    root = Path(__file__).resolve().parents[2] / "examples"
    runpy.run_path(str(root / "torch_move.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "ms of simulated time" in out and "step 4: loss" in out
    gpt = runpy.run_path(str(root / "torch_gpt.py"), run_name="example")
    gpt["run"].__globals__["STEPS"] = 1  # run_path returns a copy of the module's globals
    gpt["run"]("trn2")  # the chip the tests use (one per process)
    out = capsys.readouterr().out
    assert "trn2 step 0: loss" in out and "tokens/s, MFU" in out
