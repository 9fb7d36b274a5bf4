"""`schedule.Scheduled`: a lowering's instructions re-emitted in a list schedule's order, when
that ends sooner by the engines' own cost models, derived here by hand."""

from __future__ import annotations

import pytest

from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.isa import Activation, Engine, TensorScalar
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.schedule import Scheduled

F32 = dtype("float32")


def _chains(b: KernelBuilder) -> None:
    """VectorE's pass over tile a (2048 fp32 columns), then ScalarE's over a; ScalarE's pass
    over tile c (1024 columns), which nothing before it writes, emitted last."""
    a, c = (b.tile(n, "sbuf", (128, w), F32) for n, w in (("a", 2048), ("c", 1024)))
    o, p = (b.tile(n, "sbuf", (128, w), F32) for n, w in (("o", 2048), ("p", 1024)))
    b.emit(TensorScalar, [], [ap(a)], src=ap(a), dst=ap(a), op0="add", operand0=1.0)
    b.emit(Activation, [ap(a)], [ap(o)], func="copy", src=ap(a), dst=ap(o))
    b.emit(Activation, [ap(c)], [ap(p)], func="copy", src=ap(c), dst=ap(p))


def test_an_independent_pass_goes_before_one_that_waits():
    cfg = load_chip("trn2")
    b = KernelBuilder({})
    with Scheduled(b, cfg) as s:
        _chains(b)
    ops = [(i.engine, i.src.name) for i in b.instructions]
    assert ops == [(Engine.VECTOR, "a"), (Engine.SCALAR, "c"), (Engine.SCALAR, "a")]
    v, sc = cfg.core.vector, cfg.core.scalar
    vector_ns = 2048 / v.clock_hz * 1e9  # one cycle an fp32 element, no wait
    # ScalarE's pass over a waits on VectorE's semaphore: its fixed overhead
    scalar_ns = (2048 + sc.fixed_overhead_cycles) / sc.clock_hz * 1e9
    assert s.makespan == pytest.approx(vector_ns + scalar_ns, rel=1e-9)
    # the instructions as emitted, for the builder: ScalarE's pass over c waits for a's
    assert b.instructions[2].wait and not b.instructions[1].wait


def test_the_emitted_order_stays_when_nothing_gains():
    cfg = load_chip("trn2")
    b = KernelBuilder({})
    with Scheduled(b, cfg):
        a = b.tile("a", "sbuf", (128, 512), F32)
        for _ in range(3):  # one engine, one tile: in order
            b.emit(TensorScalar, [ap(a)], [ap(a)], src=ap(a), dst=ap(a), op0="add", operand0=1.0)
    assert [i.index for i in b.instructions] == [0, 1, 2]
    assert b.emit.__func__ is KernelBuilder.emit  # the builder's own emit again
