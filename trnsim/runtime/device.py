"""The device API: memory, streams, events and launches over a simulated chip.

Names follow CUDA's (malloc, memcpy, Stream, Event, synchronize). Simulation advances lazily: host
calls enqueue work on streams; a synchronizing call (`Device.synchronize`, `Stream.synchronize`,
`Event.synchronize`, `Event.query`) runs the SimPy clock until what it waits for is complete.
Streams are in-order queues bound to a logical NeuronCore; kernels on one logical core run one at
a time, while copies and kernels of different streams overlap when they use different hardware.
"""

from __future__ import annotations

import math

import numpy as np
import simpy

from trnsim.chip import Chip
from trnsim.config import ChipConfig
from trnsim.core.plan import Launch
from trnsim.core.run import deadlock_error
from trnsim.dtypes import DType
from trnsim.errors import DeadlockError, TrnsimError
from trnsim.isa import Ap, DmaCopy, Engine
from trnsim.memory.buffer import Buffer, Ref, bind
from trnsim.memory.init import initial_values
from trnsim.report.recorder import Recorder
from trnsim.report.tracks import HOST
from trnsim.trace.program import KernelSpec
from trnsim.units import fmt_bytes, seconds_to_ps

# Values of tensors live in this machine's RAM in functional mode: a tensor that fits the chip's
# HBM may not fit here. Beyond this many bytes, runs must use timing mode.
MAX_BACKING_BYTES = 8 * 2**30


class Event:
    """A point in a stream. `elapsed_time` gives simulated milliseconds, like CUDA's."""

    def __init__(self, device: Device, name: str = ""):
        self.device, self.name = device, name
        self.time_ps: int | None = None
        self._done = device.env.event()

    def _fire(self) -> None:
        self.time_ps = self.device.env.now
        if not self._done.triggered:
            self._done.succeed()
        if self.name:
            self.device.recorder.event(self.name, self.time_ps)

    def record(self, stream: Stream | None = None) -> None:
        (stream or self.device.default_stream).record_event(self)

    def query(self) -> bool:
        """True once the work before the record has completed (runs the clock up to now)."""
        self.device.run()
        return self.time_ps is not None

    def synchronize(self) -> None:
        self.device.run(until=self._done)

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds of simulated time from this event to `end` (both must have completed)."""
        for e in (self, end):
            if e.time_ps is None:
                e.synchronize()
        return (end.time_ps - self.time_ps) / 1e9


class Stream:
    """An in-order queue of device work bound to a logical NeuronCore."""

    def __init__(self, device: Device, core: int = 0, name: str = ""):
        device.chip.physical(core)  # validates the index
        self.device, self.core, self.name = device, core, name or f"stream{len(device.streams)}"
        self._work = simpy.Store(device.env)
        self._pending = 0
        self._idle = device.env.event()
        self._idle.succeed()
        self.blocked_on: str | None = None
        device.streams.append(self)
        device.env.process(self._run())

    def _enqueue(self, kind: str, *args) -> None:
        if self._pending == 0:
            self._idle = self.device.env.event()
        self._pending += 1
        self._work.put((kind, args))

    def launch(self, kernel: KernelSpec) -> None:
        """Run a kernel on this stream's logical core after the work before it."""
        self.device.check_launch(kernel, self.core)
        self._enqueue("launch", kernel)

    def memcpy(self, dst: Buffer | Ref, src: Buffer | Ref) -> None:
        """Copy a tensor, or a slice of one (a Ref): host<->device over the host link,
        device->device by DMA. Element counts must match; a dtype change is a cast."""
        s, d = _whole(src, "copy src"), _whole(dst, "copy dst")
        if s.size != d.size:
            raise TrnsimError(
                f"copy {s} -> {d}: {list(s.shape)} and {list(d.shape)} have "
                f"different element counts"
            )
        self._enqueue("copy", s, d)

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event(self.device)
        self._enqueue("record", event)
        return event

    def wait_event(self, event: Event) -> None:
        self._enqueue("wait", event)

    def synchronize(self) -> None:
        self.device.run(until=self._idle)

    def query(self) -> bool:
        self.device.run()
        return self._pending == 0

    # -- the stream's process ------------------------------------------------------------------

    def _run(self):
        dev = self.device
        while True:
            kind, args = yield self._work.get()
            if kind == "launch":
                yield from dev._launch(self, args[0])
            elif kind == "copy":
                yield from dev._copy(self, *args)
            elif kind == "record":
                args[0]._fire()
            elif kind == "wait":
                if not args[0]._done.triggered:
                    self.blocked_on = f"event '{args[0].name}'"
                    yield args[0]._done
                    self.blocked_on = None
            self._pending -= 1
            if self._pending == 0:
                self._idle.succeed()


class Device:
    """A simulated chip with the device API on top."""

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
        self.tensors: dict[str, Buffer] = {}
        self.streams: list[Stream] = []
        self.launches: list[Launch] = []  # running now (for deadlock reports)
        self.kernel_tiles: dict[tuple[str, int], dict[str, Buffer]] = {}  # last launch's tiles
        self._core_busy = [simpy.Resource(self.env, 1) for _ in range(self.chip.logical_cores)]
        self._host = simpy.Resource(self.env, 1)
        self.progress = None  # callable(now_ps, events) called every 100,000 events
        self.max_backing_bytes = MAX_BACKING_BYTES
        self._backed = 0  # bytes of numpy backing store held by tensors
        self.default_stream = Stream(self, 0, "default")

    # -- memory --------------------------------------------------------------------------------

    def malloc(
        self, name: str, shape, dt: DType, init=None, on: str = "hbm", core: int = 0
    ) -> Buffer:
        """Allocate a named tensor in HBM (near logical core `core`) or host memory."""
        if name in self.tensors:
            raise TrnsimError(f"tensor {name} already exists")
        shape = tuple(int(x) for x in shape)
        nbytes = math.prod(shape) * dt.itemsize
        if (self.functional or on == "host") and nbytes > self.max_backing_bytes - self._backed:
            raise TrnsimError(
                f"tensor {name}: {list(shape)} {dt.name} needs {fmt_bytes(nbytes)} of this "
                f"machine's memory for its values, beyond the functional-mode limit of "
                f"{fmt_bytes(self.max_backing_bytes)} ({fmt_bytes(self._backed)} already used); "
                f"run with --mode timing (shapes only; or `mode: timing` in the trace; "
                f"from Python, raise Device.max_backing_bytes)"
            )
        self._backed += nbytes if (self.functional or on == "host") else 0
        arr = (
            initial_values(init, shape, dt, self.rng, f"tensor {name}")
            if self.functional or on == "host"
            else None
        )
        addr = 0
        if on == "hbm":
            stack = self.chip.hbm.home_stack(self.chip.physical(core)[0].index)
            addr = self.chip.hbm.allocate(math.prod(shape) * dt.itemsize, name, stack)
            self.recorder.peak("hbm", self.chip.hbm.peak)
        buf = Buffer(name, on, shape, dt, arr, addr)
        self.tensors[name] = buf
        return buf

    def view(self, name: str, of: str, shape) -> Buffer:
        """A tensor sharing `of`'s memory with another shape (no copy, no traffic)."""
        base = self.tensors[of]
        shape = tuple(int(x) for x in shape)
        if math.prod(shape) != math.prod(base.shape):
            raise TrnsimError(
                f"view {name} of {of}: {list(shape)} has a different element "
                f"count than {list(base.shape)}"
            )
        arr = base.array.reshape(shape) if base.array is not None else None
        buf = Buffer(name, base.memory, shape, base.dtype, arr, base.offset)
        self.tensors[name] = buf
        return buf

    def free(self, name: str) -> None:
        buf = self.tensors.pop(name)
        if buf.memory == "hbm" and not any(
            t.offset == buf.offset and t.memory == "hbm" for t in self.tensors.values()
        ):
            self.chip.hbm.free(buf.offset)

    def check_launch(self, kernel: KernelSpec, core: int) -> None:
        """Raise if `kernel` cannot be launched on logical core `core`."""
        if not kernel.low_level:
            ops = ", ".join(sorted({o.op for o in kernel.ops}))
            where = f"{self.source}:{kernel.line}: " if self.source and kernel.line else ""
            raise TrnsimError(
                f"{where}kernel {kernel.name}: high-level ops ({ops}) are not yet "
                f"supported; the kernel library lands in a later release — "
                f"write it as a low-level kernel (instructions:)"
            )
        phys = len(self.chip.physical(core))
        if len(kernel.per_core) > phys:
            raise TrnsimError(
                f"kernel {kernel.name}: per_core has {len(kernel.per_core)} "
                f"programs but logical core {core} has {phys} physical cores "
                f"(lnc={self.chip.lnc})"
            )

    def stream(self, core: int = 0, name: str = "") -> Stream:
        return Stream(self, core, name)

    def event(self, name: str = "") -> Event:
        return Event(self, name)

    # -- running -------------------------------------------------------------------------------

    def run(self, until: simpy.Event | None = None) -> None:
        """Advance the clock until `until` fires (or until nothing is left to do)."""
        env = self.env
        if self.progress is None:  # SimPy's own loop: the fast path
            try:
                env.run(until=until)
            except RuntimeError:  # the schedule ran dry before `until` fired
                if until is None or until.triggered:
                    raise
        else:
            step, peek, inf, progress, n = env.step, env.peek, math.inf, self.progress, 0
            while (until is None or not until.processed) and peek() != inf:
                step()
                n += 1
                if n % 100_000 == 0:
                    progress(env.now, n)
        if until is not None and not until.triggered:
            raise self._deadlock()
        if until is None and any(s._pending for s in self.streams):
            raise self._deadlock()

    def synchronize(self) -> None:
        """Wait for all work on all streams."""
        self.run()

    def _deadlock(self) -> DeadlockError:
        extra = [
            f"stream {s.name} waits for {s.blocked_on} that is never recorded"
            for s in self.streams
            if s.blocked_on
        ]
        live = [la for la in self.launches if la.blocked]
        return deadlock_error(live, extra)

    def _launch(self, stream: Stream, kernel: KernelSpec):
        env = self.env
        with self._host.request() as req:  # the host thread issues launches one at a time
            yield req
            yield env.timeout(seconds_to_ps(self.cfg.host_link.launch_overhead))
        with self._core_busy[stream.core].request() as req:
            yield req
            cores = self.chip.physical(stream.core)
            launches = [
                core.prepare(kernel.name, prog, self.tensors, self.rng, self.source)
                for core, prog in zip(cores, kernel.per_core)
            ]
            for la in launches:
                self.launches.append(la)
                self.kernel_tiles[(kernel.name, la.core)] = la.tiles
                for memory in ("sbuf", "psum"):
                    self.recorder.peak(memory, la.tile_bytes(memory))
            yield env.all_of([core.start(la) for core, la in zip(cores, launches)])
            self.launches = [la for la in self.launches if la not in launches]

    def _copy(self, stream: Stream, s: Ref, d: Ref):
        done = self.env.event()
        core = self.chip.physical(stream.core)[0].index
        name = f"copy {s}->{d}"
        if "host" in (s.memory, d.memory):
            start = self.env.now
            self.chip.dma.submit_host(core, s, d, done.succeed)
            yield done
            self.recorder.span(
                core,
                HOST,
                "copy",
                start,
                self.env.now,
                max(s.nbytes, d.nbytes),
                kernel=name,
                dtype=d.dtype.name,
            )
            return
        ins = DmaCopy(engine=Engine.DMA, src=s, dst=d)
        self.chip.dma.check(ins, core)
        self.chip.dma.submit(core, 0, ins, name, done.succeed)
        yield done


def _whole(x: Buffer | Ref, where: str) -> Ref:
    """A Ref as it is, or a whole buffer as a Ref."""
    return x if isinstance(x, Ref) else bind(Ap(x.name), x, where)
