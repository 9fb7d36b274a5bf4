"""The per-op roofline (trnsim/kernels/roofline.py) counts every tensor the op's record says it
reads and writes, lists included: cat's inputs, split's outputs, a foreach op's lists; bytes
against hand counts, and the bounds from them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.kernels.roofline import op_flops, op_rows
from trnsim.trace.program import OpSpec, TensorSpec

F32 = dtype("float32")


def _specs(shapes: dict) -> dict:
    return {n: TensorSpec(n, s, F32) for n, s in shapes.items()}


def _row(op, args, shapes, cores=1):
    cfg = load_chip("trn2")
    (row,) = op_rows([OpSpec(op, args, 1)], _specs(shapes), cfg, cores)
    return row, cfg


def test_cat_reads_every_input():
    row, _ = _row("cat", {"tensors": ["a", "b", "c"], "out": "o", "dim": 1},
                  {"a": (64, 32), "b": (64, 16), "c": (64, 80), "o": (64, 128)})  # fmt: skip
    assert row["bytes_read"] == 64 * (32 + 16 + 80) * 4
    assert row["bytes_written"] == 64 * 128 * 4


def test_split_writes_every_output():
    row, _ = _row("split", {"x": "x", "split_size": 40, "outs": ["p", "q", "r"], "dim": 0},
                  {"x": (100, 8), "p": (40, 8), "q": (40, 8), "r": (20, 8)})  # fmt: skip
    assert (row["bytes_read"], row["bytes_written"]) == (100 * 8 * 4, 100 * 8 * 4)


@pytest.mark.parametrize("op, args, reads, writes", [
    ("_foreach_add", {"x": ["a", "b"], "other": ["c", "d"], "out": ["e", "f"]}, 4, 2),
    ("_foreach_add", {"x": ["a", "b"], "other": 2.0, "out": ["a", "b"]}, 2, 2),
    ("_foreach_addcdiv", {"x": ["a", "b"], "tensor1": ["c", "d"], "tensor2": ["e", "f"],
                          "value": 0.1, "out": ["a", "b"]}, 6, 2),
    ("_foreach_sqrt", {"x": ["a", "b"], "out": ["c", "d"]}, 2, 2),
])  # fmt: skip
def test_foreach_ops_count_their_lists(op, args, reads, writes):
    shapes = {n: (128, 64) for n in "abcdef"}
    row, cfg = _row(op, args, shapes)
    one = 128 * 64 * 4
    assert (row["bytes_read"], row["bytes_written"]) == (reads * one, writes * one)
    d = cfg.core.dma
    dma = (reads * one / d.engine_bandwidth + writes * one / d.store_bandwidth) / d.engines
    assert row["dma_bound_ns"] == pytest.approx(dma * 1e9)
    assert row["hbm_bound_ns"] == pytest.approx(
        (reads + writes) * one / (cfg.hbm.bandwidth / cfg.hbm.stacks) * 1e9
    )
    assert row["roofline_ns"] > 0


def test_addmm_counts_its_multiply_adds():
    shapes = {"i": (64, 48), "a": (64, 32), "b": (32, 48), "o": (64, 48)}
    args = {"input": "i", "mat1": "a", "mat2": "b", "out": "o"}
    assert op_flops(OpSpec("addmm", args), _specs(shapes)) == 2 * 64 * 48 * 32
    row, _ = _row("addmm", args, shapes)
    assert row["flops"] == 2 * 64 * 48 * 32 and row["compute_bound_ns"] > 0


def test_an_embedding_reads_the_rows_its_indices_name():
    """A gather's roofline counts the rows it reads, not its table: 8 tokens of GPT-2's
    [50257, 768] bf16 table read 8 x 768 x 2 bytes (and the indices); counting the table
    (77 MB) gave a roofline of 210 us against 1.7 us simulated, faster than its bound."""
    from tests.kernels.test_op_report import ops_program
    from trnsim.runtime.session import run_program

    t = {"w": ((50257, 768), "bfloat16"), "i": ((8,), "int32"), "y": ((8, 768), "bfloat16")}
    prog, cfg = ops_program(t, [("embedding", {"weight": "w", "indices": "i", "out": "y"})])
    prog.tensors["i"] = replace(prog.tensors["i"], init="zeros")  # rows in range
    (row,) = run_program(prog, cfg, "timing").summary["ops"]
    assert row["bytes_read"] == 8 * 768 * 2 + 8 * 4
    assert row["bytes_written"] == 8 * 768 * 2
    assert row["time_ns"] >= row["roofline_ns"]
