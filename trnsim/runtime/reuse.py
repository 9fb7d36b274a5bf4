"""Timeline reuse: a timing launch that starts on an idle chip, in a state already seen, replays
the timeline its first run recorded instead of simulating it again.

What a launch does on the clock depends only on the program, its tensors' places, the chip, the
physical cores it runs on, the state the chip is in when it starts and what else runs meanwhile.
A launch that computes no values (timing mode, or `timing_only`) and starts when nothing else is
in flight on the chip (no other stream has work, no launch or transfer in flight, no HBM
traffic) is keyed by all of the first five: the lowered kernel (the object the lowering cache
returns), each tensor's memory, offset, shape and dtype, the logical core, and the state the
chip carries from launch to launch (each PE array's warm-up, the last HBM rates sampled). The
first launch of a key is simulated and recorded (`Recorder.capture`); the next ones hold the
core for its duration and insert its timeline shifted to their start (`Recorder.replay`), and
leave the chip in the state the first one left it in.

The last condition (nothing else runs meanwhile) is watched, not foreseen: while a recorded or
replayed launch runs, another stream starting an item (`ReuseState.item_starts`) spoils a
recording (it is not kept) and a replay: a replay cannot be undone, so it raises `ReuseConflict`
and the run starts over without reusing that launch (`trnsim.runtime.session`). The reuse count
is `ReuseState.replays`; TRNSIM_REUSE=0 in the environment turns reuse off (docs/runtime.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from trnsim.memory.onchip import in_use
from trnsim.report.recorder import Timeline


class ReuseConflict(Exception):
    """Work of another stream started during the replayed launch number `ordinal`."""

    def __init__(self, ordinal: int):
        super().__init__(ordinal)  # SimPy may raise a copy made from the args
        self.ordinal = ordinal

    def __str__(self) -> str:
        return f"reused launch {self.ordinal} overlapped other work"


def enabled() -> bool:
    """Reuse is on unless TRNSIM_REUSE=0."""
    return os.environ.get("TRNSIM_REUSE", "1") != "0"


@dataclass
class _Entry:
    """A recorded launch: its timeline and duration, per physical core its tiles and their
    SBUF/PSUM bytes, and the state it left the chip in (warm-ups relative to its start, the HBM
    rates last sampled)."""

    kernel: object  # kept so that its id, in the key, stays its own
    timeline: Timeline
    duration: int
    tiles: list
    tile_bytes: list
    warm: list
    sampled: tuple


@dataclass
class ReuseState:
    """The recorded launches of one run (kept across its restarts), and what is running."""

    deny: set = field(default_factory=set)  # ordinals that must be simulated
    cache: dict = field(default_factory=dict)
    replays: int = 0
    recordings: int = 0
    ordinal: int = 0  # eligible launches so far in this attempt
    _window: tuple | None = None  # (stream, end ps or None while recording, ordinal)
    _spoilt: bool = False

    def restart(self) -> None:
        """A new attempt of the same run: the cache stays."""
        self.ordinal, self.replays, self.recordings = 0, 0, 0
        self._window, self._spoilt = None, False

    def item_starts(self, stream, now: int) -> None:
        """`stream` starts an item at `now` (`Stream._drain`)."""
        w = self._window
        if w is None or w[0] is stream:
            return
        if w[1] is None:
            self._spoilt = True
        elif now <= w[1]:
            raise ReuseConflict(w[2])

    def run(self, ctx, stream, kernel, tensors: dict, simulate):
        """Run a launch on `stream` (its core is held): replayed, recorded or just simulated
        (`simulate()`, a generator)."""
        cores = ctx.chip.physical(stream.core)[: len(kernel.per_core)]  # the ones it runs on
        key = self._key(ctx, stream, kernel, tensors, cores)
        if key is None:
            yield from simulate()
            return
        self.ordinal += 1
        entry = self.cache.get(key)
        if entry is not None and self.ordinal not in self.deny:
            yield from self._replay(ctx, stream, kernel, cores, entry)
            return
        rec, start = ctx.recorder, ctx.env.now
        mark = rec.mark()
        self._window, self._spoilt = (stream, None, self.ordinal), False
        yield from simulate()
        self._window = None
        if self._spoilt or entry is not None:
            return
        self.recordings += 1
        self.cache[key] = _Entry(
            kernel,
            rec.capture(mark, start),
            ctx.env.now - start,
            [ctx.kernel_tiles[(kernel.name, c.index)] for c in cores],
            [(rec_bytes(ctx, kernel, c, "sbuf"), rec_bytes(ctx, kernel, c, "psum")) for c in cores],
            [_warmth(c, start, relative=True) for c in cores],
            ctx.chip.dma.sampled,
        )

    def _replay(self, ctx, stream, kernel, cores, entry: _Entry):
        env, rec = ctx.env, ctx.recorder
        start = env.now
        for core, tiles, (sbuf, psum) in zip(cores, entry.tiles, entry.tile_bytes):
            ctx.kernel_tiles[(kernel.name, core.index)] = tiles
            rec.peak("sbuf", sbuf)
            rec.peak("psum", psum)
        self._window = (stream, start + entry.duration, self.ordinal)
        yield env.timeout(entry.duration)
        self._window = None
        self.replays += 1
        rec.replay(entry.timeline, start)
        for core, warm in zip(cores, entry.warm):
            if core.warmup is not None:
                core.warmup.w, core.warmup.free = warm[0], start + warm[1]
        ctx.chip.dma.sampled = entry.sampled
        rec.launch(kernel.name, tuple(c.index for c in cores), start, env.now)

    def _key(self, ctx, stream, kernel, tensors: dict, cores) -> tuple | None:
        """The launch's key, or None when it cannot be reused: the chip is not idle, or a
        transfer may start the instant it is submitted (then an HBM sample at the launch's
        start or end could merge with another's, `Recorder.hbm_sample`)."""
        dma, now = ctx.chip.dma, ctx.env.now
        if ctx.launches or len(ctx.busy) != 1 or stream not in ctx.busy:
            return None
        if not dma.idle() or not dma.starts_later:
            return None
        if ctx.recorder.last_sample_ps() > now:
            return None
        places = tuple((n, b.memory, b.offset, b.shape, b.dtype.name) for n, b in tensors.items())
        warm = tuple(_warmth(c, now) for c in cores)
        return (id(kernel), stream.core, places, warm, dma.sampled)


def rec_bytes(ctx, kernel, core, memory: str) -> int:
    """Bytes of `memory` the tiles of `kernel`'s last launch on `core` take."""
    return in_use(ctx.kernel_tiles[(kernel.name, core.index)].values(), memory)


def _warmth(core, now: int, relative: bool = False):
    """A PE array's warm-up state at `now`: None without warm-up; "cold" once it has cooled
    fully (it then behaves the same whenever it last ran); else (warmth, ps since its last
    instruction ended) (`relative`: (warmth, end of its last instruction - now), to restore)."""
    wu = core.warmup
    if wu is None:
        return None
    if relative:
        return (wu.w, wu.free - now)
    if wu.w == 0.0 or (now > wu.free and wu.w - (now - wu.free) / wu.t <= 0.0):
        return "cold"
    return (wu.w, now - wu.free)
