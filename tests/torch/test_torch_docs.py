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


def test_the_compile_example_runs_and_its_recording_replays(capsys, tmp_path):
    """examples/torch_compile.py on trn2: compiled faster than eager (launch-bound: the host's
    launches against one graph launch), a profile and a recording written, and the recording
    replayed by `trnsim run` in as long as the eager step the example measured (within 1%)."""
    import json
    import re
    import runpy

    from click.testing import CliRunner

    from trnsim.cli import main

    root = Path(__file__).resolve().parents[2] / "examples"
    ex = runpy.run_path(str(root / "torch_compile.py"), run_name="example")
    ex["run"]("trn2", tmp_path)
    out = capsys.readouterr().out
    times = re.findall(
        r"trn2 (forward|training step): eager ([\d.]+) ms, compiled ([\d.]+) ms", out
    )
    assert [t[0] for t in times] == ["forward", "training step"], out
    for _, eager, compiled in times:
        assert float(compiled) < float(eager)
    assert json.loads((tmp_path / "profile.json").read_text())["traceEvents"]
    r = CliRunner().invoke(main, ["run", str(tmp_path / "step.yaml"), "--json", "--quiet"])
    assert r.exit_code == 0, r.output
    replayed_ms = json.loads(r.stdout)["total_time_ns"] / 1e6
    assert replayed_ms == pytest.approx(float(times[1][1]), rel=0.01)
