"""Dropping unobserved signals (`kernels.signals`): the counts waits name are reached by the same
instructions, totals are kept, DMA-signalled and shared semaphores are untouched, and a lowered
kernel runs to the same timeline, span for span, with fewer simulation steps."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.helpers import run_lowered
from trnsim.isa import Engine, Instr
from trnsim.kernels import lower
from trnsim.kernels.signals import drop_unobserved_signals
from trnsim.trace.program import CoreProgram, OpSpec


def _ins(i, engine=Engine.TENSOR, wait=(), signal=()):
    return Instr(index=i, engine=engine, wait=tuple(wait), signal=tuple(signal))


def _signals(prog):
    return [ins.signal for ins in prog.instructions]


def test_increments_no_wait_names_move_to_the_next_named_count_or_the_last():
    """s is signalled once by each of instructions 0-4 on TensorE and a DMA waits for s >= 2:
    count 2 is still reached by instruction 1 (carrying 0's increment), 3 and 4 by the last."""
    prog = CoreProgram(
        {},
        [
            *(_ins(i, signal=[("s", 1)]) for i in range(5)),
            _ins(5, Engine.DMA, wait=[("s", 2)]),
        ],
    )
    drop_unobserved_signals(prog)
    assert _signals(prog) == [(), (("s", 2),), (), (), (("s", 3),), ()]


def test_a_count_inside_a_multiple_increment_is_observed():
    """An increment of 2 from count 1 reaches count 3 on the way: a wait for 2 or 3 sees it."""
    prog = CoreProgram(
        {},
        [
            _ins(0, signal=[("s", 1)]),
            _ins(1, signal=[("s", 2)]),
            _ins(2, signal=[("s", 1)]),
            _ins(3, Engine.VECTOR, wait=[("s", 2)]),
        ],
    )
    drop_unobserved_signals(prog)
    assert _signals(prog) == [(), (("s", 3),), (("s", 1),), ()]


@pytest.mark.parametrize(
    "engines", [(Engine.DMA, Engine.DMA, Engine.DMA), (Engine.TENSOR, Engine.VECTOR, Engine.TENSOR)]
)
def test_dma_and_shared_semaphores_are_left_alone(engines):
    """DMA queues complete out of issue order, two engines' signals interleave at run time."""
    prog = CoreProgram({}, [_ins(i, e, signal=[("s", 1)]) for i, e in enumerate(engines)])
    before = _signals(prog)
    drop_unobserved_signals(prog)
    assert _signals(prog) == before


def test_other_semaphores_of_an_instruction_are_kept():
    prog = CoreProgram(
        {},
        [
            _ins(0, signal=[("a", 1), ("b", 1)]),
            _ins(1, signal=[("a", 1), ("b", 1)]),
            _ins(2, Engine.VECTOR, wait=[("b", 1)]),
        ],
    )
    drop_unobserved_signals(prog)
    assert _signals(prog) == [(("b", 1),), (("a", 2), ("b", 1)), ()]


def _run(tensors, ops, drop):
    """`ops` lowered on one core (with or without the drop) and run functionally."""
    specs = [OpSpec(op, args) for op, args in ops]

    def emit(b, cfg):
        import trnsim.kernels as k

        keep = k.drop_unobserved_signals
        k.drop_unobserved_signals = (lambda p: p) if not drop else keep
        try:
            prog = lower(specs, b.tensors, cfg)
        finally:
            k.drop_unobserved_signals = keep
        b.tiles.update(prog.tiles)
        b.instructions[:] = prog.instructions

    r, b = run_lowered(tensors, emit)
    spans = sorted(r.device.recorder.recorded)
    return r, spans, sum(n for ins in b.instructions for _, n in ins.signal), b


def test_a_lowered_kernel_runs_to_the_same_timeline_and_values():
    """A matmul whose K is streamed (28 K blocks, 2 row blocks, one N block) and a softmax of
    its output: the same spans to the picosecond, the same values, the same signal totals, on
    half as many signalling matmuls."""
    tensors = {
        "a": ((256, 3500), "bfloat16", "normal"),
        "w": ((3500, 300), "bfloat16", "normal"),
        "h": ((256, 300), "float32", None),
        "y": ((256, 300), "float32", None),
    }
    ops = [("matmul", {"a": "a", "b": "w", "out": "h"}), ("softmax", {"x": "h", "out": "y"})]
    r0, spans0, total0, b0 = _run(tensors, ops, drop=False)
    r1, spans1, total1, b1 = _run(tensors, ops, drop=True)
    assert spans1 == spans0 and r1.total_ps == r0.total_ps
    np.testing.assert_array_equal(r1.tensor("y"), r0.tensor("y"))
    assert total1 == total0
    # each K block's two matmuls signalled; now only the second (whose reads free the A^T
    # and B buffers for their next loads), and in the last K block both (each the last write
    # of its accumulator, which its evacuation waits for)
    matmuls = [[i for i in b.instructions if i.OP == "matmul"] for b in (b0, b1)]
    assert len(matmuls[0]) == 2 * 28 and all(i.signal for i in matmuls[0])
    assert [bool(i.signal) for i in matmuls[1]] == [False, True] * 27 + [True, True]
