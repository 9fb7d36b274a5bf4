"""ScalarE: activation values and reductions, copies, tensor_scalar limits, costs and checks."""

import math

import ml_dtypes
import numpy as np
import pytest

from tests.engines.helpers import rejects
from trnsim.config import load_chip
from trnsim.dtypes import dtype, to_dtype
from trnsim.engines.scalar import ScalarEngine
from trnsim.isa import ACT_FUNCS, Activation, Ap, TensorCopy, TensorScalar
from trnsim.memory.buffer import Buffer, bind

FLOATS = ("float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2")
RNG = np.random.default_rng(1)


def tile(name, shape, dt="float32", memory="sbuf", values=None):
    """A Ref to a fresh buffer holding `values` (fp64 -> fp32 -> dt), or zeros."""
    d = dtype(dt)
    arr = np.zeros(shape, d.np)
    if values is not None:
        arr[...] = to_dtype(np.asarray(values, np.float64).astype(np.float32), d)
    return bind(Ap(name), Buffer(name, memory, shape, d, arr), "test")


def f64(ref):
    return ref.read().astype(np.float64)


@pytest.fixture(scope="module")
def act():
    return ScalarEngine(load_chip("trn2").core)


def _sig(v):
    return 1 / (1 + math.exp(-v)) if v > -700 else 0.0


def _softplus(v):
    return max(v, 0.0) + math.log1p(math.exp(-abs(v)))


REFERENCE = {
    "identity": lambda v: v,
    "copy": lambda v: v,
    "exp": math.exp,
    "log": math.log,
    "tanh": math.tanh,
    "sigmoid": _sig,
    "relu": lambda v: max(v, 0.0),
    "gelu": lambda v: 0.5 * v * math.erfc(-v / math.sqrt(2)),
    "gelu_tanh": lambda v: v * _sig(2 * math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)),
    "silu": lambda v: v * _sig(v),
    "square": lambda v: v * v,
    "sqrt": math.sqrt,
    "rsqrt": lambda v: 1 / math.sqrt(v),
    "reciprocal": lambda v: 1 / v,
    "sin": math.sin,
    "cos": math.cos,
    "abs": abs,
    "sign": lambda v: float(v > 0) - float(v < 0),
    "softplus": _softplus,
    "erf": math.erf,
    "arctan": math.atan,
    "mish": lambda v: v * math.tanh(_softplus(v)),
    "gelu_dx": lambda v: (
        0.5 * math.erfc(-v / math.sqrt(2)) + v * math.exp(-v * v / 2) / math.sqrt(2 * math.pi)
    ),
    "silu_dx": lambda v: _sig(v) * (1 + v * (1 - _sig(v))),
}


@pytest.mark.parametrize("func", ACT_FUNCS)
@pytest.mark.parametrize(
    "src_dt, dst_dt",
    [(d, d) for d in FLOATS]
    + [("float32", "bfloat16"), ("bfloat16", "float32"), ("float32", "int8")],
)
def test_activation_values(act, func, src_dt, dst_dt):
    positive = func in ("log", "sqrt", "rsqrt", "reciprocal")
    x = RNG.uniform(0.25, 6, (32, 40)) if positive else RNG.uniform(-6, 3, (32, 40))
    src = tile("s", (32, 4, 10), src_dt, values=x.reshape(32, 4, 10))
    bias = tile("b", (32, 1), "bfloat16", values=RNG.uniform(0, 0.5, (32, 1)))
    dst = tile("d", (32, 40), dst_dt)
    ins = Activation(func=func, src=src, dst=dst, scale=0.75, bias=bias)
    act.check(ins)
    act.execute(ins)
    pre = src.read_f32().reshape(32, 40) * np.float32(0.75) + bias.read_f32()  # fp32 FMA steps
    want = np.vectorize(lambda v: float(REFERENCE[func](v)))(pre.astype(np.float64))
    want = to_dtype(want.astype(np.float32), dst.dtype).astype(np.float64)
    if dst.dtype.is_float:  # one rounding step of the dst dtype at most (fp32 then dst rounding)
        eps = float(ml_dtypes.finfo(dst.dtype.np).eps)
        if func in (
            "gelu",
            "erf",
            "gelu_dx",
        ):  # erfc is an fp32-level fit: 1.2e-7 relative (alu.py)
            eps += 1.2e-7
        # gelu_dx crosses 0 near x = -0.75: erfc's absolute error stays, relative grows
        atol = 1e-7 if func == "gelu_dx" else 1e-30
        np.testing.assert_allclose(f64(dst), want, rtol=eps, atol=atol)
    else:
        np.testing.assert_array_less(np.abs(f64(dst) - want), 1.0 + 1e-9)


@pytest.mark.parametrize(
    "reduce, dt", [("add", "float32"), ("max", "float32"), ("add", "bfloat16"), ("max", "float16")]
)
def test_activation_reduce(act, reduce, dt):
    src = tile("s", (64, 300), values=RNG.normal(0, 2, (64, 300)))
    scale = tile("c", (64, 1), values=RNG.uniform(-1, 1, (64, 1)))
    dst, red = tile("d", (64, 300), "bfloat16"), tile("r", (64, 1), dt, "psum")
    ins = Activation(
        func="exp", src=src, dst=dst, scale=scale, bias=-0.5, reduce=reduce, reduce_dst=red
    )
    act.check(ins)
    act.execute(ins)
    y = np.exp((src.read_f32() * scale.read_f32() + np.float32(-0.5)).astype(np.float64))
    y = y.astype(np.float32).astype(np.float64)  # the fp32 values before dst's bf16 cast
    want = y.sum(axis=1, keepdims=True) if reduce == "add" else y.max(axis=1, keepdims=True)
    assert (
        f64(red).tolist()
        == to_dtype(want.astype(np.float32), red.dtype).astype(np.float64).tolist()
    )


@pytest.mark.parametrize("chip, exact", [("trn1", False), ("trn2", True), ("trn3", True)])
def test_tensor_copy_is_bit_exact_from_nc_v3(chip, exact):
    src, dst = tile("s", (2, 2), "int32"), tile("d", (2, 2), "int32")
    src.buf.array[...] = [[2**24 + 1, 7], [-(2**30) - 1, 0]]
    ScalarEngine(load_chip(chip).core).execute(TensorCopy(src=src, dst=dst))
    want = src.read() if exact else src.read().astype(np.float32).astype(np.int32)
    assert dst.read().tolist() == want.tolist()
    assert (dst.read().tolist() == src.read().tolist()) == exact


def test_tensor_scalar_multiply_add(act):
    src = tile("s", (16, 8), "bfloat16", values=RNG.normal(0, 3, (16, 8)))
    col, dst = tile("c", (16, 1), values=RNG.normal(0, 3, (16, 1))), tile("d", (16, 8))
    ins = TensorScalar(src=src, dst=dst, op0="multiply", operand0=col, op1="add", operand1=0.25)
    act.check(ins)
    act.execute(ins)
    want = (src.read_f32() * col.read_f32() + np.float32(0.25)).astype(np.float32)
    assert dst.read().tolist() == want.tolist()


# ---------------------------------------------------------------------------------------------
# costs in scalar cycles (trainium.md 3.2, configs/trn{1,2,3}.yaml: MIN_II 64, overhead 100,
# reduce_cycles 64, perf_mode_factor 1 on trn1/trn2 and 2 on trn3)


def _act(n, **kw):
    return Activation(func="gelu", src=tile("s", (128, n)), dst=tile("d", (128, n)), **kw)


@pytest.mark.parametrize(
    "chip, ins, cycles",
    [
        ("trn2", _act(32), 64),  # MIN_II
        ("trn2", _act(512, scale=tile("c", (128, 1)), bias=2.0), 512),  # scale/bias free
        ("trn2", _act(512, reduce="add", reduce_dst=tile("r", (128, 1))), 576),  # + read-out
        ("trn1", _act(512, wait=(("s", 1),)), 612),  # + fixed overhead
        (
            "trn2",
            TensorCopy(
                src=tile("s", (128, 2048), "bfloat16"), dst=tile("d", (128, 2048), "bfloat16")
            ),
            2048,
        ),
        (
            "trn3",
            TensorCopy(
                src=tile("s", (128, 2048), "bfloat16"), dst=tile("d", (128, 2048), "float16")
            ),
            1024,
        ),  # NC-v4 2x 16-bit
        (
            "trn3",
            TensorCopy(
                src=tile("s", (128, 2048), "bfloat16"), dst=tile("d", (128, 2048), "float32")
            ),
            2048,
        ),
        (
            "trn3",
            TensorScalar(
                src=tile("s", (128, 2048), "bfloat16"),
                op0="max",
                operand0=0.0,
                dst=tile("d", (128, 2048), "bfloat16"),
            ),
            1024,
        ),
        (
            "trn3",
            TensorScalar(
                src=tile("s", (128, 64), "bfloat16"),
                op0="max",
                operand0=0.0,
                dst=tile("d", (128, 64), "bfloat16"),
            ),
            64,
        ),  # 32 -> MIN_II
    ],
)
def test_scalar_costs(chip, ins, cycles):
    assert ScalarEngine(load_chip(chip).core).cost(ins, None) == cycles


# ---------------------------------------------------------------------------------------------
# checks


@pytest.mark.parametrize("chip", ["trn1", "trn2", "trn3"])
def test_tensor_scalar_op_pairs(chip):
    e = ScalarEngine(load_chip(chip).core)
    s, d = tile("s", (8, 8)), tile("d", (8, 8))
    for op0, op1 in (("multiply", "add"), ("multiply", None), ("add", None)):
        e.check(
            TensorScalar(
                src=s, dst=d, op0=op0, operand0=2.0, op1=op1, operand1=None if op1 is None else 1.0
            )
        )
    bad = TensorScalar(index=7, src=s, dst=d, op0="subtract", operand0=1.0, op1="max", operand1=0.0)
    if chip == "trn3":
        e.check(bad)  # NC-v4 runs tensor_scalar natively
    else:
        version = e.core.version
        rejects(
            e,
            bad,
            f"op0=subtract, op1=max is not supported by tensor_scalar on the "
            f"scalar engine of {version}",
            "(multiply, add)",
        )


def test_activation_checks(act):
    s, d = tile("s", (128, 16), memory="psum"), tile("d", (128, 16))
    base = dict(index=7, func="exp", src=s, dst=d)
    rejects(act, Activation(reduce="add", **base), "reduce is given without reduce_dst")
    rejects(
        act,
        Activation(reduce_dst=tile("r", (128, 1)), **base),
        "reduce_dst is given without reduce",
    )
    rejects(
        act,
        Activation(reduce="max", reduce_dst=tile("r", (128, 2)), **base),
        "reduce_dst 'r' has 2 elements per partition; a per-partition operand must be",
    )
    rejects(act, Activation(scale=tile("c", (128, 16)), **base), "scale 'c' has 16 elements")
    rejects(
        act,
        Activation(bias=tile("b", (64, 1)), **base),
        "bias 'b' has 64 partitions but src 's' has 128",
    )
    rejects(
        act,
        Activation(index=7, func="exp", src=s, dst=tile("d", (128, 8))),
        "dst 'd' has 8 elements per partition but src 's' has 16",
    )
    rejects(
        act,
        Activation(index=7, func="exp", src=s, dst=tile("d", (128, 16), memory="hbm")),
        "dst 'd' is in HBM, expected SBUF or PSUM",
    )
    trn1 = ScalarEngine(load_chip("trn1").core)
    trn1.check(Activation(reduce="add", reduce_dst=tile("r", (128, 1)), **base))
    rejects(
        trn1,
        Activation(reduce="max", reduce_dst=tile("r", (128, 1)), **base),
        "reduce=max is not supported on NC-v2",
    )
    trn1.check(Activation(index=7, func="reciprocal", src=s, dst=d))
    rejects(
        trn1,
        Activation(index=7, func="reciprocal", src=s, dst=d, bias=1.0),
        "func reciprocal cannot be combined with a bias on NC-v2",
    )
    act.check(Activation(index=7, func="reciprocal", src=s, dst=d, bias=tile("b", (128, 1))))
