"""The race check across the cores of an LNC 2 launch (trnsim.trace.races.barriers): a
core_barrier orders what one core completed before its nth barrier before what the other does
after its nth; nothing else orders the two cores."""

import pytest

from trnsim.trace import loads
from trnsim.trace.races import find_races

HEAD = """
trnsim: 1
lnc: 2
tensors:
  x: {shape: [128, 64], dtype: float32}
  y: {shape: [128, 64], dtype: float32}
kernels:
  k:
    tiles:
      t: {memory: sbuf, shape: [128, 64], dtype: float32}
    per_core:
"""

STORE = """
- {op: memset, dst: t, signal: {m: 1}}
- {op: dma_copy, src: t, dst: y, wait: {m: 1}, signal: {st: 1}}
"""
LOAD = "- {op: dma_copy, src: y, dst: t, wait: {met: 1}}"


def prog(core0: str, core1: str):
    text = HEAD
    for body in (core0, core1):
        text += "      - " + body.strip().replace("\n", "\n        ") + "\n"
    return loads(text, "r.yaml")


def races(core0, core1):
    return [r.message for r in find_races(prog(core0, core1))]


BAR = "- {op: core_barrier, data: y, wait: {st: 1}}"
MEET = "- {op: core_barrier, data: y, signal: {met: 1}}"


def test_a_store_before_the_barrier_and_a_load_after_it_on_the_other_core_do_not_race():
    assert races(STORE + BAR, MEET + "\n" + LOAD) == []


def test_without_the_barrier_they_race_naming_both_cores():
    (msg,) = races(STORE, LOAD.replace("wait: {met: 1}", ""))
    assert "(core0)" in msg and "(core1)" in msg and "(tensor y)" in msg


@pytest.mark.parametrize(
    "core0,why",
    [
        (STORE + "- {op: core_barrier, data: y}", "the barrier does not wait for the store"),
        (
            STORE.replace(", signal: {st: 1}", "") + BAR.replace(", wait: {st: 1}", ""),
            "the store signals nothing: never known complete",
        ),
        ("- {op: core_barrier, data: y}\n" + STORE.strip(), "the store is after the barrier"),
    ],
)
def test_an_access_not_known_complete_before_the_barrier_still_races(core0, why):
    assert len(races(core0, MEET + "\n" + LOAD)) == 1, why


def test_a_load_not_after_the_barrier_still_races():
    # core 1's load does not wait for its barrier (another engine's queue runs on)
    assert len(races(STORE + BAR, MEET + "\n" + LOAD.replace("wait: {met: 1}", ""))) == 1


def test_the_nth_barrier_orders_only_with_the_nth():
    # core 0 stores after its 1st barrier, before its 2nd; core 1 loads after its 1st only
    core0 = "- {op: core_barrier, data: y}\n" + STORE.strip() + "\n" + BAR
    core1 = MEET + "\n" + LOAD + "\n- {op: core_barrier, data: y}"
    assert len(races(core0, core1)) == 1
    core1 = "- {op: core_barrier, data: y}\n" + MEET + "\n" + LOAD  # loads after its 2nd
    assert races(core0, core1) == []


def test_the_barriers_data_is_not_an_access():
    # both name y, neither reads nor writes it: no race between the barriers themselves
    assert races("- {op: core_barrier, data: y}", STORE + "- {op: core_barrier, data: y}") == []


def test_a_barrier_the_other_core_cannot_reach_is_a_deadlock_before_running():
    from trnsim.errors import DeadlockError
    from trnsim.trace.races import check_deadlocks

    two = "- {op: core_barrier, data: y}\n- {op: core_barrier, data: y, engine: vector}"
    with pytest.raises(DeadlockError, match=r"r.yaml:13 kernel k queue core0.vector instruction "
                       r"1 \(core_barrier\) waits at core_barrier 2 for core1's, which it never "
                       r"reaches$"):  # fmt: skip
        check_deadlocks(prog(two, "- {op: core_barrier, data: y}"))


def test_a_cycle_through_the_barriers_is_a_deadlock_naming_both_cores():
    # core 0's 2nd barrier waits for its 1st; core 1's 1st waits for its 2nd: neither pair meets
    from trnsim.errors import DeadlockError

    core0 = """
- {op: core_barrier, data: y, signal: {t: 1}}
- {op: core_barrier, data: y, engine: vector, wait: {t: 1}}
"""
    core1 = """
- {op: core_barrier, data: y, engine: vector, wait: {s: 1}}
- {op: core_barrier, data: y, signal: {s: 1}}
"""
    with pytest.raises(DeadlockError) as e:
        find_races(prog(core0, core1))
    msg = str(e.value)
    assert "core0.gpsimd instruction 0 (core_barrier) waits at core_barrier 1 for core1's" in msg
    assert "core0.vector instruction 1 (core_barrier) waits for semaphore 't' >= 1" in msg
    assert "core1.gpsimd instruction 1 (core_barrier) waits at core_barrier 2 for core0's" in msg
    assert "core1.vector instruction 0 (core_barrier) waits for semaphore 's' >= 1" in msg
    text = HEAD + "      - " + core0.strip().replace("\n", "\n        ") + "\n"
    text += "      - " + core1.strip().replace("\n", "\n        ") + "\n"
    from trnsim.config import load_chip
    from trnsim.runtime.session import run_program

    with pytest.raises(DeadlockError, match="core1.gpsimd in kernel k waits for core0 to reach"):
        run_program(loads(text, "r.yaml"), load_chip("trn2"))  # the run agrees


def test_a_kernel_with_one_cores_list_has_no_core_to_meet():
    from trnsim.errors import DeadlockError
    from trnsim.trace.races import check_deadlocks

    text = HEAD.replace(
        "    per_core:\n", "    instructions:\n      - {op: core_barrier, data: y}\n"
    )
    with pytest.raises(DeadlockError, match=r"r.yaml:12 kernel k queue core0.gpsimd instruction "
                       r"0 \(core_barrier\) waits at core_barrier 1 for core1's, which it never "
                       r"reaches \(the kernel has no list for it: give per_core both\)$"):  # fmt: skip
        check_deadlocks(loads(text, "r.yaml"))
    check_deadlocks(loads(text.replace("lnc: 2", "lnc: 1"), "r.yaml"))  # the run refuses it
