"""Kernels for what CUDA habits reach beyond the aten ops, made to work for `neuron` from Python
only (docs/torch.md, "CUDA habits"): pinned memory (`Tensor.pin_memory()`, `is_pinned`,
`DataLoader(pin_memory=True)`) by CPU kernels that copy (PrivateUse1's hooks interface, whose
pinned allocator raises, is not overridable from Python); `.to("cpu", non_blocking=True)` by a
`_to_copy` that does not ask for pinned memory; `record_stream`, accepted (the allocator holds
no block for another stream: ops compute their values at once). The torch functions the shim
must wrap (torch.accelerator, fork_rng, inductor) are in `wrappers`.
"""

from __future__ import annotations

import weakref

import torch

from trnsim.torch.private import PRIVATEUSE1, current_accelerator, has_kernel

CEA = torch.DispatchKeySet(torch.DispatchKey.CompositeExplicitAutograd)
_lib: torch.library.Library | None = None
_pinned: dict[int, weakref.finalize] = {}  # storage data_ptr -> its finalizer (alive: pinned)


def install() -> None:
    """The kernels above (once per process); after the aten kernels are registered."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    _kernels(_lib)


def _neuron_accelerator() -> bool:
    return current_accelerator() == "neuron"


# -- kernels -------------------------------------------------------------------------------------


def _kernels(lib) -> None:
    """Each kernel only where none is registered (trnsim.torch.kernels may come to have it)."""
    has = has_kernel
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
    as CUDA's is, and the host does not wait for it (`kernels.host_async`)."""
    handle = torch.ops.aten._to_copy.default._handle
    device = kwargs.get("device")
    if kwargs.get("non_blocking") and device is not None and torch.device(device).type == "cpu":
        from trnsim.torch import kernels

        kwargs = {**kwargs, "non_blocking": False, "pin_memory": None}
        kernels.host_async[0] = True  # the copy inside is still non-blocking for the host
        try:
            return _mark_pinned(handle.redispatch_boxed(CEA, self, **kwargs))
        finally:
            kernels.host_async[0] = False
    return handle.redispatch_boxed(CEA, self, **kwargs)


def _record_stream(self, s) -> None:
    """Accepted: the caching allocator reuses a dead tensor's block for the next request, and
    no op can see it too early (values are computed when an op is enqueued)."""
    if s.device_type != int(PRIVATEUSE1):
        raise RuntimeError(f"record_stream: a neuron tensor and a stream on {s.device}")
