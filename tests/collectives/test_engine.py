"""The engine's API: matching by group and sequence, deadlocks and order errors named,
determinism, what-ifs (a straggler, a degraded link, jobs sharing links)."""

import re

import pytest

from tests.collectives.helpers import A, B, C, close, switch_world, torus_world
from trnsim.errors import DeadlockError, TrnsimError

S = 16 << 20


def test_a_rank_that_never_arrives_is_named():
    w = torus_world((4,))
    for r in (0, 1, 3):
        w.post(r, "all_reduce", range(4), S)
    with pytest.raises(
        DeadlockError, match=r"all_reduce #0 on group \(0, 1, 2, 3\): ranks \(2\) never"
    ):
        w.run()


def test_ranks_issuing_collectives_in_different_orders_is_an_error():
    w = torus_world((2,))
    w.post(0, "all_reduce", (0, 1), S)
    w.post(0, "all_gather", (0, 1), S)
    with pytest.raises(
        TrnsimError,
        match=r"collective #0 on group \(0, 1\): rank 1 issued all_gather .* rank 0 issued all_reduce",
    ):
        w.post(1, "all_gather", (0, 1), S)


def test_sequence_numbers_match_collectives_per_group():
    """Two all-reduces in a row on one group: the second starts as it is posted (here at 0,
    sharing the links with the first), both complete."""
    w = torus_world((4,))
    hs = [w.post(r, "all_reduce", range(4), S) for _ in range(2) for r in range(4)]
    w.run()
    assert all(h.result is not None for h in hs)
    assert hs[0].seq == 0 and hs[4].seq == 1


def test_same_inputs_same_times_bit_for_bit():
    def once():
        w = torus_world((4, 4), rings=4, links_only=False, slices=2)
        r = w.collective("all_reduce", range(16), S, "bfloat16", algorithm="ring")
        return r.time_ps, r.rank_end_ps, r.link_bytes

    assert once() == once()


def test_a_straggler_delays_the_ring_by_its_delay():
    """Rank 2 starts 50 us late: nothing can pass it, so a ring all-reduce ends 50 us later."""
    w = torus_world((4,))
    base = w.collective("all_reduce", range(4), S, algorithm="ring")
    late = w.collective("all_reduce", range(4), S, algorithm="ring", start_delays=[0, 0, 50e-6, 0])
    assert late.time_ps - base.time_ps == 50_000_000


def test_a_degraded_link_slows_the_ring_it_is_on():
    """Link c1+x at B/4: the 1-D ring of 4 (one direction) is as slow as its slowest link:
    C + 2(N - 1)(A + S/(N B/4))."""
    w = torus_world((4,), link_bandwidth={"c1+x": B / 4})
    r = w.collective("all_reduce", range(4), S, algorithm="ring")
    assert close(r.time_ps, C + 2 * 3 * (A + S / (4 * B / 4)))
    with pytest.raises(TrnsimError, match=re.escape("no link named 'c1+z'; links are named like")):
        torus_world((4,), link_bandwidth={"c1+z": B})


def test_permute_needs_direct_links():
    w = torus_world((4, 4))
    with pytest.raises(
        TrnsimError, match=r"permute pair \(0, 5\): chips 0 and 5 are not neighbours"
    ):
        w.collective("permute", range(16), 1024, pairs=((0, 5),))


def test_permute_on_a_switch_takes_any_pairs_of_its_chips():
    """A switched fabric joins every pair of chips through one switch: no ring of direct
    links to find (a route's up and down ports were counted as two hops)."""
    w = switch_world(8)
    r = w.collective("permute", range(8), 1024, pairs=((0, 5), (5, 2), (2, 0)))
    assert r.time_ps > 0


def test_forcing_an_algorithm_that_cannot_run_says_why():
    w = torus_world((3,))
    with pytest.raises(
        TrnsimError, match="rdh cannot run all_reduce on 3 ranks: 3 ranks is not a power of 2"
    ):
        w.collective("all_reduce", range(3), S, algorithm="rdh")
    with pytest.raises(TrnsimError, match="kangaring cannot run"):
        w.collective("all_reduce", range(3), S, algorithm="kangaring")
