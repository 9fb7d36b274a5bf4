"""Registering the `neuron` device with PyTorch (from Python only; TORCH_SHIM.md): the
PrivateUse1 backend renamed, its device module `torch.neuron`, a device guard and hooks, the
generated `Tensor.neuron()` methods, the aten kernels, and what CUDA habits reach beyond them
(`hooks`: pinned memory and the host copy's kernels; `wrappers`: the torch functions wrapped,
`torch.accelerator`, `fork_rng`, inductor's error). Private `torch._C` APIs: `private`."""

from __future__ import annotations

import torch

from trnsim.torch import private

_done = False


class DeviceGuard(private.DeviceGuardBase):
    """Tells PyTorch the device type; without it `.to("neuron")` and autograd fail."""

    def type_(self):
        return private.PRIVATEUSE1


class Hooks(private.HooksBase):
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
    if private.backend_name() != "neuron":
        torch.utils.rename_privateuse1_backend("neuron")
    from trnsim.torch import (
        autocast,
        distributed,
        hooks,
        kernels,
        module,
        profiler,
        timing,
        wrappers,
    )

    torch.utils.generate_methods_for_privateuse1_backend()
    module.profiler = profiler  # torch.neuron.profiler
    torch._register_device_module("neuron", module)
    private.register_hooks(Hooks())
    private.register_device_guard(DeviceGuard())
    kernels.register(timing.record)
    autocast.register()
    hooks.install()
    wrappers.install(module)
    distributed.register()  # the process-group backend "neuron" (docs/distributed.md)
    torch.serialization.register_package(5, _tag, _deserialize)
    _done = True


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
