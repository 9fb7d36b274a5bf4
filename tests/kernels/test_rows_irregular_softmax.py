"""softmax and log_softmax over rows of 1024 elements or more at the widths real models have,
not powers of two (issue 26): hidden sizes (4544, 5120, 10240, 14336), vocabularies (GPT-2's
50257, Llama 3's 128256, Qwen's 151936) and a row of 10^6. Such rows go in pieces over the
partitions (`softmax_pieces`; a row a partition for rows up to a tile's share, with a remainder
column where the length is not a multiple of 128, `softmax_ragged`), whatever their count, each
group's stages emitted in the list schedule's order (`schedule.Scheduled`). Before (packed
blocks, or pieces in the fixed interleaving: trn2 LNC 2, 16 MiB, the scan of docs/kernels.md's
row kernels) they reached 64-80% of their bound; each now within 80% of the larger of its DMA
and engine bounds (`test_rows_families.reached`), with numpy's values (--check) at LNC 1 and 2,
the same at both."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import checked_at_both_lncs
from tests.kernels.test_rows_families import case, reached
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.isa import CoreBarrier
from trnsim.kernels import lower_cores
from trnsim.runtime.session import run_program
from trnsim.trace.program import KernelSpec, OpSpec, Program, Step, StreamSpec, TensorSpec

CASES = [
    ("softmax", "float32", 4544),  # 71% before (packed)
    ("softmax", "float32", 5120),  # 65%
    ("softmax", "bfloat16", 10240),  # 64%
    ("softmax", "bfloat16", 12288),  # 72% (pieces in the fixed interleaving)
    ("softmax", "bfloat16", 20000),  # 70%
    ("softmax", "bfloat16", 151936),  # 71%
    ("softmax", "bfloat16", 1000000),  # 79.9%
    ("log_softmax", "float32", 5120),  # 65%
    ("log_softmax", "bfloat16", 50257),  # 72%
    ("log_softmax", "bfloat16", 100000),  # 74%
]


@pytest.mark.parametrize("op,dt,d", CASES)
def test_irregular_rows_reach_80_percent_of_their_bound(op, dt, d):
    got, row, engines = reached(*case(op, d, dt), op, dt, d)
    assert got >= 0.8, (row["time_ns"], row["roofline_ns"], engines)


@pytest.mark.parametrize(
    "op,dt,shape",
    [
        ("softmax", "float32", (131, 1536)),  # a row a partition (k = 1), 131 rows
        ("log_softmax", "bfloat16", (130, 4544)),  # 4 pieces of 1136, no remainder
        ("softmax", "bfloat16", (5, 2000)),  # k = 1, a remainder column of its own width
        ("log_softmax", "float32", (3, 50257)),  # 32 pieces and a remainder of 17
        ("softmax", "float32", (3, 151936)),  # 128 pieces of 1187 (1187 prime)
    ],
)
def test_irregular_rows_check(op, dt, shape, tmp_path):
    """numpy's values (--check) at LNC 1 and 2, the same at both."""
    rng = np.random.default_rng(7)
    path = tmp_path / "x.npy"
    np.save(path, (rng.standard_normal(shape) * 3).astype(np.float32))
    specs = {"x": TensorSpec("x", shape, dtype(dt), ("file", str(path))),
             "out": TensorSpec("out", shape, dtype(dt), None)}  # fmt: skip
    checked_at_both_lncs(specs, [OpSpec(op, {"x": "x", "out": "out"}, 1)])


def test_uneven_rows_in_pieces_split_evenly_with_the_other_ops(tmp_path):
    """Rows in pieces whose cut at multiples of 128 rows is uneven (682 rows: 384 and 298) go
    341 and 341 (the op alone, `softmax.evenly`): between a mul and an add that keep the
    128-row cut, the cores meet before the softmax and after it (a barrier each on both), and
    the values are numpy's and the same at LNC 1 and 2. An even 128-row cut (768 rows) keeps
    its rows and meets nowhere."""
    rng = np.random.default_rng(11)
    for rows, barriers in ((682, [2, 2]), (768, [0, 0])):
        shape = (rows, 2048)
        path = tmp_path / f"x{rows}.npy"
        np.save(path, rng.standard_normal(shape).astype(np.float32))
        specs = {n: TensorSpec(n, shape, dtype("float32"), ("file", str(path)) if n == "x"
                               else None) for n in ("x", "a", "p", "q")}  # fmt: skip
        ops = [OpSpec("mul", {"a": "x", "b": 2.0, "out": "a"}, 1),
               OpSpec("log_softmax", {"x": "a", "out": "p"}, 2),
               OpSpec("add", {"a": "p", "b": 1.0, "out": "q"}, 3)]  # fmt: skip
        progs = lower_cores(ops, specs, load_chip("trn2"), 2)
        assert [sum(type(i) is CoreBarrier for i in p.instructions) for p in progs] == barriers
        checked_at_both_lncs(specs, ops, "q")


@pytest.mark.parametrize(
    "op,dt,shape",
    [("softmax", "float32", (64, 4096)), ("log_softmax", "float32", (64, 4096)),
     ("softmax", "bfloat16", (6, 50257)), ("log_softmax", "float32", (2, 151936))],
)  # fmt: skip
def test_rows_whose_first_pieces_are_all_minus_inf(op, dt, shape, tmp_path):
    """A causal mask's rows (the first three quarters -inf): their first pieces' max is -inf,
    and exp(x - max) gave NaN (every row of the tile, through TensorE's 0 * -inf) before each
    piece's max was kept at least the most negative fp32 (`softmax_pieces.LOWEST`): numpy's
    values, 0 (softmax) or -inf (log_softmax) where masked, at LNC 2."""
    x = np.random.default_rng(13).standard_normal(shape).astype(np.float32)
    x[..., : shape[-1] * 3 // 4] = -np.inf
    path = tmp_path / "x.npy"
    np.save(path, x)
    specs = {"x": TensorSpec("x", shape, dtype(dt), ("file", str(path))),
             "out": TensorSpec("out", shape, dtype(dt), None)}  # fmt: skip
    prog = Program("p", "trn2", 0, "functional", 2, [], specs,
                   {"k": KernelSpec("k", ops=[OpSpec(op, {"x": "x", "out": "out"}, 1)])},
                   [StreamSpec("s", 0, [Step("launch", "k")])])  # fmt: skip
    got = np.asarray(run_program(prog, load_chip("trn2"), "functional").tensor("out"), np.float64)
    xs = x.astype(dtype(dt).np).astype(np.float64)
    shifted = xs - xs.max(-1, keepdims=True)
    want = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    if op == "softmax":
        want = np.exp(want)
    assert not np.isnan(got).any()
    tol = 1e-2 if dt == "bfloat16" else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
