"""Device memory by bytes: buffers from the chip's HBM allocator, strided views over them, and
per-device statistics with torch.cuda's names.

`Device.malloc(nbytes)` returns a `DeviceBuffer` (an address and a size); `buf.view(dtype, shape,
strides, offset)` or `buf[...]` slicing of a view give `TensorView`s that share its bytes. In
functional mode a buffer's bytes are a numpy `uint8` array and a view's `array` is a numpy view
of them (no copy); in timing mode there are no bytes and `array` is None. A freed buffer, and
every view of it, raise `UseAfterFreeError` when used; a bad argument (size, dtype, shape,
index) raises `InvalidValueError` at the call.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from trnsim.dtypes import DTYPES, DType, dtype
from trnsim.errors import TrnsimError
from trnsim.memory.buffer import Buffer
from trnsim.runtime.errors import InvalidValueError, UseAfterFreeError


class DeviceBuffer:
    """`nbytes` of HBM at device address `address`, owned by one device (logical core).

    `size` is the block actually taken from the allocator (`nbytes` rounded up to the HBM
    alignment). Use `view` for typed access."""

    __slots__ = ("device", "address", "nbytes", "size", "raw", "freed")

    def __init__(self, device, address: int, nbytes: int, size: int, raw: np.ndarray | None):
        self.device, self.address, self.nbytes, self.size = device, address, nbytes, size
        self.raw = raw  # the bytes (functional mode)
        self.freed = False

    def check(self, where: str, hint: str = "") -> None:
        """Raise UseAfterFreeError (`where`, then `hint` if given) if the buffer was freed."""
        if self.freed:
            raise UseAfterFreeError(
                f"{where}: use of freed device buffer at {self.address:#x} ({self.nbytes} bytes)"
                + (f"; {hint}" if hint else "")
            )

    def view(self, dt, shape=None, strides=None, offset: int = 0) -> TensorView:
        """A typed view (no copy): `shape` (default: the whole buffer as 1-D), `strides` in
        elements (default: contiguous, row-major), `offset` in bytes from the buffer's start."""
        dt = dt if isinstance(dt, DType) else _dtype(dt)
        if shape is None:
            shape = (self.nbytes // dt.itemsize,)
        return TensorView(self, dt, shape, strides, offset)

    def __repr__(self) -> str:
        state = " freed" if self.freed else ""
        return f"DeviceBuffer(address={self.address:#x}, nbytes={self.nbytes}{state})"


def _dtype(name) -> DType:
    try:
        return dtype(name)
    except (KeyError, TypeError):  # TypeError: an unhashable name
        raise InvalidValueError(
            f"view: unknown dtype {name!r}; expected one of {', '.join(DTYPES)}"
        ) from None


def ints(values, what: str) -> tuple[int, ...]:
    """`values` as a tuple of ints (numpy integers too, but no floats, which `int` would
    truncate); InvalidValueError naming `what` otherwise."""
    try:
        return tuple(operator.index(x) for x in values)
    except TypeError:
        raise InvalidValueError(f"{what} {values!r}: expected a sequence of ints") from None


def size_arg(nbytes, what: str) -> int:
    """A size in bytes given to `what` (malloc): a non-negative int, as C's size_t (a float or
    a string is a mistake, not a size to round); InvalidValueError otherwise."""
    try:
        n = operator.index(nbytes)
    except TypeError:
        n = -1
    if n < 0 or isinstance(nbytes, bool):
        raise InvalidValueError(f"{what}: size {nbytes!r}: expected a non-negative int (bytes)")
    return n


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides, in elements."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


class TensorView:
    """A strided view of a device buffer: `offset` (bytes), `shape`, `strides` (elements, as in
    torch) and `dtype`. Views of one buffer share its memory; slicing (`v[:, 0:128]`) gives
    another view."""

    __slots__ = ("buffer", "dtype", "shape", "strides", "offset", "_bound")

    def __init__(self, buffer: DeviceBuffer, dt: DType, shape, strides=None, offset: int = 0):
        buffer.check("view")
        shape = ints(shape, "view: shape")
        strides = contiguous_strides(shape) if strides is None else ints(strides, "view: strides")
        if len(strides) != len(shape) or any(n < 0 for n in shape) or any(s < 0 for s in strides):
            raise InvalidValueError(
                f"view: shape {list(shape)} and strides {list(strides)}: expected one "
                f"non-negative stride per non-negative dim"
            )
        if offset < 0 or offset % dt.itemsize:
            raise InvalidValueError(f"view: offset {offset} is not a multiple of {dt.name}'s size")
        last = sum((n - 1) * s for n, s in zip(shape, strides)) if math.prod(shape) else -1
        end = offset + (last + 1) * dt.itemsize
        if end > buffer.nbytes:
            raise InvalidValueError(
                f"view: {list(shape)} {dt.name} with strides {list(strides)} at offset {offset} "
                f"needs {end} bytes; the buffer has {buffer.nbytes}"
            )
        self.buffer, self.dtype, self.shape, self.strides = buffer, dt, shape, strides
        self.offset = offset
        self._bound: dict[tuple[str, bool], Buffer] = {}

    @property
    def data_ptr(self) -> int:
        """The device address of the first element."""
        return self.buffer.address + self.offset

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def is_contiguous(self) -> bool:
        return self.strides == contiguous_strides(self.shape)

    @property
    def array(self) -> np.ndarray | None:
        """The values as a numpy view of the buffer's bytes (functional mode), else None."""
        self.buffer.check("array")
        raw = self.buffer.raw
        if raw is None:
            return None
        isz = self.dtype.itemsize
        return np.ndarray(
            self.shape,
            self.dtype.np,
            raw,
            self.offset,
            tuple(s * isz for s in self.strides),
        )

    def numpy(self) -> np.ndarray:
        """A copy of the values (functional mode)."""
        arr = self.array
        if arr is None:
            raise TrnsimError("numpy(): the device is timing-only; its buffers hold no values")
        return arr.copy()

    def view(self, shape) -> TensorView:
        """The same elements with another shape (the view must be contiguous)."""
        shape = ints(shape, "view: shape")
        if math.prod(shape) != self.numel or not self.is_contiguous:
            raise InvalidValueError(
                f"view {list(shape)} of a {list(self.shape)} "
                f"{'contiguous' if self.is_contiguous else 'strided'} view: element counts "
                f"must match and the view must be contiguous"
            )
        return TensorView(self.buffer, self.dtype, shape, None, self.offset)

    def __getitem__(self, key) -> TensorView:
        """Basic indexing: ints and slices with positive steps, one per leading dim."""
        key = key if isinstance(key, tuple) else (key,)
        if len(key) > len(self.shape):
            raise InvalidValueError(f"index {key}: too many indices for a {len(self.shape)}-d view")
        offset, shape, strides = self.offset, [], []
        isz = self.dtype.itemsize
        for d, (n, st) in enumerate(zip(self.shape, self.strides)):
            k = key[d] if d < len(key) else slice(None)
            if isinstance(k, int):
                i = k + n if k < 0 else k
                if not 0 <= i < n:
                    raise InvalidValueError(f"index {k} is out of bounds for dim {d} (size {n})")
                offset += i * st * isz
                continue
            if not isinstance(k, slice):
                raise InvalidValueError(f"index {k!r}: only ints and slices index a view")
            start, stop, step = k.indices(n)
            if step <= 0:
                raise InvalidValueError(f"index {k}: slice steps must be positive")
            count = len(range(start, stop, step))
            offset += start * st * isz if count else 0
            shape.append(count)
            strides.append(st * step)
        return TensorView(self.buffer, self.dtype, shape, strides, offset)

    def bound(self, name: str, values: bool = True) -> Buffer:
        """The view as the named tensor a kernel's instructions bind to (cached per name);
        without `values` (a timing-only launch) the Buffer has no array."""
        self.buffer.check(f"tensor {name}")
        buf = self._bound.get((name, values))
        if buf is None:
            arr = self.array if values else None
            buf = Buffer(name, "hbm", self.shape, self.dtype, arr, self.data_ptr)
            self._bound[(name, values)] = buf
        return buf

    def __repr__(self) -> str:
        return (
            f"TensorView({list(self.shape)} {self.dtype.name}, strides={list(self.strides)}, "
            f"data_ptr={self.data_ptr:#x})"
        )


class MemoryStats:
    """Counters of one device's allocations, read as torch.cuda's `memory_stats()` keys.

    There is no caching allocator: a freed block goes straight back to the chip's HBM, so
    reserved equals allocated. Allocated sizes are the blocks taken (rounded up to the HBM
    alignment); requested sizes are what `malloc` was asked for."""

    def __init__(self):
        self.allocated = self.allocated_peak = self.allocated_total = self.freed_total = 0
        self.requested = self.requested_peak = self.requested_total = self.requested_freed = 0
        self.count = self.count_peak = self.count_total = self.count_freed = 0
        self.ooms = 0

    def on_malloc(self, buf: DeviceBuffer) -> None:
        self.allocated += buf.size
        self.allocated_total += buf.size
        self.requested += buf.nbytes
        self.requested_total += buf.nbytes
        self.count += 1
        self.count_total += 1
        self.allocated_peak = max(self.allocated_peak, self.allocated)
        self.requested_peak = max(self.requested_peak, self.requested)
        self.count_peak = max(self.count_peak, self.count)

    def on_free(self, buf: DeviceBuffer) -> None:
        self.allocated -= buf.size
        self.freed_total += buf.size
        self.requested -= buf.nbytes
        self.requested_freed += buf.nbytes
        self.count -= 1
        self.count_freed += 1

    def reset_peak(self) -> None:
        self.allocated_peak, self.requested_peak = self.allocated, self.requested
        self.count_peak = self.count

    def as_dict(self) -> dict[str, int]:
        """The statistics under torch.cuda.memory_stats()'s names (the "all" pool only)."""
        out = {}
        for key, cur, peak, total, freed in (
            ("allocated_bytes", self.allocated, self.allocated_peak, self.allocated_total,
             self.freed_total),
            ("reserved_bytes", self.allocated, self.allocated_peak, self.allocated_total,
             self.freed_total),
            ("requested_bytes", self.requested, self.requested_peak, self.requested_total,
             self.requested_freed),
            ("allocation", self.count, self.count_peak, self.count_total, self.count_freed),
            ("segment", self.count, self.count_peak, self.count_total, self.count_freed),
        ):  # fmt: skip
            out[f"{key}.all.current"] = cur
            out[f"{key}.all.peak"] = peak
            out[f"{key}.all.allocated"] = total
            out[f"{key}.all.freed"] = freed
        out["num_ooms"] = self.ooms
        out["num_alloc_retries"] = 0
        return out
