"""The activations with parameters and their backward ops (`kernels.activations`,
`kernels.activations_backward`): values against PyTorch's CPU kernels (and the numpy
references against them) over shapes that are and are not multiples of 128, in fp32 and bf16,
the boundaries PyTorch draws (x = +-3, min_val, max_val, 0) exactly, and the time at a size
where they are bound by moving their bytes."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import run_ops, timed
from trnsim.config import load_chip
from trnsim.errors import TraceError
from trnsim.kernels import lower, reference
from trnsim.kernels.reference import tolerance
from trnsim.trace.program import OpSpec

torch = pytest.importorskip("torch")
F = torch.nn.functional

SHAPES = [(128, 512), (3, 5), (300, 1000), (2, 130, 7)]
DTYPES = ["float32", "bfloat16"]
SELU = {"alpha": 1.6732632423543772, "scale": 1.0507009873554805}
FORWARD = [  # (op, its arguments, the torch function)
    ("leaky_relu", {}, lambda x: F.leaky_relu(x)),
    ("leaky_relu", {"negative_slope": 0.2}, lambda x: F.leaky_relu(x, 0.2)),
    ("leaky_relu", {"negative_slope": 1.5}, lambda x: F.leaky_relu(x, 1.5)),
    ("hardswish", {}, F.hardswish),
    ("hardsigmoid", {}, F.hardsigmoid),
    ("elu", {}, F.elu),
    ("elu", SELU, F.selu),
    ("elu", {"alpha": 0.5, "input_scale": 2.0}, lambda x: torch.ops.aten.elu(x, 0.5, 1, 2.0)),
    ("hardtanh", {}, F.hardtanh),
    ("hardtanh", {"min_val": 0.0, "max_val": 6.0}, F.relu6),
    ("softplus", {}, F.softplus),
    ("softplus", {"beta": 2.0, "threshold": 1.0}, lambda x: F.softplus(x, 2.0, 1.0)),
]
BACKWARD = [  # (op, its arguments but the tensors, the forward whose input gradient it is)
    ("leaky_relu_backward", {"negative_slope": 0.01}, lambda x: F.leaky_relu(x)),
    ("leaky_relu_backward", {"negative_slope": -0.5}, lambda x: F.leaky_relu(x, -0.5)),
    ("hardswish_backward", {}, F.hardswish),
    ("hardsigmoid_backward", {}, F.hardsigmoid),
    ("hardtanh_backward", {"min_val": -1.0, "max_val": 1.0}, F.hardtanh),
    ("hardtanh_backward", {"min_val": 0.0, "max_val": 6.0}, F.relu6),
    ("elu_backward", {"alpha": 1.0, "scale": 1.0, "input_scale": 1.0}, F.elu),
    ("elu_backward", {"alpha": SELU["alpha"], "scale": SELU["scale"], "input_scale": 1.0},
     F.selu),
    ("elu_backward", {"alpha": 0.5, "scale": 2.0, "input_scale": 1.0},
     lambda x: torch.ops.aten.elu(x, 0.5, 2.0, 1.0)),
    ("softplus_backward", {"beta": 1.0, "threshold": 20.0}, F.softplus),
    ("softplus_backward", {"beta": 2.0, "threshold": 1.0}, lambda x: F.softplus(x, 2.0, 1.0)),
]  # fmt: skip


def close(got, want, dtype_name, factor=1.0):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    rtol, atol = (factor * t for t in tolerance(dtype_name))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * max(1.0, np.abs(want).max()))


def _torch(a: np.ndarray, dt: str):
    t = torch.tensor(np.asarray(a, np.float32))
    return t.to(torch.bfloat16) if dt == "bfloat16" else t


def _edges(shape, dt):
    """Normal values with PyTorch's boundaries written into the first elements."""
    x = np.random.default_rng(7).normal(0, 3, shape).astype(np.float32).reshape(-1)
    # the 16-bit neighbours of -3 and 3, and values far out
    edge = [-3.0, 3.0, 0.0, -1.0, 1.0, 6.0, -3.015625, 3.015625, 20.0, 0.5, -0.5, 1e-30,
            -2.984375, 2.984375, -1e30, 1e30]  # fmt: skip
    x[: min(len(edge), x.size)] = edge[: x.size]
    return x.reshape(shape)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("case", range(len(FORWARD)))
def test_forward_against_torch(case, shape, dt, tmp_path):
    op, args, fn = FORWARD[case]
    path = tmp_path / "x.npy"
    np.save(path, _edges(shape, dt).astype(np.float32))
    r = run_ops(
        {"x": (shape, "float32", ("file", str(path))), "xd": (shape, dt, None),
         "out": (shape, dt, None)},
        [("copy", {"x": "x", "out": "xd"}), (op, {"x": "xd", "out": "out", **args})],
    )  # fmt: skip
    x = r.tensor("xd")
    want = fn(_torch(x, dt)).float().numpy()
    close(r.tensor("out"), want, dt)
    close(reference(op, {"x": "x", **args}, {"x": np.asarray(x, np.float64)}), want, dt, 1)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("case", range(len(BACKWARD)))
def test_backward_against_torch_autograd(case, shape, dt, tmp_path):
    op, args, fn = BACKWARD[case]
    np.save(tmp_path / "x.npy", _edges(shape, dt))
    np.save(tmp_path / "g.npy", np.random.default_rng(8).normal(size=shape).astype(np.float32))
    t = {"x0": (shape, "float32", ("file", str(tmp_path / "x.npy"))),
         "g0": (shape, "float32", ("file", str(tmp_path / "g.npy"))),
         "x": (shape, dt, None), "g": (shape, dt, None), "out": (shape, dt, None)}  # fmt: skip
    xk = "self_or_result" if op == "elu_backward" else "x"
    extra = {"is_result": False} if op == "elu_backward" else {}
    ops = [("copy", {"x": "x0", "out": "x"}), ("copy", {"x": "g0", "out": "g"}),
           (op, {"grad_output": "g", xk: "x", "out": "out", **args, **extra})]  # fmt: skip
    r = run_ops(t, ops)
    x, g = r.tensor("x"), r.tensor("g")
    xt = _torch(x, dt).float().requires_grad_()
    fn(xt).backward(_torch(g, dt).float())
    want = xt.grad.numpy()
    close(r.tensor("out"), want, dt)
    ref = reference(op, {**ops[-1][1]}, {"g": np.asarray(g, np.float64),
                                          "x": np.asarray(x, np.float64)})  # fmt: skip
    close(ref, want, "float32", 4)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("args", [{"alpha": 1.0, "scale": 1.0, "input_scale": 1.0},
                                  {**SELU, "input_scale": 1.0}])  # fmt: skip
def test_elu_backward_from_the_result(args, dt):
    """is_result: the derivative from y = elu(x), as aten's in-place ELU passes it."""
    shape = (130, 70)
    t = {"x": (shape, dt, "normal"), "g": (shape, dt, "normal"), "y": (shape, dt, None),
         "out": (shape, dt, None)}  # fmt: skip
    ops = [("elu", {"x": "x", "out": "y", **args}),
           ("elu_backward", {"grad_output": "g", "self_or_result": "y", "is_result": True,
                             "out": "out", **args})]  # fmt: skip
    r = run_ops(t, ops)
    y, g = (torch.tensor(r.tensor(n).astype(np.float32)) for n in ("y", "g"))
    want = torch.ops.aten.elu_backward(g, args["alpha"], args["scale"], args["input_scale"],
                                       True, y).numpy()  # fmt: skip
    close(r.tensor("out"), want, dt)


def test_refused_arguments_name_the_op():
    from trnsim.dtypes import dtype
    from trnsim.trace.program import TensorSpec

    f32 = dtype("float32")
    tensors = {n: TensorSpec(n, (4, 8), f32) for n in ("x", "out")}
    cfg = load_chip("trn2")
    for op, args, match in [
        ("elu", {"input_scale": -1.0}, "elu: input_scale -1.0; expected a positive number"),
        ("hardtanh", {"min_val": 2.0, "max_val": 1.0}, "hardtanh: min_val 2.0 > max_val 1.0"),
        ("leaky_relu", {"negative_slope": "a"}, "negative_slope 'a'; expected a finite number"),
    ]:
        with pytest.raises(TraceError, match=match):
            lower([OpSpec(op, {"x": "x", "out": "out", **args})], tensors, cfg)


BIG = (8, 64, 64, 64)
# the fraction of the roofline each reaches on one trn2 core at [8, 64, 64, 64] (8 MiB of
# fp32, sixteen blocks), less a margin: 97% (fp32) and 82-94% (bf16) forward, 96-98% and
# 87-95% backward; the library's relu reaches 88% and 76% here, gelu_backward 92% and 84%.
# hardswish_backward in bf16 is bound by VectorE and GpSimd, not the DMA: its factor has two
# jumps (at x = -3 and 3), a min with a mask and a product with another (ScalarE's), then the
# product with the gradient: three tensor_tensor and one tensor_scalar pass, 2.4 ns a
# partition's element at best over the two engines where the DMA moves it in 2.0 (70% here)
REACHED = {
    ("leaky_relu", "float32"): 0.9, ("hardswish", "float32"): 0.9,
    ("hardsigmoid", "float32"): 0.9, ("elu", "float32"): 0.9, ("hardtanh", "float32"): 0.9,
    ("softplus", "float32"): 0.9,
    ("leaky_relu", "bfloat16"): 0.85, ("hardswish", "bfloat16"): 0.78,
    ("hardsigmoid", "bfloat16"): 0.85, ("elu", "bfloat16"): 0.75,
    ("hardtanh", "bfloat16"): 0.85, ("softplus", "bfloat16"): 0.85,
    ("leaky_relu_backward", "float32"): 0.9, ("hardswish_backward", "float32"): 0.78,
    ("hardsigmoid_backward", "float32"): 0.9, ("hardtanh_backward", "float32"): 0.9,
    ("elu_backward", "float32"): 0.9, ("softplus_backward", "float32"): 0.9,
    ("leaky_relu_backward", "bfloat16"): 0.88, ("hardswish_backward", "bfloat16"): 0.68,
    ("hardsigmoid_backward", "bfloat16"): 0.88, ("hardtanh_backward", "bfloat16"): 0.8,
    ("elu_backward", "bfloat16"): 0.88, ("softplus_backward", "bfloat16"): 0.88,
}  # fmt: skip


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("op", ["leaky_relu", "hardswish", "hardsigmoid", "elu", "hardtanh",
                                "softplus"])  # fmt: skip
def test_forward_time_against_the_roofline(op, dt):
    t = {"x": (BIG, dt, "normal"), "out": (BIG, dt, None)}
    ns, roof = timed(t, op, {"x": "x", "out": "out"})
    assert roof / ns >= REACHED[op, dt] and ns >= roof


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("op,args", [
    ("leaky_relu_backward", {"negative_slope": 0.01}), ("hardswish_backward", {}),
    ("hardsigmoid_backward", {}), ("hardtanh_backward", {"min_val": 0.0, "max_val": 6.0}),
    ("elu_backward", {"alpha": 1.0, "scale": 1.0, "input_scale": 1.0, "is_result": False}),
    ("softplus_backward", {"beta": 1.0, "threshold": 20.0}),
])  # fmt: skip
def test_backward_time_against_the_roofline(op, args, dt):
    """Each within 1.5x of its roofline (issue 25), most near it."""
    t = {"g": (BIG, dt, "normal"), "x": (BIG, dt, "normal"), "out": (BIG, dt, None)}
    xk = "self_or_result" if op == "elu_backward" else "x"
    ns, roof = timed(t, op, {"grad_output": "g", xk: "x", **args, "out": "out"})
    assert roof / ns >= max(REACHED[op, dt], 1 / 1.5) and ns >= roof
