"""The backward ops lowered by the kernel library: values against PyTorch's CPU autograd (the
numpy references where torch is not installed), over shapes that are and are not multiples of
128 or 512, in bf16 and fp32."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import run_lowered
from trnsim.kernels import lower, reference
from trnsim.kernels.reference import tolerance
from trnsim.trace.program import OpSpec


def run(tensors, ops, chip="trn2"):
    specs = [OpSpec(op, args) for op, args in ops]

    def emit(b, cfg):
        prog = lower(specs, b.tensors, cfg)
        b.tiles.update(prog.tiles)
        b.instructions[:] = prog.instructions

    r, _ = run_lowered(tensors, emit, chip=chip)
    return r


def close(got, want, dtype_name, factor=1.0):
    """Within the library's tolerance for `dtype_name` (times `factor`)."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    rtol, atol = (factor * t for t in tolerance(dtype_name))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * max(1.0, np.abs(want).max()))


def torch_grad(fn, *inputs, grad):
    """d(fn(*inputs))/d inputs . grad, by torch autograd in float64."""
    torch = pytest.importorskip("torch")
    ts = [torch.tensor(np.asarray(x, np.float64), requires_grad=True) for x in inputs]
    fn(*ts).backward(torch.tensor(np.asarray(grad, np.float64)))
    return [t.grad.numpy() for t in ts]


SHAPES = [(128, 512), (3, 5), (300, 1000), (2, 130, 7)]
DTYPES = ["float32", "bfloat16"]


def _act_grad(op, args):
    """The torch function whose input gradient the op computes, and which input it needs."""
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    return {
        "threshold_backward": (lambda x: f.threshold(x, args.get("threshold", 0.0), 0.0), "x"),
        "gelu_backward": (lambda x: f.gelu(x, approximate=args.get("approximate", "none")), "x"),
        "silu_backward": (f.silu, "x"),
        "sigmoid_backward": (torch.sigmoid, "output"),
        "tanh_backward": (torch.tanh, "output"),
    }[op]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "op,extra",
    [
        ("threshold_backward", {"threshold": 0.25}),
        ("gelu_backward", {}),
        ("gelu_backward", {"approximate": "tanh"}),
        ("silu_backward", {}),
        ("sigmoid_backward", {}),
        ("tanh_backward", {}),
    ],
)
def test_elementwise_backward_against_torch_autograd(op, extra, shape, dt):
    torch = pytest.importorskip("torch")
    fn, which = _act_grad(op, extra)
    t = {"g": (shape, dt, "normal"), "x": (shape, dt, "normal"), "out": (shape, dt, None)}
    if which == "output":  # the forward's output: sigmoid or tanh of x, stored in dt
        ops = [
            ("sigmoid" if op == "sigmoid_backward" else "tanh", {"x": "x", "out": "x"}),
            (op, {"grad_output": "g", "output": "x", "out": "out"}),
        ]
    else:
        ops = [(op, {"grad_output": "g", "x": "x", "out": "out", **extra})]
    r = run(t, ops)
    g, x = (r.tensor(n).astype(np.float64) for n in ("g", "x"))
    if which == "output":  # d tanh / dx from the stored output y: grad * (1 - y^2) in torch
        back = getattr(torch.ops.aten, op)
        want = back(torch.tensor(g), torch.tensor(x)).numpy()
    else:
        (want,) = torch_grad(fn, x, grad=g)
    close(r.tensor("out"), want, dt)
    # and the numpy reference agrees with torch
    args = {k: v for k, v in ops[-1][1].items() if k != "out"}
    close(reference(op, args, {"g": g, "x": x}), want, "float32", 4)


def test_threshold_backward_is_zero_at_and_below_the_threshold():
    r = run(
        {"g": ((4, 64), "float32", "normal"), "x": ((4, 64), "float32", "normal"),
         "out": ((4, 64), "float32", None)},
        [("threshold_backward", {"grad_output": "g", "x": "x", "threshold": 0.0, "out": "out"})],
    )  # fmt: skip
    x, g = r.tensor("x"), r.tensor("g")
    np.testing.assert_array_equal(r.tensor("out"), np.where(x > 0, g, 0))
