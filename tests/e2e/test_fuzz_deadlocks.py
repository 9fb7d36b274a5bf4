"""Fuzzed deadlocks: semaphore cycles between engines and event cycles between streams must be
reported as a DeadlockError naming everything that is stuck."""

from __future__ import annotations

import textwrap

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.e2e.fuzzing import CHIPS, EXAMPLES, FUZZ, MODES, run_trace
from trnsim.errors import DeadlockError

# ----------------------------------------------------------------------------------------------
# deadlocks must be reported as such, naming what is stuck

RING_INSTRS = {  # one instruction per engine, on tiles a/b of the ring kernel
    "tensor": "{op: transpose, src: a, dst: t}",
    "vector": "{op: tensor_copy, src: a, dst: b}",
    "scalar": "{op: activation, func: exp, src: a, dst: c}",
    "gpsimd": "{op: iota, dst: d}",
    "q0": "{op: dma_copy, src: a, dst: x, queue: 0}",
    "q7": "{op: dma_copy, src: x, dst: e, queue: 7}",
}


@settings(FUZZ, max_examples=max(1, EXAMPLES * 2 // 5))
@given(
    ring=st.lists(st.sampled_from(sorted(RING_INSTRS)), min_size=2, max_size=6, unique=True),
    extra=st.integers(1, 3),
    chip_name=st.sampled_from(CHIPS),
    mode=st.sampled_from(MODES),
)
def test_semaphore_cycle_between_engines_is_a_deadlock(ring, extra, chip_name, mode):
    """Queue k waits for semaphore s<k> that only queue k+1 signals (after its own wait): a
    cycle. The run must stop with a DeadlockError naming every queue of the cycle."""
    lines = []
    for k, track in enumerate(ring):
        body = RING_INSTRS[track][:-1]
        lines.append(
            f"  - {body}, wait: {{s{k}: {extra}}}, signal: {{s{(k - 1) % len(ring)}: {extra}}}}}"
        )
    text = (
        textwrap.dedent("""\
        trnsim: 1
        tensors:
          x: {shape: [128, 64], dtype: float32}
        tiles:
          a: {memory: sbuf, shape: [128, 64], dtype: float32, init: normal}
          b: {memory: sbuf, shape: [128, 64], dtype: float32}
          c: {memory: sbuf, shape: [128, 64], dtype: float32}
          d: {memory: sbuf, shape: [128, 64], dtype: float32}
          e: {memory: sbuf, shape: [128, 64], dtype: float32}
          t: {memory: psum, shape: [64, 128], dtype: float32}
        instructions:
        """)
        + "\n".join(lines)
        + "\n"
    )
    err = run_trace(text, chip_name, mode)
    assert isinstance(err, DeadlockError), err
    for track in ring:
        assert f"core0.{track} in kernel main waits for semaphore" in str(err), (track, err)


@settings(FUZZ, max_examples=max(1, EXAMPLES // 4))
@given(
    n=st.integers(1, 5),
    cores=st.lists(st.integers(0, 3), min_size=5, max_size=5),
    launch=st.booleans(),
    chip_name=st.sampled_from(["trn2", "trn3"]),
    mode=st.sampled_from(MODES),
)
def test_streams_waiting_in_a_cycle_is_a_deadlock(n, cores, launch, chip_name, mode):
    """Stream k waits for the event stream k+1 records after its own wait: a cycle of n."""
    out = [
        "trnsim: 1",
        "kernels:",
        "  k:",
        "    tiles:",
        "      a: {memory: sbuf, shape: [128, 8], dtype: float32}",
        "    instructions:",
        "      - {op: memset, dst: a, value: 2}",
        "streams:",
    ]
    for k in range(n):
        steps = [f"{{wait: e{k}}}", f"{{record: e{(k - 1) % n}}}"]
        if launch:
            steps.insert(0, "{launch: k}")
        out.append(f"  - {{name: s{k}, core: {cores[k]}, do: [{', '.join(steps)}]}}")
    err = run_trace("\n".join(out) + "\n", chip_name, mode)
    assert isinstance(err, DeadlockError), err
    for k in range(n):
        assert f"stream s{k} waits for event 'e{k}'" in str(err), (k, err)
