"""Display lanes: the greedy assignment (fewest lanes, lowest free lane first, deterministic)
and the nesting check the Perfetto tests use."""

import random

from trnsim.report.lanes import assign, violations


def depth(intervals) -> int:
    """The most intervals in flight at one time t: those with start <= t < end, or with
    start < t < end and an instant at t (an instant only overlaps what runs across it)."""
    most = 0
    for t, _ in intervals:
        across = sum(a < t < b for a, b in intervals)
        most = max(most, sum(a <= t < b for a, b in intervals), across + ((t, t) in intervals))
    return most


def test_in_order_intervals_share_lane_zero():
    assert assign([]) == []
    assert assign([(0, 5), (5, 9), (9, 9), (9, 12), (20, 30)]) == [0, 0, 0, 0, 0]


def test_each_goes_to_the_lowest_lane_free_at_its_start():
    # a queue with three transfers in flight at 4; lane 0 frees first, at 6, lane 1 at 8
    got = assign([(0, 6), (2, 8), (4, 10), (6, 7), (7, 12), (8, 9)])
    assert got == [0, 1, 2, 0, 0, 1]


def test_lanes_are_given_in_input_order_and_ties_keep_it():
    assert assign([(4, 10), (0, 6), (2, 8)]) == [2, 0, 1]
    assert assign([(0, 3), (0, 3), (0, 3)]) == [0, 1, 2]
    # the shorter first at one start; an instant takes no lane from what starts with it
    assert assign([(0, 3), (0, 1), (0, 0), (1, 2)]) == [1, 0, 0, 0]


def test_random_intervals_fewest_lanes_each_without_overlap():
    rng = random.Random(7)
    for _ in range(200):
        ivs = []
        for _ in range(rng.randrange(1, 60)):
            a = rng.randrange(0, 100)
            ivs.append((a, a + rng.choice((0, 1, rng.randrange(1, 30)))))
        lanes = assign(ivs)
        assert max(lanes) + 1 == depth(ivs)
        for lane in set(lanes):
            mine = sorted(iv for iv, ln in zip(ivs, lanes) if ln == lane)
            assert all(b <= c for (_, b), (c, _) in zip(mine, mine[1:]))
        assert assign(ivs) == lanes  # the same input, the same lanes


def x(tid, ts, dur, pid=0):
    return {"ph": "X", "name": "s", "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def test_violations_are_partial_overlaps_on_one_thread():
    nested = [x(1, 0.0, 10.0), x(1, 2.0, 3.0), x(1, 2.5, 0.5), x(1, 5.0, 5.0), x(1, 10.0, 0.0)]
    assert violations(nested) == []
    a, b = x(1, 0.0, 4.0), x(1, 3.0, 4.0)
    assert violations({"traceEvents": [a, b, x(2, 3.0, 4.0), x(1, 3.0, 4.0, pid=1)]}) == [(a, b)]
    assert violations([x(1, 1.0, 1.0, pid=1), {"ph": "C", "name": "c", "pid": 1, "ts": 0}]) == []


def test_back_to_back_slices_in_whole_picoseconds_do_not_overlap():
    """0.1 + 0.2 > 0.3 in floating point: compared in ps, the slices only touch."""
    assert 0.1 + 0.2 > 0.3
    assert violations([x(1, 0.1, 0.2), x(1, 0.3, 0.1)]) == []
    assert violations([x(1, 0.1, 0.2), x(1, 0.299999, 0.1)]) != []  # one ps of overlap
