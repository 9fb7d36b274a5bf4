"""`torch.neuron`: the device module, with torch.cuda's names.

Streams and events are Python classes over the runtime's (`trnsim.runtime`): what they time is
the simulated chip's clock, not this machine's. Memory figures are the shim's caching
allocator's. Random ops draw from PyTorch's CPU generator, so `manual_seed` seeds it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from trnsim.torch import recording, state


def _index(device=None) -> int:
    """The logical core of `device` (an int, "neuron:i", a torch.device, or None: current)."""
    if device is None:
        return state.get().index
    if isinstance(device, int):
        i = device
    else:
        d = torch.device(device)
        if d.type != "neuron":
            raise ValueError(f"expected a neuron device, got {d}")
        i = state.get().index if d.index is None else d.index
    n = device_count()
    if not 0 <= i < n:
        raise RuntimeError(f"neuron:{i}: invalid device ordinal; the chip has {n} logical cores")
    return i


# -- devices --------------------------------------------------------------------------------------


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return state.started()


def init() -> None:
    state.get()


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    """The chip's logical NeuronCores."""
    return len(state.get().devices)


def current_device() -> int:
    return state.get().index


def set_device(device) -> None:
    """Choose the logical core the following ops run on."""
    state.get().index = _index(device)


class device:
    """Context manager: run the ops inside on logical core `idx` (torch.load needs it)."""

    def __init__(self, idx):
        self.idx = idx if idx is None or isinstance(idx, int) else torch.device(idx).index
        self.prev = None

    def __enter__(self):
        if self.idx is not None:
            self.prev = current_device()
            set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.prev is not None:
            set_device(self.prev)
        return False


def synchronize(device=None) -> None:
    """Block until all simulated work of the chip is done (the host clock moves there)."""
    state.get().devices[_index(device)].synchronize()
    if recording.active is not None:
        recording.active.synchronize(None)


def get_device_name(device=None) -> str:
    return state.get().devices[_index(device)].name


@dataclass(frozen=True)
class DeviceProperties:
    """What `get_device_properties` says about a logical NeuronCore."""

    name: str
    chip: str
    total_memory: int  # bytes of HBM (shared by the chip's logical cores)
    physical_cores: int  # per logical core (lnc)
    logical_cores: int  # on the chip
    peak_flops: dict  # dtype -> dense FLOP/s of this logical core
    clocks: dict  # engine -> Hz

    @property
    def multi_processor_count(self) -> int:
        return self.physical_cores


def get_device_properties(device=None) -> DeviceProperties:
    chip = state.get()
    dev = chip.devices[_index(device)]
    return DeviceProperties(
        dev.name, chip.cfg.name, dev.memory, chip.lnc, len(chip.devices), dev.peak_flops,
        dev.clocks,
    )  # fmt: skip


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


# -- random numbers -------------------------------------------------------------------------------


def manual_seed(seed: int) -> None:
    """Seed the generator random ops on neuron draw from (PyTorch's CPU generator: a generator
    of a device defined in Python is not possible); torch.manual_seed calls this too."""
    torch.default_generator.manual_seed(int(seed))


manual_seed_all = manual_seed


def seed() -> None:
    torch.default_generator.seed()


seed_all = seed


def initial_seed() -> int:
    return torch.initial_seed()


# -- memory ---------------------------------------------------------------------------------------


def _alloc(device=None):
    _index(device)
    return state.get().allocator


def memory_allocated(device=None) -> int:
    """Bytes of device memory live tensors use (blocks, rounded as the allocator rounds)."""
    return _alloc(device).allocated


def max_memory_allocated(device=None) -> int:
    return _alloc(device).allocated_peak


def memory_reserved(device=None) -> int:
    """Bytes the shim holds from the runtime (live tensors and pooled blocks)."""
    return _alloc(device).reserved


def max_memory_reserved(device=None) -> int:
    return _alloc(device).reserved_peak


def memory_stats(device=None) -> dict[str, int]:
    return _alloc(device).stats()


def reset_peak_memory_stats(device=None) -> None:
    _alloc(device).reset_peak()


def empty_cache() -> None:
    """Give the pooled blocks back to the runtime."""
    if state.started():
        state.get().allocator.empty_cache()


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of HBM, as the shim sees it."""
    a = _alloc(device)
    return a.device.memory - a.reserved, a.device.memory


# -- streams and events ---------------------------------------------------------------------------


class Stream:
    """An in-order queue of the simulated device's work (torch.cuda.Stream's methods)."""

    def __init__(self, device=None, priority: int = 0, _runtime=None):
        idx = _index(device)
        self.device_index, self.priority = idx, priority
        self.rt = _runtime or state.get().devices[idx].stream()

    @property
    def device(self) -> torch.device:
        return torch.device("neuron", self.device_index)

    def synchronize(self) -> None:
        self.rt.synchronize()
        if recording.active is not None:
            recording.active.synchronize(self.rt)

    def query(self) -> bool:
        return self.rt.query()

    def wait_event(self, event: Event) -> None:
        self.rt.wait_event(event.rt)
        if recording.active is not None:
            recording.active.wait_event(self.rt, event.rt)

    def wait_stream(self, stream: Stream) -> None:
        self.rt.wait_stream(stream.rt)
        if recording.active is not None:
            recording.active.wait_stream(self.rt, stream.rt)

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __enter__(self):
        self._ctx = stream(self)
        return self._ctx.__enter__()

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other.rt is self.rt

    def __hash__(self) -> int:
        return hash(id(self.rt))

    def __repr__(self) -> str:
        return f"<torch.neuron.Stream device=neuron:{self.device_index} name={self.rt.name}>"


_defaults: dict[int, Stream] = {}


def default_stream(device=None) -> Stream:
    idx = _index(device)
    s = _defaults.get(idx)
    if s is None or s.rt.device is not state.get().devices[idx]:
        s = _defaults[idx] = Stream(idx, _runtime=state.get().devices[idx].default_stream)
    return s


def current_stream(device=None) -> Stream:
    idx = _index(device)
    return state.get().streams[idx] or default_stream(idx)


def set_stream(s: Stream) -> None:
    state.get().streams[s.device_index] = s


@contextlib.contextmanager
def stream(s: Stream | None):
    """Context manager: ops inside are enqueued on `s` (None: no change)."""
    if s is None:
        yield None
        return
    chip = state.get()
    prev, prev_index = chip.streams[s.device_index], chip.index
    chip.streams[s.device_index], chip.index = s, s.device_index
    try:
        yield s
    finally:
        chip.streams[s.device_index], chip.index = prev, prev_index


class Event:
    """A point in a stream, timed on the simulated clock (torch.cuda.Event's methods)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess=False):
        self.enable_timing = enable_timing
        self.rt = state.get().device.event(enable_timing)

    def record(self, stream: Stream | None = None) -> None:
        rt = (stream or current_stream()).rt
        rt.record_event(self.rt)
        if recording.active is not None:
            recording.active.record_event(rt, self.rt)

    def wait(self, stream: Stream | None = None) -> None:
        (stream or current_stream()).wait_event(self)

    def query(self) -> bool:
        return self.rt.query()

    def synchronize(self) -> None:
        self.rt.synchronize()
        if recording.active is not None:
            recording.active.event_synchronize(self.rt)

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds of simulated time between the two records (both complete)."""
        try:
            return self.rt.elapsed_time(end.rt)
        except Exception as e:
            raise RuntimeError(str(e)) from None

    def __repr__(self) -> str:
        return f"<torch.neuron.Event {self.rt!r}>"


# -- the report -----------------------------------------------------------------------------------


def report(perfetto=None) -> str:
    """The run so far: simulated time, the ops (modelled by the kernel library or estimated),
    memory. `perfetto`: a path to write the timeline to (Chrome trace JSON)."""
    from trnsim.torch.report import report as _report

    return _report(perfetto)
