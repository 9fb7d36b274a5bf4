"""The gather DMA (`dma_copy` with `indices`): rows of src chosen by integer indices in SBUF,
its values, its cost (one descriptor per row, the bytes of the rows it moves), its errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.dma.test_system import copy, data_ps, latency_ps, make, setup_ps, submit, tensor, tile
from trnsim.dtypes import dtype
from trnsim.errors import SimError
from trnsim.isa import Ap
from trnsim.memory.buffer import bind

I32, FP32 = dtype("int32"), dtype("float32")


def gather(src, dst, idx, idx_index=(), dst_index=(), queue=0):
    ins = copy(src, dst, dst_index=dst_index, queue=queue)
    rows = bind(Ap(idx.name, tuple(idx_index)), idx, "indices")
    from dataclasses import replace

    return replace(ins, indices=rows)


def test_a_gather_copies_the_rows_the_indices_name():
    s = make(functional=True)
    table = np.arange(10 * 6, dtype=np.float32).reshape(10, 6)
    w = tensor(s, "w", [10, 6], FP32, values=table)
    out = tensor(s, "out", [2, 3, 6], FP32)
    pick = [9, 0, 3, 3, 7, 1]
    idx = tile(s, "i", [1, 6], I32)
    idx.array[:] = pick
    submit(s, gather(w, out, idx))
    s.env.run()
    np.testing.assert_array_equal(out.array.reshape(6, 6), table[pick])
    assert s.rec.hbm_bytes_read == 6 * 6 * 4  # the rows moved, not the table


def test_a_gather_costs_one_descriptor_a_row_over_all_engines():
    """HBM -> HBM, table and out on two stacks, 32 rows of 2 KiB (bf16 [*, 1024]): 32
    descriptors dealt 2 per engine over 16 engines, each engine moving 4 KiB at the store rate:
    S(16) + 2 d + 4096 / B_store + L (each stack's 64 KiB at H takes less)."""
    s = make()
    w = tensor(s, "w", [5000, 1024], stack=0)
    out = tensor(s, "out", [32, 1024], stack=1)
    idx = tile(s, "i", [1, 32], I32)
    submit(s, gather(w, out, idx))
    s.env.run()
    (span,) = s.rec.spans
    h = s.cfg.hbm.bandwidth / s.cfg.hbm.stacks
    assert 32 * 2048 / h * 1e12 < data_ps(s.cfg, 2, 4096, store=True)
    expect = setup_ps(s.cfg, 16) + data_ps(s.cfg, 2, 4096, store=True) + latency_ps(s.cfg, True)
    assert abs(span.end_ps - expect) <= 2
    assert s.rec.hbm_bytes_read == s.rec.hbm_bytes_written == 32 * 2048


def test_gather_errors():
    s = make(functional=True)
    w = tensor(s, "w", [10, 6], FP32)
    out = tensor(s, "out", [4, 6], FP32)
    idx = tile(s, "i", [1, 4], I32)
    fidx = tile(s, "f", [1, 4], FP32)
    hidx = tensor(s, "h", [4], I32)
    with pytest.raises(SimError, match=r"indices 'f' must be integers in SBUF"):
        submit(s, gather(w, out, fidx))
    with pytest.raises(SimError, match=r"indices 'h' must be integers in SBUF"):
        submit(s, gather(w, out, hidx))
    with pytest.raises(SimError, match=r"a gather by 3 indices needs dst of a multiple of 3 "
                       r"elements, rows that divide src's 60, no transpose; dst 'out' has 24"):  # fmt: skip
        submit(s, gather(w, out, idx, idx_index=[(0, 1, None), (0, 3, None)]))
    idx.array[:] = [0, 1, 10, 2]
    submit(s, gather(w, out, idx))
    with pytest.raises(SimError, match=r"gather index 10 is out of range 0..9"):
        s.env.run()


GATHER_TRACE = """\
trnsim: 1
name: gather
chip: trn2
tensors:
  w: {shape: [10, 6], dtype: float32, init: arange}
  i: {shape: [4], dtype: int32, init: {file: i.npy}}
  out: {shape: [4, 6], dtype: float32}
kernels:
  main:
    tiles:
      idx: {memory: sbuf, shape: [1, 4], dtype: int32}
    instructions:
      - {op: dma_copy, src: i, dst: idx, queue: 0, signal: {ld: 1}}
      - {op: dma_copy, src: w, dst: out, indices: idx, queue: 1, wait: {ld: 1}}
"""


def test_a_trace_gathers_with_dma_copy_indices(tmp_path):
    from click.testing import CliRunner

    from trnsim.cli import main

    np.save(tmp_path / "i.npy", np.array([7, 0, 9, 7], np.int32))
    (tmp_path / "t.yaml").write_text(GATHER_TRACE)
    (tmp_path / "o").mkdir()  # not the trace's folder: --out-dir would overwrite i.npy there
    r = CliRunner().invoke(
        main, ["run", str(tmp_path / "t.yaml"), "--out-dir", str(tmp_path / "o")]
    )
    assert r.exit_code == 0, r.output
    w = np.arange(60, dtype=np.float32).reshape(10, 6)
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "out.npy"), w[[7, 0, 9, 7]])
