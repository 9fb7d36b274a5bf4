"""The reductions over the last dim (sum, mean, amax; cross_entropy's log-sum-exp) at row
lengths real models have, not powers of two (issue 26): 16 MiB of x, trn2, LNC 2, each at
least 80% of the larger of its DMA and engine bounds (`kernels.row_bounds`), as
tests/kernels/test_rows_families.py holds them at powers of two; and numpy's values (--check)
at such lengths at LNC 1 and 2.

Rows of 128 m elements with m past a piece tile's columns and no divisor that cuts it in even
segments near that width (m prime: 151936 = 128 x 1187, 262784 = 128 x 2053) went in m
segments of one element a partition (`row_pieces.layout`): 3829 us, 0.6% of the bound, for
fp32 rows of 151936 (cross_entropy 7194 us). They now take the remainder-column layout
(`ragged`), whose segments need not be even. At mid lengths (1024 to 16K, 70-79% before) a
core's last rows, too few to fill the partitions, go in pieces (`rows.tail_pieces`,
`rows_ragged.last_rows`) and the rows go evenly between the cores (`rows.even_rows`)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import checked_at_both_lncs
from tests.kernels.test_rows_families import case, reached
from tests.kernels.test_rows_families_argmax_loss import case as loss_case
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.isa import CoreBarrier
from trnsim.kernels import lower_cores
from trnsim.kernels.row_pieces import layout
from trnsim.runtime.session import run_program
from trnsim.trace.program import KernelSpec, OpSpec, Program, Step, StreamSpec, TensorSpec

REACH = [  # (op, dtype, row length) at >= 80%
    ("sum", "float32", 151936),
    ("mean", "float32", 151936),
    ("amax", "float32", 151936),
    ("sum", "float32", 262784),
    ("amax", "bfloat16", 262784),
    ("sum", "float32", 5120),  # (the rows' tail in pieces, the rows even between the cores)
    ("amax", "float32", 6144),
    ("mean", "bfloat16", 10240),
    ("sum", "bfloat16", 14336),
    ("sum", "bfloat16", 50257),  # (in pieces with a remainder column)
    ("amax", "bfloat16", 100000),  # (its last row in more pieces, `rows_ragged.last_rows`)
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
@pytest.mark.parametrize("shape,dt", [((3, 151936), "float32"), ((300, 5120), "float32"),
                                      ((300, 4544), "bfloat16"), ((5, 100000), "bfloat16"),
                                      ((5, 24576), "float32")])  # fmt: skip
def test_irregular_reductions_check(op, shape, dt, tmp_path):
    """numpy's values at LNC 1 and 2, the same at both (but an fp32 sum's: its partials fall on
    VectorE or ScalarE as the cores' shares of tiles do, rounded apart; a bf16 sum's rows one a
    partition, whole or in pieces, in fp32 rounded once, `rows.in_fp32`). Rows of 151936 (three: a
    core's share at LNC 2 is one or two); 300 rows of 5120 or 4544: 150 a core at LNC 2, 128
    whole and 22 in pieces (`rows.tail_pieces`), 300 at LNC 1, 256 whole and 44 in pieces;
    rows in pieces whose last are in more pieces (`rows_ragged.last_rows`): 5 of 100000 (2 or
    3 a core at LNC 2, 2 a tile, one row in 128 pieces; at LNC 1 the fifth), 5 of 24576 fp32
    (4 a tile in 32 pieces: the fifth in 128; 2 or 3 a core at LNC 2, 2 in 64)."""
    x = (np.random.default_rng(5).standard_normal(shape) * 3).astype(np.float32)
    specs = _saved(tmp_path, x=x)
    specs["x"] = TensorSpec("x", shape, dtype(dt), specs["x"].init)
    specs["out"] = TensorSpec("out", shape[:1], dtype(dt), None)
    a, b = _run(specs, op, {"x": "x", "out": "out", "dim": -1})
    if op != "amax" and dt == "float32":
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-4)  # (sums of ~200: 2^-23 units)
    else:
        assert np.array_equal(a, b)


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


def test_uneven_rows_split_evenly_with_the_other_ops(tmp_path):
    """Rows one a partition whose cut at multiples of 128 rows is uneven (300 rows of 5120:
    128 and 172) go 150 and 150 (the op alone, `rows.even_rows`): between a mul and an add
    that keep the 128-row cut, the cores meet before the amax and after it (a barrier each on
    both), and the values are numpy's and the same at LNC 1 and 2. An even 128-row cut (512
    rows) keeps its rows: the cores meet only before the add (m, one row of 512, is cut by
    elements, as before)."""
    rng = np.random.default_rng(12)
    for rows, barriers in ((300, [2, 2]), (512, [1, 1])):
        shape = (rows, 5120)
        path = tmp_path / f"x{rows}.npy"
        np.save(path, rng.standard_normal(shape).astype(np.float32))
        f32 = dtype("float32")
        specs = {"x": TensorSpec("x", shape, f32, ("file", str(path))),
                 "a": TensorSpec("a", shape, f32, None),
                 "m": TensorSpec("m", (rows,), f32, None),
                 "q": TensorSpec("q", (rows,), f32, None)}  # fmt: skip
        ops = [OpSpec("mul", {"a": "x", "b": 2.0, "out": "a"}, 1),
               OpSpec("amax", {"x": "a", "out": "m", "dim": -1}, 2),
               OpSpec("add", {"a": "m", "b": 1.0, "out": "q"}, 3)]  # fmt: skip
        progs = lower_cores(ops, specs, load_chip("trn2"), 2)
        assert [sum(type(i) is CoreBarrier for i in p.instructions) for p in progs] == barriers
        checked_at_both_lncs(specs, ops, "q")
