"""The torch functions the shim wraps, all here, each with its reason: where torch 2.13 offers
a device defined in Python no hook, a torch function is replaced by one that does the neuron
case and calls the original for every other device (docs/torch.md, "CUDA habits"):

- `torch.UntypedStorage.__new__`: `UntypedStorage(n, device="neuron")` (a storage's `clone`,
  `copy.deepcopy` of a tensor) would take the device's C++ allocator, which a device defined
  in Python does not have (a null pointer: SIGSEGV); the shim's allocator serves it;
- `torch.accelerator`'s functions, which raise from C++ or do nothing for a device defined in
  Python (memory, the device index, streams): routed to `torch.neuron`;
- `torch.random.fork_rng` for neuron without its warning about initialising every device (all
  logical cores draw from the one CPU generator);
- inductor (torch.compile's default backend), which cannot compile for neuron: a clear error
  naming `backend="neuron"` instead of a KeyError deep in its code generation;
- FSDP2's `free_storage` / `alloc_storage` (`fsdp_storage`, replaced when FSDP2's module is
  imported, by a finder on `sys.meta_path`: importing it here would cost seconds): they
  `resize_` a storage, which a device defined in Python cannot serve (NotImplementedError,
  resizePrivateUse1Bytes); for neuron the shim's allocator frees the storage's device memory
  and regrows it (`CachingAllocator.free_bytes` / `regrow`), so `memory_allocated()` shows the
  unsharded parameters freed after forward and back before use, as on a GPU. The storage keeps
  its size (FSDP2 asks `size()` only inside the two functions) and its host bytes.
- `torch.distributed.init_process_group` (torch.distributed's name and distributed_c10d's),
  when the neuron backend registers: with a virtual world size (`virtual.wrap_init`,
  TRNSIM_VIRTUAL_WORLD_SIZE) it makes a default group of N ranks in one process over a local
  store, where torch's env:// rendezvous would wait for N processes; otherwise torch's call.
- Dynamo's skip list (`torch._dynamo.trace_rules`, not a function replaced: trnsim added to it
  when Dynamo is first imported, by the same finder): torch.compile with any backend, not only
  "neuron", must not trace the shim's Python (the process group's methods, which DDP's forward
  calls: Dynamo fails on them as opaque objects).

No other module of the shim assigns to torch's objects (a test checks).
"""

from __future__ import annotations

import functools

import torch
from typing_extensions import deprecated

from trnsim.torch import state
from trnsim.torch.kernels import _check_device, new_storage
from trnsim.torch.private import current_accelerator, storage_new

_done = False


def install(module) -> None:
    """Every wrapper (once per process), `module` being `torch.neuron`."""
    global _done
    if _done:
        return
    torch.UntypedStorage.__new__ = _untyped_storage
    _accelerator(module)
    _fork_rng()
    _inductor()
    fsdp_storage()
    after_import("torch._dynamo.trace_rules", lambda mod: mod.add("trnsim"))
    _done = True


def _neuron_accelerator() -> bool:
    return current_accelerator() == "neuron"


# -- torch.UntypedStorage -----------------------------------------------------------------------


def _untyped_storage(cls, *args, device=None, **kwargs):
    """`torch.UntypedStorage(..., device="neuron")` (a storage's `clone`, `copy.deepcopy` of a
    tensor) from the shim's allocator: PyTorch's would take the device's C++ allocator, which a
    device defined in Python does not have (a null pointer: SIGSEGV)."""
    if device is None or torch.device(device).type != "neuron" or kwargs:
        return storage_new(cls, *args, device=device, **kwargs)
    _check_device(device)
    if not args:
        return new_storage(0)[0]
    (what,) = args
    if isinstance(what, int):
        return new_storage(what)[0]
    values = storage_new(cls, what)  # a sequence of bytes, on the CPU first
    return new_storage(values.nbytes())[0].copy_(values)


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


# -- FSDP2 ---------------------------------------------------------------------------------------

_FSDP = "torch.distributed.fsdp._fully_shard._fsdp_param"


def init_process_group() -> None:
    """`init_process_group` wrapped for a virtual world size (see the module docstring), once."""
    import torch.distributed as dist

    c10d = dist.distributed_c10d
    if getattr(c10d.init_process_group, "_trnsim", False):
        return
    from trnsim.torch import virtual

    c10d.init_process_group = dist.init_process_group = virtual.wrap_init(c10d.init_process_group)


def fsdp_storage() -> None:
    """FSDP2's storage free/regrow for neuron tensors (see the module docstring): now if FSDP2
    is imported, else when it is."""
    after_import(_FSDP, _fsdp_patch)


def after_import(name: str, fn) -> None:
    """`fn(module)` for module `name`: now if it is imported, else right after its first
    import (a finder on `sys.meta_path`, which removes itself)."""
    import sys

    mod = sys.modules.get(name)
    if mod is not None:
        fn(mod)
    elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, fn))


class _AfterImport:
    """Runs `fn(module)` right after module `name` is first imported."""

    def __init__(self, name: str, fn):
        self.name, self.fn = name, fn

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        import importlib.util
        import sys

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run, fn = spec.loader.exec_module, self.fn

        def exec_module(module) -> None:
            run(module)
            fn(module)

        spec.loader.exec_module = exec_module
        return spec


def _fsdp_patch(mod) -> None:
    if getattr(mod.free_storage, "_neuron", False):
        return
    free, alloc = mod.free_storage, mod.alloc_storage

    @functools.wraps(free)
    def free_storage(tensor) -> None:
        if tensor.device.type != "neuron":
            return free(tensor)
        state.get().allocator.free_bytes(tensor.untyped_storage().data_ptr())

    @functools.wraps(alloc)
    def alloc_storage(tensor) -> None:
        if tensor.device.type != "neuron":
            return alloc(tensor)
        state.get().allocator.regrow(tensor.untyped_storage().data_ptr())

    free_storage._neuron = True
    mod.free_storage, mod.alloc_storage = free_storage, alloc_storage
