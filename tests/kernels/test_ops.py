"""Elementwise, softmax and op lists lowered by `trnsim.kernels.lower`: values against each op's
numpy reference (`kernels.reference`) over shapes that are and are not multiples of 128."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import run_ops
from trnsim.errors import TraceError
from trnsim.kernels import lower, reference
from trnsim.kernels.reference import tolerance
from trnsim.trace.program import OpSpec


def _run(tensors, ops, chip="trn2"):
    return run_ops(tensors, ops, chip)


def _check(r, op, args, out="out", inputs=None):
    arrays = {n: r.tensor(n) for n in (inputs or [v for v in args.values() if isinstance(v, str)])}
    ref = reference(op, args, arrays)
    got = r.tensor(out).astype(np.float64)
    rtol, atol = tolerance(r.tensors[out].dtype.name)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol * max(1.0, np.abs(ref).max()))


SHAPES = [(128, 64), (3, 5), (300, 1000), (2, 130, 7), (5000,), (4, 3000)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", ["exp", "tanh", "sigmoid", "relu", "gelu", "silu", "neg", "square"])
def test_unary(op, shape):
    r = _run(
        {"x": (shape, "float32", "normal"), "out": (shape, "float32", None)},
        [(op, {"x": "x", "out": "out"})],
    )
    _check(r, op, {"x": "x"})


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "maximum"])
def test_binary(op, shape):
    r = _run(
        {
            "a": (shape, "bfloat16", "normal"),
            "b": (shape, "bfloat16", "normal"),
            "out": (shape, "float32", None),
        },
        [(op, {"a": "a", "b": "b", "out": "out"})],
    )
    _check(r, op, {"a": "a", "b": "b"})


def test_binary_with_a_number_on_either_side():
    t = {
        "x": ((200, 300), "float32", "normal"),
        "out": ((200, 300), "float32", None),
        "out2": ((200, 300), "float32", None),
    }
    r = _run(
        t,
        [("sub", {"a": "x", "b": 2.5, "out": "out"}), ("sub", {"a": 2.5, "b": "x", "out": "out2"})],
    )
    _check(r, "sub", {"a": "x", "b": 2.5}, inputs=["x"])
    _check(r, "sub", {"a": 2.5, "b": "x"}, out="out2", inputs=["x"])


def test_cast_by_copy():
    r = _run(
        {"x": ((256, 512), "float32", "normal"), "out": ((256, 512), "bfloat16", None)},
        [("copy", {"x": "x", "out": "out"})],
    )
    _check(r, "copy", {"x": "x"})


@pytest.mark.parametrize("shape", [(128, 512), (300, 1000), (2, 70, 33), (1, 4096)])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax(op, shape):
    r = _run(
        {"x": (shape, "float32", "normal"), "out": (shape, "float32", None)},
        [(op, {"x": "x", "out": "out", "dim": -1})],
    )
    _check(r, op, {"x": "x", "dim": -1}, inputs=["x"])


@pytest.mark.parametrize("shape,dt", [((1000, 64), "bfloat16"), ((3, 100, 64), "float16")])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_short_16bit_rows(op, shape, dt):
    """Short rows (`softmax.SHORT_ROW`): exp row by row, the sums split between ScalarE and
    VectorE, GpSimd's scale, three stages a block apart."""
    r = _run(
        {"x": (shape, dt, "normal"), "out": (shape, dt, None)},
        [(op, {"x": "x", "out": "out", "dim": -1})],
    )
    _check(r, op, {"x": "x", "dim": -1}, inputs=["x"])


def test_a_chain_in_place_keeps_each_ops_order():
    """h = x @ w; h = gelu(h); h = h + x2; p = softmax(h): in place, each op reads what the
    previous one wrote."""
    t = {
        "x": ((256, 384), "bfloat16", "normal"),
        "w": ((384, 640), "bfloat16", "normal"),
        "h": ((256, 640), "float32", None),
        "x2": ((256, 640), "float32", "normal"),
        "p": ((256, 640), "float32", None),
    }
    r = _run(
        t,
        [
            ("matmul", {"a": "x", "b": "w", "out": "h"}),
            ("gelu", {"x": "h", "out": "h"}),
            ("add", {"a": "h", "b": "x2", "out": "h"}),
            ("softmax", {"x": "h", "out": "p"}),
        ],
    )
    x = r.tensor("x").astype(np.float64)
    w = r.tensor("w").astype(np.float64)
    h = reference("gelu", {"x": "h"}, {"h": x @ w}) + r.tensor("x2")
    ref = reference("softmax", {"x": "h"}, {"h": h})
    np.testing.assert_allclose(r.tensor("p"), ref, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "ops,match",
    [
        ([("conv2d", {"x": "x", "out": "out"})], r"unknown op 'conv2d'; expected one of "),
        ([("exp", {"x": "nope", "out": "out"})], r"exp: x names 'nope', which is not a tensor"),
        ([("exp", {"out": "out"})], r"exp: missing argument 'x'"),
        ([("exp", {"x": "x", "out": "out", "alpha": 1})], r"exp: unknown argument 'alpha'"),
        (
            [("add", {"a": "x", "b": "y", "out": "out"})],
            r"add: a \[4, 4\], b \[4, 5\] -> out \[4, 4\]: this broadcast is not lowered",
        ),
        ([("softmax", {"x": "x", "out": "out", "dim": 0})], r"softmax: dim 0; only the last dim"),
    ],
)
def test_what_is_not_lowered_is_an_error_naming_the_op(ops, match):
    from trnsim.config import load_chip
    from trnsim.dtypes import dtype
    from trnsim.trace.program import TensorSpec

    tensors = {
        n: TensorSpec(n, s, dtype("float32"))
        for n, s in (("x", (4, 4)), ("y", (4, 5)), ("out", (4, 4)))
    }
    with pytest.raises(TraceError, match="line 7: " + match):
        lower([OpSpec(op, args, line=7) for op, args in ops], tensors, load_chip("trn2"))


def test_lowered_programs_pass_the_race_check():
    """What the builder derives orders every conflicting pair by the race check's own rules."""
    from trnsim.trace.races import find_races

    t = {
        "x": ((256, 384), "bfloat16", "normal"),
        "w": ((384, 640), "bfloat16", "normal"),
        "h": ((256, 640), "float32", None),
        "p": ((256, 640), "float32", None),
        "g": ((640,), "float32", "normal"),
        "s": ((256,), "float32", None),
    }
    r = _run(
        t,
        [
            ("matmul", {"a": "x", "b": "w", "out": "h"}),
            ("gelu", {"x": "h", "out": "h"}),
            ("exp", {"x": "h", "out": "p"}),
            ("relu", {"x": "h", "out": "h"}),
            ("log_softmax", {"x": "h", "out": "p"}),
            ("rms_norm", {"x": "p", "out": "h", "weight": "g"}),
            ("sum", {"x": "h", "out": "s"}),
        ],
    )
    assert find_races(r.program) == []
    # and the check can fail: without the waits of the first instruction that has some, it
    # reports a race
    from dataclasses import replace

    ins = r.program.kernels["k"].per_core[0].instructions
    i = next(i for i, x in enumerate(ins) if x.wait)
    ins[i] = replace(ins[i], wait=())
    assert find_races(r.program)


@pytest.mark.parametrize("shape", [(128, 512), (300, 70), (2, 130, 33)])
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_over_the_last_dim(op, shape, keepdim):
    out = shape[:-1] + ((1,) if keepdim else ())
    r = _run(
        {"x": (shape, "float32", "normal"), "out": (out, "float32", None)},
        [(op, {"x": "x", "out": "out", "dim": -1, "keepdim": keepdim})],
    )
    _check(r, op, {"x": "x", "keepdim": keepdim}, inputs=["x"])


@pytest.mark.parametrize("shape", [(128, 512), (300, 70), (2, 130, 600)])
@pytest.mark.parametrize(
    "op,affine",
    [
        ("layer_norm", ("weight", "bias")),
        ("layer_norm", ()),
        ("rms_norm", ("weight",)),
        ("rms_norm", ()),
    ],
)
def test_norms(op, affine, shape):
    d = shape[-1]
    t = {
        "x": (shape, "bfloat16", "normal"),
        "out": (shape, "float32", None),
        "weight": ((d,), "float32", "normal"),
        "bias": ((d,), "float32", "normal"),
    }
    args = {"x": "x", "out": "out", "eps": 1e-5, **{k: k for k in affine}}
    r = _run(t, [(op, args)])
    ref = reference(
        op,
        {k: v for k, v in args.items() if k != "out"},
        {n: r.tensor(n) for n in ("x", "weight", "bias")},
    )
    np.testing.assert_allclose(r.tensor("out"), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize(
    "full,part",
    [((300, 70), (70,)), ((2, 130, 33), (1, 1, 33)), ((300, 70), (300, 1)), ((2, 5, 9), (2, 5, 1)),
     ((2, 3, 200, 24), (200, 24)), ((2, 3, 130, 9), (2, 1, 130, 9))],
)  # fmt: skip
@pytest.mark.parametrize("part_first", [False, True])
def test_binary_broadcast(op, full, part, part_first):
    t = {
        "f": (full, "float32", "normal"),
        "p": (part, "float32", "random"),
        "out": (full, "float32", None),
    }
    args = {"a": "p", "b": "f"} if part_first else {"a": "f", "b": "p"}
    r = _run(t, [(op, {**args, "out": "out"})])
    _check(r, op, args)


@pytest.mark.parametrize("full,part", [((1, 16, 256, 64), (256, 64)), ((2, 3, 300, 33), (2, 1, 300, 33)),
                                       ((3, 130, 2500), (130, 2500))])  # fmt: skip
def test_a_table_broadcast_splits_its_rows_between_two_cores(full, part):
    """A table of out's last two dims [T, D] (a rotary table over [B, H, T, hd]) at LNC 2:
    each core takes its rows (a share starting off a partition step loads its table rows
    again, `broadcast_table`); the values are one core's."""
    t = {"f": (full, "float32", "normal"), "p": (part, "float32", "random"),
         "out": (full, "float32", None)}  # fmt: skip
    ops = [("mul", {"a": "f", "b": "p", "out": "out"})]
    two, progs = _run_cores(t, ops, 2)
    np.testing.assert_array_equal(two.tensor("out"), _run(t, ops).tensor("out"))
    assert all(p.instructions for p in progs)


def test_a_broadcast_that_is_not_lowered_names_the_shapes():
    from trnsim.config import load_chip
    from trnsim.dtypes import dtype
    from trnsim.trace.program import TensorSpec

    tensors = {
        n: TensorSpec(n, s, dtype("float32"))
        for n, s in (("x", (4, 6)), ("y", (4, 1, 6)), ("out", (4, 6)))
    }
    with pytest.raises(
        TraceError,
        match=r"add: a \[4, 6\], b \[4, 1, 6\] -> out \[4, 6\]: this broadcast is not lowered yet",
    ):
        lower([OpSpec("add", {"a": "x", "b": "y", "out": "out"})], tensors, load_chip("trn2"))


def test_every_op_of_the_trace_table_is_lowered():
    """trnsim.trace.ops (what loading accepts) and the library agree: every op in the table
    lowers on a small example, none is refused as unknown."""
    from trnsim.config import load_chip
    from trnsim.dtypes import dtype
    from trnsim.trace.ops import OPS
    from trnsim.trace.program import TensorSpec

    f32 = dtype("float32")
    shapes = {
        "condition": (8, 8),
        "other": (8, 8),
        "mask": (4, 8),
        "x": (4, 8),
        "a": (8, 8),
        "b": (8, 8),
        "out": (4, 8),
        "weight": (8,),
        "bias": (8,),
        "q": (1, 4, 8),
        "k": (1, 4, 8),
        "v": (1, 4, 8),
    }
    i32 = dtype("int32")
    special = {  # op -> (tensors name -> (shape, dtype), args)
        "argmax": ({"x": ((4, 8), f32), "out": ((4,), i32)}, {}),
        "permute": ({"x": ((4, 8), f32), "out": ((8, 4), f32)}, {"dims": [1, 0]}),
        "cat": (
            {"a": ((4, 8), f32), "b": ((2, 8), f32), "out": ((6, 8), f32)},
            {"tensors": ["a", "b"]},
        ),  # fmt: skip
        "split": (
            {"x": ((6, 8), f32), "p": ((4, 8), f32), "q": ((2, 8), f32)},
            {"split_size": 4, "outs": ["p", "q"]},
        ),  # fmt: skip
        "embedding": (
            {"weight": ((8, 8), f32), "indices": ((4,), i32), "out": ((4, 8), f32)},
            {},
        ),  # fmt: skip
        "addmm": (
            {
                "input": ((8,), f32),
                "mat1": ((4, 8), f32),
                "mat2": ((8, 8), f32),
                "out": ((4, 8), f32),
            },
            {},
        ),  # fmt: skip
        **{
            op: ({"input": ((4, 8), f32), "target": ((4,), i32), "out": ((), f32)}, {})
            for op in ("cross_entropy", "nll_loss")
        },  # fmt: skip
    }
    special["native_batch_norm"] = (
        {"input": ((2, 4, 3, 3), f32), "y": ((2, 4, 3, 3), f32), "m": ((4,), f32),
         "s": ((4,), f32)},
        {"out": ["y", "m", "s"]},
    )  # fmt: skip
    special["max_pool2d_with_indices"] = (
        {"x": ((1, 2, 8, 8), f32), "o": ((1, 2, 4, 4), f32), "i": ((1, 2, 4, 4), i32)},
        {"kernel_size": 2, "out": ["o", "i"]},
    )  # fmt: skip
    special["avg_pool2d"] = (
        {"x": ((1, 2, 8, 8), f32), "out": ((1, 2, 4, 4), f32)}, {"kernel_size": 2},
    )  # fmt: skip
    for op, rec in OPS.items():
        if rec.reference.endswith(":backward_reference"):
            continue  # tests/kernels/test_backward.py
        spec = rec.args
        if op in special:
            shapes_of, extra = special[op]
            tensors = {n: TensorSpec(n, s, dt) for n, (s, dt) in shapes_of.items()}
            args = {k: k for k in spec if not k.endswith("?") and k in tensors} | extra
            prog = lower([OpSpec(op, args)], tensors, load_chip("trn2"))
            assert prog.instructions, op
            continue
        args = {k: k for k in spec if not k.endswith("?")}
        if "value" in args:
            args["value"] = 0.5
        out = shapes["out"]
        if op in ("matmul", "mm", "bmm"):
            out = (8, 8)
        elif op in ("sum", "mean", "amax", "amin"):
            out = (4,)
        elif op == "scaled_dot_product_attention":
            out = (1, 4, 8)
        elif "a" in args:
            out = (8, 8)
        tensors = {
            n: TensorSpec(n, out if n == "out" else shapes[n], f32)
            for n in (*args, "weight", "bias")
            if n != "value"
        }
        if op == "linear":  # a weight [N, K]
            tensors["weight"] = TensorSpec("weight", (8, 8), f32)
        if op == "transpose":
            tensors["out"] = TensorSpec("out", (8, 4), f32)
        prog = lower([OpSpec(op, args)], tensors, load_chip("trn2"))
        assert prog.instructions, op


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_rows_longer_than_one_vector_instruction_are_lowered(op):
    """Rows longer than a partition's SBUF takes go in pieces over the partitions: a multiple
    of 128 by `row_pieces`, others with a remainder column (`ragged`)."""
    from trnsim.config import load_chip
    from trnsim.dtypes import dtype
    from trnsim.trace.program import TensorSpec

    cfg = load_chip("trn2")
    for d in (cfg.core.vector.dve_max_free_elements * 2, 65537):
        tensors = {
            "x": TensorSpec("x", (2, d), dtype("bfloat16")),
            "out": TensorSpec("out", (2, d), dtype("bfloat16")),
        }
        assert lower([OpSpec(op, {"x": "x", "out": "out"})], tensors, cfg).instructions


def _run_cores(tensors, ops, cores, chip="trn2"):
    """Lower `ops` over `cores` physical cores and run them as one LNC kernel."""
    from trnsim.config import load_chip
    from trnsim.dtypes import dtype
    from trnsim.kernels import lower_cores
    from trnsim.runtime.session import run_program
    from trnsim.trace.program import KernelSpec, Program, Step, StreamSpec, TensorSpec

    cfg = load_chip(chip)
    specs = {n: TensorSpec(n, tuple(s), dtype(d), init) for n, (s, d, init) in tensors.items()}
    progs = lower_cores([OpSpec(op, args) for op, args in ops], specs, cfg, cores)
    prog = Program(
        "lnc",
        chip,
        0,
        "functional",
        cores,
        [],
        specs,
        {"k": KernelSpec("k", per_core=progs)},
        [StreamSpec("s", 0, [Step("launch", "k")])],
    )
    return run_program(prog, cfg), progs


def test_two_cores_split_the_rows_and_give_the_same_values():
    """LNC 2: each core computes half of every op's rows; the values are one core's."""
    from trnsim.trace.races import find_races

    t = {
        "x": ((512, 256), "bfloat16", "normal"),
        "w": ((256, 640), "bfloat16", "normal"),
        "g": ((640,), "float32", "normal"),
        "h": ((512, 640), "float32", None),
        "p": ((512, 640), "float32", None),
    }
    ops = [
        ("matmul", {"a": "x", "b": "w", "out": "h"}),
        ("gelu", {"x": "h", "out": "h"}),
        ("rms_norm", {"x": "h", "out": "p", "weight": "g"}),
        ("softmax", {"x": "p", "out": "p"}),
    ]
    two, progs = _run_cores(t, ops, 2)
    one = _run(t, ops)
    np.testing.assert_array_equal(two.tensor("p"), one.tensor("p"))
    assert all(p.instructions for p in progs)  # both cores work
    mm = [sum(1 for i in p.instructions if i.OP == "matmul") for p in progs]
    assert mm[0] == mm[1]  # 256 rows each: the same matmuls
    assert find_races(two.program) == []


def test_a_whole_read_of_what_both_cores_wrote_needs_a_core_barrier():
    from trnsim.config import load_chip
    from trnsim.dtypes import dtype
    from trnsim.kernels import lower_cores
    from trnsim.trace.program import TensorSpec

    tensors = {n: TensorSpec(n, (256, 256), dtype("bfloat16")) for n in ("x", "w", "h", "y")}
    ops = [
        OpSpec("exp", {"x": "w", "out": "h"}, line=5),
        OpSpec("matmul", {"a": "x", "b": "h", "out": "y"}, line=6),
    ]
    no_barrier = load_chip("trn2", ["core.core_barrier=false"])
    with pytest.raises(TraceError, match=r"t.yaml:6: matmul: b 'h' was written by an earlier op"):
        lower_cores(ops, tensors, no_barrier, 2, "t.yaml")
    lower_cores(ops, tensors, load_chip("trn2"), 2, "t.yaml")  # the cores meet before it
    lower_cores(ops, tensors, load_chip("trn2"), 1, "t.yaml")  # on one core it is fine


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_shape", [(200, 300), (2, 70, 300)])
def test_linear_takes_the_weight_as_n_by_k(bias, x_shape):
    t = {
        "x": (x_shape, "bfloat16", "normal"),
        "weight": ((130, 300), "bfloat16", "normal"),
        "bias": ((130,), "float32", "normal"),
        "out": (x_shape[:-1] + (130,), "float32", None),
    }
    args = {"x": "x", "weight": "weight", "out": "out", **({"bias": "bias"} if bias else {})}
    r = _run(t, [("linear", args)])
    _check(r, "linear", {k: v for k, v in args.items() if k != "out"})


def test_a_linear_s_bias_fits_psum_after_the_accumulators_of_many_row_tiles():
    """linear x [1000, 7], weight [300, 7], bias: the matmul's 8 accumulators of [128, 300]
    fp32 took PSUM's 8 banks; the bias's spread asked for a [128, 512] tile, which none of the
    released ones fits: 'PSUM overflow' (a SimError). It now asks for [128, 300]."""
    t = {
        "x": ((1000, 7), "float32", "normal"),
        "weight": ((300, 7), "float32", "normal"),
        "bias": ((300,), "float32", "normal"),
        "out": ((1000, 300), "float32", None),
    }
    args = {"x": "x", "weight": "weight", "bias": "bias", "out": "out"}
    r = _run(t, [("linear", args)])
    _check(r, "linear", {k: v for k, v in args.items() if k != "out"})


@pytest.mark.parametrize("chip", ["trn1", "trn2"])
@pytest.mark.parametrize("shape", [(200, 700), (3, 130, 64), (128, 128)])
def test_transpose_of_the_last_two_dims(chip, shape):
    out = shape[:-2] + (shape[-1], shape[-2])
    t = {"x": (shape, "float32", "normal"), "out": (out, "float32", None)}
    r = _run(t, [("transpose", {"x": "x", "out": "out", "dim0": -1, "dim1": -2})], chip=chip)
    np.testing.assert_array_equal(r.tensor("out"), np.swapaxes(r.tensor("x"), -1, -2))


@pytest.mark.parametrize("shape", [(7, 13), (127, 129), (3, 300, 200), (1000, 3), (1, 1)])
def test_transpose_at_lnc_2_whatever_out_s_rows(shape):
    """At LNC 2 each core transposes the rows of out in its share (cut at multiples of 128 of
    out's flattened rows), a block of 128 rows that the cut crosses cut there too: out's rows
    of 13, 129 or 200 were refused ('blocks of 128 would straddle the cores' shares'), so any
    odd transpose failed at trn2's default LNC."""
    from tests.kernels.test_op_report import run_ops as run_lnc

    out = shape[:-2] + (shape[-1], shape[-2])
    t = {"x": (shape, "bfloat16"), "out": (out, "bfloat16")}
    r, _ = run_lnc(t, [("transpose", {"x": "x", "out": "out"})], lnc=2, mode="functional")
    np.testing.assert_array_equal(r.tensor("out"), np.swapaxes(r.tensor("x"), -1, -2))


@pytest.mark.parametrize(
    "shape,one,op,first",
    [((7, 13), (1,), "add", False), ((3, 5, 7), (), "sub", True),
     ((2, 3, 5, 2), (1, 1, 1, 1), "mul", False), ((300, 1000), (1,), "maximum", True)],
)  # fmt: skip
def test_a_tensor_of_one_element_broadcast_over_any_shape(shape, one, op, first):
    """A tensor of one element ([1], [], [1, 1, 1, 1]; a loss scale, a learning rate held in a
    tensor) with a tensor of any shape, either side, at LNC 1 and 2: spread once over the
    partitions and used as each flat block's `tensor_scalar` operand. It was refused ('this
    broadcast is not lowered yet'), so through neuron estimated at its bytes."""
    from tests.kernels.test_op_report import ops_program
    from trnsim.runtime.session import run_program

    t = {"x": (shape, "float32"), "v": (one, "float32"), "y": (shape, "float32")}
    a, b = ("v", "x") if first else ("x", "v")
    outs = []
    for lnc in (1, 2):
        prog, cfg = ops_program(t, [(op, {"a": a, "b": b, "out": "y"})], lnc=lnc,
                                mode="functional")  # fmt: skip
        r = run_program(prog, cfg, "functional", check=True)
        assert all(c["ok"] for c in r.summary["check"].values()), r.summary["check"]
        outs.append(r.tensor("y"))
    np.testing.assert_array_equal(*outs)


def test_a_tensor_of_one_element_costs_what_a_number_costs():
    """[4096, 4096] bf16 times a [1] tensor at LNC 2: within 5% of times a number (the
    column's spread overlaps the first loads): 94.9 us."""
    from tests.kernels.test_op_report import run_ops

    t = {"x": ((4096, 4096), "bfloat16"), "v": ((1,), "bfloat16"), "y": ((4096, 4096), "bfloat16")}
    by_tensor = run_ops(t, [("mul", {"a": "x", "b": "v", "out": "y"})], lnc=2)[0]
    by_number = run_ops(t, [("mul", {"a": "x", "b": 2.0, "out": "y"})], lnc=2)[0]
    assert by_tensor.summary["ops"][0]["time_ns"] < 1.05 * by_number.summary["ops"][0]["time_ns"]


@pytest.mark.parametrize("shape", [(300, 70), (2, 130, 7)])
def test_where_and_masked_fill(shape):
    t = {
        "c": (shape, "uint8", "random"),
        "a": (shape, "float32", "normal"),
        "o": (shape, "float32", "normal"),
        "out": (shape, "float32", None),
        "out2": (shape, "float32", None),
        "out3": (shape, "float32", None),
    }
    r = _run(
        t,
        [
            ("where", {"condition": "c", "a": "a", "other": "o", "out": "out"}),
            ("masked_fill", {"x": "a", "mask": "c", "value": -1e4, "out": "out2"}),
            ("where", {"condition": "c", "a": 2.5, "other": "o", "out": "out3"}),
        ],
    )
    c = r.tensor("c") != 0
    assert 0 < c.mean() < 1  # both branches are taken
    np.testing.assert_array_equal(r.tensor("out"), np.where(c, r.tensor("a"), r.tensor("o")))
    np.testing.assert_array_equal(r.tensor("out2"), np.where(c, np.float32(-1e4), r.tensor("a")))
    np.testing.assert_array_equal(r.tensor("out3"), np.where(c, np.float32(2.5), r.tensor("o")))


@pytest.mark.parametrize("cores", [1, 2])
def test_where_of_two_numbers_is_a_select_of_a_filled_tile(cores):
    """where(mask, 0.0, -inf): a causal mask made from a boolean one (SDPA's math path under
    is_causal, every GPT-2 and Llama forward) was refused ('a and other are both numbers')."""
    t = {"c": ((300, 256), "uint8", "random"), "out": ((300, 256), "float32", None)}
    args = {"condition": "c", "a": 0.0, "other": float("-inf"), "out": "out"}
    r, progs = _run_cores(t, [("where", args)], cores)
    c = r.tensor("c") != 0
    assert 0 < c.mean() < 1
    np.testing.assert_array_equal(r.tensor("out"), np.where(c, np.float32(0), np.float32("-inf")))
    assert [sum(i.OP == "memset" for i in p.instructions) for p in progs] == [1] * cores


@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("a,other", [(0.0, "x"), ("x", "y"), ("x", -1.5)])
def test_where_of_a_column_condition_selects_whole_rows(cores, a, other):
    """where(cond [.., T, 1], 0.0, scores [.., T, T]): SDPA's math path zeroing fully masked
    rows, in every causal GPT-2 and Llama forward on neuron, was refused ('shapes differ')."""
    shape = (2, 3, 130, 300)
    t = {"c": (shape[:-1] + (1,), "uint8", "random"), "x": (shape, "float32", "normal"),
         "y": (shape, "float32", "normal"), "out": (shape, "float32", None)}  # fmt: skip
    args = {"condition": "c", "a": a, "other": other, "out": "out"}
    r, _ = _run_cores(t, [("where", args)], cores)
    c = r.tensor("c") != 0
    assert 0 < c.mean() < 1
    val = {k: r.tensor(k) if isinstance(k, str) else np.float32(k) for k in (a, other)}
    np.testing.assert_array_equal(r.tensor("out"), np.where(c, val[a], val[other]))


def test_a_run_of_elementwise_ops_is_fused_and_keeps_its_intermediates_on_chip():
    """h = h + x; h = gelu(h); y = h * 2.0; y = exp(y): one pass over the blocks that reads h
    and x once and writes h and y once (unfused: 4 reads and 4 writes of that shape), with the
    values of the ops one after another."""
    from trnsim.kernels.fusion import chains
    from trnsim.trace.races import find_races

    shape = (300, 1000)
    t = {
        "h": (shape, "float32", "normal"),
        "x": (shape, "float32", "normal"),
        "y": (shape, "float32", None),
    }
    ops = [
        ("add", {"a": "h", "b": "x", "out": "h"}),
        ("gelu", {"x": "h", "out": "h"}),
        ("mul", {"a": "h", "b": 2.0, "out": "y"}),
        ("exp", {"x": "y", "out": "y"}),
    ]
    specs = [OpSpec(o, a) for o, a in ops]
    from trnsim.dtypes import dtype
    from trnsim.trace.program import TensorSpec

    tensors = {n: TensorSpec(n, s, dtype(d)) for n, (s, d, _) in t.items()}
    assert [len(c) for c in chains(specs, tensors)] == [4]
    r = _run(t, ops)
    nbytes = 300 * 1000 * 4
    assert r.summary["hbm"]["bytes_read"] == 2 * nbytes  # h and x, once
    assert r.summary["hbm"]["bytes_written"] == 2 * nbytes  # h and y, once
    assert find_races(r.program) == []
    # the values: each op in turn, in float32 as the device stores them
    from trnsim.kernels.reference import reference

    h = r.tensor("h").astype(np.float64)  # final h = gelu(h0 + x)
    y = reference("exp", {"x": "y"}, {"y": (h * 2.0).astype(np.float32)})
    np.testing.assert_allclose(r.tensor("y"), y, rtol=1e-5, atol=1e-6)


def test_transposes_keep_32_blocks_in_flight_on_half_the_queues_each_way():
    """Loads on queues 0-7, stores on 8-15 (trn2: 16 queues), through 32 buffers as wide as
    x's rows (up to 512), each transpose's own (live over its op step: `kernels.liveness`)."""
    from trnsim.config import load_chip
    from trnsim.dtypes import dtype
    from trnsim.trace.program import TensorSpec

    bf16 = dtype("bfloat16")
    specs = {
        n: TensorSpec(n, s, bf16, None)
        for n, s in [
            ("x", (4, 128, 2048)),
            ("y", (4, 2048, 128)),
            ("u", (128, 256)),
            ("v", (256, 128)),
        ]
    }
    ops = [OpSpec("transpose", {"x": "x", "out": "y"}), OpSpec("transpose", {"x": "u", "out": "v"})]
    prog = lower(ops, specs, load_chip("trn2"))
    assert [(t.shape, t.live) for t in prog.tiles.values()] == (
        [((128, 128), (0, 0))] * 32 + [((128, 128), (1, 1))] * 32
    )
    copies = [i for i in prog.instructions if i.OP == "dma_copy"]
    loads = [i.queue for i in copies if i.transpose]
    stores = [i.queue for i in copies if not i.transpose]
    assert len(loads) == len(stores) == 4 * 16 + 2  # [128, 128] blocks
    assert loads[:9] == [0, 1, 2, 3, 4, 5, 6, 7, 0] and set(stores) == set(range(8, 16))
