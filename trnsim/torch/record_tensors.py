"""The tensors of a recording (`trnsim.torch.record`): each block of device memory a trace
tensor of bytes, each tensor an op or copy used a strided view of it, an op's result still on
the CPU (PyTorch's result, copied to the device right after the op) bound to the block the
allocator gives it next, meta intermediates as scratch, CPU operands and the host side of
copies as tensors of their own; their values when the recording keeps them."""

from __future__ import annotations

import re

import numpy as np
import torch

from trnsim.torch.tensors import contiguous_stride

Tensor = torch.Tensor
# torch dtype -> the trace's (what the timer times it as)
DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16",
          torch.int64: "int32", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8",
          torch.uint8: "uint8", torch.bool: "uint8", torch.float64: "float32"}  # fmt: skip
NP = {"float32": np.float32, "float16": np.float16, "int32": np.int32, "int16": np.int16,
      "int8": np.int8, "uint8": np.uint8}  # fmt: skip


class TraceTensors:
    """The tensor half of `Recording`: trace names for tensors, and their entries
    (`tensors`), views (`views`), roots (`blocks`), start images and files."""

    def alloc(self, blk, nbytes: int) -> None:
        """The allocator handed out a block while recording (a `Listener`'s `alloc`): a new
        storage; the first pending result (an op's output PyTorch computed on the CPU) of its
        size is copied into it."""
        self.by_host[blk.host_ptr] = blk
        if self.pending:
            r, name = self.pending[0]
            if _storage_bytes(r) == nbytes:
                ptr = r.untyped_storage().data_ptr()  # with it, the views of it named so far
                here = [(x, n) for x, n in self.pending if x.untyped_storage().data_ptr() == ptr]
                self.pending = [(x, n) for x, n in self.pending if all(n != m for _, m in here)]
                for x, n in here:  # (a view of it at its offset: `aten._per_item`'s items)
                    stride = x.stride() if _dense(x) else contiguous_stride(x.shape)
                    at = x.storage_offset() - r.storage_offset()
                    self._view(blk, x.dtype, tuple(x.shape), tuple(stride), at, n)

    def _settle(self) -> None:
        """Results never copied to the device (an `out=` temporary): tensors of their own."""
        for r, name in self.pending:
            self.tensors[name] = {"shape": _shape(r), "dtype": DTYPES.get(r.dtype, "float32")}
        self.pending = []

    def _block(self, t: Tensor):
        ptr = t.untyped_storage().data_ptr()
        if t.device.type == "neuron":
            return self.chip.allocator.blocks.get(ptr)
        blk = self.by_host.get(ptr)
        if blk is None:
            self.by_host = {b.host_ptr: b for b in self.chip.allocator.blocks.values()}
            blk = self.by_host.get(ptr)
        return blk

    def tensor(self, t: Tensor, stream: str, results=()) -> str:
        """The trace name of tensor `t` (a device tensor, the CPU view of one, an op's result
        not yet on the device, a meta intermediate or a CPU scalar)."""
        if t.device.type == "meta":
            return self._scratch(t, stream)
        blk = self._block(t)
        if blk is None:
            for x, name in self.pending:
                if x is t:
                    return name
            ptr = t.untyped_storage().data_ptr()
            # a result, or a view of one (`aten._trailing`'s [rows, n]): named now, placed
            # when the result's storage reaches the device
            if any(t is x or x.untyped_storage().data_ptr() == ptr for x in results):
                name = self._new_name()
                self.pending.append((t, name))
                return name
            return self._constant(t)
        return self._view(blk, t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())

    def _root(self, blk) -> str:
        hit = self.blocks.get(id(blk))
        if hit is None:
            name = f"m{len(self.blocks)}"
            hit = self.blocks[id(blk)] = (blk, name)
            entry = {"shape": [blk.size], "dtype": "uint8"}
            if id(blk) in self.images:
                entry["init"] = {"file": self._file(name, self.images[id(blk)])}
            self.tensors[name] = entry
        return hit[1]

    def _view(self, blk, dtype, shape, strides, offset, name=None) -> str:
        root = self._root(blk)
        dt = DTYPES.get(dtype, "float32")
        key = (root, dt, shape, strides, offset)
        hit = self.views.get(key)
        if hit is not None:
            if name is not None:  # a result landing where a tensor of its kind was
                self.alias[name] = hit
            return hit
        if dtype == torch.int64 and id(blk) in self.images:
            _as_int32(self.images[id(blk)], shape, strides, offset)
        name = name or self._new_name()
        self.views[key] = name
        self.tensors[name] = {"view": root, "dtype": dt, "shape": list(shape) or [1],
                              "strides": list(strides) or [1], "offset": offset}  # fmt: skip
        return name

    def _new_name(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def _scratch(self, t: Tensor, stream: str) -> str:
        """A meta tensor (an intermediate of a composition): scratch of its shape, one per
        stream (ops of two streams may run at once)."""
        name = f"scratch_{_ident(stream)}_{'x'.join(map(str, _shape(t)))}_{t.dtype}".replace(
            "torch.", ""
        )
        self.tensors.setdefault(name, {"shape": _shape(t), "dtype": DTYPES.get(t.dtype)})
        return name

    def _constant(self, t: Tensor) -> str:
        """A CPU tensor an op took (a 0-dim scalar): a device tensor with its value."""
        name = f"c{self._new_name()}"
        entry = {"shape": _shape(t), "dtype": DTYPES.get(t.dtype, "float32")}
        if self.values:
            entry["init"] = {"file": self._file(name, _array(t, entry["dtype"]))}
        self.tensors[name] = entry
        return name

    def _file(self, name: str, values: np.ndarray) -> str:
        folder = f"{self.path.stem}_values"
        self.files[f"{name}.npy"] = values
        return f"{folder}/{name}.npy"

    def _host(self, t: Tensor, sent: bool) -> str:
        """A host tensor of a copy (`on: host`); what the host sent when values are kept."""
        name = f"h{self._new_name()}"
        entry = {"shape": _shape(t), "dtype": DTYPES.get(t.dtype, "float32"), "on": "host"}
        if self.values and sent:
            entry["init"] = {"file": self._file(name, _array(t, entry["dtype"]))}
        self.tensors[name] = entry
        return name


def _ident(name: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return name if re.match(r"[A-Za-z_]", name) else f"t_{name}"


def _shape(t: Tensor) -> list[int]:
    return list(t.shape) or [1]


def _np(dt: str):
    if dt == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return NP[dt]


def _array(t: Tensor, dt: str) -> np.ndarray:
    """`t`'s values as a numpy array of trace dtype `dt` (int64 as int32, bool as uint8)."""
    t = t.detach()
    if t.device.type == "neuron":
        from trnsim.torch.tensors import cpu_view

        t = cpu_view(t)
    t = t.resolve_conj().resolve_neg().contiguous().reshape(_shape(t))  # numpy takes no bits
    if dt == "bfloat16":
        return t.to(torch.bfloat16).view(torch.int16).numpy().view(_np(dt))
    return t.to(torch.float32 if dt == "float32" else t.dtype).numpy().astype(_np(dt))


def _storage_bytes(r: Tensor) -> int:
    """The bytes `to_device` allocates for result `r`."""
    if r.is_contiguous():
        return r.numel() * r.element_size()
    n = 1 + sum((a - 1) * s for a, s in zip(r.shape, r.stride())) if _dense(r) else r.numel()
    return n * r.element_size()


def _dense(r: Tensor) -> bool:
    span = 1 + sum((a - 1) * s for a, s in zip(r.shape, r.stride())) if r.numel() else 0
    return r.is_contiguous() or (span == r.numel() and r.storage_offset() == 0) or not r.numel()


def _as_int32(image: np.ndarray, shape, strides, offset: int) -> None:
    """An int64 tensor of the block image `image`, rewritten as the int32 tensor the trace
    reads there (the same element offsets and strides)."""
    if not shape or 0 in shape:
        return
    span = offset + 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    if span * 8 > image.size:
        return
    as64 = np.lib.stride_tricks.as_strided(
        image.view(np.int64)[offset:], shape, [s * 8 for s in strides]
    ).copy()
    as32 = np.lib.stride_tricks.as_strided(image.view(np.int32)[offset:], shape,
                                           [s * 4 for s in strides])  # fmt: skip
    as32[...] = as64.astype(np.int32)
