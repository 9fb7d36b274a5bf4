"""Every op the kernel library lowers, on every bundled chip and at several DMA queue counts
(`core.dma.queues_per_engine`), lowered on small shapes of a few blocks each and run
functionally with `--check`'s comparison against the numpy reference: the lowerings take their
queues (`kernels.queues`), partitions, SBUF and PSUM sizes from the config, so a config with
fewer or more queues than the bundled chips' 16 runs every op and gives the same values."""

from __future__ import annotations

import functools
import zlib

import numpy as np
import pytest

from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.runtime.session import run_program
from trnsim.trace.ops import OPS
from trnsim.trace.program import KernelSpec, OpSpec, Program, Step, StreamSpec, TensorSpec

CHIPS = ("trn1", "trn2", "trn3")
QUEUES = (2, 4, 8, 16)  # queues_per_engine on every chip (16: the bundled chips')
EXTREMES = (1, 32)  # and on trn2: one queue for everything, and twice the chips' queues
POINTS = [(chip, q) for chip in CHIPS for q in QUEUES] + [("trn2", q) for q in EXTREMES]

F32, BF16, I32 = "float32", "bfloat16", "int32"
E = (3, 128, 1024)  # elementwise: two flat blocks (of 256 and 128 rows)
R = (300, 2048)  # rows: two row blocks of up to two rows a partition, or three of one
N = "normal"
POS = ("values", lambda g, s: g.uniform(0.5, 2.0, s))  # positive inputs (log, sqrt, div, ...)


def _ints(hi: int):
    """Integers in [0, hi) (indices, targets, masks)."""
    return ("values", lambda g, s: g.integers(0, hi, s))


def _x(op: str, shape=E, dt=F32, init="normal", out_dt=None, **extra):
    return op, {"x": (shape, dt, init), "out": (shape, out_dt or dt, None)}, {"x": "x"} | extra


def _ab(op: str, b_shape=E, b_init="normal", a_init="normal", **extra):
    t = {"a": (E, F32, a_init), "b": (b_shape, F32, b_init), "out": (E, F32, None)}
    return op, t, {"a": "a", "b": "b"} | extra


def _mm(op, a, b, out, dt=BF16):
    t = {"a": (a, dt, "normal"), "b": (b, dt, "normal"), "out": (out, F32, None)}
    return op, t, {"a": "a", "b": "b"}


def _grad(op, second, shape=R, **extra):
    t = {"grad_output": (shape, F32, "normal"), second: (shape, F32, "normal")}
    return (
        op,
        t | {"out": (shape, F32, None)},
        {"grad_output": "grad_output", second: second} | extra,
    )


def _reduce(op, dim, out_shape):
    return op, {"x": (R, F32, "normal"), "out": (out_shape, F32, None)}, {"x": "x", "dim": dim}


def _foreach(op, inits: dict, **extra):
    """A list op on two tensors of different shapes; `inits`: argument -> its tensors' init."""
    shapes = [(300, 1000), (5000,)]
    t, args = {f"o{i}": (s, F32, None) for i, s in enumerate(shapes)}, {}
    for k, init in inits.items():
        args[k] = [f"{k}{i}" for i in range(len(shapes))]
        t |= {f"{k}{i}": (s, F32, init) for i, s in enumerate(shapes)}
    return op, t, args | {"out": [f"o{i}" for i in range(len(shapes))]} | extra


def _attention(op, dt=BF16):
    shape, kv = (1, 2, 256, 64), (1, 1, 256, 64)  # two query blocks, two heads a kv head
    t = {"q": (shape, dt, "normal"), "k": (kv, dt, "normal"), "v": (kv, dt, "normal")}
    if op == "scaled_dot_product_attention":
        return op, t | {"out": (shape, dt, None)}, {"q": "q", "k": "k", "v": "v", "is_causal": True}
    t |= {"grad_out": (shape, dt, "normal")}
    t |= {n: (s, dt, None) for n, s in (("dq", shape), ("dk", kv), ("dv", kv))}
    args = {"grad_out": "grad_out", "q": "q", "k": "k", "v": "v", "is_causal": True}
    return op, t, args | {"out": ["dq", "dk", "dv"]}


CASES = {  # label -> (op, tensors name -> (shape, dtype, init), args but out)
    **{
        op: _x(op)
        for op in (
            "exp",
            "tanh",
            "sigmoid",
            "relu",
            "gelu",
            "gelu_tanh",
            "silu",
            "square",
            "abs",
            "sin",
            "cos",
            "erf",
            "neg",
        )
    },  # fmt: skip
    **{op: _x(op, init=POS) for op in ("log", "sqrt", "rsqrt", "reciprocal")},
    "copy": _x("copy", out_dt=BF16),
    **{op: _ab(op) for op in ("add", "sub", "mul", "maximum", "minimum")},
    "div": _ab("div", b_init=POS),
    "pow": _ab("pow", a_init=POS),
    "add row": _ab("add", b_shape=(E[-1],)),
    "mul column": _ab("mul", b_shape=(3, 128, 1)),
    "sub number": ("sub", {"x": (E, F32, "normal"), "out": (E, F32, None)}, {"a": 2.5, "b": "x"}),
    "where": (
        "where",
        {
            "c": (E, "uint8", _ints(2)),
            "a": (E, F32, "normal"),
            "o": (E, F32, "normal"),
            "out": (E, F32, None),
        },
        {"condition": "c", "a": "a", "other": "o"},
    ),  # fmt: skip
    "masked_fill": (
        "masked_fill",
        {"x": (E, F32, "normal"), "m": (E, "uint8", _ints(2)), "out": (E, F32, None)},
        {"x": "x", "mask": "m", "value": -1e4},
    ),  # fmt: skip
    "matmul": _mm("matmul", (200, 256), (256, 600), (200, 600)),
    "mm": _mm("mm", (200, 130), (130, 260), (200, 260)),
    "bmm": _mm("bmm", (2, 130, 200), (2, 200, 300), (2, 130, 300)),
    "linear": (
        "linear",
        {
            "x": ((200, 256), BF16, "normal"),
            "weight": ((300, 256), BF16, "normal"),
            "bias": ((300,), F32, "normal"),
            "out": ((200, 300), F32, None),
        },
        {"x": "x", "weight": "weight", "bias": "bias"},
    ),  # fmt: skip
    "addmm": (
        "addmm",
        {
            "input": ((130,), F32, "normal"),
            "mat1": ((200, 300), BF16, "normal"),
            "mat2": ((300, 130), BF16, "normal"),
            "out": ((200, 130), F32, None),
        },
        {"input": "input", "mat1": "mat1", "mat2": "mat2", "beta": 0.5, "alpha": 2.0},
    ),  # fmt: skip
    **{op: _x(op, shape=R, dim=-1) for op in ("softmax", "log_softmax")},
    "layer_norm": (
        "layer_norm",
        {
            "x": (R, F32, "normal"),
            "w": ((R[1],), F32, "normal"),
            "bi": ((R[1],), F32, "normal"),
            "out": (R, F32, None),
        },
        {"x": "x", "weight": "w", "bias": "bi"},
    ),  # fmt: skip
    "rms_norm": (
        "rms_norm",
        {"x": (R, F32, "normal"), "w": ((R[1],), F32, "normal"), "out": (R, F32, None)},
        {"x": "x", "weight": "w"},
    ),  # fmt: skip
    **{op: _reduce(op, -1, (R[0],)) for op in ("sum", "mean", "amax", "amin")},
    "sum dim 0": _reduce("sum", 0, (R[1],)),
    "amax of all": _reduce("amax", None, ()),
    "argmax": (
        "argmax",
        {"x": ((300, 1000), F32, "normal"), "out": ((300,), I32, None)},
        {"x": "x"},
    ),  # fmt: skip
    "argmax dim 0": (
        "argmax",
        {"x": ((300, 1000), F32, "normal"), "out": ((1000,), I32, None)},
        {"x": "x", "dim": 0},
    ),  # fmt: skip
    "transpose": (
        "transpose",
        {"x": ((2, 300, 256), F32, "normal"), "out": ((2, 256, 300), F32, None)},
        {"x": "x"},
    ),  # fmt: skip
    "transpose bf16": (
        "transpose",
        {"x": ((2, 300, 256), BF16, "normal"), "out": ((2, 256, 300), BF16, None)},
        {"x": "x"},
    ),  # fmt: skip
    "scaled_dot_product_attention": _attention("scaled_dot_product_attention"),
    "contiguous": _x("contiguous", shape=(300, 200)),
    "permute": (
        "permute",
        {"x": ((4, 60, 50), F32, "normal"), "out": ((60, 4, 50), F32, None)},
        {"x": "x", "dims": [1, 0, 2]},
    ),  # fmt: skip
    "cat": (
        "cat",
        {
            "a": ((100, 60), F32, "normal"),
            "b": ((100, 40), F32, "normal"),
            "out": ((100, 100), F32, None),
        },
        {"tensors": ["a", "b"], "dim": 1},
    ),  # fmt: skip
    "split": (
        "split",
        {
            "x": ((300, 64), F32, "normal"),
            "p": ((128, 64), F32, None),
            "q": ((128, 64), F32, None),
            "r": ((44, 64), F32, None),
        },
        {"x": "x", "split_size": 128, "outs": ["p", "q", "r"]},
    ),  # fmt: skip
    "embedding": (
        "embedding",
        {
            "weight": ((500, 96), F32, "normal"),
            "indices": ((2, 700), I32, _ints(500)),
            "out": ((2, 700, 96), F32, None),
        },
        {"weight": "weight", "indices": "indices"},
    ),  # fmt: skip
    "cross_entropy": (
        "cross_entropy",
        {
            "input": ((300, 5000), F32, "normal"),
            "target": ((300,), I32, _ints(5000)),
            "out": ((), F32, None),
        },
        {"input": "input", "target": "target"},
    ),  # fmt: skip
    "nll_loss": (
        "nll_loss",
        {
            "input": ((300, 70), F32, "normal"),
            "target": ((300,), I32, _ints(70)),
            "out": ((300,), F32, None),
        },
        {"input": "input", "target": "target", "reduction": "none"},
    ),  # fmt: skip
    # the backward and optimizer ops (`kernels.training`)
    "threshold_backward": _grad("threshold_backward", "x", threshold=0.25),
    "gelu_backward": _grad("gelu_backward", "x"),
    "gelu_backward tanh": _grad("gelu_backward", "x", approximate="tanh"),
    "silu_backward": _grad("silu_backward", "x"),
    "sigmoid_backward": _grad("sigmoid_backward", "output"),
    "tanh_backward": _grad("tanh_backward", "output"),
    "_softmax_backward_data": _grad("_softmax_backward_data", "output", shape=(300, 1000)),
    "_log_softmax_backward_data": _grad("_log_softmax_backward_data", "output", shape=(300, 1000)),
    "native_layer_norm_backward": (
        "native_layer_norm_backward",
        {
            "g": ((300, 256), F32, "normal"),
            "x": ((300, 256), F32, "normal"),
            "mean": ((300, 1), F32, "normal"),
            "rstd": ((300, 1), F32, POS),
            "w": ((256,), F32, "normal"),
            "bi": ((256,), F32, "normal"),
            "gi": ((300, 256), F32, None),
            "gw": ((256,), F32, None),
            "gb": ((256,), F32, None),
        },
        {
            "grad_out": "g",
            "input": "x",
            "mean": "mean",
            "rstd": "rstd",
            "weight": "w",
            "bias": "bi",
            "normalized_shape": [256],
            "out": ["gi", "gw", "gb"],
        },
    ),  # fmt: skip
    "embedding_dense_backward": (
        "embedding_dense_backward",
        {
            "g": ((300, 96), F32, "normal"),
            "i": ((300,), I32, _ints(200)),
            "out": ((200, 96), F32, None),
        },
        {"grad_output": "g", "indices": "i", "num_weights": 200},
    ),  # fmt: skip
    "nll_loss_backward": (
        "nll_loss_backward",
        {
            "g": ((), F32, "normal"),
            "x": ((300, 5000), F32, None),
            "t": ((300,), I32, _ints(5000)),
            "out": ((300, 5000), F32, None),
        },
        {"grad_output": "g", "x": "x", "target": "t", "reduction": "sum"},
    ),  # fmt: skip
    "scaled_dot_product_attention_backward": _attention("scaled_dot_product_attention_backward"),
    "addcdiv": (
        "addcdiv",
        {
            "x": (R, F32, "normal"),
            "a": (R, F32, "normal"),
            "c": (R, F32, POS),
            "out": (R, F32, None),
        },
        {"x": "x", "tensor1": "a", "tensor2": "c", "value": 0.5},
    ),  # fmt: skip
    "addcmul": (
        "addcmul",
        {
            "x": (R, F32, "normal"),
            "a": (R, F32, "normal"),
            "c": (R, F32, "normal"),
            "out": (R, F32, None),
        },
        {"x": "x", "tensor1": "a", "tensor2": "c", "value": 0.5},
    ),  # fmt: skip
    "lerp": (
        "lerp",
        {"x": (R, F32, "normal"), "e": (R, F32, "normal"), "out": (R, F32, None)},
        {"x": "x", "end": "e", "weight": 0.3},
    ),  # fmt: skip
    "_foreach_add": _foreach("_foreach_add", {"x": N, "other": N}, alpha=0.5),
    "_foreach_mul": _foreach("_foreach_mul", {"x": N, "other": N}),
    "_foreach_div": _foreach("_foreach_div", {"x": N, "other": POS}),
    "_foreach_addcdiv": _foreach(
        "_foreach_addcdiv", {"x": N, "tensor1": N, "tensor2": POS}, value=-0.1
    ),
    "_foreach_addcmul": _foreach("_foreach_addcmul", {"x": N, "tensor1": N, "tensor2": N}),
    "_foreach_lerp": _foreach("_foreach_lerp", {"x": N, "tensors1": N}, weight=0.3),
    "_foreach_sqrt": _foreach("_foreach_sqrt", {"x": POS}),
}

# the activations with parameters and their backward ops (kernels.activations)
CASES |= {
    "leaky_relu": _x("leaky_relu", negative_slope=0.2),
    "hardswish": _x("hardswish"),
    "hardsigmoid": _x("hardsigmoid"),
    "elu": _x("elu", alpha=1.5, scale=1.1),
    "hardtanh": _x("hardtanh", min_val=0.0, max_val=6.0),
    "softplus": _x("softplus", beta=2.0, threshold=1.0),
    "leaky_relu_backward": _grad("leaky_relu_backward", "x", negative_slope=0.01),
    "hardswish_backward": _grad("hardswish_backward", "x"),
    "hardsigmoid_backward": _grad("hardsigmoid_backward", "x"),
    "hardtanh_backward": _grad("hardtanh_backward", "x", min_val=0.0, max_val=6.0),
    "softplus_backward": _grad("softplus_backward", "x", beta=1.0, threshold=20.0),
    "elu_backward": _grad("elu_backward", "self_or_result", alpha=1.0, scale=1.0,
                          input_scale=1.0, is_result=False),
}  # fmt: skip

# batch norm (kernels.batch_norm): training, with every input, and inference
_BN = {"x": ((3, 64, 5, 6), F32, "normal"), "w": ((64,), F32, "normal"),
       "b": ((64,), F32, "normal"), "rm": ((64,), F32, "normal"), "rv": ((64,), F32, POS),
       "y": ((3, 64, 5, 6), F32, None), "sm": ((64,), F32, None), "si": ((64,), F32, None)}  # fmt: skip
_BN_ARGS = {"input": "x", "weight": "w", "bias": "b", "running_mean": "rm", "running_var": "rv"}
CASES |= {
    "native_batch_norm": ("native_batch_norm", _BN, {**_BN_ARGS, "training": True,
                                                     "out": ["y", "sm", "si", "rm", "rv"]}),
    "native_batch_norm inference": ("native_batch_norm", _BN, {**_BN_ARGS, "training": False,
                                                               "out": ["y"]}),
}  # fmt: skip

_BNB = {"g": ((3, 64, 5, 6), F32, "normal"), "x": ((3, 64, 5, 6), F32, "normal"),
        "w": ((64,), F32, "normal"), "m": ((64,), F32, "normal"), "s": ((64,), F32, POS),
        "gi": ((3, 64, 5, 6), F32, None), "gw": ((64,), F32, None), "gb": ((64,), F32, None)}  # fmt: skip
CASES["native_batch_norm_backward"] = (
    "native_batch_norm_backward", _BNB,
    {"grad_out": "g", "input": "x", "weight": "w", "save_mean": "m", "save_invstd": "s",
     "train": True, "out": ["gi", "gw", "gb"]},
)  # fmt: skip

# 2-D pooling (kernels.pooling, .pooling_backward): kernel 3 stride 2 padding 1, [3, 64, 9, 9]
_PW = {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1]}
_PS, _PO = (3, 64, 9, 9), (3, 64, 5, 5)
CASES |= {
    "max_pool2d_with_indices": (
        "max_pool2d_with_indices",
        {"x": (_PS, F32, "normal"), "o": (_PO, F32, None), "i": (_PO, I32, None)},
        {"x": "x", **_PW, "out": ["o", "i"]}),
    "avg_pool2d": ("avg_pool2d", {"x": (_PS, F32, "normal"), "out": (_PO, F32, None)},
                   {"x": "x", **_PW, "count_include_pad": False}),
    "max_pool2d_with_indices_backward": (
        "max_pool2d_with_indices_backward",
        {"g": (_PO, F32, "normal"), "i": (_PO, I32, ("values", lambda g, s: (  # the center
            np.broadcast_to(np.arange(25).reshape(5, 5) // 5 * 18
                            + np.arange(25).reshape(5, 5) % 5 * 2, s)))),
         "out": (_PS, F32, None)},
        {"grad_output": "g", "indices": "i", "input_size": list(_PS), **_PW}),
    "avg_pool2d_backward": ("avg_pool2d_backward",
                            {"g": (_PO, F32, "normal"), "out": (_PS, F32, None)},
                            {"grad_output": "g", "input_size": list(_PS), **_PW}),
}  # fmt: skip

CANNOT = {  # (label, chip) -> why the op is not lowered there
    ("linear", "trn1"): "a weight [N, K] is turned by DMA transpose, which NC-v2 lacks",
    ("scaled_dot_product_attention_backward", "trn1"): "needs the DMA transpose (NC-v3 and later)",
}


def test_the_cases_cover_every_op_of_the_table():
    assert {op for op, _, _ in CASES.values()} == set(OPS)


@functools.cache
def _chip(chip: str, queues: int):
    return load_chip(chip, [f"core.dma.queues_per_engine={queues}"])


def _init(init, label: str, name: str, shape, dt: str, tmp):
    """A tensor's init: a name, or ('file', path) of the values ("values", make) makes (with a
    generator seeded by the case and the tensor, so every worker makes the same)."""
    if not (isinstance(init, tuple) and init[0] == "values"):
        return init
    path = tmp / f"{label.replace(' ', '_')}.{name}.npy"
    if not path.exists():
        g = np.random.default_rng(zlib.crc32(f"{label} {name}".encode()))
        np.save(path, np.asarray(init[1](g, shape)).astype(dtype(dt).np))
    return ("file", str(path))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tmp_path_factory.mktemp("config_figures")


def run_case(label: str, cfg, tmp):
    """The case's op lowered as one kernel at the chip's default LNC, run functionally with
    the check: the summary's `check`."""
    op, tensors, args = CASES[label]
    specs = {
        n: TensorSpec(n, s, dtype(d), _init(i, label, n, s, d, tmp))
        for n, (s, d, i) in tensors.items()
    }
    if "out" not in args and "outs" not in args:
        args = args | {"out": "out"}
    kernel = KernelSpec("k", ops=[OpSpec(op, args)])
    prog = Program("figures", cfg.name, 0, "functional", None, [], specs, {"k": kernel},
                   [StreamSpec("s", 0, [Step("launch", "k")])])  # fmt: skip
    return run_program(prog, cfg, "functional", check=True).summary


@pytest.mark.parametrize("chip,queues", POINTS)
@pytest.mark.parametrize("label", list(CASES))
def test_every_op_runs_and_checks_at_every_queue_count(label, chip, queues, files):
    if (label, chip) in CANNOT:
        pytest.skip(f"{label} on {chip}: {CANNOT[label, chip]}")
    summary = run_case(label, _chip(chip, queues), files)
    check = summary["check"]
    assert check, summary.get("check_note")
    bad = {k: v for k, v in check.items() if not v["ok"]}
    assert not bad, bad
