"""Broadcast operands (`*n`: a dim read with stride 0, isa.md 4): the text, the values each
engine computes from them against numpy, their costs by hand, and the operands that may not
have one."""

import numpy as np
import pytest

from trnsim.config import load_chip
from trnsim.dtypes import dtype, to_dtype
from trnsim.engines.gpsimd import GpSimdEngine
from trnsim.engines.scalar import ScalarEngine
from trnsim.engines.vector import VectorEngine
from trnsim.errors import SimError
from trnsim.isa import Activation, Ap, TensorReduce, TensorTensor
from trnsim.kernels.builder import ap
from trnsim.memory.buffer import Buffer, bind
from trnsim.runtime.session import run_program
from trnsim.trace import loads
from trnsim.trace.instructions import parse_ap

RNG = np.random.default_rng(3)
P, R, D = 128, 8, 64


def ref(text: str, shape, dt="float32", values=None):
    """`text` (an operand of a fresh SBUF buffer of `shape`) bound, the buffer holding values."""
    d = dtype(dt)
    arr = np.zeros(shape, d.np)
    if values is not None:
        arr[...] = to_dtype(np.asarray(values, np.float32).reshape(shape), d)
    a = parse_ap(text)
    return bind(a, Buffer(a.name, "sbuf", shape, d, arr), "test")


@pytest.mark.parametrize(
    "text,index,bcast",
    [
        ("m[0:128, 0:8, *64]", ((0, 128, None), (0, 8, None)), ((2, 64),)),
        ("w[:, *8, 0:64]", ((None, None, None), (0, 64, None)), ((1, 8),)),
        ("w[0:128, * 2, *3]", ((0, 128, None),), ((1, 2), (1, 3))),
    ],
)
def test_broadcast_text(text, index, bcast):
    a = parse_ap(text)
    assert (a.index, a.bcast) == (index, bcast)
    again = parse_ap(str(a._replace(text="")))  # written out from its fields, read back
    assert (again.index, again.bcast) == (index, bcast)


def test_broadcast_in_code_is_written_out():
    a = ap("w", slice(0, 128), slice(None))._replace(bcast=((1, 8),))
    assert str(a) == "w[0:128, *8, :]"


def test_broadcast_views_and_their_bounds():
    m = ref("m[0:128, 0:8, *64]", (P, R), values=RNG.standard_normal((P, R)))
    assert m.shape == (P, R, D) and m.free_size == R * D and not m.contiguous
    np.testing.assert_array_equal(m.read(), np.repeat(m.buf.array[:, :, None], D, axis=2))
    w = ref("w[:, *8, :]", (P, D), values=RNG.standard_normal((P, D)))
    assert w.shape == (P, R, D) and w.contiguous  # the innermost dim keeps its unit stride
    assert w.ranges == ((0, P, 1), (0, D, 1))  # the memory touched: the buffer's own
    with pytest.raises(SimError, match="partition dim of a tile cannot be broadcast"):
        ref("m[*2, 0:128, 0:8]", (P, R))
    with pytest.raises(SimError, match="cannot be written"):
        m.write(np.zeros((P, R, D)))


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_rows_minus_their_max_and_times_a_weight(dt):
    """x - max (the row's statistic along its 64 elements) and x * w (the weight along the
    rows) on VectorE and GpSimd: numpy's, each result rounded once to dt."""
    x = ref("x", (P, R, D), dt, RNG.standard_normal((P, R, D)))
    m = ref("m[:, :, *64]", (P, R), dt, RNG.standard_normal((P, R)))
    w = ref("w[:, *8, :]", (P, D), dt, RNG.standard_normal((P, D)))
    xs = x.read().astype(np.float64)
    for model in (VectorEngine, GpSimdEngine):
        eng = model(load_chip("trn2").core)
        for alu, other, want in (
            ("subtract", m, xs - m.buf.array.astype(np.float64)[:, :, None]),
            ("multiply", w, xs * w.buf.array.astype(np.float64)[:, None, :]),
        ):
            d = ref("d", (P, R, D), dt)
            ins = TensorTensor(alu=alu, src0=x, src1=other, dst=d)
            eng.check(ins)
            eng.execute(ins)
            expect = to_dtype(want.astype(np.float32), dtype(dt)).astype(np.float64)
            np.testing.assert_array_equal(d.read().astype(np.float64), expect)


def test_reduce_and_activation_of_a_broadcast():
    """tensor_reduce of [P, R, *64] is 64 times each element (add) or the element (max);
    ScalarE's exp of a broadcast is the element's exp repeated, its add reduction over all."""
    core = load_chip("trn2").core
    vals = RNG.standard_normal((P, R))
    m = ref("m[:, :, *64]", (P, R), values=vals)
    s = ref("s", (P, R))
    ins = TensorReduce(alu="add", src=m, dst=s)
    VectorEngine(core).check(ins)
    VectorEngine(core).execute(ins)
    v32 = vals.astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(s.read(), (v32 * D).astype(np.float32))
    e, tot = ref("e", (P, R, D)), ref("t", (P, 1))
    ins = Activation(func="exp", src=m, dst=e, reduce="add", reduce_dst=tot)
    ScalarEngine(core).check(ins)
    ScalarEngine(core).execute(ins)
    want = np.exp(v32).astype(np.float32)
    np.testing.assert_array_equal(e.read(), np.repeat(want[:, :, None], D, axis=2))
    total = np.repeat(want.astype(np.float64)[:, :, None], D, axis=2).sum(axis=(1, 2))
    np.testing.assert_array_equal(tot.read()[:, 0], total.astype(np.float32))


@pytest.mark.parametrize("chip", ["trn1", "trn2"])
def test_broadcast_costs(chip):
    """Costs count the output's elements N = R * 64, whatever the stride. VectorE's 16-bit
    tensor_tensor: the weight broadcast along the rows keeps unit stride innermost, so N-A2's
    one-pass rule applies (N); a row statistic broadcast along the row reads with stride 0
    innermost: 2N on trn1, 2N / tt_fast_factor (2) on trn2's perf mode. GpSimd: 2N."""
    core = load_chip(chip).core
    vec, gp = VectorEngine(core), GpSimdEngine(core)
    n = R * D
    x = ref("x", (P, R, D), "bfloat16")
    d = ref("d", (P, R, D), "bfloat16")
    w = ref("w[:, *8, :]", (P, D), "bfloat16")
    m = ref("m[:, :, *64]", (P, R), "bfloat16")
    assert vec.cost(TensorTensor(alu="multiply", src0=x, src1=w, dst=d), None) == n
    strided = n if core.vector.perf_mode else 2 * n
    assert vec.cost(TensorTensor(alu="subtract", src0=x, src1=m, dst=d), None) == strided
    assert gp.cost(TensorTensor(alu="multiply", src0=x, src1=w, dst=d), None) == 2 * n


TRACE = """\
trnsim: 1
mode: functional
chip: trn2
tensors:
  x: {{shape: [128, 8, 64], dtype: bfloat16, init: normal}}
  y: {{shape: [128, 8, 64], dtype: bfloat16}}
tiles:
  xt: {{memory: sbuf, shape: [128, 8, 64], dtype: bfloat16}}
  mt: {{memory: sbuf, shape: [128, 8], dtype: bfloat16}}
  yt: {{memory: sbuf, shape: [128, 8, 64], dtype: bfloat16}}
instructions:
  - {{op: dma_copy, src: x, dst: xt, signal: {{ld: 1}}}}
  - {{op: tensor_reduce, alu: max, src: xt, dst: mt, wait: {{ld: 1}}}}
  - {{op: tensor_tensor, alu: subtract, src0: xt, src1: "mt[:, :, *64]", dst: {dst}, signal: {{v: 1}}}}
  - {{op: dma_copy, src: {src}, dst: y, wait: {{v: 1}}}}
"""


def test_a_trace_subtracts_each_rows_max():
    """From a trace's text: y = x - max over each row of 64 (one tensor_tensor for the block)."""
    prog = loads(TRACE.format(dst="yt", src="yt"), source="t.yaml")
    r = run_program(prog, load_chip("trn2"), "functional")
    x = r.tensor("x").astype(np.float64)
    want = to_dtype((x - x.max(axis=2, keepdims=True)).astype(np.float32), dtype("bfloat16"))
    np.testing.assert_array_equal(r.tensor("y"), want)


@pytest.mark.parametrize(
    "dst,src,words",
    [
        ('"yt[:, :, *1]"', "yt", "a written operand"),
        ("yt", '"mt[:, :, *64]"', "a dma operand"),
    ],
)
def test_broadcast_only_in_an_engines_input(dst, src, words):
    prog = loads(TRACE.format(dst=dst, src=src), source="t.yaml")
    with pytest.raises(SimError, match=words):
        run_program(prog, load_chip("trn2"), "functional")


def test_ap_without_broadcast_is_unchanged():
    assert Ap("x", ((0, 4, None),)) == Ap("x", ((0, 4, None),), "", ())
