"""The two physical cores of an LNC 2 logical core meet at a `core_barrier` between ops where
one op needs rows the other core wrote (trnsim/kernels/__init__.py, `_meetings`): values equal
to LNC 1 with `--check`, the race check passes, the barrier is in each core's program, and a
kernel whose ops need no rows of the other core's has none."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from trnsim.cli import main
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.isa import CoreBarrier
from trnsim.kernels import lower_cores
from trnsim.trace.program import OpSpec, TensorSpec

F32 = dtype("float32")

# each op reads what the one before wrote, with another split than it was written with
CROSSING = """\
trnsim: 1
name: crossing
chip: trn2
lnc: {lnc}
tensors:
  x: {{shape: [256, 128], dtype: float32, init: normal}}
  w: {{shape: [128, 128], dtype: float32, init: normal}}
  y: {{shape: [128, 128], dtype: float32}}
  z: {{shape: [256, 128], dtype: float32}}
  s: {{shape: [128], dtype: float32}}
  t: {{shape: [256, 128], dtype: float32}}
  u: {{shape: [384, 128], dtype: float32}}
ops:
  - softmax: {{x: w, out: y}}              # rows of w split between the cores
  - matmul: {{a: x, b: y, out: z}}         # reads y whole: the cores meet first
  - sum: {{x: z, out: s, dim: 0}}          # a reduction over rows: shared otherwise (alone)
  - mul: {{a: z, b: 2.0, out: t}}          # reads z, which the sum read: no meeting needed
  - cat: {{tensors: [t, w], out: u}}       # alone, reads t the other core wrote: meet
"""


def _run(tmp_path, lnc: int):
    p = tmp_path / f"crossing{lnc}.yaml"
    p.write_text(CROSSING.format(lnc=lnc))
    out = tmp_path / f"out{lnc}"
    r = CliRunner().invoke(main, ["run", str(p), "--check", "--json", "--out-dir", str(out)])
    assert r.exit_code == 0, r.output
    return json.loads(r.output), out


def test_values_at_lnc_2_equal_lnc_1_and_the_check_and_race_check_pass(tmp_path):
    s2, out2 = _run(tmp_path, 2)
    s1, out1 = _run(tmp_path, 1)
    assert s2["check"] and all(c["ok"] for c in s2["check"].values())
    for name in ("y", "z", "s", "t", "u"):
        a, b = np.load(out2 / f"{name}.npy"), np.load(out1 / f"{name}.npy")
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=name)


def _kernel(ops, shapes):
    tensors = {n: TensorSpec(n, s, F32) for n, s in shapes.items()}
    return lower_cores([OpSpec(o, a, i + 1) for i, (o, a) in enumerate(ops)], tensors,
                       load_chip("trn2"), 2)  # fmt: skip


def _barriers(programs) -> list[int]:
    return [sum(type(i) is CoreBarrier for i in p.instructions) for p in programs]


def test_a_whole_read_of_a_row_split_tensor_meets_once_on_both_cores():
    progs = _kernel([("softmax", {"x": "w", "out": "y"}), ("matmul", {"a": "x", "b": "y", "out": "z"})],
                    {"x": (256, 128), "w": (128, 128), "y": (128, 128), "z": (256, 128)})  # fmt: skip
    assert _barriers(progs) == [1, 1]


def test_ops_that_keep_their_rows_do_not_meet():
    progs = _kernel([("exp", {"x": "x", "out": "y"}), ("softmax", {"x": "y", "out": "z"}),
                     ("matmul", {"a": "z", "b": "w", "out": "v"})],
                    {"x": (256, 128), "y": (256, 128), "z": (256, 128), "w": (128, 64),
                     "v": (256, 64)})  # fmt: skip
    assert _barriers(progs) == [0, 0]


def test_a_chip_without_core_barrier_names_the_op():
    cfg = load_chip("trn2", ["core.core_barrier=false"])
    tensors = {
        n: TensorSpec(n, s, F32)
        for n, s in {"x": (256, 128), "w": (128, 128), "y": (128, 128), "z": (256, 128)}.items()
    }
    ops = [
        OpSpec("softmax", {"x": "w", "out": "y"}, 3),
        OpSpec("matmul", {"a": "x", "b": "y", "out": "z"}, 4),
    ]
    with pytest.raises(
        Exception, match=r"t.yaml:4: matmul: b 'y' was written by an earlier op.*no core_barrier"
    ):
        lower_cores(ops, tensors, cfg, 2, "t.yaml")
