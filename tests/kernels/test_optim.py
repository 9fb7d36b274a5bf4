"""The optimizer's elementwise ops lowered: values against torch (numpy where torch is not
installed), and one AdamW step written with them giving torch.optim.AdamW's parameters."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.test_backward import close, run
from trnsim.dtypes import dtype
from trnsim.kernels import reference

SHAPES = [(128, 512), (3, 5), (300, 1000), (2, 130, 7)]


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "op,args",
    [
        ("addcdiv", {"x": "x", "tensor1": "a", "tensor2": "c", "value": -0.5}),
        ("addcmul", {"x": "x", "tensor1": "a", "tensor2": "a", "value": 0.1}),
        ("addcmul", {"x": "x", "tensor1": "a", "tensor2": "c"}),
        ("lerp", {"x": "x", "end": "a", "weight": 0.1}),
        ("lerp", {"x": "x", "end": "a", "weight": 0.75}),
    ],
)
def test_addc_and_lerp_against_torch(op, args, shape, dt):
    torch = pytest.importorskip("torch")
    t = {n: (shape, dt, "normal") for n in ("x", "a")}
    t["c"] = (shape, dt, "random")
    t["out"] = (shape, dt, None)
    r = run(t, [(op, {**args, "out": "out"})])
    got = {n: torch.tensor(r.tensor(n).astype(np.float32)) for n in ("x", "a", "c")}
    if op == "lerp":
        want = torch.lerp(got["x"], got["a"], args["weight"])
    else:
        f = getattr(torch, op)
        want = f(got["x"], got[args["tensor1"]], got[args["tensor2"]], value=args.get("value", 1))
    close(r.tensor("out"), want.numpy(), dt)
    arrays = {n: r.tensor(n) for n in ("x", "a", "c")}
    close(reference(op, args, arrays), want.numpy(), "float32")


@pytest.mark.parametrize("w", [0.1, 0.75])
def test_a_16_bit_lerp_is_the_fp32_formula_rounded_once_with_end_minus_x_on_tensor_e(w):
    """bf16 lerp (`kernels.lerp`): end - x on TensorE (identity matmuls accumulated in PSUM),
    the scaling on ScalarE, the sum on VectorE; bit for bit PyTorch's form for w (x + w (end -
    x), or end - (1 - w)(end - x)) computed in fp32 and rounded once to bf16."""
    shape, bf16 = (300, 1000), dtype("bfloat16")
    t = {n: (shape, "bfloat16", "normal") for n in ("x", "a")}
    t["out"] = (shape, "bfloat16", None)
    r = run(t, [("lerp", {"x": "x", "end": "a", "weight": w, "out": "out"})])
    x, a = (r.tensor(n).astype(np.float32) for n in ("x", "a"))
    w32 = np.float32(w)
    want = x + w32 * (a - x) if w < 0.5 else a - (a - x) * np.float32(1.0 - w)
    np.testing.assert_array_equal(r.tensor("out"), want.astype(bf16.np))
    busy = {e: r.summary["engines"][f"core0.{e}"]["instructions"] for e in ("tensor", "scalar")}
    assert all(busy.values()), busy


def test_foreach_ops_take_lists_numbers_and_lists_of_numbers():
    torch = pytest.importorskip("torch")
    shapes = [(130, 70), (5,), (2, 300)]
    t = {}
    for i, s in enumerate(shapes):
        for k in ("x", "y", "o"):
            t[f"{k}{i}"] = (s, "float32", "random" if k != "o" else None)
    xs, ys, os_ = ([f"{k}{i}" for i in range(3)] for k in ("x", "y", "o"))
    ops = [
        ("_foreach_add", {"x": xs, "other": ys, "alpha": -2.0, "out": os_}),
        ("_foreach_mul", {"x": os_, "other": 3.0, "out": os_}),
        ("_foreach_div", {"x": os_, "other": [2.0, 4.0, 8.0], "out": os_}),
        ("_foreach_add", {"x": os_, "other": 1.5, "out": os_}),
        ("_foreach_sqrt", {"x": ys, "out": ys}),
        ("_foreach_addcdiv", {"x": os_, "tensor1": ys, "tensor2": xs, "value": [1, 2, 3],
                              "out": os_}),
        ("_foreach_lerp", {"x": os_, "tensors1": xs, "weight": 0.3, "out": os_}),
    ]  # fmt: skip
    r = run(t, ops)
    x0 = [torch.tensor(r.tensor(n)) for n in xs]
    y0 = [torch.tensor(np.square(r.tensor(n))) for n in ys]  # ys were square-rooted in place
    o = torch._foreach_add(x0, y0, alpha=-2.0)
    o = torch._foreach_mul(o, 3.0)
    o = torch._foreach_div(o, [2.0, 4.0, 8.0])
    o = torch._foreach_add(o, 1.5)
    y1 = torch._foreach_sqrt(y0)
    o = torch._foreach_addcdiv(o, y1, x0, [1.0, 2.0, 3.0])
    o = torch._foreach_lerp(o, x0, 0.3)
    for name, want in zip(os_, o):
        close(r.tensor(name), want.numpy(), "float32", 4)


def test_an_adamw_step_written_with_these_ops_gives_torchs_parameters(tmp_path):
    """torch.optim.AdamW's foreach step, op for op (step 3: bias corrections that are not
    1), against torch.optim.AdamW itself."""
    torch = pytest.importorskip("torch")
    lr, b1, b2, eps, wd, step = 1e-2, 0.9, 0.999, 1e-8, 0.1, 3
    shapes = [(300, 70), (129,)]
    rng = np.random.default_rng(0)
    p0 = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    g = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    m0 = [0.1 * rng.standard_normal(s).astype(np.float32) for s in shapes]
    v0 = [0.01 * rng.random(s).astype(np.float32) for s in shapes]
    # torch's own step from this state
    params = [torch.tensor(p, requires_grad=True) for p in p0]
    opt = torch.optim.AdamW(params, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    for p, gi, mi, vi in zip(params, g, m0, v0):
        p.grad = torch.tensor(gi)
        opt.state[p] = {"step": torch.tensor(float(step - 1)), "exp_avg": torch.tensor(mi),
                        "exp_avg_sq": torch.tensor(vi)}  # fmt: skip
    opt.step()
    # the same with the lowered ops
    bc1, bc2 = 1 - b1**step, 1 - b2**step
    n = len(shapes)
    P, G, M, V, D = ([f"{k}{i}" for i in range(n)] for k in "pgmvd")
    t = {}
    for i, s in enumerate(shapes):
        for name, value in ((P[i], p0[i]), (G[i], g[i]), (M[i], m0[i]), (V[i], v0[i])):
            np.save(tmp_path / f"{name}.npy", value)
            t[name] = (s, "float32", {"file": str(tmp_path / f"{name}.npy")})
        t[D[i]] = (s, "float32", None)
    ops = [
        ("_foreach_mul", {"x": P, "other": 1 - lr * wd, "out": P}),
        ("_foreach_lerp", {"x": M, "tensors1": G, "weight": 1 - b1, "out": M}),
        ("_foreach_mul", {"x": V, "other": b2, "out": V}),
        ("_foreach_addcmul", {"x": V, "tensor1": G, "tensor2": G, "value": 1 - b2, "out": V}),
        ("_foreach_sqrt", {"x": V, "out": D}),
        ("_foreach_div", {"x": D, "other": bc2**0.5, "out": D}),
        ("_foreach_add", {"x": D, "other": eps, "out": D}),
        ("_foreach_addcdiv", {"x": P, "tensor1": M, "tensor2": D, "value": -lr / bc1, "out": P}),
    ]
    r = run(t, ops)
    for i, p in enumerate(params):
        np.testing.assert_allclose(r.tensor(P[i]), p.detach().numpy(), rtol=2e-6, atol=1e-7)
        np.testing.assert_allclose(r.tensor(M[i]), opt.state[p]["exp_avg"].numpy(), rtol=2e-6,
                                   atol=1e-8)  # fmt: skip
