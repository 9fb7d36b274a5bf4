"""Running a launch: a NeuronCore's engine and DMA queues as in-order SimPy processes.

The plan (`trnsim.core.plan`) did the binding, checking and costing; the loops here only wait on
semaphores, compute values, advance the clock, record spans and signal.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import simpy

from trnsim.config import ChipConfig
from trnsim.core.link import CoreLink
from trnsim.core.plan import Issue, Launch, Planner
from trnsim.engines.warmup import Warmup
from trnsim.errors import DeadlockError
from trnsim.isa import Engine
from trnsim.report.recorder import Recorder, Span
from trnsim.report.tracks import dma_queue, is_dma, track_id
from trnsim.trace.program import CoreProgram
from trnsim.units import seconds_to_ps

TENSOR = Engine.TENSOR.label


class NeuronCore:
    """One physical NeuronCore on a chip's SimPy environment: plans launches, then runs them."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        cfg: ChipConfig,
        dma,
        recorder: Recorder,
        functional: bool,
        link: CoreLink | None = None,
    ):
        self.env, self.index, self.cfg, self.dma = env, index, cfg, dma
        self.recorder, self.functional = recorder, functional
        self.link = link  # to the other core of its LNC 2 logical core (core_barrier)
        self.planner = Planner(env, index, cfg, dma, functional, link is not None)
        t = cfg.core.tensor
        self.warmup = (
            Warmup(t.warmup_start_rate, seconds_to_ps(t.warmup_time))
            if t.warmup and t.warmup_start_rate < 1
            else None
        )
        self._timing_planner: Planner | None = None  # for timing-only launches on a functional chip

    def prepare(
        self,
        kernel: str,
        prog: CoreProgram,
        tensors: dict,
        rng: np.random.Generator,
        source: str = "",
        timing_only: bool = False,
    ) -> Launch:
        """The launch of `prog` on this core, planned (see `Planner.prepare`). A `timing_only`
        launch computes no values (its tiles have none), even on a functional chip."""
        planner = self.planner
        if timing_only and self.functional:
            if self._timing_planner is None:
                self._timing_planner = Planner(
                    self.env, self.index, self.cfg, self.dma, False, self.link is not None
                )
            planner = self._timing_planner
        return planner.prepare(kernel, prog, tensors, rng, source)

    def start(self, launch: Launch) -> simpy.Event:
        """Start every queue of the launch; the returned event fires when all have finished."""
        env = self.env
        if launch.barriers:
            launch.first_barrier = self.link.begin(self.index, launch.barriers)
        procs = []
        for track, issues in sorted(launch.queues.items(), key=lambda kv: track_id(kv[0])):
            if is_dma(track):
                procs.append(env.process(self._dma_queue(launch, track, issues)))
            else:
                procs.append(env.process(self._engine_queue(launch, track, issues)))
        return env.all_of(procs)

    def _engine_queue(self, launch: Launch, track: str, issues: list[Issue]):
        """Run one engine's instructions in order.

        A block is an instruction followed by every next one that neither waits, nor holds a
        shared port, up to and including the first that signals: nothing can observe the
        instants inside a block, so it costs one SimPy timeout however long it is. Values are
        computed, in order, when the block starts. An instruction with a `stall` starts no
        sooner than that long after the previous one's end; on the tensor track of a core with
        warm-up, durations are stretched by `Warmup` as the block is laid out."""
        if track == TENSOR and self.warmup is not None:
            yield from self._warm_queue(launch, track, issues)
            return
        env, sems, core, kernel = self.env, launch.sems, self.index, launch.kernel
        add_span = self.recorder.add_span
        timeout = env.timeout
        values = sems.values
        n, i, last = len(issues), 0, 0
        while i < n:
            it = issues[i]
            for s, v in it.waits:
                if values[s] < v:
                    launch.blocked[track] = (s, v, it)
                    yield sems.wait(s, v)
                    del launch.blocked[track]
            if it.barrier >= 0:
                last = yield from self._barrier(launch, track, it)
                i += 1
                continue
            req = None
            if it.port is not None:
                req = it.port.request()
                yield req
            j, dur = i + 1, it.dur
            if req is None and not it.signals:
                while j < n:
                    nxt = issues[j]
                    if nxt.waits or nxt.port is not None or nxt.barrier >= 0:
                        break
                    dur += nxt.stall + nxt.dur
                    j += 1
                    if nxt.signals:
                        break
            start = env.now
            gap = last + it.stall - start if it.stall else 0
            if gap > 0:
                dur += gap
            for k in range(i, j):
                it = issues[k]
                if it.run is not None:
                    it.run(it.ins)
            yield timeout(dur)
            if req is not None:
                issues[i].port.release(req)
            t = start if gap <= 0 else start + gap
            for k in range(i, j):
                it = issues[k]
                if k > i:
                    t += it.stall
                add_span(
                    Span(
                        core,
                        track,
                        it.op,
                        t,
                        t + it.dur,
                        it.nbytes,
                        it.flops,
                        it.index,
                        kernel,
                        it.dtype,
                    )
                )
                t += it.dur
            last = t
            for s, n_ in it.signals:
                sems.signal(s, n_)
            i = j

    def _barrier(self, launch: Launch, track: str, it: Issue):
        """Meet the other core at core_barrier `it` (`core.link`), signal; return the release
        time. Its span is the crossing (at most the link's latency, up to the release): the
        wait for the other core before it is idle time, like a semaphore wait's."""
        env, arrived = self.env, self.env.now
        n = launch.first_barrier + it.barrier
        wake = self.link.arrive(self.index, n)
        if wake is not None:
            launch.blocked[track] = (self.link, n, it)
            yield wake
            del launch.blocked[track]
        start = max(arrived, env.now - self.link.latency)
        self.recorder.add_span(
            Span(self.index, track, it.op, start, env.now, 0, 0, it.index, launch.kernel, "")
        )
        for s, n_ in it.signals:
            launch.sems.signal(s, n_)
        return env.now

    def _warm_queue(self, launch: Launch, track: str, issues: list[Issue]):
        """`_engine_queue` for a PE array with warm-up: one instruction at a time (each one's
        duration depends on when it starts), one timeout per run of instructions that neither
        wait nor signal."""
        env, sems, core, kernel = self.env, launch.sems, self.index, launch.kernel
        add_span, stretch = self.recorder.add_span, self.warmup.stretch
        values = sems.values
        n, i = len(issues), 0
        while i < n:
            it = issues[i]
            for s, v in it.waits:
                if values[s] < v:
                    launch.blocked[track] = (s, v)
                    yield sems.wait(s, v)
                    del launch.blocked[track]
            t = start = env.now
            j = i
            while True:
                it = issues[j]
                if it.run is not None:
                    it.run(it.ins)
                dur = stretch(t, it.dur)
                add_span(
                    Span(
                        core,
                        track,
                        it.op,
                        t,
                        t + dur,
                        it.nbytes,
                        it.flops,
                        it.index,
                        kernel,
                        it.dtype,
                    )
                )
                t += dur
                j += 1
                if it.signals or j == n or issues[j].waits:
                    break
            yield env.timeout(t - start)
            for s, n_ in it.signals:
                sems.signal(s, n_)
            i = j

    def _dma_queue(self, launch: Launch, track: str, issues: list[Issue]):
        """Issue transfers in order; each signals its semaphores when it completes.

        The semaphore waits are inlined (no sub-generator per issue), and the completion
        callbacks are partials of one function (no closure per transfer)."""
        queue = dma_queue(track)
        done = self.env.event()
        sems, kernel, core, submit = launch.sems, launch.kernel, self.index, self.dma.submit
        values, blocked = sems.values, launch.blocked
        left = [len(issues)]

        def finished(issue: Issue) -> None:
            for s, n in issue.signals:
                sems.signal(s, n)
            left[0] -= 1
            if left[0] == 0:
                done.succeed()

        for it in issues:
            for s, v in it.waits:
                if values[s] < v:
                    blocked[track] = (s, v, it)
                    yield sems.wait(s, v)
                    del blocked[track]
            submit(core, queue, it.ins, kernel, partial(finished, it), it.index)
        if left[0]:
            blocked[track] = None  # waiting for its own transfers
            yield done
            blocked.pop(track, None)


def deadlock_error(launches: list[Launch], extra: list[str] = ()) -> DeadlockError:
    """Describe which queues are stuck on which semaphore, for a run whose event queue ran dry."""
    stuck = []
    for la in launches:
        for track, b in sorted(la.blocked.items(), key=lambda kv: track_id(kv[0])):
            if b is not None:
                s, v, it = b if len(b) == 3 else (*b, None)
                where = f"{la.source}:{it.line}: " if it is not None and it.line else ""
                at = f" at instruction {it.index} ({it.op})" if it is not None else ""
                what = (
                    s.stuck(la.core, v)
                    if isinstance(s, CoreLink)
                    else f"semaphore '{la.sems.names[s]}' >= {v} (it is {la.sems.values[s]})"
                )
                who = f"core{la.core}.{track} in kernel {la.kernel}"
                stuck.append(f"{where}{who} waits for {what}{at}")
    stuck += list(extra)
    return DeadlockError(
        "deadlock: nothing can run but work is pending: "
        + ("; ".join(stuck) or "no queue reports what it waits for")
    )
