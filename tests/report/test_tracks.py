"""The one enumeration of timeline tracks: names, order, Perfetto ids and labels, and the core's
use of that order."""

from types import SimpleNamespace

import pytest

from trnsim.core.run import deadlock_error
from trnsim.isa import Engine
from trnsim.report.tracks import (
    ENGINE_TRACKS,
    HOST,
    LANE_STRIDE,
    display_name,
    dma_engine_id,
    dma_queue,
    dma_track,
    engine_track,
    is_dma,
    lane_id,
    lane_name,
    lane_of,
    lane_sort_index,
    track_id,
)


def test_engine_tracks_in_engine_order():
    assert ENGINE_TRACKS == ("tensor", "vector", "scalar", "gpsimd")
    assert [engine_track(e) for e in Engine if e is not Engine.DMA] == list(ENGINE_TRACKS)


def test_dma_tracks():
    assert dma_track(0) == "q0" and dma_track(15) == "q15"
    assert dma_queue("q15") == 15
    assert is_dma("q3") and not is_dma("tensor") and not is_dma(HOST)
    with pytest.raises(ValueError, match="not a DMA queue"):
        dma_queue("vector")


def test_ids_are_perfetto_thread_ids():
    assert {t: track_id(t) for t in (*ENGINE_TRACKS, HOST, "q0", "q2", "q10")} == {
        "tensor": 0,
        "vector": 1,
        "scalar": 2,
        "gpsimd": 3,
        "host": 99,
        "q0": 100,
        "q2": 102,
        "q10": 110,
    }


def test_order_is_engines_host_then_queues_by_number():
    tracks = ["q10", "host", "q2", "gpsimd", "tensor", "scalar", "q0", "vector"]
    assert sorted(tracks, key=track_id) == [
        "tensor",
        "vector",
        "scalar",
        "gpsimd",
        "host",
        "q0",
        "q2",
        "q10",
    ]


def test_display_names():
    assert [display_name(t) for t in ("tensor", "gpsimd", "q3", HOST)] == [
        "tensor",
        "gpsimd",
        "dma q3",
        "host copies",
    ]


def test_display_lanes_of_a_row():
    """Lane 0 is the row itself; later lanes get their own ids and sort right below it."""
    q3, q4 = track_id("q3"), track_id("q4")
    assert [lane_id(q3, n) for n in range(3)] == [q3, q3 + LANE_STRIDE, q3 + 2 * LANE_STRIDE]
    assert [lane_of(lane_id(q3, n)) for n in range(3)] == [(q3, 0), (q3, 1), (q3, 2)]
    assert lane_of(lane_id(dma_engine_id(15), 7)) == (dma_engine_id(15), 7)
    order = [lane_sort_index(q3, 0), lane_sort_index(q3, 1), lane_sort_index(q3, 9)]
    assert order == sorted(order) and order[-1] < lane_sort_index(q4, 0)
    assert [lane_name("dma q3", n) for n in range(3)] == ["dma q3", "dma q3 #2", "dma q3 #3"]
    with pytest.raises(ValueError, match="row id"):
        lane_id(LANE_STRIDE, 1)


def test_deadlock_report_lists_queues_in_track_order():
    sems = SimpleNamespace(names=["a", "b", "c", "d"], values=[0, 1, 2, 3])
    launch = SimpleNamespace(
        core=1,
        kernel="k",
        sems=sems,
        blocked={"q10": (0, 1), "q2": (1, 2), "vector": (2, 3), "tensor": (3, 4), "q3": None},
    )
    msg = str(deadlock_error([launch]))
    order = [msg.index(f"core1.{t} ") for t in ("tensor", "vector", "q2", "q10")]
    assert order == sorted(order)
    assert "core1.q3" not in msg  # waiting for its own transfers, not on a semaphore
    assert "core1.q2 in kernel k waits for semaphore 'b' >= 2 (it is 1)" in msg
