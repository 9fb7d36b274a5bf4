"""The reductions over the last dim (sum, mean, amax; cross_entropy's log-sum-exp) at row
lengths real models have, not powers of two (issue 26): 16 MiB of x, trn2, LNC 2, each at
least 80% of the larger of its DMA and engine bounds (`kernels.row_bounds`), as
tests/kernels/test_rows_families.py holds them at powers of two; and numpy's values (--check)
at such lengths at LNC 1 and 2.

Rows of 128 m elements with m past a piece tile's columns and no divisor that cuts it in even
segments near that width (m prime: 151936 = 128 x 1187, 262784 = 128 x 2053) went in m
segments of one element a partition (`row_pieces.layout`): 3829 us, 0.6% of the bound, for
fp32 rows of 151936 (cross_entropy 7194 us). They now take the remainder-column layout
(`ragged`), whose segments need not be even."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.test_rows_families import case, reached
from tests.kernels.test_rows_families_argmax_loss import case as loss_case
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.kernels.row_pieces import layout
from trnsim.runtime.session import run_program
from trnsim.trace.program import KernelSpec, OpSpec, Program, Step, StreamSpec, TensorSpec

REACH = [  # (op, dtype, row length) at >= 80%
    ("sum", "float32", 151936),
    ("mean", "float32", 151936),
    ("amax", "float32", 151936),
    ("sum", "float32", 262784),
    ("amax", "bfloat16", 262784),
]
# cross_entropy at such rows: the fraction it keeps (rounded down to 5%; its powers of two
# reach 70%, test_rows_families_argmax_loss: the log-sum-exp chain after the last load)
LOSS_FLOOR = {("float32", 151936): 0.55, ("bfloat16", 262784): 0.55}


def test_pieces_layout_segments_never_narrow():
    """A row of 128 m in even segments of at least half a tile's columns, or None (then the
    remainder-column layout): never the 1187 segments of one element of 151936 fp32."""
    assert layout(151936, 1024) is None and layout(262784, 2048) is None
    assert layout(128 * 2048, 1024).f == 1024  # (powers of two unchanged)
    for m in range(1025, 4 * 1024):
        lay = layout(128 * m, 1024)
        assert lay is None or (lay.f * lay.t == m and 512 <= lay.f <= 1024), m


@pytest.mark.parametrize("op,dt,d", REACH)
def test_irregular_reductions_reach_80_percent(op, dt, d):
    got, row, engines = reached(*case(op, d, dt), op, dt, d)
    assert got >= 0.8, (row["time_ns"], row["roofline_ns"], engines)


@pytest.mark.parametrize("dt,d", list(LOSS_FLOOR))
def test_irregular_cross_entropy_keeps_its_floor(dt, d):
    got, row, _ = reached(*loss_case("cross_entropy", d, dt), "cross_entropy", dt, d)
    assert got >= LOSS_FLOOR[(dt, d)], row["time_ns"]


def _run(specs: dict, op: str, args: dict) -> list[np.ndarray]:
    """out at LNC 1 and 2, each with --check (which must hold)."""
    outs = []
    for lnc in (1, 2):
        prog = Program("p", "trn2", 0, "functional", lnc, [], specs,
                       {"k": KernelSpec("k", ops=[OpSpec(op, args, 1)])},
                       [StreamSpec("s", 0, [Step("launch", "k")])])  # fmt: skip
        r = run_program(prog, load_chip("trn2"), "functional", check=True)
        assert all(c["ok"] for c in r.summary["check"].values()), (lnc, r.summary["check"])
        outs.append(np.asarray(r.tensor("out")))
    return outs


def _saved(tmp_path, **arrays) -> dict:
    specs = {}
    for name, a in arrays.items():
        path = tmp_path / f"{name}.npy"
        np.save(path, a)
        specs[name] = TensorSpec(name, a.shape, dtype(str(a.dtype)), ("file", str(path)))
    return specs


@pytest.mark.parametrize("op", ["sum", "mean", "amax"])
def test_irregular_reductions_check(op, tmp_path):
    """Rows of 151936 fp32 (three: a core's share at LNC 2 is one or two): numpy's values at
    LNC 1 and 2; a max the same at both (a sum's partials fall on VectorE or ScalarE as the
    cores' shares of tiles do, rounded apart)."""
    x = (np.random.default_rng(5).standard_normal((3, 151936)) * 3).astype(np.float32)
    specs = _saved(tmp_path, x=x)
    specs["out"] = TensorSpec("out", (3,), dtype("float32"), None)
    outs = _run(specs, op, {"x": "x", "out": "out", "dim": -1})
    if op == "amax":
        assert np.array_equal(*outs)


def test_irregular_cross_entropy_check(tmp_path):
    """cross_entropy over rows of 151936 fp32, a target on a row's last and first elements:
    torch's values at LNC 1 and 2, the same losses at both."""
    rng = np.random.default_rng(6)
    d = 151936
    x = (rng.standard_normal((3, d)) * 3).astype(np.float32)
    t = np.array([d - 1, 0, 77777], dtype=np.int32)
    specs = _saved(tmp_path, x=x, t=t)
    specs["out"] = TensorSpec("out", (3,), dtype("float32"), None)
    args = {"input": "x", "target": "t", "out": "out", "reduction": "none"}
    assert np.array_equal(*_run(specs, "cross_entropy", args))
