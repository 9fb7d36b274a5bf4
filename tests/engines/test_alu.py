"""The shared ALU: operator and activation tables, erf, and the engines' op registry."""

import math

import numpy as np
import pytest

from tests.engines.helpers import rejects
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.engines.alu_math import ACT, ALU, activate, alu, erf, erfc
from trnsim.engines.gpsimd import GpSimdEngine
from trnsim.engines.scalar import ScalarEngine
from trnsim.engines.vector import VectorEngine
from trnsim.errors import SimError
from trnsim.isa import (
    ACT_FUNCS,
    ALU_OPS,
    Activation,
    Ap,
    BnStats,
    Iota,
    Memset,
    Select,
    TensorCopy,
    TensorScalar,
    TensorTensor,
)
from trnsim.memory.buffer import Buffer, bind


def test_tables_cover_the_isa():
    assert set(ALU) == set(ALU_OPS)
    assert set(ACT) == set(ACT_FUNCS)


@pytest.mark.parametrize("op", ALU_OPS)
def test_alu_ops_by_hand(op):
    a = np.array([-4.0, 2.0], np.float32)
    b = np.array([2.0, 2.0], np.float32)
    r = alu(op, a, b)
    assert r.dtype == np.float32
    expect = {
        "add": [-2, 4],
        "subtract": [-6, 0],
        "multiply": [-8, 4],
        "divide": [-2, 1],
        "max": [2, 2],
        "min": [-4, 2],
        "pow": [16, 4],
        "equal": [0, 1],
        "not_equal": [1, 0],
        "less": [1, 0],
        "less_equal": [1, 1],
        "greater": [0, 0],
        "greater_equal": [0, 1],
    }[op]
    assert r.tolist() == expect


def test_alu_reverse_swaps_operands():
    a, b = np.float32([8.0]), np.float32([2.0])
    assert alu("subtract", a, b, reverse=True).tolist() == [-6.0]
    assert alu("divide", a, b, reverse=True).tolist() == [0.25]
    assert alu("less", a, b, reverse=True).tolist() == [1.0]


def test_alu_specials_without_warnings():
    with np.errstate(all="raise"):
        r = alu("divide", np.float32([1.0, -1.0, 0.0]), np.float32([0.0, 0.0, 0.0]))
        assert r[0] == np.inf and r[1] == -np.inf and np.isnan(r[2])
        assert np.isnan(alu("pow", np.float32([-2.0]), np.float32([0.5]))[0])


def test_alu_integers_stay_integers():
    r = alu("add", np.array([2**40], np.int64), np.int64(1))
    assert r.dtype == np.int64 and r.tolist() == [2**40 + 1]
    assert alu("greater", np.array([3, 1], np.int64), np.int64(2)).tolist() == [1, 0]


def test_erf_matches_math_everywhere():
    x = np.concatenate(
        [
            np.linspace(-8, 8, 20001),
            np.logspace(-40, 1.4, 500),
            -np.logspace(-40, 1.4, 500),
            [0.0, 2.9999999, 3.0, 3.0000001],
        ]
    )
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(erf(x), want, rtol=2e-7, atol=0)  # fp32-level (NR erfcc)
    want_c = np.array([math.erfc(v) for v in x])
    np.testing.assert_allclose(erfc(x), want_c, rtol=2e-7, atol=0)


def test_erf_specials():
    assert erf(np.array([np.inf, -np.inf])).tolist() == [1.0, -1.0]
    assert erfc(np.array([np.inf, -np.inf])).tolist() == [0.0, 2.0]
    assert np.isnan(erf(np.array([np.nan]))[0]) and np.isnan(erfc(np.array([np.nan]))[0])


def _sig(v):
    return 1 / (1 + math.exp(-v))


def test_activation_tails():
    x = np.float32([-20.0, -200.0, 100.0, np.inf, -np.inf])
    g = activate("gelu", x)
    assert g[0] == np.float32(-20 * 0.5 * math.erfc(20 / math.sqrt(2)))  # relative accuracy kept
    assert g[1] == 0.0 and g[2] == 100.0 and g[3] == np.inf
    assert activate("sigmoid", np.float32([-100.0]))[0] == np.float32(_sig(-100.0))
    assert activate("exp", np.float32([100.0]))[0] == np.inf


def _ref(name, shape, dt="float32", memory="sbuf"):
    """A Ref to a whole zero-filled buffer."""
    d = dtype(dt)
    return bind(Ap(name), Buffer(name, memory, shape, d, np.zeros(shape, d.np)), "test")


@pytest.mark.parametrize(
    "engine, ins",
    [
        (ScalarEngine, Memset(index=4, dst=None)),
        (ScalarEngine, Select(index=4)),
        (VectorEngine, Activation(index=4, func="exp")),
        (VectorEngine, Iota(index=4)),
        (GpSimdEngine, Activation(index=4, func="exp")),
        (GpSimdEngine, BnStats(index=4)),
    ],
)
def test_ops_outside_the_engine_are_rejected(engine, ins):
    e = engine(load_chip("trn2").core)
    for call in (lambda: e.check(ins), lambda: e.cost(ins, None), lambda: e.execute(ins)):
        with pytest.raises(
            SimError,
            match=rf"^instruction 4 \({ins.OP}\): not supported on "
            rf"the {e.engine.label} engine",
        ):
            call()


def test_tensor_copy_is_bit_exact_only_for_equal_dtypes():
    vec = VectorEngine(load_chip("trn2").core)
    src, d32, df = _ref("s", (1, 2), "int32"), _ref("d", (1, 2), "int32"), _ref("f", (1, 2))
    src.buf.array[...] = [[2**24 + 1, -(2**31)]]
    nan, dn = _ref("n", (1, 1)), _ref("dn", (1, 1))
    nan.buf.array.view(np.uint32)[...] = 0x7FC12345  # a NaN with a payload
    for s, d in ((src, d32), (src, df), (nan, dn)):
        vec.execute(TensorCopy(src=s, dst=d))
    assert d32.read().tolist() == [[2**24 + 1, -(2**31)]]
    assert df.read().tolist() == [[16777216.0, -2147483648.0]]
    assert dn.buf.array.view(np.uint32)[0, 0] == 0x7FC12345


def test_shared_ops_run_on_every_engine_that_lists_them():
    core = load_chip("trn2").core
    for engine in (VectorEngine, ScalarEngine, GpSimdEngine):
        src, dst = _ref("a", (4, 3)), _ref("b", (4, 3))
        src.write(np.arange(12.0))
        ins = TensorCopy(src=src, dst=dst)
        engine(core).check(ins)
        engine(core).execute(ins)
        assert dst.read().tolist() == src.read().tolist()


# ---------------------------------------------------------------------------------------------
# operand rules shared by the three engines (AluEngine)


def _slice(name, shape, p0, p1, memory="sbuf"):
    buf = Buffer(name, memory, shape, dtype("float32"), np.zeros(shape, np.float32))
    return bind(Ap(name, ((p0, p1, None),), f"{name}[{p0}:{p1}]"), buf, "test")


ENGINES = (VectorEngine, ScalarEngine, GpSimdEngine)


@pytest.mark.parametrize("engine", ENGINES)
def test_shared_operand_checks(engine):
    e = engine(load_chip("trn2").core)
    onchip = "SBUF" if engine is GpSimdEngine else "SBUF or PSUM"
    s, d = _ref("s", (128, 8)), _ref("d", (128, 8))
    copy = dict(index=7)
    rejects(
        e,
        TensorCopy(src=_ref("s", (128, 8), memory="hbm"), dst=d, **copy),
        f"src 's' is in HBM, expected {onchip}",
    )
    rejects(
        e,
        TensorCopy(src=s, dst=_ref("d", (64, 8)), **copy),
        "dst 'd' has 64 partitions but src 's' has 128",
    )
    rejects(
        e,
        TensorCopy(src=s, dst=_ref("d", (128, 2, 3)), **copy),
        "dst 'd' has 6 elements per partition but src 's' has 8",
    )
    rejects(
        e,
        TensorCopy(src=_ref("s", (256, 8)), dst=_ref("d", (256, 8)), **copy),
        "src 's' spans 256 partitions, more than 128",
    )
    rejects(
        e,
        TensorCopy(src=_slice("s", (128, 8), 32, 96), dst=_ref("d", (64, 8)), **copy),
        "src 's[32:96]' spans 64 partitions starting at partition 32; it must start at 0, 64",
    )
    # the config's limits: VectorE's 2^14 on NC-v3 (NKL), N-A2's 64K for the others
    vec = e.core.vector
    limit = vec.dve_max_free_elements if engine is VectorEngine else vec.max_free_elements
    n = limit + 1
    rejects(
        e,
        TensorCopy(src=_ref("s", (1, n), "int8"), dst=_ref("d", (1, n), "int8"), **copy),
        f"src 's' has {n} elements per partition, more than the SBUF limit of {limit}",
    )
    ts = dict(index=7, src=s, dst=d, op0="add")
    rejects(
        e,
        TensorScalar(operand0=_ref("c", (128, 2)), **ts),
        "operand0 'c' has 2 elements per partition; a per-partition operand must be a [P,1]",
    )
    rejects(
        e,
        TensorScalar(operand0=_ref("c", (64, 1)), **ts),
        "operand0 'c' has 64 partitions but src 's' has 128",
    )
    rejects(
        e, TensorScalar(operand0=1.0, operand1=2.0, **ts), "op1 and operand1 must be given together"
    )
    if engine is not ScalarEngine:
        rejects(
            e,
            Memset(index=7, dst=_ref("d", (128, 8), memory="hbm")),
            f"dst 'd' is in HBM, expected {onchip}",
        )
        tt = dict(index=7, alu="add", dst=d)
        rejects(
            e,
            TensorTensor(src0=s, src1=_ref("b", (128, 7)), **tt),
            "src1 'b' has 7 elements per partition but src0 's' has 8",
        )


def test_psum_rules():
    core = load_chip("trn2").core
    big = dict(src=_ref("s", (1, 4097)), dst=_ref("d", (1, 4097), memory="psum"), index=7)
    rejects(
        VectorEngine(core),
        TensorCopy(**big),
        "dst 'd' has 4097 elements per partition, more than the PSUM limit of 4096",
    )
    p = _ref("p", (128, 8), memory="psum")
    rejects(
        GpSimdEngine(core),
        TensorCopy(index=7, src=p, dst=_ref("d", (128, 8))),
        "src 'p' is in PSUM, expected SBUF",
    )
    rejects(
        VectorEngine(core),
        TensorTensor(index=7, alu="add", src0=p, src1=p, dst=_ref("d", (128, 8))),
        "src0 'p' and src1 'p' are both in PSUM; at most one input may be",
    )
    VectorEngine(core).check(TensorTensor(alu="pow", src0=p, src1=_ref("s", (128, 8)), dst=p))
