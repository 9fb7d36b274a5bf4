"""Registering the `neuron` device with PyTorch (from Python only; TORCH_SHIM.md): the
PrivateUse1 backend renamed, its device module `torch.neuron`, a device guard and hooks, the
generated `Tensor.neuron()` methods, the aten kernels, and `torch.accelerator`'s functions that
would otherwise raise from C++."""

from __future__ import annotations

import torch

_done = False


class DeviceGuard(torch._C._acc.DeviceGuard):
    """Tells PyTorch the device type; without it `.to("neuron")` and autograd fail."""

    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


class Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index) -> bool:
        return True

    def is_built(self) -> bool:
        return True


def register() -> None:
    """Make `neuron` a PyTorch device (once per process)."""
    global _done
    if _done:
        return
    if torch._C._get_privateuse1_backend_name() != "neuron":
        torch.utils.rename_privateuse1_backend("neuron")
    from trnsim.torch import autocast, kernels, module, profiler, timing  # use device "neuron"

    torch.utils.generate_methods_for_privateuse1_backend()
    module.profiler = profiler  # torch.neuron.profiler
    torch._register_device_module("neuron", module)
    torch._C._acc.register_python_privateuseone_hook(Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(DeviceGuard())
    kernels.register(timing.record)
    autocast.register()
    _wrap_accelerator(module)
    torch.serialization.register_package(5, _tag, _deserialize)
    _done = True


def _wrap_accelerator(module) -> None:
    """`torch.accelerator.synchronize` and `memory_*` answer for neuron by calling the device
    module (they raise from C++ for a device defined in Python)."""
    acc = torch.accelerator
    for name in (
        "synchronize",
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "max_memory_reserved",
        "memory_stats",
        "reset_peak_memory_stats",
        "empty_cache",
    ):
        original = getattr(acc, name, None)
        mine = getattr(module, name)
        if original is None or getattr(original, "_neuron", False):
            continue

        def wrapped(*args, _mine=mine, _original=original, **kwargs):
            if torch._C._get_accelerator().type == "neuron":
                return _mine(*args, **kwargs)
            return _original(*args, **kwargs)

        wrapped._neuron = True
        wrapped.__doc__ = original.__doc__
        setattr(acc, name, wrapped)


def _tag(obj):
    return None  # torch's own tagger names neuron storages "neuron:0"


def _deserialize(obj, location: str):
    """torch.load of a neuron storage: torch's path allocates through a C++ allocator, which a
    device defined in Python does not have; this one goes through the shim's."""
    if not location.startswith("neuron"):
        return None
    if location not in ("neuron", "neuron:0"):
        raise RuntimeError(f"{location}: only neuron:0 holds tensors (see trnsim.torch)")
    out = torch.empty(obj.nbytes(), dtype=torch.uint8, device="neuron").untyped_storage()
    out.copy_(obj)
    return out
