"""scalar_tensor_tensor on VectorE and GpSimd: (data op0 operand0) op1 operand1 against numpy,
its cost against trainium.md 3.2's rule worked by hand, and its operand checks."""

import numpy as np
import pytest

from tests.engines.helpers import rejects
from trnsim.config import load_chip
from trnsim.dtypes import dtype, to_dtype
from trnsim.engines.gpsimd import GpSimdEngine
from trnsim.engines.vector import VectorEngine
from trnsim.isa import INSTRUCTIONS, Ap, ScalarTensorTensor
from trnsim.memory.buffer import Buffer, bind

RNG = np.random.default_rng(5)
ENGINES = {"vector": VectorEngine, "gpsimd": GpSimdEngine}


def tile(name, shape, dt="float32", memory="sbuf", values=None):
    """A Ref to a fresh buffer holding `values` (fp64 -> fp32 -> dt), or zeros."""
    d = dtype(dt)
    arr = np.zeros(shape, d.np)
    if values is not None:
        arr[...] = to_dtype(np.asarray(values, np.float64).astype(np.float32), d)
    return bind(Ap(name, (), name), Buffer(name, memory, shape, d, arr), "test")


def f64(ref):
    return ref.read().astype(np.float64)


def stt(dt, n, op0="subtract", op1="multiply", odt=None, p=128, **kw):
    """A scalar_tensor_tensor over [p, n] tiles of dt (dst odt), a per-partition operand0."""
    return ScalarTensorTensor(
        data=tile("x", (p, n), dt, values=RNG.uniform(-4, 4, (p, n))),
        op0=op0,
        operand0=tile("m", (p, 1), values=RNG.uniform(-1, 1, (p, 1))),
        op1=op1,
        operand1=tile("w", (p, n), dt, values=RNG.uniform(-2, 2, (p, n))),
        dst=tile("d", (p, n), odt or dt),
        **kw,
    )


def test_it_is_an_instruction_of_vector_and_gpsimd():
    cls = INSTRUCTIONS["scalar_tensor_tensor"]
    assert cls is ScalarTensorTensor and {cls.ENGINE.label, *(e.label for e in cls.ENGINES)} == {
        "vector", "gpsimd"}  # fmt: skip


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
@pytest.mark.parametrize(
    "op0, op1, rev0, rev1",
    [("subtract", "multiply", False, False), ("multiply", "add", False, False),
     ("subtract", "divide", True, True), ("max", "subtract", False, True)],
)  # fmt: skip
def test_values_match_numpy(engine, dt, op0, op1, rev0, rev1):
    e = ENGINES[engine](load_chip("trn2").core)
    ins = stt(dt, 64, op0, op1, reverse0=rev0, reverse1=rev1)
    e.check(ins)
    e.execute(ins)
    x, m, w = (f64(r).astype(np.float32) for r in (ins.data, ins.operand0, ins.operand1))
    ops = {"subtract": np.subtract, "multiply": np.multiply, "add": np.add,
           "divide": np.divide, "max": np.maximum}  # fmt: skip
    t = ops[op0](m, x) if rev0 else ops[op0](x, m)  # fp32, not rounded between the two ops
    want = ops[op1](w, t) if rev1 else ops[op1](t, w)
    np.testing.assert_array_equal(f64(ins.dst), to_dtype(want, dtype(dt)).astype(np.float64))


def test_a_number_as_operand0():
    e = VectorEngine(load_chip("trn2").core)
    base = stt("float32", 8)
    ins = ScalarTensorTensor(data=base.data, op0="add", operand0=2.5, op1="multiply",
                             operand1=base.operand1, dst=base.dst)  # fmt: skip
    e.check(ins)
    e.execute(ins)
    want = (f64(base.data).astype(np.float32) + np.float32(2.5)) * f64(base.operand1)
    np.testing.assert_array_equal(f64(ins.dst), want.astype(np.float32))


@pytest.mark.parametrize(
    "ins, cycles",
    [
        (stt("bfloat16", 512), 512),  # data and operand1 bf16, subtract then multiply, N even: N
        (stt("bfloat16", 512, odt="float32"), 512),  # (the rule names data and operand1 only)
        (stt("bfloat16", 511), 1022),  # N odd: 2N
        (stt("float32", 512), 1024),  # fp32: 2N
        (stt("float16", 512), 1024),  # fp16 (not named): 2N
        (stt("bfloat16", 512, "add", "multiply"), 1024),  # op0 not subtract: 2N
        (stt("bfloat16", 512, "subtract", "add"), 1024),  # op1 not multiply: 2N
        (stt("bfloat16", 16), 64),  # N = 16 < MIN_II (64)
        (stt("bfloat16", 512, wait=(("s", 1),)), 512 + 144),  # + the NC-v3 static overhead
    ],
)
def test_vector_cost(ins, cycles):
    assert VectorEngine(load_chip("trn2").core).cost(ins, None) == cycles


@pytest.mark.parametrize(
    "ins, cycles",
    [
        (stt("bfloat16", 512), 1024),  # 2N (assumption: its tensor_tensor's)
        (stt("float32", 512, "multiply", "add"), 1024),
        (stt("bfloat16", 16), 64),
        (stt("bfloat16", 512, "pow", "multiply"), 4 * 512),  # pow: c N
    ],
)
def test_gpsimd_cost(ins, cycles):
    assert GpSimdEngine(load_chip("trn2").core).cost(ins, None) == cycles


def test_checks():
    e, base = VectorEngine(load_chip("trn2").core), stt("bfloat16", 64)

    def bad(engine, words, **kw):
        fields = dict(data=base.data, op0="subtract", operand0=base.operand0, op1="multiply",
                      operand1=base.operand1, dst=base.dst) | kw  # fmt: skip
        rejects(engine, ScalarTensorTensor(**fields), *words)

    bad(e, ["operand0", "per-partition"], operand0=tile("m2", (128, 2)))
    bad(e, ["operand1"], operand1=tile("w2", (128, 32), "bfloat16"))
    pa, pb = tile("pa", (128, 64), memory="psum"), tile("pb", (128, 64), memory="psum")
    bad(e, ["both in PSUM"], data=pa, operand1=pb)
    bad(GpSimdEngine(load_chip("trn2").core), ["data"], data=pa)
