"""Every private `torch._C` API the shim uses, in one place, each with why (torch 2.13 offers
no public one for a device defined in Python). A torch upgrade that moves one breaks here."""

from __future__ import annotations

import torch

_C = torch._C

# -- registering the device (register) ------------------------------------------------------------
# the device guard and hooks a PrivateUse1 backend must provide: without the guard `.to("neuron")`
# and autograd fail; the hooks answer is_available() and friends
DeviceGuardBase = _C._acc.DeviceGuard
HooksBase = _C._acc.PrivateUse1Hooks
register_hooks = _C._acc.register_python_privateuseone_hook
register_device_guard = _C._acc.register_python_privateuseone_device_guard
# whether the backend is already renamed (rename_privateuse1_backend raises on a second call)
backend_name = _C._get_privateuse1_backend_name
# the device type torch's streams and guards report for PrivateUse1
PRIVATEUSE1 = _C._autograd.DeviceType.PrivateUse1


def current_accelerator() -> str:
    """The type of torch's current accelerator ("neuron" once registered)."""
    return _C._get_accelerator().type


# -- which aten ops have kernels (kernels, hooks) ------------------------------------------------
all_op_names = _C._dispatch_get_all_op_names  # every registered op ("aten::add.Tensor", ...)
has_kernel = _C._dispatch_has_kernel_for_dispatch_key  # (op name, dispatch key) -> bool

# -- device tensors over host bytes (tensors) ------------------------------------------------------
# a storage over the device block's bytes (their real host address: native code may read it)
storage_at = _C._construct_storage_from_data_pointer
# a tensor shell of the PrivateUse1 device, whose storage is then set
empty_shell = _C._acc.create_empty_tensor
# a view keeps its conjugate and negative bits (PyTorch's views set them from C++)
set_conj, set_neg = _C._set_conj, _C._set_neg
# torch.UntypedStorage's own constructor (the shim's wraps it for device="neuron")
storage_new = _C.StorageBase.__new__

# -- autocast (autocast) -------------------------------------------------------------------------
# an op under autocast runs its kernel with the autocast key excluded, as torch's own kernels do
ExcludeDispatchKeyGuard = _C._ExcludeDispatchKeyGuard
