"""Device tensors: plain `torch.Tensor`s on `neuron:0` whose storage is a block of the
simulated chip's HBM, and the zero-copy CPU views through which ops compute their values.

A storage is made with `_construct_storage_from_data_pointer(address, device, nbytes)`, so its
`data_ptr()` is the host address of the block's bytes (never a made-up one: native code reads
it): the key back to the block. A weak reference on the storage holds the block, so the bytes
live as long as the storage, and gives the block back to the allocator when the storage dies.

A tensor's conjugate and negative bits (`x.conj()`, `x.conj().imag`) carry over to its CPU view
and from a view's CPU result to the device view: PyTorch resolves them lazily, and lets some
ops (copies, views, `mm`) take them as they are.
"""

from __future__ import annotations

import ctypes
import math
import weakref

import torch

from trnsim.torch import private, state

DEVICE = torch.device("neuron", 0)
_CPU_SET = torch.DispatchKeySet(torch.DispatchKey.CPU)
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset._handle.redispatch_boxed
_storage_at, _empty_shell = private.storage_at, private.empty_shell
_set_conj, _set_neg = private.set_conj, private.set_neg
_refs: dict[int, weakref.ref] = {}  # data_ptr -> the weak reference on its live storage


def _released(ref: weakref.ref) -> None:
    address = ref.address
    if _refs.get(address) is ref:
        del _refs[address]
        chip = state._chip
        if chip is not None:
            chip.allocator.release(address)


class _Ref(weakref.ref):
    __slots__ = ("address", "block")


def span(shape, stride) -> int:
    """Elements a tensor of `shape` and `stride` reaches (0 when it is empty)."""
    if 0 in shape:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride))


def contiguous_stride(shape) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def new_storage(nbytes: int):
    """A neuron storage of `nbytes` on a fresh block; returns (storage, block)."""
    blk = state.get().allocator.alloc(nbytes)
    st = _storage_at(blk.address, DEVICE, nbytes)
    ref = _Ref(st, _released)
    ref.address, ref.block = blk.address, blk
    _refs[blk.address] = ref
    return st, blk


def on_storage(st, offset: int, shape, stride, dtype: torch.dtype, like=None) -> torch.Tensor:
    """A neuron tensor over storage `st` (no allocation), with the conjugate and negative bits
    of CPU tensor `like` (a view's values include them)."""
    t = _empty_shell([0], dtype)
    _set_storage(_CPU_SET, t, st, offset, shape, stride)
    if like is not None:
        if like.is_conj():
            _set_conj(t, True)
        if like.is_neg():
            _set_neg(t, True)
    return t


def empty(shape, dtype: torch.dtype, stride=None) -> tuple[torch.Tensor, object]:
    """A new neuron tensor (values: whatever the block held) and its block."""
    shape = tuple(shape)
    stride = contiguous_stride(shape) if stride is None else tuple(stride)
    st, blk = new_storage(span(shape, stride) * dtype.itemsize)
    return on_storage(st, 0, shape, stride, dtype), blk


def block_of(t: torch.Tensor):
    """The allocator block holding `t`'s storage; RuntimeError for a storage the shim did not
    make."""
    ptr = t.untyped_storage().data_ptr()
    blk = state.get().allocator.blocks.get(ptr)
    if blk is None:
        raise RuntimeError(f"neuron tensor at {ptr:#x} has no device memory from trnsim")
    return blk


def cpu_view(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor sharing `t`'s device bytes (same sizes, strides and offset)."""
    chip = state._chip
    blk = chip.allocator.blocks.get(t.untyped_storage().data_ptr()) if chip else None
    if blk is None:
        blk = block_of(t)
    typed = blk.typed.get(t.dtype)
    if typed is None:
        typed = blk.as_dtype(t.dtype)
    v = typed.as_strided(t.size(), t.stride(), t.storage_offset())
    if t.is_conj():  # lazy bits (`x.conj()`, `x.conj().imag`) are part of the values
        v = v.conj()
    if t.is_neg():
        v = v._neg_view()
    return v


def to_device(r: torch.Tensor) -> torch.Tensor:
    """A new neuron tensor with CPU tensor `r`'s values (its strides, when dense)."""
    dtype, shape = r.dtype, r.shape
    if r.is_conj() or r.is_neg():  # lazy bits: the bytes alone are not the values
        r = r.resolve_conj().resolve_neg()
    if r._is_zerotensor():  # autograd's `_efficientzerotensor`: no bytes at all (a null pointer)
        r = torch.zeros(shape, dtype=dtype)
    if r.is_contiguous():
        nbytes = r.numel() * r.element_size()
        st, blk = new_storage(nbytes)
        t = _empty_shell([0], dtype)
        _set_storage(_CPU_SET, t, st, 0, shape, r.stride())
        _memmove(blk.host_ptr, r.data_ptr(), nbytes)
        return t
    t, blk = empty(shape, dtype, r.stride() if _dense(r) else None)
    blk.as_dtype(dtype).as_strided(shape, t.stride(), 0).copy_(r)
    return t


_memmove = ctypes.memmove


def _dense(r: torch.Tensor) -> bool:
    """Non-overlapping and dense: its strides can be reused as they are."""
    return span(r.shape, r.stride()) == r.numel() and r.storage_offset() == 0 or r.numel() == 0


def nbytes(shape, dtype: torch.dtype) -> int:
    return math.prod(shape) * dtype.itemsize
