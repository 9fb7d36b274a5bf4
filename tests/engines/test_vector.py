"""VectorE: values against numpy references, hand-worked cost tables, and every check."""

import numpy as np
import pytest

from tests.engines.helpers import rejects
from trnsim.config import load_chip
from trnsim.dtypes import dtype, to_dtype
from trnsim.engines.vector import VectorEngine
from trnsim.isa import (
    ALU_OPS,
    Ap,
    BnAggr,
    BnStats,
    Memset,
    Select,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from trnsim.memory.buffer import Buffer, bind

FLOATS = ("float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2")
DTYPES = FLOATS + ("int32", "int8")
RNG = np.random.default_rng(0)


def tile(name, shape, dt="float32", memory="sbuf", values=None, index=()):
    """A Ref to a fresh buffer holding `values` (fp64 -> fp32 -> dt), or zeros."""
    d = dtype(dt)
    arr = np.zeros(shape, d.np)
    if values is not None:
        v = np.asarray(values, np.float64)
        arr[...] = to_dtype(
            v.reshape(shape if v.size == arr.size else v.shape).astype(np.float32), d
        )
    return bind(Ap(name, index, name), Buffer(name, memory, shape, d, arr), "test")


def expect(ref, values64):
    """Compare ref's contents with the float64 reference rounded to fp32 then to ref's dtype."""
    with np.errstate(over="ignore"):  # 1e9 into fp16 is inf, as on hardware
        want = to_dtype(np.asarray(values64, np.float64).astype(np.float32), ref.dtype)
    np.testing.assert_array_equal(
        ref.read().astype(np.float64), want.reshape(ref.shape).astype(np.float64)
    )


def f64(ref):
    return ref.read().astype(np.float64)


@pytest.fixture(scope="module")
def vec():
    return VectorEngine(load_chip("trn2").core)


# ---------------------------------------------------------------------------------------------
# values


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("op", [o for o in ALU_OPS if o != "pow"])
def test_tensor_tensor_values(vec, op, dt):
    a = tile("a", (128, 4, 8), dt, values=RNG.integers(-6, 7, (128, 32)))
    b = tile("b", (128, 32), dt, values=RNG.choice([-3, -2, -1, 1, 2, 3, 0.5], (128, 32)))
    d = tile("d", (128, 32), dt)
    ins = TensorTensor(alu=op, src0=a, src1=b, dst=d)
    vec.check(ins)
    vec.execute(ins)
    x, y = f64(a).reshape(128, 32), f64(b)
    with np.errstate(all="ignore"):
        ref = {
            "add": x + y,
            "subtract": x - y,
            "multiply": x * y,
            "divide": x / y,
            "max": np.maximum(x, y),
            "min": np.minimum(x, y),
            "equal": x == y,
            "not_equal": x != y,
            "less": x < y,
            "less_equal": x <= y,
            "greater": x > y,
            "greater_equal": x >= y,
        }[op]
    expect(d, ref)


@pytest.mark.parametrize("dt", FLOATS)
def test_tensor_tensor_pow(vec, dt):
    a = tile("a", (8, 16), dt, values=RNG.uniform(0.5, 3, (8, 16)))
    b = tile("b", (8, 16), dt, values=RNG.uniform(-2, 2, (8, 16)))
    d = tile("d", (8, 16), "float32")
    vec.execute(TensorTensor(alu="pow", src0=a, src1=b, dst=d))
    np.testing.assert_allclose(f64(d), f64(a) ** f64(b), rtol=2**-22)


def test_tensor_tensor_casts_on_write(vec):
    a = tile("a", (1, 2), values=[[1.0, 1.0]])
    b = tile("b", (1, 2), values=[[2**-8, 3 * 2**-8]])
    d = tile("d", (1, 2), "bfloat16")
    vec.execute(TensorTensor(alu="add", src0=a, src1=b, dst=d))
    assert f64(d).tolist() == [[1.0, 1.015625]]  # round to nearest even: tie down, then up


@pytest.mark.parametrize("dt", DTYPES)
def test_tensor_scalar_values(vec, dt):
    src = tile("s", (64, 2, 5), dt, values=RNG.integers(-8, 9, (64, 10)))
    col = tile("c", (64, 1), "float32", values=RNG.integers(1, 4, (64, 1)))
    d = tile("d", (64, 10), dt)
    x = f64(src).reshape(64, 10)
    cases = [
        (dict(op0="multiply", operand0=col, op1="add", operand1=1.5), x * f64(col) + 1.5),
        (dict(op0="subtract", operand0=2.0, reverse0=True), 2.0 - x),
        (
            dict(op0="max", operand0=0.5, op1="divide", operand1=col, reverse1=True),
            f64(col) / np.maximum(x, 0.5),
        ),
        (dict(op0="greater_equal", operand0=col), x >= f64(col)),
    ]
    for kw, ref in cases:
        ins = TensorScalar(src=src, dst=d, **kw)
        vec.check(ins)
        vec.execute(ins)
        expect(d, ref.astype(np.float32))


@pytest.mark.parametrize("alu", ["add", "max", "min", "multiply"])
@pytest.mark.parametrize(
    "axis, out_shape",
    [(None, (16, 3, 4)), (-1, (16, 12)), (2, (16, 3, 5)), ([2, 3], (16, 3)), ((1, 2, 3), (16, 1))],
)
@pytest.mark.parametrize("dt", ["float32", "bfloat16", "float8_e5m2", "int32"])
def test_tensor_reduce_values(vec, alu, axis, out_shape, dt):
    src = tile("s", (16, 3, 4, 5), dt, values=RNG.uniform(-2, 2, (16, 3, 4, 5)))
    d = tile("d", out_shape, dt)
    ins = TensorReduce(alu=alu, src=src, dst=d, axis=axis)
    vec.check(ins)
    vec.execute(ins)
    axes = {None: (3,), -1: (3,), 2: (2,)}.get(axis, axis) if not isinstance(axis, list) else (2, 3)
    fn = {"add": np.sum, "max": np.max, "min": np.min, "multiply": np.prod}[alu]
    expect(d, fn(f64(src), axis=tuple(axes)))


def _bn(x):
    out = []
    for part in (x[:, 0::2], x[:, 1::2]):
        n = part.shape[1]
        mean = part.mean(axis=1) if n else np.zeros(len(x))
        out += [np.full(len(x), n), mean, part.var(axis=1) * n if n else np.zeros(len(x))]
    return np.stack(out, axis=1)


@pytest.mark.parametrize("dt", FLOATS + ("int8",))
@pytest.mark.parametrize("n", [1, 7, 512])
def test_bn_stats_and_aggr(vec, dt, n):
    src = tile("s", (32, n), dt, values=RNG.normal(2, 3, (32, n)))
    stats = tile("st", (32, 6))
    vec.check(BnStats(src=src, dst=stats))
    vec.execute(BnStats(src=src, dst=stats))
    np.testing.assert_allclose(f64(stats), _bn(f64(src)), rtol=1e-6, atol=1e-5)
    mv = tile("mv", (32, 2))
    vec.execute(BnAggr(src=stats, dst=mv))
    x = f64(src)
    np.testing.assert_allclose(f64(mv), np.stack([x.mean(1), x.var(1)], 1), rtol=1e-5, atol=1e-5)


def test_bn_aggr_combines_chunks(vec):
    x = RNG.normal(-1, 2, (4, 1536)).astype(np.float32)
    stats = tile("st", (4, 3, 6))
    for c in range(3):
        s = tile("s", (4, 512), values=x[:, c * 512 : (c + 1) * 512])
        part = Ap("st", ((None, None, None), (c, c + 1, None)))
        vec.execute(BnStats(src=s, dst=bind(part, stats.buf, "test")))
    mv = tile("mv", (4, 2), "bfloat16")
    vec.execute(BnAggr(src=stats, dst=mv))
    expect(mv, np.stack([x.mean(1, dtype=np.float64), x.var(1, dtype=np.float64)], 1))


@pytest.mark.parametrize("src_dt", DTYPES)
@pytest.mark.parametrize("dst_dt", DTYPES)
def test_tensor_copy(vec, src_dt, dst_dt):
    src = tile("s", (8, 6), src_dt, values=RNG.uniform(-200, 200, (8, 6)))
    d = tile("d", (8, 2, 3), dst_dt)
    vec.execute(TensorCopy(src=src, dst=d))
    if src_dt == dst_dt:
        assert d.read().tobytes() == src.read().tobytes()
    else:
        expect(d, f64(src).reshape(8, 2, 3))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("value", [0.0, -1.5, 1e9])
def test_memset(vec, dt, value):
    d = tile("d", (128, 2, 8), dt, values=np.full((128, 2, 8), 7.0))
    vec.execute(Memset(dst=bind(Ap("d", ((0, 64, None),)), d.buf, "test"), value=value))
    expect(d, np.concatenate([np.full((64, 2, 8), value), np.full((64, 2, 8), 7.0)]))


@pytest.mark.parametrize("dt", DTYPES)
def test_select(vec, dt):
    pred = tile("p", (16, 8), "uint8", values=RNG.integers(0, 3, (16, 8)))
    on_true = tile("t", (16, 8), dt, values=RNG.uniform(-50, 50, (16, 8)))
    fcol = tile("fc", (16, 1), "float32", values=RNG.uniform(-9, 9, (16, 1)))
    ftile = tile("ft", (16, 8), dt, values=RNG.uniform(-9, 9, (16, 8)))
    for on_false, fvals in ((-3.0, -3.0), (fcol, f64(fcol)), (ftile, f64(ftile))):
        d = tile("d", (16, 8), dt)
        ins = Select(predicate=pred, on_true=on_true, on_false=on_false, dst=d)
        vec.check(ins)
        vec.execute(ins)
        expect(d, np.where(f64(pred) != 0, f64(on_true), fvals))


# ---------------------------------------------------------------------------------------------
# costs (vector cycles), worked by hand from trainium.md 3.2 / 2.3 and configs/trn{1,2}.yaml


def _tt(alu, dt, n, mem0="sbuf", step=1, wait=()):
    """tensor_tensor with N = n elements per partition, src0 read with stride `step`."""
    a = tile("a", (128, n * step), dt, mem0, index=((None, None, None), (None, None, step)))
    shape = a.shape
    return TensorTensor(
        alu=alu, src0=a, src1=tile("b", shape, dt), dst=tile("d", shape, dt), wait=wait
    )


@pytest.mark.parametrize(
    "chip, ins, cycles",
    [
        ("trn2", _tt("add", "float32", 512, step=2), 1024),  # 2N
        ("trn2", _tt("add", "float32", 512), 1024),  # 2N
        ("trn2", _tt("add", "bfloat16", 512), 512),  # N-A2 fast path: N
        ("trn2", _tt("divide", "bfloat16", 512), 512),  # perf mode 2N/2
        ("trn2", _tt("add", "bfloat16", 512, step=2), 512),  # strided: perf mode 2N/2
        ("trn1", _tt("add", "bfloat16", 512, step=2), 1024),  # no perf mode: 2N
        ("trn1", _tt("divide", "bfloat16", 512), 1024),  # no perf mode: 2N
        ("trn1", _tt("multiply", "bfloat16", 512), 512),  # N-A2 fast path: N
        ("trn2", _tt("max", "float32", 512, mem0="psum"), 512),  # one input in PSUM: N
        ("trn2", _tt("add", "float32", 16), 64),  # 2*16 = 32 < MIN_II
        ("trn2", _tt("add", "float32", 512, wait=(("s", 1),)), 1168),  # + 144 (NKL, NC-v3)
    ],
)
def test_tensor_tensor_cost(chip, ins, cycles):
    assert VectorEngine(load_chip(chip).core).cost(ins, None) == cycles


def _copy(src_dt, dst_dt, n, src_mem="sbuf", dst_mem="sbuf", step=1):
    """tensor_copy with N = n elements per partition, src read with stride `step`."""
    s = tile("s", (128, n * step), src_dt, src_mem, index=((None, None, None), (None, None, step)))
    return TensorCopy(src=s, dst=tile("d", s.shape, dst_dt, dst_mem))


@pytest.mark.parametrize(
    "chip, ins, cycles",
    [
        ("trn2", _copy("bfloat16", "bfloat16", 2048), 512),  # 2048 / 4
        ("trn1", _copy("bfloat16", "bfloat16", 2048), 2048),  # no perf mode
        ("trn3", _copy("float16", "bfloat16", 2048), 512),  # 2048 / 4
        ("trn2", _copy("bfloat16", "bfloat16", 2048, step=2), 1024),  # strided: 2048 / 2
        ("trn2", _copy("bfloat16", "bfloat16", 2048, src_mem="psum"), 1024),  # PSUM side: / 2
        ("trn2", _copy("bfloat16", "float32", 2048), 2048),  # not all 16-bit
        ("trn2", _copy("float32", "float32", 2048), 2048),
        ("trn2", _copy("float32", "float32", 32), 64),  # MIN_II
    ],
)
def test_tensor_copy_cost(chip, ins, cycles):
    vec = VectorEngine(load_chip(chip).core)
    assert vec.cost(ins, None) == cycles
    ts = TensorScalar(
        src=ins.src,
        dst=ins.dst,
        op0="multiply",
        operand0=2.0,
        op1="add",
        operand1=1.0,
        wait=(("x", 1),),
    )
    # same rule, + the fixed overhead of a dependent instruction (100 on NC-v2 by N-A2, 144 on
    # NC-v3/v4 by NKL); 1 or 2 ops cost the same
    assert vec.cost(ts, None) == cycles + (100 if chip == "trn1" else 144)


def test_other_vector_costs(vec):
    bf, f32 = "bfloat16", "float32"
    red = TensorReduce(alu="add", src=tile("s", (128, 512), bf), dst=tile("d", (128, 1), bf))
    assert vec.cost(red, None) == 256  # N/2, bf16 add
    assert vec.cost(TensorReduce(alu="multiply", src=red.src, dst=red.dst), None) == 512
    assert vec.cost(TensorReduce(alu="max", src=red.src, dst=tile("d", (128, 1))), None) == 512
    assert (
        vec.cost(TensorReduce(alu="add", src=tile("s", (128, 64), bf), dst=red.dst), None) == 64
    )  # 32 -> MIN_II
    assert vec.cost(Memset(dst=tile("d", (128, 512), bf), value=0.0), None) == 256
    assert vec.cost(Memset(dst=tile("d", (128, 512), bf), value=1.0), None) == 512
    assert vec.cost(Memset(dst=tile("d", (128, 512), f32), value=0.0), None) == 512
    assert vec.cost(BnStats(src=tile("s", (128, 512)), dst=tile("d", (128, 6))), None) == 512
    assert vec.cost(BnStats(src=tile("s", (128, 32)), dst=tile("d", (128, 6))), None) == 64
    assert vec.cost(BnAggr(src=tile("s", (128, 48)), dst=tile("d", (128, 2))), None) == 208
    assert vec.cost(BnAggr(src=tile("s", (128, 6)), dst=tile("d", (128, 2))), None) == 64
    sel = [
        Select(
            predicate=tile("p", (128, 512), memory=m),
            on_true=tile("t", (128, 512)),
            on_false=0.0,
            dst=tile("d", (128, 512)),
        )
        for m in ("sbuf", "psum")
    ]
    assert [vec.cost(s, None) for s in sel] == [1024, 512]


# ---------------------------------------------------------------------------------------------
# checks of the vector-only ops (the shared operand rules are tested in test_alu.py)


def test_vector_checks(vec):
    s, s3 = tile("s", (128, 4, 8)), tile("s", (128, 4, 8), "float32", "psum")
    red = dict(index=7, alu="add", src=s)
    rejects(
        vec,
        TensorReduce(dst=tile("d", (128, 4)), axis=0, **red),
        "axis 0 is not a free axis of src 's' (shape [128, 4, 8]",
    )
    rejects(vec, TensorReduce(dst=tile("d", (128, 4)), axis=3, **red), "axis 3 is not a free")
    rejects(vec, TensorReduce(dst=tile("d", (128, 1)), axis=[2, -1], **red), "twice")
    rejects(
        vec,
        TensorReduce(dst=tile("d", (128, 8)), **red),
        "dst 'd' has 8 elements per partition but reducing src 's' over axis [2] leaves 4",
    )
    rejects(vec, TensorReduce(dst=tile("d", (64, 4)), **red), "dst 'd' has 64 partitions")
    rejects(
        vec,
        BnStats(index=7, src=tile("s", (4, 513)), dst=tile("d", (4, 6))),
        "src 's' has 513 elements per partition, more than bn_stats' limit of 512",
    )
    rejects(
        vec,
        BnStats(index=7, src=tile("s", (4, 512)), dst=tile("d", (4, 5))),
        "dst 'd' has 5 elements per partition; bn_stats writes 6",
    )
    rejects(
        vec,
        BnAggr(index=7, src=tile("s", (4, 7)), dst=tile("d", (4, 2))),
        "src 's' has 7 elements",
        "multiple of 3",
    )
    rejects(
        vec,
        BnAggr(index=7, src=tile("s", (4, 6)), dst=tile("d", (4, 3))),
        "dst 'd' has 3 elements per partition; bn_aggr writes 2",
    )
    sel = dict(index=7, dst=tile("d", (128, 32)))
    rejects(
        vec,
        Select(predicate=s3, on_true=tile("t", (128, 32), memory="psum"), on_false=0.0, **sel),
        "predicate 's' and on_true 't' are both in PSUM",
    )
    rejects(
        vec,
        Select(predicate=s, on_true=tile("t", (128, 31)), on_false=0.0, **sel),
        "on_true 't' has 31 elements per partition but dst 'd' has 32",
    )
    rejects(
        vec,
        Select(predicate=s, on_true=s3, on_false=tile("f", (128, 3)), **sel),
        "on_false 'f' has 3 elements per partition but dst 'd' has 32",
    )
    rejects(
        vec,
        Select(predicate=s, on_true=s3, on_false=tile("f", (64, 1)), **sel),
        "on_false 'f' has 64 partitions but dst 'd' has 128",
    )
