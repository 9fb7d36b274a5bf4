"""GpSimd: iota, affine_select, integer-exact ALU ops, SBUF-only operands, costs."""

import numpy as np
import pytest

from trnsim.config import load_chip
from trnsim.dtypes import dtype, to_dtype
from trnsim.engines.gpsimd import GpSimdEngine
from trnsim.engines.vector import VectorEngine
from trnsim.errors import SimError
from trnsim.isa import (
    COMPARE_ALU,
    AffineSelect,
    Ap,
    Iota,
    Memset,
    TensorCopy,
    TensorScalar,
    TensorTensor,
)
from trnsim.memory.buffer import Buffer, bind

DTYPES = ("float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2", "int32", "int8")
RNG = np.random.default_rng(2)


def tile(name, shape, dt="float32", memory="sbuf", values=None, index=()):
    """A Ref to a fresh buffer holding `values` (fp64 -> fp32 -> dt), or zeros."""
    d = dtype(dt)
    arr = np.zeros(shape, d.np)
    if values is not None:
        arr[...] = to_dtype(np.asarray(values, np.float64).astype(np.float32), d)
    return bind(Ap(name, index, name), Buffer(name, memory, shape, d, arr), "test")


def f64(ref):
    return ref.read().astype(np.float64)


def as_dtype(values64, dt):
    """float64 reference -> fp32 -> dt, back as float64 for comparison."""
    with np.errstate(over="ignore"):  # fp32.min into fp16 overflows to -inf, as on hardware
        return to_dtype(np.asarray(values64).astype(np.float32), dtype(dt)).astype(np.float64)


@pytest.fixture(scope="module")
def pool():
    return GpSimdEngine(load_chip("trn2").core)


@pytest.mark.parametrize("dt", DTYPES + ("uint8",))
@pytest.mark.parametrize("start, step, pstep", [(0, 1, 0), (-5, 3, 100), (2, -1, -16)])
def test_iota_integers(pool, dt, start, step, pstep):
    d = tile("d", (64, 3, 4), dt)
    ins = Iota(dst=d, start=start, step=step, partition_step=pstep)
    pool.check(ins)
    pool.execute(ins)
    p, i = np.arange(64)[:, None], np.arange(12)[None, :]
    want = start + p * pstep + i * step  # exact integers, then cast (ints saturate)
    assert f64(d).reshape(64, 12).tolist() == as_dtype(want, dt).tolist()


def test_iota_int32_is_exact_and_wraps(pool):
    d = tile("d", (2, 3), "int32")
    pool.execute(Iota(dst=d, start=2**31 - 2, step=1, partition_step=2**24 + 1))
    want = 2**31 - 2 + np.arange(2)[:, None] * (2**24 + 1) + np.arange(3)[None, :]
    want = (want + 2**31) % 2**32 - 2**31  # int32 arithmetic wraps
    assert d.read().tolist() == want.tolist()


def test_iota_float_path(pool):
    d = tile("d", (4, 5), "float32")
    pool.execute(Iota(dst=d, start=0.5, step=0.25, partition_step=-1.5))
    p, i = np.arange(4, dtype=np.float32)[:, None], np.arange(5, dtype=np.float32)[None, :]
    want = (np.float32(0.5) + p * np.float32(-1.5)) + i * np.float32(0.25)
    assert d.read().tolist() == want.tolist()


@pytest.mark.parametrize("cmp", COMPARE_ALU)
@pytest.mark.parametrize("dt", DTYPES)
def test_affine_select(pool, cmp, dt):
    on_true = tile("t", (32, 32), dt, values=RNG.uniform(-100, 100, (32, 32)))
    d = tile("d", (32, 32), dt)
    ins = AffineSelect(on_true=on_true, dst=d, cmp=cmp, start=0, step=-1, partition_step=1)
    pool.check(ins)
    pool.execute(ins)
    v = np.arange(32)[:, None] - np.arange(32)[None, :]  # causal mask: p - i
    pred = {
        "equal": v == 0,
        "not_equal": v != 0,
        "less": v < 0,
        "less_equal": v <= 0,
        "greater": v > 0,
        "greater_equal": v >= 0,
    }[cmp]
    fill = as_dtype(np.full((1,), -3.4028234663852886e38), dt)  # -inf once narrowed to bf16
    assert f64(d).tolist() == np.where(pred, f64(on_true), fill).tolist()


def test_affine_select_float_value_and_cast(pool):
    on_true = tile("t", (4, 6), "float32", values=RNG.uniform(-3, 3, (4, 6)))
    d = tile("d", (4, 6), "bfloat16")
    pool.execute(
        AffineSelect(
            on_true=on_true,
            dst=d,
            on_false=9.0,
            cmp="greater",
            start=-1.25,
            step=0.5,
            partition_step=0.25,
        )
    )
    v = -1.25 + np.arange(4)[:, None] * 0.25 + np.arange(6)[None, :] * 0.5
    assert f64(d).tolist() == as_dtype(np.where(v > 0, f64(on_true), 9.0), "bfloat16").tolist()


def test_integers_are_exact_on_gpsimd_not_on_vector():
    core = load_chip("trn2").core
    a, b = tile("a", (2, 2), "int32"), tile("b", (2, 2), "int32")
    a.buf.array[...] = [[2**24, 2**30], [-(2**24) - 3, 5]]
    b.buf.array[...] = [[1, 3], [1, -7]]
    for engine, exact in ((GpSimdEngine, True), (VectorEngine, False)):
        d = tile("d", (2, 2), "int32")
        engine(core).execute(TensorTensor(alu="add", src0=a, src1=b, dst=d))
        x = a.read().astype(np.int64) + b.read()
        want = x if exact else (a.read_f32() + b.read_f32()).astype(np.int64)
        assert d.read().tolist() == want.tolist()
        s = tile("s", (2, 2), "int32")
        engine(core).execute(
            TensorScalar(src=a, dst=s, op0="multiply", operand0=3.0, op1="subtract", operand1=1.0)
        )
        y = a.read().astype(np.int64) * 3 - 1
        want = np.clip(y if exact else (a.read_f32() * 3 - 1).astype(np.int64), -(2**31), 2**31 - 1)
        assert s.read().tolist() == want.tolist()
    d = tile("d", (2, 2), "int32")  # divide is not integer-exact: through fp32, then rounded
    GpSimdEngine(core).execute(TensorTensor(alu="divide", src0=a, src1=b, dst=d))
    assert d.read().tolist() == np.rint(a.read_f32() / b.read_f32()).astype(np.int64).tolist()


@pytest.mark.parametrize("dt", DTYPES)
def test_shared_ops_values(pool, dt):
    src = tile("s", (16, 10), dt, values=RNG.integers(-20, 20, (16, 10)))
    col = tile("c", (16, 1), dt, values=RNG.integers(1, 5, (16, 1)))
    d = tile("d", (16, 2, 5), dt)
    pool.execute(TensorCopy(src=src, dst=d))
    assert d.read().tobytes() == src.read().tobytes()
    pool.execute(
        TensorScalar(
            src=src, dst=d, op0="min", operand0=col, op1="pow", operand1=2.0, reverse1=True
        )
    )
    want = 2.0 ** np.minimum(f64(src), f64(col))
    np.testing.assert_allclose(f64(d).reshape(16, 10), as_dtype(want, dt), rtol=2**-22)
    pool.execute(Memset(dst=d, value=-300.0))
    assert f64(d).tolist() == as_dtype(np.full((16, 2, 5), -300.0), dt).tolist()


def test_memset_integer_exact(pool):
    d = tile("d", (2, 2), "int32")
    pool.execute(Memset(dst=d, value=2**24 + 1))
    assert d.read().tolist() == [[2**24 + 1] * 2] * 2


# ---------------------------------------------------------------------------------------------
# costs in GpSimd cycles: GPSIMD_START 150, MIN_II 64, fixed overhead 100 (trn2.yaml)


def test_gpsimd_costs(pool):
    d = tile("d", (128, 512), "bfloat16")
    assert pool.cost(Iota(dst=d), None) == 150 + 512
    assert pool.cost(Iota(dst=tile("d", (128, 1))), None) == 151
    assert pool.cost(AffineSelect(on_true=d, dst=d, wait=(("s", 1),)), None) == 150 + 512 + 100
    assert pool.cost(TensorTensor(alu="add", src0=d, src1=d, dst=d), None) == 1024  # 2N
    assert (
        pool.cost(
            TensorTensor(
                alu="add",
                src0=tile("a", (128, 16)),
                src1=tile("b", (128, 16)),
                dst=tile("c", (128, 16)),
            ),
            None,
        )
        == 64
    )
    assert pool.cost(TensorCopy(src=d, dst=d), None) == 512  # no perf mode on GpSimd
    assert pool.cost(TensorScalar(src=d, dst=d, op0="add", operand0=1.0), None) == 512
    assert pool.cost(Memset(dst=d, value=0.0), None) == 256  # N/2: zero into bf16
    assert pool.cost(Memset(dst=d, value=2.0), None) == 512


def test_gpsimd_pow_costs_as_a_transcendental(pool):
    # N-SH: rsqrt on GpSimd has 4x lower throughput than ScalarE (one element per cycle, same
    # clock), so 4 cycles per element; pow is charged the same (trn2.yaml)
    d = tile("d", (128, 512), "bfloat16")
    pw = TensorScalar(src=d, dst=d, op0="pow", operand0=0.5)
    assert pool.cost(pw, None) == 4 * 512
    two = TensorScalar(src=d, dst=d, op0="multiply", operand0=2.0, op1="pow", operand1=3.0)
    assert pool.cost(two, None) == 4 * 512
    waits = TensorScalar(src=d, dst=d, op0="pow", operand0=0.5, wait=(("s", 1),))
    assert pool.cost(waits, None) == 4 * 512 + 100
    assert (
        pool.cost(
            TensorScalar(src=tile("s", (128, 8)), dst=tile("t", (128, 8)), op0="pow", operand0=2.0),
            None,
        )
        == 64
    )  # MIN_II: 4 x 8 < 64
    assert pool.cost(TensorTensor(alu="pow", src0=d, src1=d, dst=d), None) == 4 * 512  # not 2N
    slower = load_chip("trn2", ["core.gpsimd.transcendental_cycles_per_element=8"]).core
    assert GpSimdEngine(slower).cost(pw, None) == 8 * 512
    # VectorE and ScalarE are unchanged
    assert (
        VectorEngine(load_chip("trn2").core).cost(
            TensorScalar(
                src=tile("s", (128, 512)), dst=tile("t", (128, 512)), op0="pow", operand0=0.5
            ),
            None,
        )
        == 512
    )


# ---------------------------------------------------------------------------------------------
# checks


def test_gpsimd_checks(pool):
    p = tile("p", (32, 8), memory="psum")
    for ins in (
        Iota(index=7, dst=p),
        AffineSelect(index=7, on_true=p, dst=tile("d", (32, 8))),
        Memset(index=7, dst=p),
    ):
        with pytest.raises(
            SimError,
            match=r"^instruction 7 \(\w+\): .* 'p' is in PSUM, "
            r"expected SBUF$",
        ):
            pool.check(ins)
    bad = AffineSelect(index=7, on_true=tile("t", (32, 9)), dst=tile("d", (32, 8)))
    with pytest.raises(
        SimError,
        match=r"^instruction 7 \(affine_select\): on_true 't' has 9 "
        r"elements per partition but dst 'd' has 8",
    ):
        pool.check(bad)
    quarter = bind(Ap("d", ((32, 96, None),), "d[32:96]"), tile("d", (128, 4)).buf, "test")
    with pytest.raises(
        SimError,
        match=r"^instruction 7 \(iota\): dst 'd\[32:96\]' spans 64 "
        r"partitions starting at partition 32; it must start at "
        r"0, 64$",
    ):
        pool.check(Iota(index=7, dst=quarter))


def test_huge_integral_numbers_take_the_fp32_path(pool):
    d = tile("d", (2, 2), "int32")
    pool.execute(Memset(dst=d, value=1e30))  # saturates, no int64 overflow
    assert d.read().tolist() == [[2**31 - 1] * 2] * 2
    f = tile("f", (1, 2))
    pool.execute(Iota(dst=f, start=1e20, step=1))
    assert f.read().tolist() == [[float(np.float32(1e20))] * 2]  # fp32: 1e20 + 1 == 1e20
