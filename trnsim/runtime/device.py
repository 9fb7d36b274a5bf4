"""The device: one logical NeuronCore of a simulated chip, with CUDA's runtime API on top.

    from trnsim.runtime import Device
    dev = Device("trn2")                       # logical core 0 of a functional Trn2
    buf = dev.malloc(128 * 512 * 4)            # bytes of HBM
    x = buf.view("float32", (128, 512))        # a typed view, no copy
    dev.memcpy_async(x, host_array)            # host -> device on the default stream
    dev.launch(kernel, {"x": x})               # a low-level kernel, its tensor bound to x
    dev.synchronize()                          # the host waits; its clock moves to the end

Names and semantics follow the CUDA runtime and torch.cuda (docs/runtime.md). Simulation is
lazy: host calls cost host time and enqueue work; `query` runs the device up to the host's
present, `synchronize` until the work is done.
"""

from __future__ import annotations

import numpy as np

from trnsim.config import ChipConfig, load_chip
from trnsim.dtypes import DTYPES
from trnsim.errors import OutOfMemoryError, SimError, TrnsimError
from trnsim.isa import Ap
from trnsim.kernels import lower_cores
from trnsim.memory.buffer import Buffer, Ref, bind
from trnsim.runtime import context
from trnsim.runtime.context import ChipContext
from trnsim.runtime.errors import InvalidValueError
from trnsim.runtime.event import Event
from trnsim.runtime.graph import Graph
from trnsim.runtime.launchcheck import LaunchCheck, describe
from trnsim.runtime.memory import DeviceBuffer, MemoryStats, TensorView, size_arg
from trnsim.runtime.stream import Stream
from trnsim.trace.ops import OPS
from trnsim.trace.program import KernelSpec, TensorSpec

MAX_BACKING_BYTES = context.MAX_BACKING_BYTES


def _config(chip: str | ChipConfig) -> ChipConfig:
    return chip if isinstance(chip, ChipConfig) else load_chip(chip)


def devices(
    chip: str | ChipConfig = "trn2", mode: str = "functional", lnc: int | None = None, seed: int = 0
) -> list[Device]:
    """Every logical NeuronCore of one simulated chip; they share its HBM, DMA, clock and host."""
    ctx = ChipContext(_config(chip), mode, lnc, seed)
    ctx.max_backing_bytes = MAX_BACKING_BYTES
    return [Device(ctx, i) for i in range(ctx.chip.logical_cores)]


class Device:
    """One logical NeuronCore (`index`) of a chip (a name such as "trn2", a config path or a
    `ChipConfig`; or the `ChipContext` of devices sharing one chip)."""

    def __init__(
        self,
        chip: str | ChipConfig | ChipContext = "trn2",
        index: int = 0,
        mode: str = "functional",
        lnc: int | None = None,
        seed: int = 0,
        source: str = "",
    ):
        ctx = chip if isinstance(chip, ChipContext) else None
        if ctx is None:
            ctx = ChipContext(_config(chip), mode, lnc, seed, source)
            ctx.max_backing_bytes = MAX_BACKING_BYTES
        ctx.chip.physical(index)  # validates the index
        self.ctx, self.index = ctx, index
        self.stats = MemoryStats()
        self._lowered: dict[tuple, tuple] = {}  # (kernel id, shapes) -> (kernel, lowered)
        self._check = LaunchCheck(self)
        self.default_stream = Stream(self, "default" if index == 0 else f"default{index}")

    # -- properties ----------------------------------------------------------------------------

    env = property(lambda self: self.ctx.env, doc="The chip's SimPy environment (ps clock).")
    recorder = property(lambda self: self.ctx.recorder, doc="What the chip's run observed.")
    chip = property(lambda self: self.ctx.chip, doc="The simulated chip's parts.")
    cfg = property(lambda self: self.ctx.cfg, doc="The chip's config.")
    mode = property(lambda self: self.ctx.mode, doc='"functional" or "timing".')
    functional = property(lambda self: self.ctx.functional)

    @property
    def max_backing_bytes(self) -> int:
        """Bytes of this machine's RAM that values of device and host tensors may take
        (functional mode); shared by the chip's devices."""
        return self.ctx.max_backing_bytes

    @max_backing_bytes.setter
    def max_backing_bytes(self, nbytes: int) -> None:
        self.ctx.max_backing_bytes = nbytes

    @property
    def name(self) -> str:
        return f"{self.cfg.name} logical NeuronCore {self.index} (lnc={self.chip.lnc})"

    @property
    def memory(self) -> int:
        """Bytes of HBM on the chip (shared by its logical cores)."""
        return self.chip.hbm.capacity

    @property
    def clocks(self) -> dict[str, int]:
        """Engine clocks in Hz."""
        c = self.cfg.core
        return {e: getattr(c, e).clock_hz for e in ("tensor", "vector", "scalar", "gpsimd")}

    @property
    def peak_flops(self) -> dict[str, float]:
        """Published dense peak FLOP/s per dtype, this logical core's share of the chip's."""
        p, n = self.cfg.peak_flops, self.chip.logical_cores
        return {k: getattr(p, k) / n for k in ("bfloat16", "float8", "float32", "mx")}

    @property
    def host_time_ps(self) -> int:
        """The host thread's clock (ps)."""
        return self.ctx.host.now

    # -- memory --------------------------------------------------------------------------------

    def malloc(self, nbytes: int) -> DeviceBuffer:
        """`nbytes` of HBM on this core's home stack (others when it is full). Raises
        OutOfMemoryError saying what was requested, what is free and the largest free block;
        InvalidValueError if `nbytes` is not a non-negative int."""
        nbytes = size_arg(nbytes, "malloc")
        return self._malloc(nbytes, f"malloc of {nbytes} bytes")

    def _malloc(self, nbytes: int, what: str, label: str = "a buffer", values=None):
        """`malloc` for the trace runner: `what` and `label` name the tensor in errors;
        `values()` gives its initial values (their bytes become the buffer's, no copy)."""
        ctx, hbm = self.ctx, self.chip.hbm
        if nbytes < 0:
            raise InvalidValueError(f"{what}: negative size")
        raw = None
        if ctx.functional:
            ctx.reserve_backing(nbytes, what)
            raw = np.zeros(nbytes, np.uint8) if values is None else values().reshape(-1)
            raw = raw.view(np.uint8)
        stack = hbm.home_stack(self.chip.physical(self.index)[0].index)
        try:
            addr = hbm.allocate(nbytes, label, stack)
        except SimError as e:
            self.stats.ooms += 1
            ctx.release_backing(nbytes if ctx.functional else 0)
            raise OutOfMemoryError(f"out of device memory on {self.name}: {e}") from None
        buf = DeviceBuffer(self, addr, nbytes, hbm.size_of(addr), raw)
        self.stats.on_malloc(buf)
        self.recorder.peak("hbm", hbm.peak)
        return buf

    def free(self, buf: DeviceBuffer) -> None:
        """Give `buf` back to the allocator (O(log n) in the free blocks); using it, or a view
        of it, after is an error. `free` does not wait for queued work: work already enqueued on
        the buffer still runs, on bytes nobody can read any more, so synchronize first.

        Only the buffer `malloc` returned can be freed: a view is never an allocation (CUDA
        refuses a pointer that is not an allocation's base), so `free(view)` is an
        InvalidValueError saying to free `view.buffer`."""
        if isinstance(buf, TensorView):
            raise InvalidValueError(
                f"free: {buf!r} is a view, not an allocation: free its base allocation, "
                f"view.buffer ({buf.buffer!r}), once no view of it is needed"
            )
        self._own(buf, "free")
        buf.check("free")
        self.chip.hbm.free(buf.address)
        buf.freed = True
        if buf.raw is not None:
            self.ctx.release_backing(buf.nbytes)
            buf.raw = None
        self.stats.on_free(buf)

    def memory_allocated(self) -> int:
        """Bytes of HBM allocated by this device now (blocks rounded to the alignment)."""
        return self.stats.allocated

    def max_memory_allocated(self) -> int:
        return self.stats.allocated_peak

    def memory_reserved(self) -> int:
        """Equal to `memory_allocated`: there is no caching allocator."""
        return self.stats.allocated

    def memory_stats(self) -> dict[str, int]:
        """torch.cuda.memory_stats()'s keys ("allocated_bytes.all.current", ...)."""
        return self.stats.as_dict()

    def reset_peak_memory_stats(self) -> None:
        self.stats.reset_peak()

    def _own(self, buf, what: str) -> None:
        b = buf.buffer if isinstance(buf, TensorView) else buf
        if not isinstance(b, DeviceBuffer):
            raise InvalidValueError(f"{what}: expected a DeviceBuffer or TensorView, got {buf!r}")
        if b.device.ctx is not self.ctx:
            raise InvalidValueError(f"{what}: {buf!r} belongs to another chip")

    # -- streams, events, graphs ---------------------------------------------------------------

    def stream(self, name: str = "") -> Stream:
        """A new stream on this logical core."""
        return Stream(self, name)

    def event(self, enable_timing: bool = False, name: str = "") -> Event:
        return Event(self, enable_timing, name)

    def graph(self) -> Graph:
        return Graph(self)

    def synchronize(self) -> None:
        """Block the host until all work on all streams of the chip is done. Raises the first
        error inside the device not raised yet (`ChipContext.run_until`)."""
        ctx = self.ctx
        try:
            ctx.run_all()
        finally:
            ctx.host.wait_until("device.synchronize", ctx.env.now)

    # -- launches and copies -------------------------------------------------------------------

    def launch(self, kernel, tensors=None, stream: Stream | None = None, timing_only=False):
        """Launch low-level `kernel` on `stream` (default: the default stream); `tensors` maps
        the kernel's tensor names to TensorViews (see `Stream.launch`)."""
        (stream or self.default_stream).launch(kernel, tensors, timing_only)

    def memcpy_async(self, dst, src, stream: Stream | None = None) -> None:
        """Copy between a host numpy array and a device buffer or view, or device to device,
        on `stream`. Element counts must match; a dtype change is a cast. Values move when
        the copy completes: keep a host array unchanged until then."""
        (stream or self.default_stream).memcpy_async(dst, src)

    def lower(self, kernel, tensors) -> KernelSpec:
        """A high-level kernel (`ops:`) lowered by the kernel library for this logical core's
        physical cores, the shapes and dtypes of its tensors those of the views bound to them
        (`tensors`: name -> TensorView); cached per kernel and shapes, so relaunching is
        cheap."""
        tensors = tensors or {}
        for name, v in tensors.items():
            if not isinstance(v, TensorView):
                raise InvalidValueError(
                    f"launch {kernel.name}: tensor {name!r}: expected a TensorView, got "
                    f"{describe(v)}"
                )
        key = (id(kernel), tuple((n, v.shape, v.dtype.name) for n, v in tensors.items()))
        hit = self._lowered.get(key)
        if hit is None or hit[0] is not kernel:  # lowered once per kernel and shapes
            specs = {n: TensorSpec(n, v.shape, v.dtype) for n, v in tensors.items()}
            _check_bound(kernel, specs)
            try:
                cores = lower_cores(
                    kernel.ops, specs, self.cfg, len(self.chip.physical(self.index))
                )
            except TrnsimError as e:  # the library's: about the views' shapes and dtypes
                raise InvalidValueError(f"launch {kernel.name}: {e}") from None
            low = KernelSpec(kernel.name, per_core=cores, ops=kernel.ops, line=kernel.line)
            hit = self._lowered[key] = (kernel, low)
        return hit[1]

    def bind_tensors(self, kernel, tensors, timing_only: bool) -> dict[str, Buffer]:
        """Check that `kernel` can run here with `tensors` (name -> TensorView or DeviceBuffer),
        as CUDA checks a launch's arguments at the call (`LaunchCheck`); its tensors as the
        Buffers instructions bind to. Raises InvalidValueError naming the kernel and tensor."""
        if not kernel.low_level:
            raise InvalidValueError(
                f"kernel {kernel.name}: high-level ops must be lowered first (Device.lower)"
            )
        phys = len(self.chip.physical(self.index))
        if len(kernel.per_core) > phys:
            raise InvalidValueError(
                f"kernel {kernel.name}: per_core has {len(kernel.per_core)} programs but "
                f"logical core {self.index} has {phys} physical cores (lnc={self.chip.lnc})"
            )
        if not tensors:
            self._check(kernel, {}, {}, timing_only)
            return {}
        if all(type(b) is Buffer for b in tensors.values()):
            return tensors  # already bound (the trace runner's named tensors, checked by it)
        out, views = {}, {}
        for name, v in tensors.items():
            if isinstance(v, DeviceBuffer):
                v = v.view("uint8")
            if not isinstance(v, TensorView):
                raise InvalidValueError(
                    f"launch {kernel.name}: tensor {name!r}: expected a TensorView or "
                    f"DeviceBuffer, got {describe(v)}"
                )
            self._own(v, f"launch {kernel.name}: tensor {name!r}")
            out[name] = v.bound(name, values=not timing_only)
            views[name] = v
        self._check(kernel, out, views, timing_only)
        return out

    def copy_operands(self, dst, src) -> tuple[Ref, Ref]:
        """`src` and `dst` of a copy as bound references, checked."""
        s, d = self._ref(src, "src"), self._ref(dst, "dst")
        if s.size != d.size:
            raise InvalidValueError(
                f"memcpy_async {s} -> {d}: {list(s.shape)} and {list(d.shape)} have "
                f"different element counts"
            )
        if s.memory == "host" and d.memory == "host":
            raise InvalidValueError(f"memcpy_async {s} -> {d}: both sides are host memory")
        return s, d

    def _ref(self, x, which: str) -> Ref:
        if isinstance(x, Ref):
            return x
        if isinstance(x, np.ndarray):
            dt = DTYPES.get(x.dtype.name)
            if dt is None:
                raise InvalidValueError(
                    f"memcpy_async {which}: numpy dtype {x.dtype} is not supported"
                )
            buf = Buffer("host", "host", x.shape, dt, x)
            return bind(Ap("host"), buf, f"memcpy_async {which}")
        if isinstance(x, DeviceBuffer):
            x = x.view("uint8")
        if not isinstance(x, TensorView):
            raise InvalidValueError(
                f"memcpy_async {which}: expected a numpy array or device view, got {describe(x)}"
            )
        self._own(x, f"memcpy_async {which}")
        name = f"dev@{x.data_ptr:#x}"
        return bind(Ap(name), x.bound(name), f"memcpy_async {which}")

    def __repr__(self) -> str:
        return f"Device({self.cfg.name!r}, index={self.index})"


def _check_bound(kernel, specs: dict) -> None:
    """Raise InvalidValueError when an op of `kernel` names a tensor the launch does not bind
    (its record says which arguments name tensors); an unknown op or argument is left to the
    library's check, which names it."""
    for op in kernel.ops:
        rec = OPS.get(op.op)
        if rec is None:
            continue
        for key, n, _ in rec.accesses(op.args):
            if n not in specs:
                raise InvalidValueError(
                    f"launch {kernel.name}: {op.op}: {key} names {n!r}, which is not among "
                    f"the launch's tensors ({', '.join(specs) or 'none'})"
                )
