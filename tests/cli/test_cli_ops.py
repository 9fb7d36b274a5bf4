"""`trnsim run` and `validate` on traces of high-level ops (`ops:`), lowered by the kernel
library, with `--check` comparing each op's output against its numpy reference."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import trnsim.kernels.elementwise as elementwise
from trnsim.cli import main

MLP = """\
trnsim: 1
name: mlp
chip: trn2
tensors:
  x: {shape: [256, 512], dtype: bfloat16, init: normal}
  w: {shape: [512, 640], dtype: bfloat16, init: normal}
  bias: {shape: [640], dtype: float32, init: normal}
  h: {shape: [256, 640], dtype: float32}
  p: {shape: [256, 640], dtype: float32}
ops:
  - matmul: {a: x, b: w, out: h}
  - add: {a: h, b: bias, out: h}
  - gelu: {x: h, out: h}
  - softmax: {x: h, out: p, dim: -1}
"""


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def mlp(tmp_path):
    p = tmp_path / "mlp.yaml"
    p.write_text(MLP)
    return p


def test_an_ops_trace_runs_and_checks(mlp, tmp_path):
    r = invoke("run", mlp, "--check", "--json", "--out-dir", tmp_path / "out")
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    # h is written last by gelu, p by softmax: both compared, both within tolerance
    assert set(s["check"]) == {"main.ops[2] gelu", "main.ops[3] softmax"}
    assert all(c["ok"] for c in s["check"].values())
    # the saved output really is the softmax of the rows: each row sums to 1
    p = np.load(tmp_path / "out" / "p.npy")
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-5)
    # TensorE's FLOPs: the matmul, and on each of trn2's two cores (LNC 2, each computing half
    # of every op's rows) the K = 1 matmul that spreads the bias over its 128 partitions
    assert s["flops"] == 2 * 256 * 512 * 640 + 2 * (2 * 1 * 128 * 640)


def test_validate_lowers_the_ops(mlp):
    r = invoke("validate", mlp)
    assert r.exit_code == 0, r.output
    assert "ok on trn2: kernels 1" in r.output


def test_a_wrong_lowering_fails_the_check(mlp, monkeypatch):
    """--check can fail: with gelu lowered as tanh, the op's output is not its reference."""
    monkeypatch.setitem(elementwise.UNARY, "gelu", "tanh")
    r = invoke("run", mlp, "--check")
    assert r.exit_code != 0
    assert "main.ops[2] gelu" in r.output and "FAIL" in r.output
    assert "differ from their numpy reference" in r.output


def test_check_says_when_there_is_nothing_to_compare(mlp):
    r = invoke("run", mlp, "--check", "--mode", "timing")
    assert r.exit_code == 0
    assert "check           nothing to compare: a timing-mode run computes no values" in r.output


def test_an_unknown_op_names_its_line(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text(MLP.replace("  - gelu: {x: h, out: h}", "  - conv2d: {x: h, out: h}"))
    r = invoke("run", p)
    assert r.exit_code != 0
    assert f"{p}:13: ops[2]: unknown op 'conv2d'" in r.output
    assert "Traceback" not in r.output


def test_a_fused_chain_passes_the_check(tmp_path):
    """Four elementwise ops in a row run as one fused kernel; --check replays them one by one
    in numpy from the initial values and compares the final h and y."""
    p = tmp_path / "chain.yaml"
    p.write_text(
        "trnsim: 1\nchip: trn2\ntensors:\n"
        "  h: {shape: [300, 1000], dtype: bfloat16, init: normal}\n"
        "  x: {shape: [300, 1000], dtype: bfloat16, init: normal}\n"
        "  y: {shape: [300, 1000], dtype: float32}\n"
        "ops:\n"
        "  - add: {a: h, b: x, out: h}\n"
        "  - gelu: {x: h, out: h}\n"
        "  - mul: {a: h, b: 2.0, out: y}\n"
        "  - exp: {x: y, out: y}\n"
    )
    r = invoke("run", p, "--check", "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert set(s["check"]) == {"main.ops[1] gelu", "main.ops[3] exp"}
    assert all(c["ok"] for c in s["check"].values())
    assert s["hbm"]["bytes_read"] == 2 * 300 * 1000 * 2  # h and x once: fused
