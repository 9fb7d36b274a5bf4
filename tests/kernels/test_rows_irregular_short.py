"""Row ops at short row lengths that are not powers of two (issue 26), trn2 LNC 2, 16 MiB of x:
>= 80% of the larger bound, as test_rows_families asserts. 16 MiB in rows of 96 is 43690 (fp32)
or 87381 (bf16) rows, which the cores share as 21888 and 21802 (`layout.core_rows`); the
largest power of two that divided every block of the second core's share was 1 or 2 rows a
partition (bf16 softmax at 22%, sum at 18%), where `layout.row_tiles` puts 16 and its last
rows in a block of their own. And the values hold at such shapes (--check, LNC 1 == LNC 2),
layer_norm's too (its plan's ScalarE columns, which round apart from VectorE's, were chosen
on a core's blocks: a core of one block chose others, [2048, 200] bf16 differed)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.test_rows_families import case, reached
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.kernels.layout import row_tiles
from trnsim.runtime.session import run_program
from trnsim.trace.program import KernelSpec, OpSpec, Program, Step, StreamSpec, TensorSpec

CASES = [  # (before: % of the bound)
    ("softmax", "bfloat16", 96),  # 22.1%
    ("log_softmax", "float32", 100),  # 45.1%
    ("softmax", "bfloat16", 384),  # 45.4%
    ("sum", "bfloat16", 96),  # 18.3%
    ("mean", "bfloat16", 200),  # 29.1%
    ("amax", "float32", 100),  # 22.5%
    ("rms_norm", "bfloat16", 200),  # 40.0%
    ("rms_norm", "float32", 100),  # 74.8%
    ("rms_norm", "bfloat16", 136),  # 77.6% (`rms_short.SHORT_ROW` 128 -> 320)
    ("layer_norm", "float32", 320),  # 77.9% (12 rows a partition, not 8: `norms._lower`)
]


@pytest.mark.parametrize("op,dt,d", CASES)
def test_irregular_short_rows_reach_80_percent(op, dt, d):
    got, row, engines = reached(*case(op, d, dt), op, dt, d)
    assert got >= 0.8, (row["time_ns"], row["roofline_ns"], engines)


def test_row_tiles_spread_the_rows_left():
    """A core's 21802 rows of 96 (at most 16 a partition): 16 a partition but for the last
    1322 (11 to each of 120 partitions, and 2 one to a partition); with a unit of 4, 12 to
    each of 110 and the 2; 98 rows left under blocks of 4 a partition go one to each of 98."""
    per, blocks = row_tiles((43690, 96), 128, (21888, 43690), 16)
    assert per == 16 and [n for _, n, _ in blocks] == [2048] * 10 + [1320, 2]
    assert [k for _, _, k in blocks] == [16] * 10 + [11, 1]
    assert blocks[-1][0] == (slice(43688, 43690),)
    _, blocks = row_tiles((43690, 96), 128, (21888, 43690), 16, unit=4)
    assert [(n, k) for _, n, k in blocks[-2:]] == [(1320, 12), (2, 1)]
    _, blocks = row_tiles((4194, 1000), 128, (2048, 4194), 4)
    assert [(n, k) for _, n, k in blocks] == [(512, 4)] * 4 + [(98, 1)]
    # rows over items of an outer dim: every row once, in order, each block k to a partition
    _, blocks = row_tiles((7, 333, 100), 128, None, 16)
    assert sum(n for _, n, _ in blocks) == 7 * 333
    assert all(n % k == 0 and n // k <= 128 for _, n, k in blocks)


def _run(op: str, shape: tuple, dt: str, lnc: int) -> np.ndarray:
    """out of one `op` over x of `shape` at `lnc`, run functionally with --check (which must
    hold)."""
    t, d = dtype(dt), shape[-1]
    specs = {"x": TensorSpec("x", shape, t, "normal")}
    args = {"x": "x", "out": "out"}
    if op in ("sum", "mean", "amax"):
        specs["out"], args["dim"] = TensorSpec("out", shape[:-1], t, None), -1
    else:
        specs["out"] = TensorSpec("out", shape, t, None)
    affine = {"layer_norm": 2, "rms_norm": 1}.get(op, 0)
    for arg, name in (("weight", "w"), ("bias", "b"))[:affine]:
        specs[name], args[arg] = TensorSpec(name, (d,), t, "normal"), name
    prog = Program("p", "trn2", 0, "functional", lnc, [], specs,
                   {"k": KernelSpec("k", ops=[OpSpec(op, args, 1)])},
                   [StreamSpec("s", 0, [Step("launch", "k")])])  # fmt: skip
    r = run_program(prog, load_chip("trn2"), "functional", check=True)
    assert all(c["ok"] for c in r.summary["check"].values()), r.summary["check"]
    return r.tensor("out")


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "sum", "mean", "amax", "rms_norm",
                                "layer_norm"])  # fmt: skip
@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_irregular_short_rows_check(op, dt):
    """--check holds and LNC 1 and 2 give the same values at [3001, 96] (the second core's
    1465 rows: 12 to each of 122 partitions, and one), [7, 333, 100] (blocks over items of the outer
    dim) and [2048, 200] (one block a core at LNC 2, two at LNC 1)."""
    for shape in ((3001, 96), (7, 333, 100), (2048, 200)):
        outs = [_run(op, shape, dt, lnc) for lnc in (1, 2)]
        np.testing.assert_array_equal(outs[0], outs[1])
