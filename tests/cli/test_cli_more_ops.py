"""`trnsim run --check` on a trace of the movement, reduction and loss ops (LNC 2, trn2's
default): each output, split's several too, against its numpy reference."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from trnsim.cli import main

TRACE = """\
trnsim: 1
name: more
chip: trn2
tensors:
  x: {shape: [256, 1000], dtype: bfloat16, init: normal}
  t: {shape: [256], dtype: int32, init: arange}
  a: {shape: [256, 600], dtype: bfloat16}
  b: {shape: [256, 400], dtype: bfloat16}
  loss: {shape: [1], dtype: float32}
  s: {shape: [1000], dtype: float32}
  i: {shape: [256], dtype: int32}
ops:
  - split: {x: x, split_size: [600, 400], outs: [a, b], dim: 1}
  - cross_entropy: {input: x, target: t, out: loss}
  - sum: {x: x, out: s, dim: 0}
  - argmax: {x: x, out: i, dim: -1}
"""


def test_more_ops_run_and_check(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text(TRACE)
    r = CliRunner().invoke(main, ["run", str(p), "--check", "--json", "--out-dir",
                                  str(tmp_path / "out")])  # fmt: skip
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert set(s["check"]) == {
        "main.ops[0] split a",
        "main.ops[0] split b",
        "main.ops[1] cross_entropy",
        "main.ops[2] sum",
        "main.ops[3] argmax",
    }
    assert all(c["ok"] for c in s["check"].values()), s["check"]
    x = np.load(tmp_path / "out" / "x.npy").astype(np.float64)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "b.npy"), x[:, 600:].astype(
        np.load(tmp_path / "out" / "b.npy").dtype))  # fmt: skip


def test_a_list_argument_of_the_wrong_kind_names_its_line(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text(TRACE.replace("outs: [a, b]", "outs: a").replace("dim: 0}", "dim: 0}"))
    r = CliRunner().invoke(main, ["run", str(p)])
    assert r.exit_code == 2
    assert "t.yaml:13: ops[0].split.outs: split: outs: got 'a'; expected a " \
        "non-empty list of tensor names" in r.output  # fmt: skip
    p.write_text(TRACE.replace("- sum: {x: x, out: s, dim: 0}",
                               "- permute: {x: x, out: s, dims: [1, x]}"))  # fmt: skip
    r = CliRunner().invoke(main, ["run", str(p)])
    assert r.exit_code == 2
    assert "ops[2].permute.dims: permute: dims: got a list; expected a list of integers" in r.output
