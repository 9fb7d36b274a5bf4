"""The row kernels spread over VectorE, ScalarE and GpSimd (softmax, layer_norm, rms_norm):
the cost estimates the norms balance with (`kernels.balance`), the DMA queue count, values in
place and in bf16 on every chip, and how close the kernels come to the DMA bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.kernels.helpers import run_lowered
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.isa import Activation, Engine, ScalarTensorTensor, TensorScalar, TensorTensor
from trnsim.kernels import lower, reference
from trnsim.kernels.balance import cost_ns, dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.reference import tolerance
from trnsim.trace.program import OpSpec, TensorSpec

BF16, F32 = dtype("bfloat16"), dtype("float32")


def test_cost_estimates_are_the_engines_cost_formulas():
    """docs/model.md's formulas with configs/trn2.yaml's figures, for [128, 8192] bf16 rows."""
    cfg = load_chip("trn2")
    v, s, g = cfg.core.vector, cfg.core.scalar, cfg.core.gpsimd
    b = KernelBuilder({})
    x, c = ap(b.tile("x", "sbuf", (128, 8192), BF16)), ap(b.tile("c", "sbuf", (128, 1), F32))
    n = 8192
    # VectorE tensor_scalar, 16-bit SBUF -> SBUF: N / 4 cycles, + the overhead of a waiting one
    ts = cost_ns(b, cfg, TensorScalar, src=x, dst=x, op0="multiply", operand0=c)
    assert ts == pytest.approx((n / v.copy_fast_factor + v.fixed_overhead_cycles) / 0.96)
    # ScalarE activation with its reduction: N + the overhead + the accumulator's 64 cycles
    act = cost_ns(b, cfg, Activation, func="square", src=x, dst=x, reduce="add", reduce_dst=c)
    assert act == pytest.approx((n + s.fixed_overhead_cycles + s.reduce_cycles) / 1.2)
    # GpSimd tensor_tensor: 2N cycles, + its overhead
    tt = cost_ns(b, cfg, TensorTensor, Engine.GPSIMD, alu="add", src0=x, src1=x, dst=x)
    assert tt == pytest.approx((2 * n + g.fixed_overhead_cycles) / 1.2)
    # a [rows, 1] VectorE step reading the previous one's result: MIN_II + the commit latency
    small = cost_ns(b, cfg, TensorScalar, waits=False, after=True, src=c, dst=c, op0="add",
                    operand0=1.0)  # fmt: skip
    assert small == pytest.approx((v.min_ii_cycles + v.commit_latency_cycles) / 0.96)


@pytest.mark.parametrize(
    "partition_bytes,queues",
    # a 16-engine setup is 615 + 15 x 16 = 855 ns (trn2); 8 partitions per engine at 23 B/ns
    [(16384, 1), (4096, 1), (2048, 2), (1024, 3), (256, 4)],
)
def test_dma_queues_cover_the_setup_of_the_next_transfer(partition_bytes, queues):
    data = partition_bytes * 8 / 23  # ns of one transfer's data on its engines
    assert queues == min(4, math.ceil(855 / data))
    assert dma_queues(load_chip("trn2"), partition_bytes) == queues


def _run(tensors, op, args, chip):
    ops = [OpSpec(op, {**args, "out": "out"})]

    def emit(b, cfg):
        prog = lower(ops, b.tensors, cfg)
        b.tiles.update(prog.tiles)
        b.instructions[:] = prog.instructions

    return run_lowered(tensors, emit, chip=chip)


@pytest.mark.parametrize("chip", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize(
    "op,affine", [("layer_norm", ("weight", "bias")), ("rms_norm", ("weight",)), ("layer_norm", ())]
)
def test_norms_in_bf16_in_place_spread_weight_and_bias_over_two_engines(chip, op, affine):
    """bf16 in and out, a bf16 weight and bias, rows of 1024 four to a partition, 8 blocks (the
    last of 416 rows): values within bf16's tolerance of numpy; the weight and bias applied
    by VectorE or GpSimd `tensor_tensor`s, or the bias added on TensorE (`norm_affine`)."""
    shape, d = (4000, 1024), 1024
    t = {
        "x": (shape, "bfloat16", "normal"),
        "out": (shape, "bfloat16", None),
        "weight": ((d,), "bfloat16", "normal"),
        "bias": ((d,), "bfloat16", "normal"),
    }
    args = {"x": "x", "eps": 1e-5, **{k: k for k in affine}}
    r, b = _run(t, op, args, chip)
    ref = reference(op, args, {n: r.tensor(n) for n in ("x", "weight", "bias")})
    rtol, atol = tolerance("bfloat16")
    got = r.tensor("out").astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol * max(1.0, np.abs(ref).max()))
    affine_ops = [i for i in b.instructions if isinstance(i, TensorTensor) and i.src1.name
                  .endswith("_rows") or isinstance(i, ScalarTensorTensor)]  # fmt: skip
    # (TensorE's stationary the identity, or diag(rstd) where the normalisation is folded in)
    pe = [i for i in b.instructions if i.OP == "matmul" and i.stationary.name.startswith(
        ("ident", "dg"))]  # fmt: skip
    assert {i.engine for i in affine_ops} <= {Engine.VECTOR, Engine.GPSIMD}
    assert bool(affine_ops or pe) == bool(affine)


@pytest.mark.parametrize("chip", ["trn1", "trn3"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [(300, 1000), (2048, 256), (3, 100, 64)])
def test_softmax_in_bf16_on_other_chips(chip, op, shape):
    """Rows of 1000 (4 to a partition), 256 (16 to a partition), 64 in three items of 100 rows
    (64 to a partition would not divide 300 rows: 4)."""
    t = {"x": (shape, "bfloat16", "normal"), "out": (shape, "bfloat16", None)}
    r, _ = _run(t, op, {"x": "x"}, chip)
    ref = reference(op, {"x": "x"}, {"x": r.tensor("x")})
    rtol, atol = tolerance("bfloat16")
    got = r.tensor("out").astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize(
    "op,least",
    # [2048, 8192] bf16 on one trn2 core, 16 blocks (bench_kernels.py runs [8192, 8192]): the
    # simulated fractions are 96%, 91% and 64%; layer_norm is bound by its engines (docs)
    [("softmax", 0.9), ("rms_norm", 0.85), ("layer_norm", 0.6), ("short softmax", 0.9)],
)
def test_row_kernels_come_close_to_the_dma_bound(op, least):
    r, d = 2048, 8192
    if op == "short softmax":  # rows of 512, 8 to a partition: 98%
        op, r, d = "softmax", 32768, 512
    t = {"x": ((r, d), "bfloat16", "normal"), "out": ((r, d), "bfloat16", None)}
    args = {"x": "x"}
    if op != "softmax":
        t["weight"], args["weight"] = ((d,), "bfloat16", "normal"), "weight"
    if op == "layer_norm":
        t["bias"], args["bias"] = ((d,), "bfloat16", "normal"), "bias"
    res, _ = _run_timing(t, op, args)
    # x and out once each (and the weight and bias once): loads at 16 x 23 B/ns, stores at
    # 16 x 26.9 B/ns
    read = r * d * 2 + (len(args) - 1) * d * 2
    bound = read / (16 * 23) + r * d * 2 / (16 * 26.9)
    assert bound / res.summary["device_time_ns"] >= least


def _run_timing(tensors, op, args):
    ops = [OpSpec(op, {**args, "out": "out"})]

    def emit(b, cfg):
        prog = lower(ops, b.tensors, cfg)
        b.tiles.update(prog.tiles)
        b.instructions[:] = prog.instructions

    return run_lowered(tensors, emit, chip="trn2", mode="timing")


def test_a_kernel_of_several_row_ops_fits_sbuf():
    """Every op's rotating buffers fit a partition beside the tiles live with them: softmax's
    within 30% of a partition, the norms' within 45%, so matmul, both norms, gelu, softmax and
    log_softmax on rows of 4096 bf16 fit one trn2 kernel together (its tiles placed by
    liveness: each op's over its own op step, `kernels.liveness`)."""
    r, d = 1024, 4096
    t = {
        "a": ((r, 2048), "bfloat16", "normal"),
        "m": ((2048, d), "bfloat16", "normal"),
        "w": ((d,), "bfloat16", "normal"),
        "b": ((d,), "bfloat16", "normal"),
        **{n: ((r, d), "bfloat16", None) for n in ("x", "h", "p")},
    }
    ops = [
        OpSpec("matmul", {"a": "a", "b": "m", "out": "x"}),
        OpSpec("layer_norm", {"x": "x", "out": "h", "weight": "w", "bias": "b"}),
        OpSpec("gelu", {"x": "h", "out": "h"}),
        OpSpec("softmax", {"x": "h", "out": "p"}),
        OpSpec("rms_norm", {"x": "p", "out": "p", "weight": "w"}),
        OpSpec("log_softmax", {"x": "p", "out": "h"}),
    ]

    def emit(b, cfg):
        prog = lower(ops, b.tensors, cfg)
        b.tiles.update(prog.tiles)
        b.instructions[:] = prog.instructions

    res, b = run_lowered(t, emit, chip="trn2", mode="timing")
    used = max(s.offset + math.prod(s.shape[1:]) * s.dtype.itemsize for s in b.tiles.values()
               if s.memory == "sbuf")  # fmt: skip
    assert used <= 224 * 1024
    assert res.summary["device_time_ns"] > 0


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "softmax"])
def test_short_rows_fill_the_partitions_first(op):
    """256 rows of 64: each block tile is [128, 2, 64] (2 rows to each of 128 partitions), not
    [4, 64, 64], so the ScalarE passes that go row by row are 2, not 64."""
    tensors = {
        "x": TensorSpec("x", (256, 64), BF16, None),
        "w": TensorSpec("w", (64,), BF16, None),
        "y": TensorSpec("y", (256, 64), BF16, None),
    }
    args = {"x": "x", "out": "y", **({"weight": "w"} if op != "softmax" else {})}
    prog = lower([OpSpec(op, args)], tensors, load_chip("trn2"))
    shapes = {t.shape for t in prog.tiles.values() if t.shape[-1] == 64 and len(t.shape) == 3}
    assert shapes == {(128, 2, 64)}
