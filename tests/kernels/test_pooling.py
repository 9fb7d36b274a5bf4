"""2-D pooling (`kernels.pooling`, `kernels.pooling_backward`): max_pool2d_with_indices and
avg_pool2d and their backward ops against PyTorch's CPU kernels (values, and indices exactly:
the first maximum of a window in row-major order), for kernel 2 stride 2, kernel 3 stride 2
padding 1 and a few more, channel counts below and above 128, planes several to a partition
and planes cut into chunks of rows, fp32 and bf16; what is refused; the time at
[32, 64, 32, 32] against the roofline."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import run_ops, timed
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.kernels import lower, reference
from trnsim.kernels.reference import tolerance
from trnsim.trace.program import OpSpec, TensorSpec

torch = pytest.importorskip("torch")

CASES = [  # (shape, kernel, stride, padding)
    ((2, 64, 8, 8), 2, 2, 0),
    ((2, 64, 8, 8), 3, 2, 1),
    ((3, 50, 9, 7), 3, 2, 1),
    ((2, 200, 6, 6), 2, 2, 0),
    ((1, 4, 300, 64), 3, 2, 1),  # planes in chunks of rows
    ((2, 3, 11, 11), 3, 1, 1),
    ((2, 3, 20, 50), 3, 3, 1),
]
DTYPES = ["float32", "bfloat16"]


def close(got, want, dtype_name, factor=1.0):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    rtol, atol = (factor * t for t in tolerance(dtype_name))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * max(1.0, np.abs(want).max()))


def _torch(a, dt):
    t = torch.tensor(np.asarray(a, np.float32))
    return t.to(torch.bfloat16) if dt == "bfloat16" else t


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_forward_and_backward_against_torch(case, dt):
    shape, k, s, p = CASES[case]
    N, C, H, W = shape
    Ho, Wo = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
    small = (N, C, Ho, Wo)
    t = {"x": (shape, dt, "normal"), "o": (small, dt, None), "i": (small, "int32", None),
         "a": (small, dt, None), "a2": (small, dt, None), "g": (small, dt, "normal"),
         "gi": (shape, dt, None), "ga": (shape, dt, None), "ga2": (shape, dt, None)}  # fmt: skip
    win = {"kernel_size": [k, k], "stride": [s, s], "padding": [p, p]}
    back = {"grad_output": "g", "input_size": list(shape), **win}
    r = run_ops(t, [
        ("max_pool2d_with_indices", {"x": "x", **win, "out": ["o", "i"]}),
        ("avg_pool2d", {"x": "x", **win, "out": "a"}),
        ("avg_pool2d", {"x": "x", **win, "count_include_pad": False, "out": "a2"}),
        ("max_pool2d_with_indices_backward", {**back, "indices": "i", "out": "gi"}),
        ("avg_pool2d_backward", {**back, "out": "ga"}),
        ("avg_pool2d_backward", {**back, "count_include_pad": False, "out": "ga2"}),
    ])  # fmt: skip
    x, g = _torch(r.tensor("x"), dt), _torch(r.tensor("g"), dt)
    o, i = torch.ops.aten.max_pool2d_with_indices(x, [k, k], [s, s], [p, p])
    np.testing.assert_array_equal(r.tensor("o").astype(np.float32), o.float().numpy())
    np.testing.assert_array_equal(r.tensor("i"), i.numpy())
    for name, pad in (("a", True), ("a2", False)):
        want = torch.ops.aten.avg_pool2d(x.float(), [k, k], [s, s], [p, p], False, pad)
        close(r.tensor(name), want.numpy(), dt)
    gi = torch.ops.aten.max_pool2d_with_indices_backward(g.float(), x.float(), [k, k], [s, s],
                                                         [p, p], [1, 1], False, i)  # fmt: skip
    close(r.tensor("gi"), gi.numpy(), dt, 2)
    for name, pad in (("ga", True), ("ga2", False)):
        want = torch.ops.aten.avg_pool2d_backward(g.float(), x.float(), [k, k], [s, s], [p, p],
                                                  False, pad, None)  # fmt: skip
        close(r.tensor(name), want.numpy(), dt, 2)
    # and the numpy references agree with torch
    xs, gs = (np.asarray(r.tensor(n), np.float64) for n in ("x", "g"))
    ref_o, ref_i = reference("max_pool2d_with_indices", {"x": "x", **win}, {"x": xs})
    close(ref_o, o.float().numpy(), "float32")
    np.testing.assert_array_equal(ref_i, i.numpy())
    got = reference("max_pool2d_with_indices_backward", {**back, "indices": "i"},
                    {"g": gs, "i": r.tensor("i")})  # fmt: skip
    close(got, gi.numpy(), dt, 2)


def test_divisor_override():
    shape = (2, 8, 6, 6)
    t = {"x": (shape, "float32", "normal"), "a": ((2, 8, 3, 3), "float32", None),
         "g": ((2, 8, 3, 3), "float32", "normal"), "ga": (shape, "float32", None)}  # fmt: skip
    win = {"kernel_size": 2, "stride": 2, "divisor_override": 3}
    r = run_ops(t, [("avg_pool2d", {"x": "x", **win, "out": "a"}),
                    ("avg_pool2d_backward", {"grad_output": "g", "input_size": list(shape),
                                             **win, "out": "ga"})])  # fmt: skip
    x, g = _torch(r.tensor("x"), "float32"), _torch(r.tensor("g"), "float32")
    close(r.tensor("a"), torch.ops.aten.avg_pool2d(x, [2, 2], [2, 2], [0, 0], False, True, 3)
          .numpy(), "float32")  # fmt: skip
    want = torch.ops.aten.avg_pool2d_backward(g, x, [2, 2], [2, 2], [0, 0], False, True, 3)
    close(r.tensor("ga"), want.numpy(), "float32")


def test_what_is_not_lowered_says_why():
    f32, i32 = dtype("float32"), dtype("int32")
    cfg = load_chip("trn2")
    tensors = {"x": TensorSpec("x", (1, 2, 8, 8), f32), "o": TensorSpec("o", (1, 2, 4, 4), f32),
               "i": TensorSpec("i", (1, 2, 4, 4), i32)}  # fmt: skip
    for extra, match in [
        ({"dilation": 2}, "dilation .* or ceil_mode is not lowered yet"),
        ({"ceil_mode": True}, "ceil_mode is not lowered yet"),
        ({"padding": 2}, "expected padding at most half the kernel"),
    ]:
        args = {"x": "x", "kernel_size": 2, "stride": 2, "out": ["o", "i"], **extra}
        with pytest.raises(TraceError, match=match):
            lower([OpSpec("max_pool2d_with_indices", args)], tensors, cfg)


# the fraction of the roofline each reaches on one trn2 core at [32, 64, 32, 32], less a
# margin: kernel 2 stride 2, backward 70% (max) and 68% (avg) in fp32, 60% and 55% in bf16;
# forward 66% and 76%, 43% and 51%. Kernel 3 stride 2 padding 1 is bound by VectorE and
# GpSimd: its backward takes 9 taps of (a mask and a product) and 5 adds where windows
# overlap (23% max, 33% avg in fp32), its forward two merges of (compare, max, select) per
# axis (28%); one `tensor_tensor` is 2 cycles an fp32 element on either engine
REACHED = {
    ("max_pool2d_with_indices_backward", 2, "float32"): 0.63,
    ("max_pool2d_with_indices_backward", 2, "bfloat16"): 0.52,
    ("avg_pool2d_backward", 2, "float32"): 0.6,
    ("avg_pool2d_backward", 2, "bfloat16"): 0.52,
    ("max_pool2d_with_indices_backward", 3, "float32"): 0.2,
    ("max_pool2d_with_indices_backward", 3, "bfloat16"): 0.16,
    ("avg_pool2d_backward", 3, "float32"): 0.3,
    ("avg_pool2d_backward", 3, "bfloat16"): 0.18,
    ("max_pool2d_with_indices", 2, "float32"): 0.56,
    ("max_pool2d_with_indices", 2, "bfloat16"): 0.37,
    ("avg_pool2d", 2, "float32"): 0.64,
    ("avg_pool2d", 2, "bfloat16"): 0.42,
    ("max_pool2d_with_indices", 3, "float32"): 0.24,
    ("max_pool2d_with_indices", 3, "bfloat16"): 0.15,
    ("avg_pool2d", 3, "float32"): 0.33,
    ("avg_pool2d", 3, "bfloat16"): 0.2,
}


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("op", sorted({op for op, _, _ in REACHED}))
def test_time_against_the_roofline(op, k, dt):
    """Kernel 2 stride 2 within 2x of its roofline in the backward (issue 25); the rest what
    it is (REACHED)."""
    shape = (32, 64, 32, 32)
    s, p = 2, k - 2  # kernel 2 stride 2; kernel 3 stride 2 padding 1
    small = (32, 64, (32 + 2 * p - k) // s + 1, (32 + 2 * p - k) // s + 1)
    win = {"kernel_size": [k, k], "stride": [s, s], "padding": [p, p]}
    if op.endswith("backward"):
        t = {"g": (small, dt, "normal"), "i": (small, "int32", "zeros"), "gi": (shape, dt, None)}
        args = {"grad_output": "g", "input_size": list(shape), **win, "out": "gi"}
        if op.startswith("max"):
            args["indices"] = "i"
    else:
        t = {"x": (shape, dt, "normal"), "o": (small, dt, None), "i": (small, "int32", None)}
        args = {"x": "x", **win, "out": ["o", "i"] if op.startswith("max") else "o"}
    ns, roof = timed(t, op, args)
    least = REACHED[op, k, dt]
    if op.endswith("backward") and k == 2:
        least = max(least, 0.5)
    assert roof / ns >= least and ns >= roof
