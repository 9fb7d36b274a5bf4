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


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", [(128, 512), (300, 1000), (2, 70, 33), (1, 4096)])
def test_softmax_backward_against_torch(shape, dt):
    torch = pytest.importorskip("torch")
    t = {"x": (shape, dt, "normal"), "g": (shape, dt, "normal"), "y": (shape, dt, None),
         "out": (shape, dt, None)}  # fmt: skip
    r = run(
        t,
        [
            ("softmax", {"x": "x", "out": "y"}),
            ("_softmax_backward_data", {"grad_output": "g", "output": "y", "dim": -1,
                                        "out": "out"}),
        ],
    )  # fmt: skip
    g, y = (torch.tensor(r.tensor(n).astype(np.float64)) for n in ("g", "y"))
    want = torch.ops.aten._softmax_backward_data(g, y, -1, torch.float64).numpy()
    close(r.tensor("out"), want, dt)
    # and against autograd of softmax itself (from x, in fp64)
    (auto,) = torch_grad(lambda v: torch.softmax(v, -1), r.tensor("x"), grad=g.numpy())
    close(r.tensor("out"), auto, dt, 2 if dt == "bfloat16" else 1e3)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape,weighted", [((300, 1000), False), ((7, 5000), True),
                                            ((128, 64), True), ((70,), False)])  # fmt: skip
def test_nll_loss_backward_against_torch(shape, weighted, reduction, tmp_path):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    n, c = (shape[0], shape[-1]) if len(shape) > 1 else (1, shape[0])
    tshape = shape[:-1]
    target = rng.integers(0, c, n).astype(np.int32).reshape(tshape)
    if len(shape) > 1:
        target.reshape(-1)[::5] = -100  # some ignored rows
    np.save(tmp_path / "t.npy", target)
    t = {
        "x": (shape, "float32", "normal"),
        "target": (tshape, "int32", {"file": str(tmp_path / "t.npy")}),
        "w": ((c,), "float32", "random"),
        "go": ((n,) if reduction == "none" and len(shape) > 1 else (), "float32", "normal"),
        "tw": ((), "float32", None),
        "out": (shape, "bfloat16", None),
    }
    x = torch.zeros(shape, dtype=torch.float64, requires_grad=True)
    r0 = run(t, [("exp", {"x": "x", "out": "x"})])  # any op: the initial values
    w = torch.tensor(r0.tensor("w").astype(np.float64)) if weighted else None
    tgt = torch.tensor(target.astype(np.int64))
    loss = torch.nn.functional.nll_loss(x, tgt, weight=w, reduction=reduction)
    go = torch.tensor(r0.tensor("go").astype(np.float64))
    loss.backward(go)
    valid = tgt.reshape(-1) != -100
    wt = w[tgt.reshape(-1)[valid]] if weighted else torch.ones(int(valid.sum()))
    np.save(tmp_path / "tw.npy", np.float32(wt.sum().item()))
    t["tw"] = ((), "float32", {"file": str(tmp_path / "tw.npy")})
    args = {"grad_output": "go", "x": "x", "target": "target", "reduction": reduction,
            "out": "out", **({"weight": "w"} if weighted else {}),
            **({"total_weight": "tw"} if reduction == "mean" else {})}  # fmt: skip
    r = run(t, [("nll_loss_backward", args)])
    close(r.tensor("out"), x.grad.numpy(), "bfloat16")
    ref = reference("nll_loss_backward", {k: v for k, v in args.items() if k != "out"},
                    {n: r.tensor(n) for n in ("go", "x", "target", "w", "tw")})  # fmt: skip
    close(ref, x.grad.numpy(), "float32")
