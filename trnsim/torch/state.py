"""The simulated chip behind the `neuron` device: chosen once (`configure`, or the TRNSIM_CHIP
and TRNSIM_LNC environment variables), made on first use, shared by every tensor and op. In a
torch.distributed job, a system of chips (`configure(system=...)` or TRNSIM_SYSTEM) times the
collectives; the rank's chip is then the system's (docs/distributed.md).

Device indices name the logical NeuronCores this process drives (`trnsim.runtime.devices`), all
on one clock and one HBM: in a plain process every core of the chip, in a rank of a
torch.distributed job one (`local_world_size`; docs/torch.md, "Device indices"). PyTorch 2.13's
Python device guard has no device index, so every tensor reports `neuron:0`;
`torch.neuron.set_device(i)` chooses the logical core the following ops run on (HBM is shared by
the chip's cores, so where a tensor lives does not change its values).
"""

from __future__ import annotations

import os
import re

import torch

from trnsim.runtime import devices
from trnsim.torch.allocator import CachingAllocator, rounded
from trnsim.torch.listeners import Listeners
from trnsim.units import fmt_bytes

DEFAULT_CHIP = "trn2"


class Chip:
    """The runtime devices of the chip, the allocator, the current core and its streams."""

    def __init__(self, chip, lnc: int | None, timing: str = "replay", system=None):
        name = chip if isinstance(chip, str) else chip.name
        self.chip_name, self.devices = name, devices(chip, "functional", lnc)
        self.system = system  # the SystemConfig timing collectives (None: one chip)
        self.timing = timing  # "replay": a lowering's measured time; "simulate": each launch
        self.cfg = self.devices[0].cfg
        self.lnc = self.devices[0].chip.lnc
        self.listeners = Listeners(self.devices[0].ctx)  # the profiler, a recording
        self.allocator = Allocator(self.devices[0], self.listeners)
        self.index = 0  # the current logical core
        self.streams: list = [None] * len(self.devices)  # the current torch.neuron.Stream
        self.ops = None  # trnsim.torch.timing.OpTimer, set when the timer is made

    @property
    def device(self):
        """The runtime Device of the current logical core."""
        return self.devices[self.index]


class Allocator(CachingAllocator):
    """The caching allocator with torch.cuda's per-process limit
    (`torch.neuron.set_per_process_memory_fraction`): a request that needs new device memory
    beyond `limit` empties the cache, then is an OutOfMemoryError, as CUDA's allocator does."""

    limit: int | None = None  # bytes the shim may reserve (None: all of HBM)
    fraction: float = 1.0

    def alloc(self, nbytes: int):
        size = rounded(nbytes)
        over = self.limit is not None and self.reserved + size > self.limit
        if over and not self.pools.get(size):  # a pooled block of the size needs nothing new
            self.empty_cache()
            if self.reserved + size > self.limit:
                self.ooms += 1
                raise torch.OutOfMemoryError(
                    f"neuron out of memory. Tried to allocate {fmt_bytes(nbytes)}. The process "
                    f"may use {fmt_bytes(self.limit)} (set_per_process_memory_fraction("
                    f"{self.fraction}) of {fmt_bytes(self.device.memory)}), of which "
                    f"{fmt_bytes(self.reserved)} is reserved by the shim and "
                    f"{fmt_bytes(self.allocated)} allocated by live tensors"
                )
        return super().alloc(nbytes)


def local_world_size() -> int | None:
    """The rank processes of this machine when this process is one rank of a torch.distributed
    job, else None. A launcher says so (torchrun sets WORLD_SIZE, LOCAL_WORLD_SIZE, LOCAL_RANK),
    or torch.distributed once its default group is up (a job started by mp.spawn)."""
    env = os.environ
    if "WORLD_SIZE" in env:
        n = env.get("LOCAL_WORLD_SIZE") or env["WORLD_SIZE"]
        if not n.isdigit() or int(n) < 1:
            raise RuntimeError(f"LOCAL_WORLD_SIZE or WORLD_SIZE={n!r}: expected a whole number")
        return int(n)
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return None


_settings: dict = {}
_virtual: list = [None]  # configure(virtual_world_size=...)
_chip: Chip | None = None


TIMINGS = ("replay", "simulate")


def configure(chip: str | None = None, lnc: int | None = None, timing: str = "replay",
              system: str | None = None, system_set=(),
              virtual_world_size: int | None = None) -> None:  # fmt: skip
    """Choose the simulated chip (a config name such as "trn2" or "trn3", or a YAML path) and
    its logical-core size before the first use of the `neuron` device. `timing`: "replay" (an
    op's lowering is simulated once, then launched by its duration: fast) or "simulate" (every
    launch of a lowered op runs its program on the chip, timing-only: kernels of concurrent
    streams and cores then share HBM and DMA; about 0.3 ms of this machine per op). `system`:
    a system of chips (a name such as "trn2-48xl", or a YAML path) whose model times the
    collectives of a torch.distributed job (docs/distributed.md); the chip and lnc are then
    the system's (`chip`, `lnc` must agree or be None). `system_set`: overrides of the
    system's keys, `key.path=value` strings as `trnsim systems show --set` takes them
    (["ranks_per_chip=1", "topology.link.bandwidth=128GB/s"]; a string is split as
    TRNSIM_SYSTEM_SET is, `split_sets`); without `system`, they apply to the chip's default
    system. `virtual_world_size`: N makes `init_process_group()` give this process a group of
    N ranks, the others replicas of it (docs/distributed.md, "Virtual world size";
    TRNSIM_VIRTUAL_WORLD_SIZE; given alone, it changes nothing else and may change between
    process groups). Raises RuntimeError after the first use with other settings, and a
    one-line RuntimeError naming a bad key."""
    if virtual_world_size is not None:
        if isinstance(virtual_world_size, bool) or not isinstance(virtual_world_size, int) or \
                virtual_world_size < 1:  # fmt: skip
            raise ValueError(f"virtual_world_size={virtual_world_size!r}: expected a whole "
                             "number of ranks >= 1")  # fmt: skip
        _virtual[0] = virtual_world_size
        if (chip, lnc, timing, system, system_set) == (None, None, "replay", None, ()):
            return  # given alone: the chip's settings stay as they are
    if timing not in TIMINGS:
        raise ValueError(f"timing={timing!r}: expected one of {', '.join(TIMINGS)}")
    sets = tuple(split_sets(system_set) if isinstance(system_set, str) else system_set)
    if sets and system is None:
        system = default_system(chip or DEFAULT_CHIP, lnc)
        if system is None:
            raise ValueError(f"configure(system_set={list(sets)}): chip {chip or DEFAULT_CHIP} "
                             f"(lnc={lnc}) has no default system; give system=...")  # fmt: skip
    if system is not None:
        cfg = system_config(system, sets, _source)
        if chip is not None and chip != cfg.chip.name:
            raise ValueError(f"configure(chip={chip!r}, system={system!r}): the system's chips "
                             f"are {cfg.chip.name}; give one or the other")  # fmt: skip
        if lnc is not None and lnc != cfg.lnc:
            raise ValueError(f"configure(lnc={lnc}, system={system!r}): the system's lnc is "
                             f"{cfg.lnc}")  # fmt: skip
        chip, lnc = cfg.chip.name, cfg.lnc
    want = {"chip": chip or DEFAULT_CHIP, "lnc": lnc, "timing": timing, "system": system,
            "system_set": sets}  # fmt: skip
    if _chip is not None and want != _settings:
        raise RuntimeError(
            f"trnsim.torch.configure({want['chip']!r}, lnc={lnc}): the neuron device is already "
            f"in use as {_settings['chip']} (lnc={_chip.lnc}); configure before the first use"
        )
    _settings.update(want)


def get() -> Chip:
    """The chip, made on first use from `configure`'s settings or the environment."""
    global _chip
    if _chip is None:
        if not _settings:
            lnc = os.environ.get("TRNSIM_LNC") or None
            if lnc is not None and not lnc.isdigit():
                raise RuntimeError(f"TRNSIM_LNC={lnc!r}: expected a whole number (1 or 2)")
            timing = os.environ.get("TRNSIM_TIMING") or "replay"
            system = os.environ.get("TRNSIM_SYSTEM") or None
            sets = split_sets(os.environ.get("TRNSIM_SYSTEM_SET") or "")
            chip = os.environ.get("TRNSIM_CHIP") or (None if system else DEFAULT_CHIP)
            global _source
            _source = ENV_SOURCE
            try:
                configure(chip, int(lnc) if lnc else None, timing, system, sets)
            finally:
                _source = CALL_SOURCE
        system = _settings.get("system")
        cfg = system_config(system, _settings["system_set"]) if system else None
        _chip = Chip(cfg.chip if cfg else _settings["chip"], _settings["lnc"],
                     _settings["timing"], cfg)  # fmt: skip
    return _chip


_systems: dict = {}
CALL_SOURCE = ("configure(system=...)", "configure(system_set=...)")
ENV_SOURCE = ("TRNSIM_SYSTEM", "TRNSIM_SYSTEM_SET")
_source = CALL_SOURCE  # who chose the system and its overrides, for errors
# an item of TRNSIM_SYSTEM_SET starts at a word followed by "=" (a key path): items are
# separated by whitespace, and a value may hold spaces (topology.dims=[4, 2])
_ITEM = re.compile(r"\s+(?=[A-Za-z_][\w.]*=)")


def split_sets(text: str) -> list[str]:
    """TRNSIM_SYSTEM_SET's items: "ranks_per_chip=1 topology.link.bandwidth=128GB/s" ->
    ["ranks_per_chip=1", "topology.link.bandwidth=128GB/s"]. Whitespace separates items;
    a new item starts only at `key.path=`, so "topology.dims=[4, 2] nodes=2" is two."""
    text = text.strip()
    return _ITEM.split(text) if text else []


def default_system(chip: str, lnc: int | None) -> str | None:
    """The system timing collectives when none is configured: the chip's (trn2 at LNC 2 ->
    trn2-48xl, ...), or None."""
    from trnsim.torch.distributed import DEFAULT_SYSTEMS

    if lnc is None:
        from trnsim.config import load_chip

        try:
            lnc = load_chip(chip).lnc
        except Exception:  # noqa: BLE001 - a bad chip is reported where the chip is made
            return None
    return DEFAULT_SYSTEMS.get((chip, lnc))


def system_config(name: str, overrides=(), source: tuple[str, str] = CALL_SOURCE):
    """The `SystemConfig` called `name` with `overrides` (`key.path=value` strings) applied
    (loaded once); a one-line RuntimeError naming the bad system or key and where it came
    from (`source`: what named the system, what gave the overrides)."""
    key = (name, tuple(overrides))
    cfg = _systems.get(key)
    if cfg is None:
        from trnsim.config import load_system
        from trnsim.errors import TrnsimError

        try:
            cfg = _systems[key] = load_system(name, key[1])
        except (TrnsimError, OSError) as e:
            msg = str(e)
            if msg.startswith("--set "):  # an override's error: `--set key=value: ...`
                raise RuntimeError(f"{source[1]}: {msg[6:]} (system {name})") from None
            raise RuntimeError(f"trnsim system {name!r} ({source[0]}): {msg}") from None
    return cfg


def virtual_world_size_setting() -> int | None:
    """configure(virtual_world_size=...)'s value (None: not given; trnsim.torch.virtual reads
    TRNSIM_VIRTUAL_WORLD_SIZE then)."""
    return _virtual[0]


def started() -> bool:
    return _chip is not None
