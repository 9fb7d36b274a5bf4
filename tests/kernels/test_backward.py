"""The backward ops lowered by the kernel library: values against PyTorch's CPU autograd (the
numpy references where torch is not installed), over shapes that are and are not multiples of
128 or 512, in bf16 and fp32."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import run_ops
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.kernels import lower, reference
from trnsim.kernels.reference import tolerance
from trnsim.trace.program import OpSpec


def run(tensors, ops, chip="trn2"):
    return run_ops(tensors, ops, chip)


def run_kernels(tensors, kernels: dict, chip="trn2"):
    """Kernels of ops (name -> [(op, args)]) launched in order on one stream of one core."""
    from trnsim.config import load_chip
    from trnsim.runtime.session import run_program
    from trnsim.trace.program import KernelSpec, Program, Step, StreamSpec, TensorSpec

    specs = {n: TensorSpec(n, tuple(s), dtype(d), i) for n, (s, d, i) in tensors.items()}
    ks = {n: KernelSpec(n, ops=[OpSpec(op, a) for op, a in ops]) for n, ops in kernels.items()}
    steps = [Step("launch", n) for n in kernels]
    prog = Program("ops", chip, 0, "functional", 1, [], specs, ks, [StreamSpec("s", 0, steps)])
    return run_program(prog, load_chip(chip), "functional")


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


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize(
    "shape,affine", [((128, 512), True), ((300, 70), True), ((2, 130, 600), False),
                     ((5, 1000), True)],
)  # fmt: skip
def test_layer_norm_backward_against_torch(shape, affine, dt, tmp_path):
    torch = pytest.importorskip("torch")
    d = shape[-1]
    rows = shape[:-1] + (1,)
    t = {"x": (shape, dt, "normal"), "g": (shape, dt, "normal"),
         "w": ((d,), "float32", "normal"), "b": ((d,), "float32", "normal"),
         "mean": (rows, "float32", None), "rstd": (rows, "float32", None),
         "dx": (shape, dt, None), "dw": ((d,), "float32", None),
         "db": ((d,), "float32", None)}  # fmt: skip
    r0 = run(t, [("exp", {"x": "w", "out": "dw"})])  # the initial values
    x, g, w, bias = (torch.tensor(r0.tensor(n).astype(np.float64)) for n in "xgwb")
    x.requires_grad_(True)
    w.requires_grad_(True)
    bias.requires_grad_(True)
    y = torch.nn.functional.layer_norm(x, [d], w if affine else None, bias if affine else None)
    y.backward(g)
    mean = x.detach().mean(-1, keepdim=True)
    rstd = 1 / torch.sqrt(x.detach().var(-1, unbiased=False, keepdim=True) + 1e-5)
    for name, v in (("mean", mean), ("rstd", rstd)):
        np.save(tmp_path / f"{name}.npy", v.numpy().astype(np.float32))
        t[name] = (rows, "float32", {"file": str(tmp_path / f"{name}.npy")})
    args = {"grad_out": "g", "input": "x", "normalized_shape": [d], "mean": "mean",
            "rstd": "rstd", "out": ["dx", "dw", "db"] if affine else ["dx"]}  # fmt: skip
    if affine:
        args.update(weight="w", bias="b", output_mask=[True, True, True])
    r = run(t, [("native_layer_norm_backward", args)])
    close(r.tensor("dx"), x.grad.numpy(), dt, 2)
    if affine:
        close(r.tensor("dw"), w.grad.numpy(), dt)
        close(r.tensor("db"), bias.grad.numpy(), dt)
    ref = reference(
        "native_layer_norm_backward",
        {k: v for k, v in args.items() if k != "out"},
        {n: r.tensor(n) for n in ("g", "x", "mean", "rstd", "w", "b")},
    )
    close(ref[0], x.grad.numpy(), "float32", 100)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize(
    "tokens,v,d,pad", [((2, 100), 300, 70, -1), ((129,), 128, 600, 3), ((256,), 50, 1100, 0)]
)
def test_embedding_dense_backward_against_torch(tokens, v, d, pad, dt, tmp_path):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    idx = rng.integers(0, v, tokens).astype(np.int32)
    idx.reshape(-1)[:7] = 3  # repeated rows accumulate
    np.save(tmp_path / "i.npy", idx)
    t = {"g": (tokens + (d,), dt, "normal"),
         "i": (tokens, "int32", {"file": str(tmp_path / "i.npy")}),
         "out": ((v, d), "float32", None)}  # fmt: skip
    args = {"grad_output": "g", "indices": "i", "num_weights": v, "padding_idx": pad,
            "out": "out"}  # fmt: skip
    r = run(t, [("embedding_dense_backward", args)])
    g = torch.tensor(r.tensor("g").astype(np.float64))
    want = torch.ops.aten.embedding_dense_backward(g, torch.tensor(idx.astype(np.int64)), v, pad,
                                                   False)  # fmt: skip
    close(r.tensor("out"), want.numpy(), "float32")
    ref = reference("embedding_dense_backward", {k: v for k, v in args.items() if k != "out"},
                    {"g": r.tensor("g"), "i": idx})  # fmt: skip
    close(ref, want.numpy(), "float32")


def test_embedding_dense_backward_shares_the_vocabulary_between_two_cores(tmp_path):
    """At LNC 2 each core computes its half of the vocabulary's rows (128-row aligned), every
    token's gradient read by both: the same values as torch, and each core's matmuls for its
    own vocabulary blocks only (it ran whole on the first core: GPT-2's [256 tokens, 768] into
    50257 rows took 1227.6 us on trn2, now 618.2 us)."""
    torch = pytest.importorskip("torch")
    from tests.kernels.test_ops import _run_cores

    v, d = 300, 70
    idx = (np.arange(200, dtype=np.int32) * 37) % v
    np.save(tmp_path / "i.npy", idx)
    t = {"g": ((200, d), "float32", "normal"),
         "i": ((200,), "int32", {"file": str(tmp_path / "i.npy")}),
         "out": ((v, d), "float32", None)}  # fmt: skip
    args = {"grad_output": "g", "indices": "i", "num_weights": v, "out": "out"}
    r, progs = _run_cores(t, [("embedding_dense_backward", args)], 2)
    g = torch.tensor(r.tensor("g").astype(np.float64))
    want = torch.ops.aten.embedding_dense_backward(g, torch.tensor(idx.astype(np.int64)), v, -1,
                                                   False)  # fmt: skip
    close(r.tensor("out"), want.numpy(), "float32")
    # 300 rows in 128-row shares: 128 on core 0 (1 block), 172 on core 1 (2); 2 token blocks
    assert [sum(i.OP == "matmul" for i in p.instructions) for p in progs] == [1 * 2, 2 * 2]


@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("shape,dt", [((130, 5000), "float32"), ((2, 3, 300), "bfloat16")])
def test_log_softmax_backward_against_torch(shape, dt, cores):
    """g - exp(y) * sum(g) over rows of the partitions, chunked (`log_softmax_backward`)."""
    torch = pytest.importorskip("torch")
    from tests.kernels.test_ops import _run_cores

    t = {"g": (shape, dt, "normal"), "y": (shape, dt, "normal"), "out": (shape, dt, None)}
    args = {"grad_output": "g", "output": "y", "dim": -1, "out": "out"}
    r, _ = _run_cores(t, [("_log_softmax_backward_data", args)], cores)
    g, y = (torch.tensor(r.tensor(n).astype(np.float64)) for n in "gy")
    want = torch.ops.aten._log_softmax_backward_data(g, y, -1, torch.float64)
    close(r.tensor("out"), want.numpy(), dt)


def test_log_softmax_backward_of_a_vocabulary_is_near_its_four_passes():
    """[128, 20000] fp32 on one trn2 core: g read twice, y once, out written once; within
    1.5x of the roofline's three passes (the library's exp, sum, mul and sub made seven)."""
    from tests.kernels.helpers import timed

    s = (128, 20000)
    t = {"g": (s, "float32", None), "y": (s, "float32", None), "out": (s, "float32", None)}
    args = {"grad_output": "g", "output": "y", "dim": -1, "out": "out"}
    got, roof = timed(t, "_log_softmax_backward_data", args)
    assert roof < got < 1.5 * roof


def test_embedding_dense_backward_on_trn3_accumulates_in_one_bank_per_chunk(tmp_path):
    """NC-v4's moving limit is 8 PSUM banks: the two accumulators stay one bank each (two of
    4096 fp32 columns would need 32 KiB of PSUM's 16)."""
    torch = pytest.importorskip("torch")
    np.save(tmp_path / "i.npy", (np.arange(64, dtype=np.int32) * 7) % 50)
    t = {"g": ((64, 1100), "float32", "normal"),
         "i": ((64,), "int32", {"file": str(tmp_path / "i.npy")}),
         "out": ((50, 1100), "float32", None)}  # fmt: skip
    args = {"grad_output": "g", "indices": "i", "num_weights": 50, "out": "out"}
    r = run(t, [("embedding_dense_backward", args)], chip="trn3")
    g = torch.tensor(r.tensor("g").astype(np.float64))
    want = torch.ops.aten.embedding_dense_backward(g, torch.tensor(r.tensor("i").astype(np.int64)),
                                                   50, -1, False)  # fmt: skip
    close(r.tensor("out"), want.numpy(), "float32")


EXAMPLES = {  # op -> (tensors name -> shape, args): a small example of every training op
    "threshold_backward": ({"g": (4, 8), "x": (4, 8), "o": (4, 8)},
                           {"grad_output": "g", "x": "x", "threshold": 0.0, "out": "o"}),
    "gelu_backward": ({"g": (4, 8), "x": (4, 8), "o": (4, 8)},
                      {"grad_output": "g", "x": "x", "out": "o"}),
    "silu_backward": ({"g": (4, 8), "x": (4, 8), "o": (4, 8)},
                      {"grad_output": "g", "x": "x", "out": "o"}),
    "sigmoid_backward": ({"g": (4, 8), "y": (4, 8), "o": (4, 8)},
                         {"grad_output": "g", "output": "y", "out": "o"}),
    "tanh_backward": ({"g": (4, 8), "y": (4, 8), "o": (4, 8)},
                      {"grad_output": "g", "output": "y", "out": "o"}),
    "_softmax_backward_data": ({"g": (4, 8), "y": (4, 8), "o": (4, 8)},
                               {"grad_output": "g", "output": "y", "dim": -1, "out": "o"}),
    "_log_softmax_backward_data": ({"g": (4, 8), "y": (4, 8), "o": (4, 8)},
                                   {"grad_output": "g", "output": "y", "dim": -1, "out": "o"}),
    "native_layer_norm_backward": (
        {"g": (4, 8), "x": (4, 8), "m": (4, 1), "r": (4, 1), "o": (4, 8)},
        {"grad_out": "g", "input": "x", "mean": "m", "rstd": "r", "out": ["o"]}),
    "embedding_dense_backward": ({"g": (4, 8), "i": (4,), "o": (10, 8)},
                                 {"grad_output": "g", "indices": "i", "num_weights": 10,
                                  "out": "o"}),
    "nll_loss_backward": ({"g": (), "x": (4, 8), "t": (4,), "o": (4, 8)},
                          {"grad_output": "g", "x": "x", "target": "t", "reduction": "sum",
                           "out": "o"}),
    "addcdiv": ({"x": (4, 8), "a": (4, 8), "c": (4, 8), "o": (4, 8)},
                {"x": "x", "tensor1": "a", "tensor2": "c", "value": 2, "out": "o"}),
    "addcmul": ({"x": (4, 8), "a": (4, 8), "c": (4, 8), "o": (4, 8)},
                {"x": "x", "tensor1": "a", "tensor2": "c", "out": "o"}),
    "lerp": ({"x": (4, 8), "a": (4, 8), "o": (4, 8)},
             {"x": "x", "end": "a", "weight": 0.5, "out": "o"}),
    **{op: ({"x": (4, 8), "a": (4, 8), "o": (4, 8)}, {"x": ["x"], "other": ["a"], "out": ["o"]})
       for op in ("_foreach_add", "_foreach_mul", "_foreach_div")},
    **{op: ({"x": (4, 8), "a": (4, 8), "c": (4, 8), "o": (4, 8)},
            {"x": ["x"], "tensor1": ["a"], "tensor2": ["c"], "out": ["o"]})
       for op in ("_foreach_addcdiv", "_foreach_addcmul")},
    "_foreach_lerp": ({"x": (4, 8), "a": (4, 8), "o": (4, 8)},
                      {"x": ["x"], "tensors1": ["a"], "weight": 0.5, "out": ["o"]}),
    "_foreach_sqrt": ({"x": (4, 8), "o": (4, 8)}, {"x": ["x"], "out": ["o"]}),
    "scaled_dot_product_attention_backward": (
        {"g": (1, 4, 8), "q": (1, 4, 8), "k": (1, 4, 8), "v": (1, 4, 8), "dq": (1, 4, 8),
         "dk": (1, 4, 8), "dv": (1, 4, 8)},
        {"grad_out": "g", "q": "q", "k": "k", "v": "v", "out": ["dq", "dk", "dv"]}),
}  # fmt: skip


# the activations' backward ops (tests/kernels/test_activations.py has their values)
EXAMPLES |= {
    op: ({"g": (4, 8), "x": (4, 8), "o": (4, 8)},
         {"grad_output": "g", "x": "x", "out": "o", **extra})
    for op, extra in (("leaky_relu_backward", {"negative_slope": 0.01}),
                      ("hardswish_backward", {}), ("hardsigmoid_backward", {}),
                      ("hardtanh_backward", {"min_val": -1.0, "max_val": 1.0}),
                      ("softplus_backward", {"beta": 1.0, "threshold": 20.0}))
}  # fmt: skip
EXAMPLES["elu_backward"] = (
    {"g": (4, 8), "x": (4, 8), "o": (4, 8)},
    {"grad_output": "g", "alpha": 1.0, "scale": 1.0, "input_scale": 1.0, "is_result": False,
     "self_or_result": "x", "out": "o"},
)  # fmt: skip


EXAMPLES["native_batch_norm_backward"] = (
    {"g": (2, 4, 3, 3), "x": (2, 4, 3, 3), "w": (4,), "m": (4,), "s": (4,),
     "o": (2, 4, 3, 3), "ow": (4,), "ob": (4,)},
    {"grad_out": "g", "input": "x", "weight": "w", "save_mean": "m", "save_invstd": "s",
     "train": True, "out": ["o", "ow", "ob"]},
)  # fmt: skip


EXAMPLES["max_pool2d_with_indices_backward"] = (
    {"g": (1, 2, 4, 4), "t": (1, 2, 4, 4), "o": (1, 2, 8, 8)},
    {"grad_output": "g", "indices": "t", "input_size": [1, 2, 8, 8], "kernel_size": 2,
     "out": "o"},
)  # fmt: skip
EXAMPLES["avg_pool2d_backward"] = (
    {"g": (1, 2, 4, 4), "o": (1, 2, 8, 8)},
    {"grad_output": "g", "input_size": [1, 2, 8, 8], "kernel_size": 2, "out": "o"},
)  # fmt: skip


def test_every_training_op_of_the_trace_table_is_lowered():
    """Each backward and optimizer op of trnsim.trace.ops lowers on a small example and the
    trace checker accepts its arguments."""
    from trnsim.config import load_chip
    from trnsim.dtypes import dtype
    from trnsim.trace.ops import OPS
    from trnsim.trace.program import TensorSpec

    TRAINING_OPS = [op for op, r in OPS.items() if r.reference.endswith(":backward_reference")]
    table = {op for op in OPS if op in EXAMPLES}
    assert table == set(TRAINING_OPS)
    for op in TRAINING_OPS:
        shapes, args = EXAMPLES[op]
        ints = {"i", "t"}
        tensors = {n: TensorSpec(n, s, dtype("int32" if n in ints else "float32"))
                   for n, s in shapes.items()}  # fmt: skip
        prog = lower([OpSpec(op, args)], tensors, load_chip("trn2"))
        assert prog.instructions, op


def test_a_trace_with_training_ops_loads_runs_and_checks(tmp_path):
    """`ops:` with lists and several outputs: loaded, run, and --check against numpy."""
    from trnsim.runtime.session import run_program
    from trnsim.trace import load as load_trace

    text = """trnsim: 1
chip: trn2
mode: functional
lnc: LNC
tensors:
  g:  {shape: [200, 300], dtype: float32, init: normal}
  x:  {shape: [200, 300], dtype: float32, init: normal}
  m:  {shape: [200, 1], dtype: float32, init: normal}
  r:  {shape: [200, 1], dtype: float32, init: ones}
  dx: {shape: [200, 300], dtype: float32}
  dw: {shape: [300], dtype: float32}
  p:  {shape: [300], dtype: float32, init: normal}
  h:  {shape: [200, 300], dtype: float32}
ops:
  - gelu_backward: {grad_output: g, x: x, out: h, approximate: tanh}
  - native_layer_norm_backward: {grad_out: h, input: x, mean: m, rstd: r,
                                 output_mask: [true, true, false], out: [dx, dw]}
  - _foreach_add: {x: [p], other: [dw], alpha: -0.1, out: [p]}
"""
    from trnsim.config import load_chip

    path = tmp_path / "t.yaml"
    # LNC 2: the layer norm backward (whole on the first core) reads h, whose rows both cores
    # wrote: the cores meet at a core_barrier before it; LNC 1: one core, nothing to meet
    for lnc in ("2", "1"):
        path.write_text(text.replace("LNC", lnc))
        prog = load_trace(path)
        result = run_program(prog, load_chip(prog.chip), "functional", check=True)
        check = result.summary["check"]
        assert sorted(k.split(" ", 1)[1] for k in check) == [  # each output of each op
            "_foreach_add", "gelu_backward", "native_layer_norm_backward dw",
            "native_layer_norm_backward dx"]  # fmt: skip
        assert [k for k, v in check.items() if not v["ok"]] == [], (lnc, check)


@pytest.mark.parametrize(
    "q,kv,causal,with_output,dt",
    [
        ((1, 2, 128, 64), (1, 1, 512, 64), False, True, "bfloat16"),  # 2 heads share a kv head
        ((1, 2, 200, 64), (1, 2, 200, 64), True, False, "float32"),  # ragged; recomputed O
        ((2, 130, 32), (2, 700, 32), False, False, "bfloat16"),  # several key blocks
        ((1, 1, 300, 128), (1, 1, 300, 128), True, True, "bfloat16"),  # D = 128, causal
    ],
)
def test_attention_backward_against_torch_autograd(q, kv, causal, with_output, dt):
    torch = pytest.importorskip("torch")
    t = {"q": (q, dt, "normal"), "k": (kv, dt, "normal"), "v": (kv, dt, "normal"),
         "g": (q, dt, "normal"), "o": (q, dt, None), "dq": (q, "float32", None),
         "dk": (kv, "float32", None), "dv": (kv, "float32", None)}  # fmt: skip
    args = {"grad_out": "g", "q": "q", "k": "k", "v": "v", "is_causal": causal,
            "out": ["dq", "dk", "dv"]}  # fmt: skip
    kernels = {}
    if with_output:  # the forward's output, from a launch of its own as aten's forward
        kernels["fwd"] = [("scaled_dot_product_attention",
                           {"q": "q", "k": "k", "v": "v", "is_causal": causal, "out": "o"})]  # fmt: skip
        args["output"] = "o"
    kernels["bwd"] = [("scaled_dot_product_attention_backward", args)]
    r = run_kernels(t, kernels)
    from trnsim.trace.races import find_races

    assert find_races(r.program) == []  # two query blocks in flight: still race-free
    qt, kt, vt = (torch.tensor(r.tensor(n).astype(np.float64), requires_grad=True) for n in "qkv")
    group = q[-3] // kv[-3]
    out = torch.nn.functional.scaled_dot_product_attention(
        qt, kt.repeat_interleave(group, -3), vt.repeat_interleave(group, -3), is_causal=causal
    )
    out.backward(torch.tensor(r.tensor("g").astype(np.float64)))
    # bf16 probabilities and dS inside (as the forward's): bf16's tolerance, a few times over
    factor = 4 if dt == "bfloat16" else 1
    for name, want in (("dq", qt.grad), ("dk", kt.grad), ("dv", vt.grad)):
        close(r.tensor(name), want.numpy(), "bfloat16", factor)
    ref = reference("scaled_dot_product_attention_backward",
                    {k: v for k, v in args.items() if k != "out"},
                    {n: r.tensor(n) for n in ("g", "q", "k", "v")})  # fmt: skip
    close(ref[1], kt.grad.numpy(), "float32", 10)


def test_two_cores_split_the_row_ops_and_one_core_sums_over_rows():
    """LNC 2: the elementwise and row backward ops split their rows between the cores; ops
    whose outputs sum over rows (layer_norm's grad_weight) run whole on the first core. The
    values are one core's."""
    from tests.kernels.test_ops import _run_cores
    from trnsim.trace.races import find_races

    shape = (512, 300)
    t = {"g": (shape, "bfloat16", "normal"), "x": (shape, "bfloat16", "normal"),
         "m": ((512, 1), "float32", "normal"), "r": ((512, 1), "float32", "ones"),
         "h": (shape, "bfloat16", None), "y": (shape, "bfloat16", None),
         "dx": (shape, "float32", None), "dw": ((300,), "float32", None)}  # fmt: skip
    ops = [
        ("silu_backward", {"grad_output": "g", "x": "x", "out": "h"}),
        ("_softmax_backward_data", {"grad_output": "h", "output": "x", "out": "y"}),
        ("native_layer_norm_backward", {"grad_out": "g", "input": "x", "mean": "m", "rstd": "r",
                                        "output_mask": [True, True, False],
                                        "out": ["dx", "dw"]}),
    ]  # fmt: skip
    two, progs = _run_cores(t, ops, 2)
    one = run(t, ops)
    for name in ("h", "y", "dx", "dw"):
        np.testing.assert_array_equal(two.tensor(name), one.tensor(name))
    mm = [sum(1 for i in p.instructions if i.OP == "matmul") for p in progs]
    assert mm[0] > 0 and mm[1] == 0  # the column sums: on the first core only
    acts = [sum(1 for i in p.instructions if i.OP == "activation") for p in progs]
    assert acts[1] > 0  # the second core does its share of the rows
    assert find_races(two.program) == []


@pytest.mark.parametrize(
    "args,match",
    [
        ("{x: p, other: 1.0, out: [p]}", r"_foreach_add: x: got 'p'; expected a non-empty list of tensor"),
        ("{x: [p], other: [1.0, q], out: [p]}",
         r"_foreach_add: other: .*expected a non-empty list of tensor names, a list of numbers, or a"),
        ("{x: [p], other: 2.0}", r"_foreach_add: missing argument 'out'"),
    ],
)  # fmt: skip
def test_list_arguments_are_checked_when_the_trace_loads(args, match, tmp_path):
    from trnsim.trace import loads

    text = f"""trnsim: 1
chip: trn2
tensors:
  p: {{shape: [4], dtype: float32}}
  q: {{shape: [4], dtype: float32}}
ops:
  - _foreach_add: {args}
"""
    with pytest.raises(TraceError, match=r"t.yaml:7: ops\[0\]._foreach_add.*: " + match):
        loads(text, source="t.yaml")


def test_check_compares_every_output_of_every_training_op_with_its_reference():
    """`--check` over a trace of two kernels of backward and optimizer ops (bf16 inputs): an
    op of several outputs is compared output by output, all within tolerance."""
    from trnsim.config import load_chip
    from trnsim.runtime.session import run_program
    from trnsim.trace import loads

    text = """trnsim: 1
chip: trn2
mode: functional
lnc: 1
tensors:
  g:  {shape: [300, 500], dtype: bfloat16, init: normal}
  x:  {shape: [300, 500], dtype: bfloat16, init: normal}
  y:  {shape: [300, 500], dtype: bfloat16}
  m:  {shape: [300, 1], dtype: float32, init: normal}
  r:  {shape: [300, 1], dtype: float32, init: ones}
  w:  {shape: [500], dtype: float32, init: normal}
  dx: {shape: [300, 500], dtype: bfloat16}
  dw: {shape: [500], dtype: float32}
  db: {shape: [500], dtype: float32}
  h:  {shape: [300, 500], dtype: bfloat16}
  s:  {shape: [300, 500], dtype: bfloat16}
  q:  {shape: [1, 2, 200, 64], dtype: bfloat16, init: normal}
  k:  {shape: [1, 1, 300, 64], dtype: bfloat16, init: normal}
  v:  {shape: [1, 1, 300, 64], dtype: bfloat16, init: normal}
  go: {shape: [1, 2, 200, 64], dtype: bfloat16, init: normal}
  dq: {shape: [1, 2, 200, 64], dtype: float32}
  dk: {shape: [1, 1, 300, 64], dtype: float32}
  dv: {shape: [1, 1, 300, 64], dtype: float32}
  i:  {shape: [300], dtype: int32, init: arange}
  de: {shape: [400, 500], dtype: float32}
  t:  {shape: [300], dtype: int32, init: arange}
  gl: {shape: [1], dtype: float32, init: ones}
  dl: {shape: [300, 500], dtype: bfloat16}
kernels:
  a:
    ops:
      - gelu_backward: {grad_output: g, x: x, out: h, approximate: tanh}
      - softmax: {x: x, out: y}
      - _softmax_backward_data: {grad_output: g, output: y, out: s}
      - native_layer_norm_backward: {grad_out: g, input: x, mean: m, rstd: r, weight: w, bias: w, out: [dx, dw, db]}
  b:
    ops:
      - scaled_dot_product_attention_backward: {grad_out: go, q: q, k: k, v: v, is_causal: true, out: [dq, dk, dv]}
      - embedding_dense_backward: {grad_output: g, indices: i, num_weights: 400, out: de}
      - nll_loss_backward: {grad_output: gl, x: x, target: t, reduction: sum, out: dl}
      - _foreach_addcmul: {x: [w], tensor1: [w], tensor2: [w], value: 0.5, out: [w]}
streams:
      - {name: s, do: [{launch: a}, {launch: b}]}
"""
    prog = loads(text, source="t.yaml")
    check = run_program(prog, load_chip("trn2"), "functional", check=True).summary["check"]
    assert "a.ops[3] native_layer_norm_backward db" in check
    assert "b.ops[3] _foreach_addcmul" in check
    assert "b.ops[0] scaled_dot_product_attention_backward dk" in check
    assert len(check) == 12, sorted(check)
    assert [k for k, v in check.items() if not v["ok"]] == [], check
