"""One simulated chip under the device API: its SimPy clock, parts, host threads and the runs.

Every `Device` (logical NeuronCore) of a chip shares one `ChipContext`: the HBM stacks, the DMA
system, the clock and the host. The device never runs ahead of what a synchronizing call needs:
`advance_to(t)` runs it up to the host's present (for `query`), `run_until(event)` until some
work completes (for `synchronize`), raising `DeadlockError` if nothing is left to run first.
"""

from __future__ import annotations

import math

import numpy as np
import simpy

from trnsim.chip import Chip
from trnsim.config import ChipConfig
from trnsim.core.plan import Launch
from trnsim.core.run import deadlock_error
from trnsim.errors import DeadlockError, TrnsimError
from trnsim.isa import DmaCopy, Engine
from trnsim.memory.buffer import Ref
from trnsim.report.recorder import Recorder
from trnsim.report.tracks import HOST
from trnsim.runtime.host import HostCosts, HostThread
from trnsim.runtime.reuse import ReuseState
from trnsim.runtime.stream import TimedKernel
from trnsim.units import fmt_bytes

# Values of tensors live in this machine's RAM in functional mode: a tensor that fits the chip's
# HBM may not fit here. Beyond this many bytes, runs must use timing mode.
MAX_BACKING_BYTES = 8 * 2**30


class ChipContext:
    """The shared state of the devices of one simulated chip."""

    def __init__(
        self,
        cfg: ChipConfig,
        mode: str = "functional",
        lnc: int | None = None,
        seed: int = 0,
        source: str = "",
    ):
        if mode not in ("functional", "timing"):
            raise TrnsimError(f"mode '{mode}': expected functional or timing")
        self.cfg, self.mode, self.source = cfg, mode, source  # source: the trace, for errors
        self.functional = mode == "functional"
        self.env = simpy.Environment()
        self.recorder = Recorder()
        self.chip = Chip(self.env, cfg, self.recorder, self.functional, lnc)
        self.rng = np.random.default_rng(seed)
        self.costs = HostCosts.from_config(cfg)
        self.threads: list[HostThread] = []
        self.host = self.thread("main")  # the thread making API calls now
        self.busy: dict = {}  # streams with work, in the order they became busy
        self.stream_count = 0
        self.launches: list[Launch] = []  # running now (for deadlock reports)
        self.kernel_tiles: dict[tuple[str, int], dict] = {}  # the last launch's tiles
        self.core_busy = [simpy.Resource(self.env, 1) for _ in range(self.chip.logical_cores)]
        self.progress = None  # callable(now_ps, events) called every 100,000 events
        self.max_backing_bytes = MAX_BACKING_BYTES
        self.backed = 0  # bytes of this machine's memory held as values of device/host tensors
        # callable(stream, kernel, start_ps, end_ps) after each kernel ran (a profiler), or None
        self.on_launch = None
        self.reuse: ReuseState | None = None  # timeline reuse (`trnsim.runtime.reuse`), if on

    def thread(self, name: str) -> HostThread:
        """A new host thread (its calls are recorded for the timeline)."""
        t = HostThread(name, self.recorder.host_calls)
        self.threads.append(t)
        return t

    def reserve_backing(self, nbytes: int, what: str) -> None:
        """Count `nbytes` of values held in this machine's RAM, within `max_backing_bytes`."""
        if nbytes > self.max_backing_bytes - self.backed:
            raise TrnsimError(
                f"{what} needs {fmt_bytes(nbytes)} of this machine's memory for its values, "
                f"beyond the functional-mode limit of {fmt_bytes(self.max_backing_bytes)} "
                f"({fmt_bytes(self.backed)} already used); run with --mode timing (shapes "
                f"only; or `mode: timing` in the trace; from Python, raise "
                f"Device.max_backing_bytes)"
            )
        self.backed += nbytes

    # -- running the clock ---------------------------------------------------------------------

    def advance_to(self, t_ps: int) -> None:
        """Run every device event at or before `t_ps` (never past it; never a deadlock)."""
        env = self.env
        step, peek = env.step, env.peek
        while peek() <= t_ps:
            step()

    def run_until(self, until: simpy.Event) -> None:
        """Run the clock until `until` has fired. Raises DeadlockError, naming what is stuck, if
        nothing is left to run before; any other exception inside the simulation propagates."""
        env = self.env
        if self.progress is not None:
            self._run_with_progress(until)
        elif not until.triggered:
            try:
                env.run(until=until)
            except RuntimeError as e:  # SimPy's "no scheduled events left", and only that
                if type(e) is not RuntimeError or until.triggered or env.peek() != math.inf:
                    raise
        if not until.triggered:
            raise self.deadlock() from None

    def _run_with_progress(self, until: simpy.Event) -> None:
        env = self.env
        step, peek, inf, progress, n = env.step, env.peek, math.inf, self.progress, 0
        while not until.processed and peek() != inf:
            step()
            n += 1
            if n % 100_000 == 0:
                progress(env.now, n)

    def run_all(self) -> None:
        """Run until every stream is idle."""
        while self.busy:
            self.run_until(next(iter(self.busy))._idle)

    def deadlock(self) -> DeadlockError:
        """The error for a run that cannot go on: the stuck engine and DMA queues, streams and
        host threads, by name."""
        extra = [f"{t.name} waits for {t.waiting}" for t in self.threads if t.waiting]
        extra += [s.pending() for s in self.busy]
        live = [la for la in self.launches if la.blocked]
        return deadlock_error(live, extra)

    # -- the work of a launch or a copy, run by a stream ---------------------------------------

    def run_launch(self, stream, kernel, tensors: dict, timing_only: bool, before_ps: int):
        """A launch on `stream`'s logical core, after `before_ps` of device-side launch cost."""
        env = self.env
        if before_ps:
            yield env.timeout(before_ps)
        with self.core_busy[stream.core].request() as req:
            yield req
            if type(kernel) is TimedKernel:  # known by its duration: no instructions
                yield env.timeout(kernel.duration_ps)
                if kernel.estimate is not None:
                    kernel.estimate.done(self, stream, env.now - kernel.duration_ps, env.now)
                if self.on_launch is not None:
                    self.on_launch(stream, kernel, env.now - kernel.duration_ps, env.now)
                return
            start = env.now
            if self.reuse is not None and (timing_only or not self.functional):
                simulate = lambda: self._simulate(stream, kernel, tensors, timing_only)  # noqa: E731
                yield from self.reuse.run(self, stream, kernel, tensors, simulate)
            else:
                yield from self._simulate(stream, kernel, tensors, timing_only)
            if self.on_launch is not None:
                self.on_launch(stream, kernel, start, env.now)

    def _simulate(self, stream, kernel, tensors: dict, timing_only: bool):
        """Plan and run a launch on `stream`'s physical cores (held by the caller)."""
        env = self.env
        cores = self.chip.physical(stream.core)
        launches = [
            core.prepare(kernel.name, prog, tensors, self.rng, self.source, timing_only)
            for core, prog in zip(cores, kernel.per_core)
        ]
        for la in launches:
            self.launches.append(la)
            self.kernel_tiles[(kernel.name, la.core)] = la.tiles
            for memory in ("sbuf", "psum"):
                self.recorder.peak(memory, la.tile_bytes(memory))
        start = env.now
        yield env.all_of([core.start(la) for core, la in zip(cores, launches)])
        self.launches = [la for la in self.launches if la not in launches]
        self.recorder.launch(kernel.name, tuple(la.core for la in launches), start, env.now)

    def run_timed(self, stream, entries: list):
        """Timed kernels (`Stream.launch_timed`), each (host time after its launch call,
        TimedKernel), one after another on `stream`'s logical core. The core is held from one
        to the next, as the work would find it free anyway, unless another stream of the core
        has work (then it is given back at each wait for the host, and whenever another waits
        for it). Entries appended while this runs are run too."""
        env = self.env
        res = self.core_busy[stream.core]
        i = 0
        while i < len(entries):
            with res.request() as req:
                yield req
                while i < len(entries):
                    t, kernel = entries[i]
                    if t > env.now and self._core_shared(stream):
                        break
                    yield env.timeout(max(t - env.now, 0) + kernel.duration_ps)
                    if kernel.estimate is not None:
                        kernel.estimate.done(self, stream, env.now - kernel.duration_ps, env.now)
                    if self.on_launch is not None:
                        self.on_launch(stream, kernel, env.now - kernel.duration_ps, env.now)
                    i += 1
                    if res.queue:
                        break
            if i < len(entries) and entries[i][0] > env.now:
                yield env.timeout(entries[i][0] - env.now)

    def _core_shared(self, stream) -> bool:
        """Does another stream of `stream`'s logical core have work?"""
        return any(s is not stream and s.core == stream.core for s in self.busy)

    def run_copy(self, stream, s: Ref, d: Ref):
        """A copy on `stream`: host<->device over the host link, device->device by DMA."""
        env = self.env
        done = env.event()
        core = self.chip.physical(stream.core)[0].index
        if "host" in (s.memory, d.memory):
            start = env.now
            self.chip.dma.submit_host(core, s, d, done.succeed)
            yield done
            self.recorder.span(core, HOST, "copy", start, env.now, max(s.nbytes, d.nbytes),
                               kernel=f"copy {s}->{d}", dtype=d.dtype.name)  # fmt: skip
            return
        ins = DmaCopy(engine=Engine.DMA, src=s, dst=d)
        self.chip.dma.check(ins, core)
        self.chip.dma.submit(core, 0, ins, f"copy {s}->{d}", done.succeed)
        yield done
