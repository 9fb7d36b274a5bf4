"""Init files (`init: {file: x.npy}`) of tensors and tiles: the loader checks them and makes
their paths absolute, relative to the trace's folder, whatever the working directory."""

import os

import numpy as np
from click.testing import CliRunner

from tests.trace.helpers import error
from trnsim.cli import main
from trnsim.config import load_chip
from trnsim.runtime.session import run_program
from trnsim.trace import load, loads


def test_init_file_relative_to_the_trace(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(6, dtype=np.float64).reshape(2, 3))
    (tmp_path / "t.yaml").write_text(
        "trnsim: 1\ntensors:\n  x: {shape: [2, 3], dtype: bfloat16, init: {file: x.npy}}\n"
    )
    p = load(tmp_path / "t.yaml")
    assert p.tensors["x"].init == ("file", str(tmp_path / "x.npy"))
    assert p.name == "t" and p.source == str(tmp_path / "t.yaml")


def test_init_file_errors(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((2, 3)))
    (tmp_path / "bad.npy").write_text("not numpy")
    head = "trnsim: 1\ntensors:\n  x: {shape: [3, 2], dtype: float32, init: {file: %s}}\n"
    assert error(head % "x.npy", base_dir=tmp_path) == (
        "t.yaml:3: tensors.x.init.file: the file holds shape [2, 3]; expected shape [3, 2]"
    )
    assert error(head % "nope.npy", base_dir=tmp_path).startswith(
        f"t.yaml:3: tensors.x.init.file: no file '{tmp_path / 'nope.npy'}'; expected a .npy"
    )
    assert error(head % "bad.npy", base_dir=tmp_path) == (
        f"t.yaml:3: tensors.x.init.file: '{tmp_path / 'bad.npy'}': not a .npy file (it does not "
        "start with numpy's header: a text file?); expected a .npy file saved by numpy.save"
    )
    assert error(head % "[1]", base_dir=tmp_path) == (
        "t.yaml:3: tensors.x.init.file: got a list; expected a path to a .npy file"
    )


def test_loads_makes_init_paths_absolute(tmp_path, monkeypatch):
    np.save(tmp_path / "x.npy", np.zeros((2, 3)))
    monkeypatch.chdir(tmp_path)
    text = "trnsim: 1\ntensors:\n  x: {shape: [2, 3], dtype: float32, init: {file: x.npy}}\n"
    assert loads(text).tensors["x"].init == ("file", str(tmp_path / "x.npy"))
    assert loads(text, base_dir=".").tensors["x"].init == ("file", str(tmp_path / "x.npy"))


SUB = """\
trnsim: 1
tensors:
  x: {shape: [128, 4], dtype: float32, init: {file: x.npy}}
  y: {shape: [128, 4], dtype: float32}
tiles:
  a: {memory: sbuf, shape: [128, 4], dtype: float32, init: {file: data/a.npy}}
  b: {memory: sbuf, shape: [128, 4], dtype: float32}
instructions:
  - {op: dma_copy, src: x, dst: b, signal: {ld: 1}}
  - {op: tensor_tensor, alu: add, src0: a, src1: b, dst: b, wait: {ld: 1}, signal: {add: 1}}
  - {op: dma_copy, src: b, dst: y, wait: {add: 1}}
"""


def _trace_in_a_subfolder(root):
    x = np.arange(512, dtype=np.float32).reshape(128, 4)
    a = np.full((128, 4), 0.5, dtype=np.float32)
    (root / "sub" / "data").mkdir(parents=True)
    np.save(root / "sub" / "x.npy", x)
    np.save(root / "sub" / "data" / "a.npy", a)
    (root / "sub" / "t.yaml").write_text(SUB)
    return x + a


def test_a_trace_in_a_subfolder_runs_from_its_parent(tmp_path, monkeypatch):
    want = _trace_in_a_subfolder(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = run_program(load("sub/t.yaml"), load_chip("trn2"))
    np.testing.assert_array_equal(result.tensor("y"), want)
    np.testing.assert_array_equal(result.tile("main", "a"), np.full((128, 4), 0.5))


def test_cli_runs_a_trace_in_a_subfolder_from_its_parent(tmp_path, monkeypatch):
    want = _trace_in_a_subfolder(tmp_path)
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(main, ["run", "sub/t.yaml", "--out-dir", "out"])
    assert out.exit_code == 0, out.output
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), want)
    assert os.path.isfile(tmp_path / "out" / "y.npy")
