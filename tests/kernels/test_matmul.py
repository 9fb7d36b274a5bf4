"""The matmul lowering: values against numpy over ragged sizes and dtypes, and its schedule."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import run_lowered
from trnsim.errors import TraceError
from trnsim.kernels.matmul import lower_matmul


def _mm(shapes, dt="bfloat16", out_dt="float32", chip="trn2"):
    (a, b, o) = shapes
    r, builder = run_lowered(
        {"a": (a, dt, "normal"), "b": (b, dt, "normal"), "out": (o, out_dt, None)},
        lambda bl, cfg: lower_matmul(bl, cfg, "a", "b", "out"),
        chip=chip,
    )
    ref = r.tensor("a").astype(np.float32) @ r.tensor("b").astype(np.float32)
    return r.tensor("out").astype(np.float32), ref, builder


@pytest.mark.parametrize("chip", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize(
    "m,k,n", [(128, 128, 512), (1, 1, 1), (200, 300, 700), (130, 129, 513), (640, 256, 1100)]
)
def test_values_match_numpy_for_ragged_sizes(chip, m, k, n):
    got, ref, _ = _mm(((m, k), (k, n), (m, n)), chip=chip)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)  # fp32 accumulation of bf16


@pytest.mark.parametrize(
    "dt,out_dt,tol", [("float32", "float32", 1e-4), ("float16", "bfloat16", 2e-2)]
)
def test_dtypes(dt, out_dt, tol):
    got, ref, _ = _mm(((96, 160), (160, 300), (96, 300)), dt, out_dt)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_batched_and_shared_b():
    got, ref, _ = _mm(((3, 70, 140), (3, 140, 90), (3, 70, 90)))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
    got, ref, _ = _mm(((2, 70, 140), (140, 90), (2, 70, 90)))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)


def test_shapes_that_do_not_agree_are_an_error():
    with pytest.raises(TraceError, match=r"matmul: a \[4, 5\] @ b \[6, 7\] -> out \[4, 7\]"):
        _mm(((4, 5), (6, 7), (4, 7)))


def test_operands_of_two_dtypes_are_an_error():
    """bf16 @ fp32: B's tiles take A's dtype, so the fp32 operand was rounded to bf16 and
    --check failed at fp32's tolerance ([129, 127] @ [127, 131]: errors of 0.086); torch.matmul
    refuses it, and so does the lowering now, in one line."""
    with pytest.raises(TraceError, match=r"matmul: a is bfloat16 and b float32; expected the two"):
        run_lowered(
            {"a": ((7, 13), "bfloat16", "normal"), "b": ((13, 5), "float32", "normal"),
             "out": ((7, 5), "float32", None)},
            lambda bl, cfg: lower_matmul(bl, cfg, "a", "b", "out"),
        )  # fmt: skip


def test_one_block_is_load_multiply_evacuate_store():
    """128 x 128 x 512 on trn2: A^T by DMA transpose, B by DMA, one matmul, one copy out of
    PSUM, one store: 5 instructions, each waiting only for what it reads."""
    _, _, b = _mm(((128, 128), (128, 512), (128, 512)))
    ops = [(i.OP, i.engine.label) for i in b.instructions]
    assert ops == [
        ("dma_copy", "dma"),
        ("dma_copy", "dma"),
        ("matmul", "tensor"),
        ("tensor_copy", "vector"),
        ("dma_copy", "dma"),
    ]
    mm = b.instructions[2]
    assert set(dict(mm.wait)) == {
        f"w.{mm.stationary.name}",
        f"w.{mm.moving.name}",
    }
    assert b.instructions[0].transpose


@pytest.mark.parametrize("chip", ["trn2", "trn3"])
@pytest.mark.parametrize("n", [384, 640, 1000, 200])
def test_several_row_blocks_with_a_column_block_under_a_bank(chip, n):
    """M = 512 puts four 128-row blocks in one strip; N = 384 (or a ragged last block of 640
    and 1000) makes a block's accumulator narrower than a PSUM bank (512 fp32): each still
    starts on its own bank (packed at j * 384, block 1 would cross one: a SimError)."""
    got, ref, _ = _mm(((512, 128), (128, n), (512, n)), chip=chip)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("chip", ["trn2", "trn3"])
@pytest.mark.parametrize("m,k,n", [(256, 28672, 512), (200, 28000, 300), (1100, 20000, 130)])
def test_large_k_streams_k_with_values_of_numpy(chip, m, k, n):
    """A K that leaves room for one 128-row block of a resident A^T strip: the kernel streams
    K (`_one_streamed`), one A^T load (a DMA transpose of the strip's rows) and one B load per
    K block of each strip and N block, strips of up to 8 blocks (one PSUM bank each)."""
    got, ref, b = _mm(((m, k), (k, n), (m, n)), chip=chip)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4 * np.abs(ref).max())
    kt, nb = -(-k // 128), -(-n // 512)
    strips = -(-m // 1024)
    blocks = -(-m // 128)
    ops = [i.OP for i in b.instructions]
    assert ops.count("matmul") == blocks * nb * kt
    transposed = [i for i in b.instructions if i.OP == "dma_copy" and i.transpose]
    assert len(transposed) == strips * nb * kt  # A^T: one per K block, strip and N block
    assert ops.count("dma_copy") == 2 * strips * nb * kt + blocks * nb  # + B loads, stores


def test_the_kernel_moving_fewer_bytes_is_picked():
    """Resident strip: A once, B once per strip of mt blocks; streamed: A once per N block, B
    once per strip of up to 8 blocks. On a tie, streamed (its loads are larger)."""
    from trnsim.config import load_chip
    from trnsim.dtypes import dtype
    from trnsim.kernels.matmul import _Plan

    cfg, bf16 = load_chip("trn2"), dtype("bfloat16")

    def pick(m, n, k):
        p = _Plan(cfg, bf16, bf16, m, n, k)
        return p.mt, p.stream_k(m, cfg), p.mt

    # K = 28672: resident mt = 1, 3.76 GB (A 235 MB + B 117 MB x 32) vs streamed 1.41 GB
    assert pick(4096, 2048, 28672) == (1, True, 8)
    # 4096 x 8192 x 8192: resident mt = 4 (A 67 MB + B 134 MB x 8) beats A x 16 + B x 4
    assert pick(4096, 8192, 8192) == (4, False, 4)
    # one N block (decode, N = 128): A once either way, B 2 MB x 8 vs x 4
    assert pick(8192, 128, 8192)[1:] == (True, 8)
    assert not _Plan(cfg, bf16, bf16, 1, 1, 1).stream_k(0, cfg)  # a core with no rows


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_a_k_too_large_for_a_resident_strip_streams_k(dt):
    """GPT-2's tied embedding gradient, dlogits [rows, 50257] @ wte [50257, 768], has a K whose
    one 128-row block of A^T (201 KB a partition in fp32, 393 K blocks) does not fit twice in
    SBUF: it was refused with an SBUF overflow at launch; now the K-streamed kernel runs it
    (here with N = 64 to keep the test short, 128256: Llama 3's vocabulary in bf16)."""
    k = 50257 if dt == "float32" else 128256
    got, ref, b = _mm(((130, k), (k, 64), (130, 64)), dt, "float32")
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    assert sum(i.OP == "dma_copy" and i.transpose for i in b.instructions) == -(-k // 128)


def test_a_k_too_large_without_dma_transpose_is_an_error():
    with pytest.raises(TraceError, match="K = 50257 leaves no room .* trn1 has no DMA transpose"):
        _mm(((128, 50257), (50257, 64), (128, 64)), "float32", "float32", chip="trn1")


@pytest.mark.parametrize("m,n", [(1, 4096), (8, 4096), (1, 11008)])
def test_a_few_rows_stream_b_near_the_dma_bound(m, n):
    """A matmul whose rows are one strip and whose B is the larger operand (decode's [1, K] @
    [K, N]) is B's stream: six B blocks in flight, not three, keep the DMA busy. [1, 4096] @
    [4096, 4096] bf16 on one core took 168.5 us, 1.85x its DMA bound (91.2 us); now 103.6 us
    (1.14x)."""
    from tests.kernels.test_op_report import run_ops

    t = {"a": ((m, 4096), "bfloat16"), "b": ((4096, n), "bfloat16"), "out": ((m, n), "bfloat16")}
    r, _ = run_ops(t, [("matmul", {"a": "a", "b": "b", "out": "out"})], lnc=1)
    (row,) = r.summary["ops"]
    assert row["time_ns"] < 1.25 * row["roofline_ns"]


@pytest.mark.parametrize(
    "t,ops",
    [
        ({"a": ((1, 300), "float32"), "b": ((300, 1100), "float32"), "y": ((1, 1100), "float32")},
         [("matmul", {"a": "a", "b": "b", "out": "y"})]),
        ({"a": ((2, 3, 64), "float32"), "b": ((2, 64, 1500), "float32"),
          "y": ((2, 3, 1500), "float32")}, [("bmm", {"a": "a", "b": "b", "out": "y"})]),
        ({"a": ((5, 300), "bfloat16"), "w": ((1500, 300), "bfloat16"),
          "y": ((5, 1500), "bfloat16")}, [("linear", {"x": "a", "weight": "w", "out": "y"})]),
        ({"a": ((5, 300), "float32"), "w": ((1500, 300), "float32"), "c": ((1500,), "float32"),
          "y": ((5, 1500), "float32"), "z": ((5, 1500), "float32")},
         [("linear", {"x": "a", "weight": "w", "bias": "c", "out": "y"}),
          ("gelu", {"x": "y", "out": "z"})]),
        ({"x": ((8, 256), "float32"), "a": ((8, 256), "float32"), "b": ((256, 2048), "float32"),
          "y": ((8, 2048), "float32"), "z": ((8, 2048), "float32")},
         [("exp", {"x": "x", "out": "a"}), ("matmul", {"a": "a", "b": "b", "out": "y"}),
          ("gelu", {"x": "y", "out": "z"}), ("add", {"a": "y", "b": "z", "out": "z"})]),
    ],
)  # fmt: skip
def test_few_rows_are_shared_by_columns_at_lnc_2(t, ops):
    """A matmul (or a linear, its bias added on the way out of PSUM) whose rows are 128 or
    fewer has its columns cut between the two cores of an LNC 2 logical core
    (`matmul.columns_split`; by rows one core took them all): --check holds, values equal LNC
    1's (fp32: the bias added to the same fp32 sums), the kernel's other ops meet it at a core
    barrier."""
    from tests.kernels.test_op_report import ops_program
    from trnsim.runtime.session import run_program

    progs = [ops_program(t, ops, lnc=lnc, mode="functional") for lnc in (1, 2)]
    runs = [run_program(p, cfg, "functional", check=True) for p, cfg in progs]
    for r in runs:
        assert all(c["ok"] for c in r.summary["check"].values()), r.summary["check"]
    for name in {a["out"] for _, a in ops}:
        np.testing.assert_array_equal(runs[0].tensor(name), runs[1].tensor(name))


def test_a_gemv_takes_both_cores_at_lnc_2():
    """[1, 4096] @ [4096, 4096] bf16: 103.6 us on one core; at LNC 2 each core streams half of
    B's columns, 55.6 us (it was 103.6 us at LNC 2 too: all on one core), 1.2x the DMA bound."""
    from tests.kernels.test_op_report import run_ops

    t = {
        "a": ((1, 4096), "bfloat16"),
        "b": ((4096, 4096), "bfloat16"),
        "y": ((1, 4096), "bfloat16"),
    }
    ops = [("matmul", {"a": "a", "b": "b", "out": "y"})]
    one, two = (run_ops(t, ops, lnc=lnc)[0].summary["ops"][0] for lnc in (1, 2))
    assert two["time_ns"] < 0.6 * one["time_ns"]
    assert two["time_ns"] < 1.3 * two["roofline_ns"]


def test_batch_elements_overlap_their_loads():
    """Attention's [24, 128, 128] @ [24, 128, 64] fp32 on one trn2 core: each head's loads
    rotate on from the previous head's buffers and queues (they restarted at the first, so each
    head's loads waited for the previous head's matmuls: 43.6 us for 8.7 us of bytes at the
    core's HBM share; now 17.2 us), within 2.5x of the roofline."""
    from tests.kernels.helpers import timed

    t = {"a": ((24, 128, 128), "float32", None), "b": ((24, 128, 64), "float32", None),
         "out": ((24, 128, 64), "float32", None)}  # fmt: skip
    got, roof = timed(t, "matmul", {"a": "a", "b": "b", "out": "out"})
    assert got < 2.5 * roof


def test_a_linear_with_a_bias_and_few_rows_takes_both_cores_at_lnc_2():
    """x [1, 4096] @ weight^T [4096, 4096] + bias, bf16: 116.9 us at LNC 1 and 2 (the bias add
    after the matmul shared by rows, one core); at LNC 2 each core its columns with the bias
    added on the way out of PSUM: 61.0 us."""
    from tests.kernels.test_op_report import run_ops

    t = {"x": ((1, 4096), "bfloat16"), "w": ((4096, 4096), "bfloat16"),
         "c": ((4096,), "bfloat16"), "y": ((1, 4096), "bfloat16")}  # fmt: skip
    ops = [("linear", {"x": "x", "weight": "w", "bias": "c", "out": "y"})]
    one, two = (run_ops(t, ops, lnc=lnc)[0].summary["ops"][0] for lnc in (1, 2))
    assert two["time_ns"] < 0.6 * one["time_ns"]


def test_an_addmm_as_a_linear_layer_takes_both_cores_at_lnc_2():
    """addmm(bias [N], x [8, 768], w [768, 2304]) with beta and alpha 1 (torch's nn.Linear
    with a bias reaches the device as addmm) is a linear layer: at LNC 2 cut by columns, the
    bias added on the way out of PSUM, 38.2 -> 19.1 us fp32; values equal LNC 1's. With another
    beta, or an input not a row, it stays shared by rows."""
    from tests.kernels.test_op_report import ops_program
    from trnsim.runtime.session import run_program

    t = {"i": ((2304,), "float32"), "a": ((8, 768), "float32"), "b": ((768, 2304), "float32"),
         "y": ((8, 2304), "float32")}  # fmt: skip
    ops = [("addmm", {"input": "i", "mat1": "a", "mat2": "b", "out": "y"})]
    runs = []
    for lnc in (1, 2):
        prog, cfg = ops_program(t, ops, lnc=lnc, mode="functional")
        runs.append(run_program(prog, cfg, "functional", check=True))
        assert all(c["ok"] for c in runs[-1].summary["check"].values())
    np.testing.assert_array_equal(runs[0].tensor("y"), runs[1].tensor("y"))
    one, two = (r.summary["ops"][0]["time_ns"] for r in runs)
    assert two < 0.6 * one


@pytest.mark.parametrize("m,k,n,out_dt", [(8, 2048, 600, "float32"), (1, 1000, 640, "bfloat16"),
                                          (64, 520, 1100, "float32"), (17, 1024, 512, "float32"),
                                          (8, 4096, 100, "float32")])  # fmt: skip
def test_fp32_with_few_rows_puts_b_stationary_with_values_of_numpy(m, k, n, out_dt):
    """fp32 with 64 rows or fewer and enough K blocks to save TensorE a third of its cycles
    (`_Plan.swaps`): B's 128-column blocks stationary, A^T's rows moving, out^T turned back by
    TensorE (`matmul._swapped`): each matmul's [m] moving columns, one per 128 columns of a K
    block, and a transpose per 128 columns of out."""
    got, ref, b = _mm(((m, k), (k, n), (m, n)), "float32", out_dt)
    tol = 1e-5 if out_dt == "float32" else 8e-3
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())
    mms = [i for i in b.instructions if i.OP == "matmul"]
    assert len(mms) == -(-k // 128) * -(-n // 128)
    cols = [(i.moving.index[-1], i.stationary.index[-1]) for i in mms]  # (start, stop, step)
    assert all(mv[1] - mv[0] == m and st[1] - st[0] <= 128 for mv, st in cols)
    assert sum(i.OP == "transpose" for i in b.instructions) == -(-n // 128)


def test_fp32_with_few_rows_is_bound_by_b_not_tensore():
    """fp32 [8, 2048] @ [2048, 4096] on one trn2 core. A^T stationary, each K block's matmul
    streamed 512 columns of B at 4 cycles a column (fp32): 16 x 8 x 2048 cycles = 109.2 us of
    TensorE at 2.4 GHz, above B's DMA bound (32 MiB: 91.7 us), 120.7 us in all. B stationary,
    16 x 32 matmuls of max(64, 8) x 4 = 256 cycles (+ 32 of LoadStationary at most, exposed
    when a matmul waits) and 32 transposes of 128 / 0.5 = 256 cycles: 64.9 us at most; the
    op now 107.9 us, within 1.2x of its DMA bound."""
    from tests.kernels.test_op_report import run_ops

    t = {"a": ((8, 2048), "float32"), "b": ((2048, 4096), "float32"),
         "out": ((8, 4096), "float32")}  # fmt: skip
    r, cfg = run_ops(t, [("matmul", {"a": "a", "b": "b", "out": "out"})], lnc=1)
    (row,) = r.summary["ops"]
    te = cfg.core.tensor
    mm = max(te.stationary_min_cycles, 8) / te.fp32_rate + te.load_stationary_cycles
    cycles = 16 * 32 * mm + 32 * 128 / te.transpose_fp32_rate
    assert cycles == 155648
    assert r.summary["engines"]["core0.tensor"]["busy_ns"] <= cycles / te.clock_hz * 1e9
    assert row["bound"] == "dma" and row["time_ns"] < 1.2 * row["roofline_ns"]
