"""trace.races on a system (docs/races.md, "Collectives"): each rank has its own memory, a
collective orders the streams of its group's ranks both ways and accesses its tensors, a group
some rank never reaches is a deadlock and ranks issuing a group's collectives in different
orders an error, both before running; a rank issuing on a group from two streams leaves the
order to the run."""

import textwrap

import pytest

from trnsim.config import load_system
from trnsim.errors import DeadlockError, TraceError
from trnsim.trace import loads
from trnsim.trace.races import check_deadlocks, find_races
from trnsim.trace.ranks import place

SYSTEM = load_system("trn2-48xl")

HEAD = """\
trnsim: 1
tensors:
  g: {shape: [128, 64], dtype: float32}
  x: {shape: [128, 64], dtype: float32}
kernels:
  write_g:
    tiles: {t: {memory: sbuf, shape: [128, 64], dtype: float32}}
    instructions:
      - {op: memset, dst: t, value: 1.0, signal: {m: 1}}
      - {op: dma_copy, src: t, dst: g, queue: 0, wait: {m: 1}}
  read_g:
    tiles: {t: {memory: sbuf, shape: [128, 64], dtype: float32}}
    instructions: [{op: dma_copy, src: g, dst: t, queue: 0}]
streams:
"""
AR = "{collective: {op: all_reduce, group: [0, 1], tensor: g}}"


def program(streams: str, placed: bool = True):
    p = loads(HEAD + textwrap.dedent(streams), source="t.yaml")
    return place(p, SYSTEM) if placed else p


def races(streams: str, placed: bool = True) -> list[str]:
    return [r.message for r in find_races(program(streams, placed), library=False)]


def test_ranks_have_their_own_memory():
    two = """\
        - {name: a, core: 0, do: [launch: write_g]}
        - {name: b, core: 1, do: [launch: write_g]}
        """
    assert races(two) == []  # ranks 0 and 1: two copies of g
    (msg,) = races(two, placed=False)  # one chip: one g
    assert "stream a" in msg and "stream b" in msg and "(tensor g)" in msg


def test_a_collective_accesses_its_tensor():
    (msg,) = races(f"""\
        - {{name: c0, rank: 0, do: [launch: read_g]}}
        - {{name: m0, rank: 0, do: [{AR}]}}
        - {{name: m1, rank: 1, do: [{AR}]}}
        """)
    assert msg.startswith("race: t.yaml:13 kernel read_g queue q0 instruction 0 (dma_copy) "
                          "(stream c0) and t.yaml:16 collective all_reduce (stream m0)")  # fmt: skip


def test_a_collective_orders_its_ranks_streams_both_ways():
    # rank 0's compute writes g, rank 1 waits for it and then joins the collective on g that
    # rank 0's comm stream runs: ordered through rank 1 (what precedes a collective on any rank
    # precedes it on every rank)
    before = f"""\
        - {{name: c0, rank: 0, do: [launch: write_g, record: e]}}
        - {{name: m0, rank: 0, do: [{AR}]}}
        - {{name: m1, rank: 1, do: [wait: e, {AR}]}}
        """
    assert races(before) == []
    assert len(races(before.replace("wait: e, ", "record: f, "))) == 1
    # after it: rank 0's compute reads g once rank 1 has passed the collective
    after = f"""\
        - {{name: m0, rank: 0, do: [{AR}]}}
        - {{name: m1, rank: 1, do: [{AR}, record: done]}}
        - {{name: c0, rank: 0, do: [wait: done, launch: read_g]}}
        """
    assert races(after) == []
    assert len(races(after.replace("wait: done, ", ""))) == 1


def test_a_group_some_rank_never_reaches_is_a_deadlock():
    p = program(f"""\
        - {{name: m0, rank: 0, do: [{AR}]}}
        - {{name: m1, rank: 1, do: [launch: write_g]}}
        """)
    with pytest.raises(DeadlockError) as e:
        check_deadlocks(p)
    assert str(e.value) == (
        "deadlock: t.yaml:15 collective all_reduce #0 on group (0, 1): ranks (1) never reach "
        "it; ranks (0) wait at it (streams m0)"
    )


def test_a_collective_and_a_wait_in_a_cycle():
    p = program(f"""\
        - {{name: m0, rank: 0, do: [wait: e, {AR}]}}
        - {{name: m1, rank: 1, do: [{AR}, record: e]}}
        """)
    with pytest.raises(DeadlockError) as e:
        find_races(p)
    msg = str(e.value)
    assert "t.yaml:15 stream m0 waits for event 'e', which only stream m1 records" in msg
    assert "t.yaml:16 collective all_reduce #0 on group (0, 1): ranks (0) never reach it" in msg


def test_ranks_issuing_in_different_orders():
    ag = "{collective: {op: all_gather, group: [0, 1], tensor: g}}"
    p = program(f"""\
        - {{name: m0, rank: 0, do: [{AR}, {ag}]}}
        - {{name: m1, rank: 1, do: [{ag}, {AR}]}}
        """)
    with pytest.raises(TraceError) as e:
        check_deadlocks(p)
    assert str(e.value) == (
        "t.yaml:16: collective #0 on group (0, 1): rank 1 issues all_gather of 32768 bytes of "
        "float32 but rank 0 issues all_reduce of 32768 bytes of float32 (sum) (line 15); "
        "expected the ranks of a group to issue its collectives in the same order"
    )


def test_a_rank_on_two_streams_leaves_the_order_to_the_run():
    p = program(f"""\
        - {{name: a0, rank: 0, do: [{AR}]}}
        - {{name: b0, rank: 0, do: [{AR}]}}
        - {{name: m1, rank: 1, do: [{AR}]}}
        """)
    check_deadlocks(
        p
    )  # no static meeting: nothing blocks (rank 1 lacks a second one: the run says)
    assert len(find_races(p, library=False)) == 1  # a0 and b0 both write rank 0's g, unordered
