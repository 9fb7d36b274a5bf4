"""`torch.neuron`: the device module, with torch.cuda's names.

Streams and events are Python classes over the runtime's (`trnsim.runtime`): what they time is
the simulated chip's clock, not this machine's; `Stream` is a `torch.Stream` so PyTorch's own
calls take it (`tensor.record_stream(s)`). Memory figures are the shim's caching allocator's.
Random ops draw from PyTorch's CPU generator (a generator of a device defined in Python is not
possible in 2.13), so `manual_seed` seeds it and the rng state is the CPU generator's.

Device indices follow one rule (docs/torch.md, "Device indices"): an index names a logical core
this process drives; `device_count()` counts them: every core of the chip in a plain process,
one in a rank of a torch.distributed job (where the launcher's LOCAL_RANK is accepted too).
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass

import torch

from trnsim.torch import state
from trnsim.torch.private import PRIVATEUSE1
from trnsim.units import fmt_bytes


def _index(device=None) -> int:
    """The logical core of `device` (an int, "neuron:i", a torch.device, or None: current)."""
    if device is None:
        return 0 if state.local_world_size() is not None else state.get().index
    if isinstance(device, int):
        i = device
    else:
        d = torch.device(device)
        if d.type != "neuron":
            raise ValueError(f"expected a neuron device, got {d}")
        if d.index is None:
            return _index(None)
        i = d.index
    ranks = state.local_world_size()
    if ranks is not None:  # a rank: 0..ranks-1 all name its one core (set_device(LOCAL_RANK))
        if not 0 <= i < ranks:
            raise RuntimeError(
                f"neuron:{i}: invalid device ordinal; this process is a rank of a "
                f"torch.distributed job with {ranks} ranks on this machine and drives one "
                f"logical core, named by 0 to {ranks - 1}"
            )
        return 0
    n = len(state.get().devices)
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
    """The logical NeuronCores this process drives: the chip's, or one in a rank of a
    torch.distributed job (which core of which chip a rank is, is not the torch index's)."""
    if state.local_world_size() is not None:
        return 1
    return len(state.get().devices)


def current_device() -> int:
    return _index(None)


def set_device(device) -> None:
    """Choose the logical core the following ops run on (a negative index: no change, as in
    torch.cuda). In a rank, `set_device(LOCAL_RANK)` is accepted and keeps the rank's core."""
    if isinstance(device, int) and device < 0:
        return
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
    _told().synchronize(None)


def _told():
    """The chip's listeners (`listeners.Listeners`), told of the host's waits and events."""
    return state.get().listeners


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


def get_rng_state(device="neuron") -> torch.Tensor:
    """The state of the generator random ops on `device` draw from: PyTorch's CPU generator,
    one for every logical core (so `torch.random.fork_rng(device_type="neuron")` works)."""
    _index(device)
    return torch.get_rng_state()


def set_rng_state(new_state: torch.Tensor, device="neuron") -> None:
    """Set the CPU generator's state (the one every logical core draws from)."""
    _index(device)
    torch.set_rng_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    """One generator serves every core: the last state given is the one kept."""
    for i, st in enumerate(new_states):
        set_rng_state(st, i)


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


def reset_accumulated_memory_stats(device=None) -> None:
    """The totals of memory_stats ("allocated", "freed") from zero again; current and peak
    figures kept."""
    a = _alloc(device)
    a.allocated_total = a.freed_total = a.reserved_total = a.reserved_freed = 0
    a.count_total, a.segments_total = a.count, len(a.blocks) - len(a.emptied)


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of HBM, as the shim sees it."""
    a = _alloc(device)
    return a.device.memory - a.reserved, a.device.memory


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Let the shim reserve at most `fraction` of HBM (the chip's, which its logical cores
    share); beyond it an allocation empties the cache, then raises torch.OutOfMemoryError."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    a = _alloc(device)
    a.fraction, a.limit = fraction, None if fraction == 1 else int(fraction * a.device.memory)


def get_per_process_memory_fraction(device=None) -> float:
    return _alloc(device).fraction


def memory_snapshot() -> list[dict]:
    """The allocator's blocks as torch.cuda.memory_snapshot's segments: each block a segment
    of one block, live ("active_allocated") or pooled ("inactive"); no stack frames."""
    if not state.started():
        return []
    a = state.get().allocator
    pooled = {id(b) for pool in a.pools.values() for b in pool}
    out = []
    for blk in sorted(a.blocks.values(), key=lambda b: b.address):
        if blk.address in a.emptied:  # no device memory (FSDP2's freed parameters)
            continue
        live = id(blk) not in pooled
        used = blk.size if live else 0
        out.append({
            "device": 0, "address": blk.address, "total_size": blk.size,
            "allocated_size": used, "active_size": used, "requested_size": used,
            "stream": 0, "segment_type": "large" if blk.size >= SMALL_SEGMENT else "small",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
            "blocks": [{"address": blk.address, "size": blk.size, "requested_size": used,
                        "state": "active_allocated" if live else "inactive", "frames": []}],
        })  # fmt: skip
    return out


SMALL_SEGMENT = 1 << 20  # torch.cuda's small pool: blocks up to 1 MiB


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """memory_stats as torch.cuda.memory_summary's table (one pool: no small/large rows)."""
    i = _index(device)
    st = memory_stats(i)
    chip = state.get()
    rows = [("Allocated memory", "allocated_bytes", True),
            ("Reserved memory", "reserved_bytes", True),
            ("Allocations", "allocation", False),
            ("Reserved segments", "segment", False)]  # fmt: skip
    width = 75
    line, rule = "|" + "=" * width + "|", "|" + "-" * width + "|"
    out = [line,
           "|" + f"PyTorch neuron memory summary, device ID {i}".center(width) + "|",
           "|" + f"{chip.chip_name} logical core {i}; HBM shared by the chip's cores".center(width)
           + "|", rule,
           "|" + f"neuron OOMs: {st['num_ooms']}".center(37) + "|"
           + f"pooled blocks: {st['inactive_split.all.current']}".center(37) + "|",
           line,
           "|" + " Metric".ljust(23) + "| Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |",
           rule]  # fmt: skip
    for label, key, nbytes in rows:
        cells = [st[f"{key}.all.{k}"] for k in ("current", "peak", "allocated", "freed")]
        text = [fmt_bytes(c) if nbytes else str(c) for c in cells]
        out.append("| " + label.ljust(22) + "|" + "|".join(t.rjust(11) + " " for t in text) + "|")
    out.append(line)
    return "\n".join(out) + "\n"


# -- streams and events ---------------------------------------------------------------------------


_PRIVATEUSE1 = int(PRIVATEUSE1)
_stream_ids = itertools.count(1)


class Stream(torch.Stream):
    """An in-order queue of the simulated device's work (torch.cuda.Stream's methods). A
    `torch.Stream` (its own stream id, on neuron:<core>), so PyTorch's calls that take a
    stream accept it."""

    def __new__(cls, device=None, priority: int = 0, _runtime=None):
        return super().__new__(cls, stream_id=next(_stream_ids), device_index=_index(device),
                               device_type=_PRIVATEUSE1)  # fmt: skip

    def __init__(self, device=None, priority: int = 0, _runtime=None):
        self.priority = priority
        self.rt = _runtime or state.get().devices[self.device_index].stream()

    def synchronize(self) -> None:
        self.rt.synchronize()
        _told().synchronize(self.rt)

    def query(self) -> bool:
        return self.rt.query()

    def wait_event(self, event: Event) -> None:
        self.rt.wait_event(event.rt)
        _told().wait_event(self.rt, event.rt)

    def wait_stream(self, stream: Stream) -> None:
        self.rt.wait_stream(stream.rt)
        _told().wait_stream(self.rt, stream.rt)

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
        _told().record_event(rt, self.rt)

    def wait(self, stream: Stream | None = None) -> None:
        (stream or current_stream()).wait_event(self)

    def query(self) -> bool:
        return self.rt.query()

    def synchronize(self) -> None:
        self.rt.synchronize()
        _told().event_synchronize(self.rt)

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
