"""Drop each `wait:` of the bundled traces in turn (an instruction's semaphore wait, or a stream's
event wait): the race check must report a race exactly when the brute-force reference
(tests/trace/race_reference.py) finds two conflicting accesses that nothing orders any more, and
every race it reports must be one the reference finds."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from tests.trace import race_reference as ref
from trnsim.trace import load
from trnsim.trace.races import find_races

TRACES = Path(__file__).parents[2] / "traces"
SMALL = ["gemm_double_buffered", "matmul_gelu", "softmax_rows", "two_streams", "weight_stream"]
LABEL = re.compile(r"kernel (\S+) queue \S+ instruction (\d+) ")


def checker(program):
    """(launch races as {kernel: {frozenset of two indices}}, whether any race is between
    streams)."""
    launch: dict = {}
    between = False
    for r in find_races(program):
        if r.first.endswith(")") and " (stream " in r.first:
            between = True
            continue
        (k1, i1), (k2, i2) = (LABEL.search(x).groups() for x in (r.first, r.second))
        assert k1 == k2
        launch.setdefault(k1, set()).add(frozenset((int(i1), int(i2))))
    return launch, between


def reference(program):
    launch = {}
    for name, k in program.kernels.items():
        for c in range(len(k.per_core)):
            found = ref.launch_races(program, name, c)
            if found:
                launch.setdefault(name, set()).update(found)
    return launch, bool(ref.stream_races(program))


def agree(program, what):
    got, got_between = checker(program)
    want, want_between = reference(program)
    assert got_between == want_between, what
    assert set(got) == set(want), (what, got, want)
    for kernel, pairs in want.items():
        assert got[kernel] <= pairs, (what, kernel, got[kernel] - pairs)  # nothing false
        reported = {i for p in got[kernel] for i in p}
        for pair in pairs:  # each real race reported, or through a write that covers it
            assert pair & reported, (what, kernel, sorted(pair))
    return bool(want) or want_between


def dropped(program):
    """(description) for each wait dropped in turn, `program` changed in place meanwhile."""
    for kernel in program.kernels.values():
        for core in kernel.per_core:
            for i, ins in enumerate(core.instructions):
                for w in ins.wait:
                    core.instructions[i] = replace(ins, wait=tuple(x for x in ins.wait if x != w))
                    yield f"{kernel.name} instruction {ins.index} wait {w}"
                    core.instructions[i] = ins
    for st in program.streams:
        for j, step in enumerate(list(st.steps)):
            if step.kind == "wait":
                del st.steps[j]
                yield f"stream {st.name} step {j} wait {step.arg}"
                st.steps.insert(j, step)


@pytest.mark.parametrize("name", SMALL)
def test_the_bundled_trace_agrees_with_the_reference(name):
    assert agree(load(TRACES / f"{name}.yaml"), name) is False  # race-free by both


@pytest.mark.parametrize("name", SMALL)
def test_dropping_each_wait_agrees_with_the_reference(name):
    program = load(TRACES / f"{name}.yaml")
    outcomes = [agree(program, what) for what in dropped(program)]
    assert outcomes and any(outcomes)  # some wait was the only order of two accesses


def test_dropping_sampled_waits_of_the_llama_trace_agrees_with_the_reference_nearby():
    """The Llama trace is too big for the quadratic reference: for waits sampled across both
    cores' lists, every race reported is real, and a real race between the waiter and an
    instruction near it (±24 in the list) is reported."""
    program = load(TRACES / "llama70b_layer_timing.yaml")
    kernel = next(iter(program.kernels.values()))
    checked = raced = 0
    for core in kernel.per_core:
        instrs = core.instructions
        waiters = [i for i, ins in enumerate(instrs) if ins.wait]
        for i in waiters[:: max(1, len(waiters) // 2)][:2]:
            ins = instrs[i]
            instrs[i] = replace(ins, wait=ins.wait[1:])
            try:
                got, _ = checker(program)
                pairs = got.get(kernel.name, set())
                for pair in sorted(pairs, key=sorted)[:3]:
                    a, b = (instrs[x] for x in sorted(pair))
                    assert _unordered(program, core, a, b), (ins.index, sorted(pair))
                near = instrs[max(0, i - 24) : i + 24]
                real = [
                    x
                    for x in near
                    if x is not instrs[i] and _unordered(program, core, instrs[i], x)
                ]
                assert bool(real) <= bool(pairs), (ins.index, [x.index for x in real])
                checked += 1
                raced += bool(pairs)
            finally:
                instrs[i] = ins
    assert checked >= 4 and raced >= 1


def _unordered(program, core, a, b) -> bool:
    acc = [ref.accesses(x, program, core.tiles) for x in (a, b)]
    if not ref.conflict(*acc):
        return False
    return id(b) in ref.reach_without(core.instructions, a, core.tiles) and id(
        a
    ) in ref.reach_without(core.instructions, b, core.tiles)
