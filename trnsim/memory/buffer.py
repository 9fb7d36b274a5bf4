"""Buffers (tiles and tensors) and the bound references (`Ref`) that instructions operate on.

A `Ref` is an access pattern resolved against a buffer: bounds are checked once, when the
program is built, so the simulation loop never re-parses or re-checks operands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trnsim.dtypes import DType, to_dtype
from trnsim.errors import SimError
from trnsim.isa import Ap

ONCHIP = ("sbuf", "psum")


@dataclass(eq=False)
class Buffer:
    """A tile (SBUF/PSUM, first dim = partitions) or a tensor (HBM or host memory).

    `offset` is the byte offset inside each partition for tiles, the device address for HBM
    tensors. `array` is the backing store; None in timing-only mode.
    """

    name: str
    memory: str
    shape: tuple[int, ...]
    dtype: DType
    array: np.ndarray | None = None
    offset: int = 0
    core: int = 0
    live: tuple[int, int] | None = None  # a tile's op steps [first, last]; None: the launch

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def partition_bytes(self) -> int:
        """Bytes each partition holds (tiles only)."""
        return math.prod(self.shape[1:]) * self.dtype.itemsize

    @property
    def onchip(self) -> bool:
        return self.memory in ONCHIP


@dataclass(eq=False)
class Ref:
    """An operand bound to a buffer: `ranges` has one (start, stop, step) per buffer dim;
    `shape` is the shape of the view (dims indexed by an int are dropped, as in numpy); `ap`
    the operand it was bound from (its text, `text`, is written out only when shown)."""

    buf: Buffer
    ranges: tuple[tuple[int, int, int], ...]
    shape: tuple[int, ...]
    key: tuple
    ap: Ap
    bcast: tuple[int, ...] = ()  # the view dims read with stride 0 (`Ap.bcast`)

    @property
    def dtype(self) -> DType:
        return self.buf.dtype

    @property
    def memory(self) -> str:
        return self.buf.memory

    @property
    def partitions(self) -> int:
        """Partition count of an on-chip operand (its first view dim)."""
        return self.shape[0] if self.shape else 1

    @property
    def p_start(self) -> int:
        return self.ranges[0][0]

    @property
    def free_size(self) -> int:
        """Elements per partition (N in the cost formulas)."""
        return math.prod(self.shape[1:])

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.buf.dtype.itemsize

    @property
    def contiguous(self) -> bool:
        """True when the innermost dim is read with unit stride (full-rate access): not a
        broadcast one (stride 0)."""
        return self.ranges[-1][2] == 1 and len(self.shape) - 1 not in self.bcast

    def read(self) -> np.ndarray:
        """The current values (a numpy view; functional mode only), broadcast dims
        repeated."""
        v = self.buf.array[self.key]
        if self.bcast:
            v = np.broadcast_to(np.expand_dims(v, self.bcast), self.shape)
        return v

    def read_f32(self) -> np.ndarray:
        """The values converted to fp32, the engines' internal compute type."""
        return self.read().astype(np.float32)

    def write(self, values) -> None:
        """Store values cast to this buffer's dtype (round to nearest even for floats)."""
        if self.bcast:  # `check_written` refuses such an operand before a run
            raise SimError(f"'{self}' has a broadcast dim; it cannot be written")
        v = np.asarray(values)
        if v.shape != self.shape:
            v = v.reshape(self.shape)
        if v.dtype != self.buf.dtype.np:
            v = to_dtype(v, self.buf.dtype)
        self.buf.array[self.key] = v

    @property
    def text(self) -> str:
        return str(self.ap)

    def __str__(self) -> str:
        return str(self.ap)


def _at(where: str | tuple) -> str:
    """bind's `where`: as given, or (instruction, field) written out."""
    return where if where.__class__ is str else f"{where[0].label} {where[1]}"


def bind(ap: Ap, buf: Buffer, where: str | tuple) -> Ref:
    """Resolve `ap` against `buf`, checking every index against the buffer's shape.

    `where` names the instruction and field for error messages (`instruction 3 (matmul) moving`),
    or is (instruction, field name), written out only for an error (the planner binds every
    distinct operand: building the text for each was a twentieth of planning).
    """
    idx = ap.index
    if len(idx) > len(buf.shape):
        raise SimError(
            f"{_at(where)}: '{ap}' has {len(idx)} indices but {buf.name} has "
            f"{len(buf.shape)} dims (shape {list(buf.shape)})"
        )
    ranges, shape, key = [], [], []
    for d, n in enumerate(buf.shape):
        item = idx[d] if d < len(idx) else (None, None, None)
        if isinstance(item, int):
            i = item + n if item < 0 else item
            if not 0 <= i < n:
                raise SimError(
                    f"{_at(where)}: index {item} is out of bounds for dim {d} of {buf.name} "
                    f"(size {n})"
                )
            ranges.append((i, i + 1, 1))
            key.append(i)
            continue
        start, stop, step = item
        step = 1 if step is None else step
        start = 0 if start is None else (start + n if start < 0 else start)
        stop = n if stop is None else (stop + n if stop < 0 else stop)
        if step <= 0:
            raise SimError(f"{_at(where)}: slice step must be positive in '{ap}'")
        if not 0 <= start < stop <= n:
            raise SimError(
                f"{_at(where)}: slice {start}:{stop} is out of bounds for dim {d} of "
                f"{buf.name} (size {n}) in '{ap}'"
            )
        ranges.append((start, stop, step))
        shape.append(len(range(start, stop, step)))
        key.append(slice(start, stop, step))
    if buf.onchip and (isinstance(idx[0] if idx else None, int) or ranges[0][2] != 1):
        raise SimError(
            f"{_at(where)}: '{ap}' must take a contiguous range of partitions "
            f"(no integer index or step on the partition dim of a tile)"
        )
    bcast = _broadcast(ap, buf, shape, where) if ap.bcast else ()
    return Ref(buf, tuple(ranges), tuple(shape), tuple(key), ap, bcast)


def _broadcast(ap: Ap, buf: Buffer, shape: list[int], where) -> tuple[int, ...]:
    """Insert `ap`'s broadcast dims into the view's `shape`; their view positions."""
    items = list(ap.index) + [(None, None, None)] * (len(buf.shape) - len(ap.index))
    out = []
    for k, n in ap.bcast:
        if not 0 <= k <= len(items) or n < 1:
            raise SimError(
                f"{_at(where)}: broadcast *{n} of '{ap}' is after index entry {k} of "
                f"{len(items)} (expected a count of 1 or more among {buf.name}'s dims)"
            )
        pos = sum(not isinstance(i, int) for i in items[:k]) + len(out)
        if pos == 0 or (buf.onchip and k == 0):
            raise SimError(
                f"{_at(where)}: '{ap}' broadcasts its first dim; the partition dim of a tile "
                f"cannot be broadcast (expected *n after the partition range)"
            )
        shape.insert(pos, n)
        out.append(pos)
    return tuple(out)
