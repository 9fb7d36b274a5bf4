"""One simulated chip under the device API: its SimPy clock, parts, host threads and the runs.

Every `Device` (logical NeuronCore) of a chip shares one `ChipContext`: the HBM stacks, the DMA
system, the clock and the host. The device never runs ahead of what a synchronizing call needs:
`advance_to(t)` runs it up to the host's present (for `query`), `run_until(event)` until some
work completes (for `synchronize`), raising `DeadlockError` if nothing is left to run first.

An error inside the device (an item of a stream failing, or an exception out of the clock) is
kept, not raised where it happened: the next synchronizing call raises it, once, and the device
goes on (`fail`, `raise_errors`). CUDA's errors are sticky instead (docs/runtime.md says why).

On a system of chips (`trnsim.runtime.multichip.SystemContext`) each chip has its context, made
on the System's chip and clock; the first chip's context is the `root` of the others: the clock
is run, errors kept and deadlocks reported there, for every chip (`busy` and `threads` are
shared with it, and so is the host's main thread and the budget of this machine's memory).
"""

from __future__ import annotations

import math

import numpy as np
import simpy
from simpy.core import StopSimulation

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
        system=None,
        chip_index: int = 0,
    ):
        """`system` (a `SystemContext`): this is chip `chip_index` of it (its Chip, clock and
        recorder are the System's; `cfg`, `mode` and `lnc` must be the system's)."""
        if mode not in ("functional", "timing"):
            raise TrnsimError(f"mode '{mode}': expected functional or timing")
        self.cfg, self.mode, self.source = cfg, mode, source  # source: the trace, for errors
        self.functional = mode == "functional"
        self.system, self.chip_index = system, chip_index
        if system is None:
            self.env = simpy.Environment()
            self.recorder = Recorder()
            self.chip = Chip(self.env, cfg, self.recorder, self.functional, lnc)
            self.rng = np.random.default_rng(seed)
        else:
            self.env = system.env
            self.chip = system.system.chips[chip_index]
            self.recorder = self.chip.recorder
            self.rng = np.random.default_rng((seed, chip_index))
        root = system.root if system is not None and system.root is not None else None
        self.root: ChipContext = root or self
        self.costs = HostCosts.from_config(cfg)
        if root is None:
            self.threads: list[HostThread] = []
            self.host = self.thread("main")  # the thread making API calls now
            self.busy: dict = {}  # streams with work, in the order they became busy
        else:
            self.threads, self.host, self.busy = root.threads, root.host, root.busy
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
        self.errors: list[Exception] = []  # errors inside the device not raised yet
        self._stuck: list[tuple] = []  # (stream, item) in progress at an error out of the clock
        self._runs = 0  # synchronizing runs so far (a stop is for the run that asked for it)
        self._running = False  # inside `run_until`

    def thread(self, name: str) -> HostThread:
        """A new host thread (its calls are recorded for the timeline)."""
        t = HostThread(name, self.recorder.host_calls)
        self.threads.append(t)
        return t

    def peers(self) -> list[ChipContext]:
        """The contexts of every chip on this clock: this one alone, or a system's chips."""
        return [self] if self.system is None else self.system.contexts()

    def reserve_backing(self, nbytes: int, what: str) -> None:
        """Count `nbytes` of values held in this machine's RAM, within `max_backing_bytes`."""
        if self.root is not self:
            return self.root.reserve_backing(nbytes, what)
        if nbytes > self.max_backing_bytes - self.backed:
            raise TrnsimError(
                f"{what} needs {fmt_bytes(nbytes)} of this machine's memory for its values, "
                f"beyond the functional-mode limit of {fmt_bytes(self.max_backing_bytes)} "
                f"({fmt_bytes(self.backed)} already used); run with --mode timing (shapes "
                f"only; or `mode: timing` in the trace; from Python, raise "
                f"Device.max_backing_bytes)"
            )
        self.backed += nbytes

    def release_backing(self, nbytes: int) -> None:
        """`nbytes` of values no longer held (a buffer freed, an allocation that failed)."""
        self.root.backed -= nbytes

    # -- running the clock ---------------------------------------------------------------------

    def advance_to(self, t_ps: int) -> None:
        """Run every device event at or before `t_ps` (never past it). Never raises: an error
        inside the device is kept for the next synchronizing call."""
        if self.root is not self:
            return self.root.advance_to(t_ps)
        env = self.env
        step, peek = env.step, env.peek
        while True:
            try:
                while peek() <= t_ps:
                    step()
            except Exception as e:  # out of the clock: no stream's item caught it
                self._fault(e)
                continue
            if peek() != math.inf or not self._drop_stuck():
                return

    def run_until(self, until: simpy.Event | None) -> None:
        """Run the clock until `until` (None: nothing) has fired, or an error inside the device
        happens, then raise the first such error not raised yet (at once if there is one: the
        work after it waits for the next call). Raises DeadlockError, naming what is stuck, if
        nothing is left to run before `until`."""
        if self.root is not self:
            return self.root.run_until(until)
        if until is not None and not until.triggered and not self.errors:
            self._running = True
            self._runs += 1
            try:
                self._run(until)
            finally:
                self._running = False
                cbs = until.callbacks  # env.run's, left when an error stopped the run
                if cbs and StopSimulation.callback in cbs:
                    until.callbacks = [c for c in cbs if c != StopSimulation.callback]
        self.raise_errors()
        if until is not None and not until.triggered:
            raise self.deadlock() from None

    def _run(self, until: simpy.Event) -> None:
        """Run until `until` fires, an error happens or nothing is left to run (after dropping
        the items an error out of the clock left unable to finish, `_drop_stuck`)."""
        env = self.env
        while True:
            try:
                if self.progress is not None:
                    self._run_with_progress(until)
                else:
                    env.run(until=until)
            except StopSimulation:  # `fail` stopped the progress loop
                return
            except Exception as e:
                # SimPy's "no scheduled events left" is not an error inside the device
                if type(e) is not RuntimeError or until.triggered or env.peek() != math.inf:
                    self._fault(e)
                    return
            if until.triggered or self.errors or not self._drop_stuck():
                return

    def _run_with_progress(self, until: simpy.Event) -> None:
        env = self.env
        step, peek, inf, progress, n = env.step, env.peek, math.inf, self.progress, 0
        while not until.processed and peek() != inf:
            step()
            n += 1
            if n % 100_000 == 0:
                progress(env.now, n)

    def run_all(self) -> None:
        """Run until every stream is idle (raising as `run_until` does)."""
        if self.root is not self:
            return self.root.run_all()
        while self.busy:
            self.run_until(next(iter(self.busy))._idle)
        self.raise_errors()

    # -- errors inside the device --------------------------------------------------------------

    def fail(self, error: Exception) -> None:
        """An item of a stream failed with `error` (the stream dropped it and goes on): kept
        for the next synchronizing call; a synchronizing run in progress stops here."""
        if self.root is not self:
            return self.root.fail(error)
        self.errors.append(error)
        if self._running:
            stop = self.env.event()
            stop.callbacks.append(self._stop)
            stop.succeed(self._runs)

    def _stop(self, ev: simpy.Event) -> None:
        if self._running and ev.value == self._runs:  # not a stop left by an earlier run
            raise StopSimulation(None)

    def _fault(self, error: Exception) -> None:
        """`error` came out of the clock (a DMA completion's, say), in no stream's item: kept as
        `fail` keeps it. The items streams were in may then never finish: they are dropped if
        the device runs dry with them unfinished."""
        self.errors.append(error)
        now = self.env.now
        for s in self.busy:  # in an item started by now, other than a wait for an event
            if s._queue[0][1] <= now and s.blocked_on is None:
                self._stuck.append((s, s._queue[0]))

    def _drop_stuck(self) -> bool:
        """Nothing is left to run: interrupt each stream still in the item it was in at an
        error out of the clock (that item cannot finish), so that its later work runs. True
        if any was."""
        stuck, self._stuck = self._stuck, []
        dropped = False
        for stream, item in stuck:
            if stream._queue and stream._queue[0] is item and stream._proc.is_alive:
                stream._proc.interrupt("dropped after an error inside the device")
                dropped = True
        return dropped

    def raise_errors(self) -> None:
        """Raise the first error inside the device not raised yet, once. The later ones are
        dropped (they mostly follow from it); a note on it counts them."""
        if self.root is not self:
            return self.root.raise_errors()
        if not self.errors:
            return
        first, *rest = self.errors
        self.errors = []
        if rest and hasattr(first, "add_note"):  # Python 3.11+
            first.add_note(
                f"{len(rest)} later error(s) inside the device were dropped; the next: {rest[0]}"
            )
        raise first

    def deadlock(self) -> DeadlockError:
        """The error for a run that cannot go on: the stuck engine and DMA queues, streams and
        host threads, by name; on a system, first the collectives some rank never reached."""
        if self.root is not self:
            return self.root.deadlock()
        extra = self.system.stuck() if self.system is not None else []
        extra += [f"{t.name} waits for {t.waiting}" for t in self.threads if t.waiting]
        extra += [s.pending() for s in self.busy]
        live = [la for c in self.peers() for la in c.launches if la.blocked]
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
        for la, prog in zip(launches, kernel.per_core):
            self.launches.append(la)
            self.kernel_tiles[(kernel.name, la.core)] = la.tiles
            for memory in ("sbuf", "psum"):
                self.recorder.peak(memory, la.tile_bytes(memory))
            if any(t.live for t in prog.tiles.values()):  # SBUF and PSUM in use over time
                self.recorder.tiles(kernel.name, la.core, prog)
        start = env.now
        try:
            yield env.all_of([core.start(la) for core, la in zip(cores, launches)])
        finally:  # also when it failed or was dropped: it is no longer running
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
        return any(
            s is not stream and s.core == stream.core and s.ctx is stream.ctx for s in self.busy
        )

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
