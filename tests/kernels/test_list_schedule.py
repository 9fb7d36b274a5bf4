"""`schedule.Scheduled`: a lowering's instructions re-emitted in a list schedule's order, when
that ends sooner by the engines' own cost models, derived here by hand."""

from __future__ import annotations

import pytest

from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.isa import Activation, DmaCopy, Engine, TensorScalar, TensorTensor
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.schedule import Scheduled, _Graph
from trnsim.trace.program import TensorSpec

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
    b.check_reads = False  # (passes over tiles nothing writes: the schedule's own costs)
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
    b.check_reads = False  # (passes over tiles nothing writes: the schedule's own costs)
    with Scheduled(b, cfg):
        a = b.tile("a", "sbuf", (128, 512), F32)
        for _ in range(3):  # one engine, one tile: in order
            b.emit(TensorScalar, [ap(a)], [ap(a)], src=ap(a), dst=ap(a), op0="add", operand0=1.0)
    assert [i.index for i in b.instructions] == [0, 1, 2]
    assert b.emit.__func__ is KernelBuilder.emit  # the builder's own emit again


def _multiply(b: KernelBuilder, t: str, w: str, wp: str, group=None) -> None:
    """t = t * w, on VectorE (w's copy wp in PSUM: one cycle an element) or GpSimd (w)."""
    cols = slice(0, b.tiles[t].shape[-1])
    ops = [(TensorTensor, [ap(t), ap(x, slice(None), cols)], [ap(t)],
            dict(alu="multiply", src0=ap(t), src1=ap(x, slice(None), cols), dst=ap(t), engine=e))
           for e, x in ((Engine.VECTOR, wp), (Engine.GPSIMD, w))]  # fmt: skip
    b.emit(*ops[0][:3], **ops[0][3], choices=ops[1:], **({"group": group} if group else {}))


def _busy_vector_then_two_choices(b: KernelBuilder, group=None) -> None:
    """VectorE's pass over a (2048 fp32 columns); then c *= w (256 columns) and d *= w (4096),
    independent of it and of each other, each on VectorE or GpSimd."""
    a = b.tile("a", "sbuf", (128, 2048), F32)
    c, d, w = (b.tile(n, "sbuf", (128, k), F32) for n, k in (("c", 256), ("d", 4096),
                                                             ("w", 4096)))  # fmt: skip
    wp = b.tile("wp", "psum", (128, 4096), F32)
    b.emit(TensorScalar, [], [ap(a)], src=ap(a), dst=ap(a), op0="add", operand0=1.0)
    _multiply(b, c, w, wp, group)
    _multiply(b, d, w, wp, group)


def test_an_instruction_goes_to_the_choice_that_ends_it_soonest():
    """c's multiply ends sooner on GpSimd (VectorE is busy with a's pass); d's on VectorE,
    once a's pass is done, reading w from PSUM at one cycle an element (GpSimd: two, and it
    has c's first). Recorded with one group, d's takes GpSimd, as c's did."""
    cfg = load_chip("trn2")
    v, g = cfg.core.vector.clock_hz / 1e9, cfg.core.gpsimd.clock_hz / 1e9  # cycles a ns
    a_ns, c_ns = 2048 / v, 2 * 256 / g
    assert c_ns < a_ns + 256 / v  # c: GpSimd ends first
    assert a_ns + 4096 / v < c_ns + 2 * 4096 / g  # d: VectorE ends first
    for group, engines, end in (
        (None, [Engine.GPSIMD, Engine.VECTOR], a_ns + 4096 / v),
        ("block", [Engine.GPSIMD, Engine.GPSIMD], c_ns + 2 * 4096 / g),
    ):
        b = KernelBuilder({})
        b.check_reads = False  # (passes over tiles nothing writes)
        with Scheduled(b, cfg) as s:
            _busy_vector_then_two_choices(b, group)
        graph = _Graph(b, cfg, s.recorded, False, s.choices, s.groups)
        order = graph.greedy("index")
        assert [graph.queue[i] for i in (1, 2)] == engines
        assert graph.simulate(order) == pytest.approx(end, rel=1e-9)
        if group is None:  # the list schedule's order and choices, emitted
            assert [i.engine for i in b.instructions] == [Engine.VECTOR, Engine.GPSIMD,
                                                          Engine.VECTOR]  # fmt: skip
            assert s.makespan == pytest.approx(end, rel=1e-9)


def test_fluid_transfers_share_the_dma_engines_of_their_partitions():
    """`fluid`: two loads into the halves of one tile (queues 0 and 1: no order between them)
    and a third into partitions 0-63 of another (queue 2). Each [64, 1024] fp32 load moves on
    the 8 DMA engines of its 64 partitions after its setup (transfer_setup and 7 staggers):
    the second alone on engines 8-15, the first and third sharing engines 0-7 at half the rate
    each; the last ends the completion latency after its data."""
    cfg = load_chip("trn2")
    d = cfg.core.dma
    b = KernelBuilder({n: TensorSpec(n, (128, 1024), F32, None) for n in ("x", "y")})
    a, c = (b.tile(n, "sbuf", (128, 1024), F32) for n in ("a", "c"))
    with Scheduled(b, cfg, shared_dma=True, fluid=True) as s:
        for q, (src, dst, lo) in enumerate((("x", a, 0), ("x", a, 64), ("y", c, 0))):
            rows = slice(lo, lo + 64)
            b.emit(DmaCopy, [ap(src, rows)], [ap(dst, rows)], src=ap(src, rows),
                   dst=ap(dst, rows), queue=q)  # fmt: skip
    setup = (d.transfer_setup + 7 * d.engine_stagger) * 1e9
    data = 64 * 1024 * 4 / 8 / (d.engine_bandwidth / 1e9)  # ns on 8 engines at the full rate
    assert s.makespan == pytest.approx(setup + 2 * data + d.load_completion_latency * 1e9)
    graph = _Graph(b, cfg, s.recorded, True, s.choices, s.groups, fluid=True)
    assert graph.preds == [[], [], []]  # (the halves of a: no write after write)
    # the serial model: each transfer's data after the data of those scheduled before it
    serial = _Graph(b, cfg, s.recorded, True, s.choices, s.groups)
    assert serial.preds[1] == [0]
