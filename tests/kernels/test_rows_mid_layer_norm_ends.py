"""layer_norm at the long row lengths between the tested ones (issue 26): rows of 256K fp32 and
512K bf16 are a [128, f] tile each (8 a core, 1 MiB), loaded one after another
(`norms.BIG_LOADS`); fp32's in two lanes, on the engines the list schedule picks
(`norms.ROW_TILES`): >= 80% of the larger bound (trn2 LNC 2, 16 MiB), as
test_rows_families asserts. bf16 rows of 512K are not there yet (73.9%, docs/kernels.md): what
it reaches is asserted so it does not fall back. And the values hold (--check)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.test_rows_families import case, reached
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.kernels import norms
from trnsim.runtime.session import run_program
from trnsim.trace.program import KernelSpec, OpSpec, Program, Step, StreamSpec, TensorSpec

REACHED = {("float32", 262144): 0.8, ("bfloat16", 524288): 0.735}  # (before: 65.8%, 62.5%)


@pytest.mark.parametrize("dt,d", sorted(REACHED))
def test_long_row_tiles_reach_what_they_did(dt, d):
    got, row, engines = reached(*case("layer_norm", d, dt), "layer_norm", dt, d)
    assert got >= REACHED[(dt, d)], (row["time_ns"], row["roofline_ns"], engines)


@pytest.mark.parametrize("only", [None, "ROW_TILES"])
@pytest.mark.parametrize("dt,shape", [("float32", (3, 262144)), ("bfloat16", (3, 524288))])
def test_long_row_tiles_check(dt, shape, only, monkeypatch):
    """Rows a tile each, loaded one after another (and with ROW_TILES alone): --check holds at
    LNC 1 and 2 (3 rows: the cores' shares differ), with the same values."""
    if only:
        monkeypatch.setattr(norms, "VARIANTS", [getattr(norms, only)])
        monkeypatch.setattr(norms, "_CHOSEN", {})
    t = dtype(dt)
    specs = {"x": TensorSpec("x", shape, t, "normal"), "w": TensorSpec("w", shape[-1:], t,
             "normal"), "b": TensorSpec("b", shape[-1:], t, "normal"),
             "out": TensorSpec("out", shape, t, None)}  # fmt: skip
    args = {"x": "x", "out": "out", "weight": "w", "bias": "b"}
    outs = []
    for lnc in (1, 2):
        prog = Program("p", "trn2", 0, "functional", lnc, [], specs,
                       {"k": KernelSpec("k", ops=[OpSpec("layer_norm", args, 1)])},
                       [StreamSpec("s", 0, [Step("launch", "k")])])  # fmt: skip
        r = run_program(prog, load_chip("trn2"), "functional", check=True)
        assert all(c["ok"] for c in r.summary["check"].values()), r.summary["check"]
        outs.append(r.tensor("out"))
    np.testing.assert_array_equal(outs[0], outs[1])
