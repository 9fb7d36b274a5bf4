"""The timeline's tracks, named and ordered in one place.

A span's `track` is a string: an engine's name ("tensor", "vector", "scalar", "gpsimd": its
`Engine` label), "q<N>" for DMA queue N of a core, or "host" for host<->device copies (timed by
the stream that issued them). `track_id` orders them: the engines by their `Engine` value (0-3),
then the host track (99), then the DMA queues by number (100 + N). The core starts its queues
and reports deadlocks in that order, and Perfetto uses it as the thread id and order; its
DMA-engine rows (data movement per engine, not spans) come after them (`dma_engine_id`).

A row whose slices overlap (a DMA queue's transfers in flight, a DMA engine's shared ones) is
drawn as display lanes (`report.lanes`): lane 0 keeps the row's id and name, lane L >= 1 is
"<name> #<L+1>" with id `lane_id`, sorted right below the row (`lane_sort_index`).
"""

from __future__ import annotations

from trnsim.isa import Engine

ENGINE_TRACKS = tuple(e.label for e in Engine if e is not Engine.DMA)
HOST = "host"
HOST_ID = 99
DMA_ID_BASE = 100  # queue N is track id DMA_ID_BASE + N
DMA_ENGINE_ID_BASE = 1000  # DMA engine E's Perfetto row is DMA_ENGINE_ID_BASE + E
LANE_STRIDE = 10_000  # lane L of row id T is thread id T + L * LANE_STRIDE (row ids are below)
_DMA_PREFIX = "q"
_ENGINE_IDS = {e.label: int(e) for e in Engine if e is not Engine.DMA}


def engine_track(engine: Engine) -> str:
    """The track of an engine's instructions."""
    return engine.label


def dma_track(queue: int) -> str:
    """The track of DMA queue `queue` (of some core): "q<queue>"."""
    return f"{_DMA_PREFIX}{queue}"


def is_dma(track: str) -> bool:
    return track.startswith(_DMA_PREFIX)


def dma_queue(track: str) -> int:
    """The queue number of a DMA track: 3 for "q3"."""
    if not is_dma(track):
        raise ValueError(f"track '{track}' is not a DMA queue")
    return int(track[len(_DMA_PREFIX) :])


def track_id(track: str) -> int:
    """The track's place in the order above; also its Perfetto thread id."""
    if track in _ENGINE_IDS:
        return _ENGINE_IDS[track]
    if track == HOST:
        return HOST_ID
    return DMA_ID_BASE + dma_queue(track)


def dma_engine_id(engine: int) -> int:
    """The Perfetto thread id (and place in order) of a core's DMA engine `engine`."""
    return DMA_ENGINE_ID_BASE + engine


def display_name(track: str) -> str:
    """How a timeline viewer labels the track: "tensor", "dma q3", "host copies"."""
    if track == HOST:
        return "host copies"
    if is_dma(track):
        return f"dma {track}"
    return track


def lane_id(row: int, lane: int) -> int:
    """The Perfetto thread id of display lane `lane` of the row with id `row` (lane 0: `row`
    itself, so a row without overlaps keeps its id)."""
    if not 0 <= row < LANE_STRIDE:
        raise ValueError(f"row id {row}: expected 0 <= id < {LANE_STRIDE}")
    return row + lane * LANE_STRIDE


def lane_of(tid: int) -> tuple[int, int]:
    """The (row id, lane) of a Perfetto thread id: `lane_id` undone."""
    lane, row = divmod(tid, LANE_STRIDE)
    return row, lane


def lane_sort_index(row: int, lane: int) -> int:
    """The lane's sort index: the lanes of a row next to each other, rows in id order."""
    if not 0 <= lane < LANE_STRIDE:
        raise ValueError(f"lane {lane}: expected 0 <= lane < {LANE_STRIDE}")
    return row * LANE_STRIDE + lane


def lane_name(name: str, lane: int) -> str:
    """The lane's label: "dma q3" for lane 0, then "dma q3 #2", "dma q3 #3", ..."""
    return f"{name} #{lane + 1}" if lane else name
