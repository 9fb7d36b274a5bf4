"""What CUDA habits reach in PyTorch beyond the device module, made to work for `neuron` (or to
fail clearly), from Python only (docs/torch.md, "CUDA habits"):

- kernels PyTorch has no Python hook for: pinned memory (`Tensor.pin_memory()`, `is_pinned`,
  `DataLoader(pin_memory=True)`) by CPU kernels that copy (PrivateUse1's hooks interface, whose
  pinned allocator raises, is not overridable from Python); `.to("cpu", non_blocking=True)` by
  a `_to_copy` that does not ask for pinned memory; `record_stream`, accepted (the allocator
  holds no block for another stream: ops compute their values at once);
- `torch.accelerator`'s functions that raise from C++ or do nothing for a device defined in
  Python (memory, the device index, streams), routed to `torch.neuron`;
- `torch.random.fork_rng` for neuron without its warning about initialising every device (all
  logical cores draw from the one CPU generator);
- inductor (torch.compile's default backend), which cannot compile for neuron: a clear error
  naming `backend="neuron"` instead of a KeyError deep in its code generation.
"""

from __future__ import annotations

import functools
import weakref

import torch
from typing_extensions import deprecated

CEA = torch.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
_lib: torch.library.Library | None = None
_pinned: dict[int, weakref.finalize] = {}  # storage data_ptr -> its finalizer (alive: pinned)


def install(module) -> None:
    """Everything above (once per process); after the aten kernels are registered."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    _kernels(_lib)
    _accelerator(module)
    _fork_rng()
    _inductor()


def _neuron_accelerator() -> bool:
    return torch._C._get_accelerator().type == "neuron"


# -- kernels -------------------------------------------------------------------------------------


def _kernels(lib) -> None:
    """Each kernel only where none is registered (trnsim.torch.kernels may come to have it)."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for name, fn, key in (
        ("_pin_memory", _pin_memory, "CPU"),
        ("is_pinned", _is_pinned, "CPU"),
        ("_to_copy", _to_copy, "PrivateUse1"),
        ("record_stream", _record_stream, "PrivateUse1"),
    ):
        if not has(f"aten::{name}", key):
            lib.impl(name, fn, key)


def _for_neuron(device) -> bool:
    """Pinning asked for neuron: named, or the current accelerator's."""
    if device is None:
        return _neuron_accelerator()
    return torch.device(device).type == "neuron"


def _mark_pinned(t: torch.Tensor) -> torch.Tensor:
    """`t`'s storage answers is_pinned() True while it lives."""
    st = t.untyped_storage()
    ptr = st.data_ptr()
    if ptr and ptr not in _pinned:
        _pinned[ptr] = weakref.finalize(st, _pinned.pop, ptr, None)
    return t


def _pin_memory(self, device=None):
    """A copy in ordinary host memory, marked pinned (a copy's time is the host link's either
    way: the simulator does not model pageable transfers)."""
    if not _for_neuron(device):
        return torch.ops.aten._pin_memory.default._handle.redispatch_boxed(CEA, self, device)
    out = torch.empty_strided(self.size(), self.stride(), dtype=self.dtype)
    out.copy_(self)
    return _mark_pinned(out)


def _is_pinned(self, device=None) -> bool:
    if not _for_neuron(device):
        return torch.ops.aten.is_pinned.default._handle.redispatch_boxed(CEA, self, device)
    f = _pinned.get(self.untyped_storage().data_ptr())
    return f is not None and f.alive


def _to_copy(self, **kwargs):
    """PyTorch's own `_to_copy`, except that a non-blocking copy to the host does not ask for
    pinned memory (which raises for a device defined in Python); its result is marked pinned,
    as CUDA's is."""
    handle = torch.ops.aten._to_copy.default._handle
    device = kwargs.get("device")
    if kwargs.get("non_blocking") and device is not None and torch.device(device).type == "cpu":
        kwargs = {**kwargs, "non_blocking": False, "pin_memory": None}
        return _mark_pinned(handle.redispatch_boxed(CEA, self, **kwargs))
    return handle.redispatch_boxed(CEA, self, **kwargs)


def _record_stream(self, s) -> None:
    """Accepted: the caching allocator reuses a dead tensor's block for the next request, and
    no op can see it too early (values are computed when an op is enqueued)."""
    if s.device_type != int(torch._C._autograd.DeviceType.PrivateUse1):
        raise RuntimeError(f"record_stream: a neuron tensor and a stream on {s.device}")


# -- torch.accelerator ---------------------------------------------------------------------------

# torch.accelerator(.memory) name -> torch.neuron name
MEMORY = {
    "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated",
    "memory_reserved": "memory_reserved",
    "max_memory_reserved": "max_memory_reserved",
    "memory_stats": "memory_stats",
    "reset_peak_memory_stats": "reset_peak_memory_stats",
    "reset_accumulated_memory_stats": "reset_accumulated_memory_stats",
    "get_memory_info": "mem_get_info",
}


def _route(original, mine, index: bool = True):
    """`original` for other accelerators; `mine` for neuron, given the device index torch's
    own argument checks make of the argument (`index`)."""
    from torch.accelerator._utils import _get_device_index

    @functools.wraps(original)
    def wrapped(*args, **kwargs):
        if not _neuron_accelerator():
            return original(*args, **kwargs)
        if index and args:
            args = (_get_device_index(args[0], optional=True), *args[1:])
        return mine(*args, **kwargs)

    return wrapped


def _accelerator(module) -> None:
    """torch.accelerator's functions answer for neuron by calling the device module: they
    raise from C++ (memory: "not a DeviceAllocator"; empty_host_cache crashes the process) or
    change nothing (set_device_index, device_index) for a device defined in Python."""
    acc, mem = torch.accelerator, torch.accelerator.memory
    from torch.accelerator._utils import _get_device_index

    def set_device_index(device, /) -> None:
        module.set_device(_get_device_index(device, optional=False))

    routes = {name: getattr(module, mine) for name, mine in MEMORY.items()}
    routes["empty_cache"] = module.empty_cache
    routes["empty_host_cache"] = lambda: None  # pinned copies are ordinary host memory
    for name, mine in routes.items():
        original = getattr(mem, name)
        wrapped = _route(original, mine, index=name not in ("empty_cache", "empty_host_cache"))
        setattr(mem, name, wrapped)  # the module's functions call each other through it
        if getattr(acc, name, None) is original:
            setattr(acc, name, wrapped)
    for name, mine, index in (
        ("synchronize", module.synchronize, True),
        ("current_device_index", module.current_device, False),
        ("set_device_index", set_device_index, False),
        ("current_stream", module.current_stream, True),
        ("set_stream", _set_stream(module), False),
    ):
        setattr(acc, name, _route(getattr(acc, name), mine, index))
    acc.set_device_idx = deprecated("Use `set_device_index` instead.", category=FutureWarning)(
        acc.set_device_index
    )
    acc.current_device_idx = deprecated(
        "Use `current_device_index` instead.", category=FutureWarning
    )(acc.current_device_index)
    original = acc.device_index
    acc.device_index = type("device_index", (_DeviceIndex, original), {"__doc__": original.__doc__})


def _set_stream(module):
    def set_stream(stream) -> None:
        if not isinstance(stream, module.Stream):
            raise TypeError(
                f"torch.accelerator.set_stream on neuron takes a torch.neuron.Stream, got "
                f"{stream!r} (torch.Stream(device='neuron') is PyTorch's no-op stream)"
            )
        module.set_stream(stream)

    return set_stream


class _DeviceIndex:
    """torch.accelerator.device_index for neuron: torch.neuron.device's switch."""

    def __enter__(self) -> None:
        if not _neuron_accelerator():
            return super().__enter__()
        if self.idx is not None:
            self.prev_idx = torch.neuron.current_device()
            torch.neuron.set_device(self.idx)

    def __exit__(self, *exc_info) -> None:
        if not _neuron_accelerator():
            return super().__exit__(*exc_info)
        if self.idx is not None:
            torch.neuron.set_device(self.prev_idx)


# -- fork_rng ------------------------------------------------------------------------------------


def _fork_rng() -> None:
    """fork_rng(device_type="neuron") saves and restores the CPU generator's state (taken
    once, for every core: there is one generator), without warning that it initialises each
    of device_count() devices."""
    original = torch.random.fork_rng

    @functools.wraps(original)
    def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices",
                 device_type=None):  # fmt: skip
        if devices is None and (device_type == "neuron" or device_type is None
                                and _neuron_accelerator()):  # fmt: skip
            devices = [torch.neuron.current_device()]
        return original(devices, enabled, _caller, _devices_kw, device_type)

    torch.random.fork_rng = fork_rng


# -- inductor ------------------------------------------------------------------------------------

INDUCTOR = (
    "torch.compile's default backend, inductor, cannot compile for the neuron device (it "
    "generates C++ and Triton code for CPUs and GPUs); use torch.compile(model, "
    'backend="neuron"), or torch.compiler.set_default_backend("neuron") once'
)


def _inductor() -> None:
    """torch.compile(model) on neuron tensors: the error above, at the first call, before
    inductor's own work (its KeyError: 'neuron' came after lowering the whole graph)."""
    cls = torch._TorchCompileInductorWrapper
    original = cls.__call__

    @functools.wraps(original)
    def __call__(self, model_, inputs_, *args, **kwargs):
        if _on_neuron(model_, inputs_):
            raise RuntimeError(INDUCTOR)
        return original(self, model_, inputs_, *args, **kwargs)

    cls.__call__ = __call__


def _on_neuron(gm, inputs) -> bool:
    """Any graph input, or any value the graph makes, on neuron."""
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.device.type == "neuron":
            return True
    for node in getattr(getattr(gm, "graph", None), "nodes", ()):
        v = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(v, torch.Tensor) and v.device.type == "neuron":
            return True
    return False
