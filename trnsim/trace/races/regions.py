"""Memory regions for the race check: what one operand of one instruction (or host copy)
touches, and whether two of them overlap (conservatively) or one holds the other."""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.isa import Ap, Instr
from trnsim.trace.program import Program

__all__ = ["Access", "Shapes", "overlap", "dims_meet", "contains", "instr_accesses"]

WRITE_FIELDS = ("dst", "reduce_dst")


@dataclass(frozen=True, eq=False)
class Access:
    """One operand: `buf` names the memory (a tile, or the base tensor of a view), `dims` the
    (start, stop, step) per dim of `name`'s shape, `flat` the element range [lo, hi) in `buf`."""

    buf: str
    name: str
    dims: tuple
    flat: tuple
    write: bool
    text: str


def _dims(ap: Ap, shape: tuple) -> tuple:
    out = []
    for d, n in enumerate(shape):
        item = ap.index[d] if d < len(ap.index) else (None, None, None)
        if isinstance(item, int):
            i = item + n if item < 0 else item
            out.append((i, i + 1, 1))
            continue
        start, stop, step = item
        step = step or 1
        start = 0 if start is None else (start + n if start < 0 else start)
        stop = n if stop is None else (stop + n if stop < 0 else stop)
        out.append((max(0, start), min(n, max(stop, start + 1)), step))
    return tuple(out)


def _flat(dims: tuple, shape: tuple) -> tuple:
    lo = hi = 0
    stride = 1
    for (start, stop, step), n in zip(reversed(dims), reversed(shape)):
        last = start + (len(range(start, stop, step)) - 1) * step
        lo += start * stride
        hi += last * stride
        stride *= n
    return lo, hi + 1


def _ranges_meet(a: tuple, b: tuple) -> bool:
    if a[0] >= b[1] or b[0] >= a[1]:
        return False
    if a[2] == b[2] and a[2] > 1 and (a[0] - b[0]) % a[2]:
        return False
    return True


def dims_meet(a: tuple, b: tuple) -> bool:
    """Do two slices (dims) of one operand meet in every dim?"""
    for x, y in zip(a, b):
        if x is not y and x != y and not _ranges_meet(x, y):
            return False
    return True


def overlap(a: Access, b: Access) -> bool:
    """Conservative: same name: the slices meet in every dim; views: the flat ranges meet."""
    if a.buf != b.buf:
        return False
    if a.name == b.name:
        return dims_meet(a.dims, b.dims)
    return a.flat[0] < b.flat[1] and b.flat[0] < a.flat[1]


def contains(a: Access, b: Access) -> bool:
    """Does a's region hold all of b's (same name, unit steps in a, or equal slices)?"""
    if a.name != b.name:
        return False
    if a.dims == b.dims:
        return True
    for x, y in zip(a.dims, b.dims):
        if x == y:
            continue
        if x[2] != 1 or y[0] < x[0] or y[1] > x[1]:
            return False
    return True


class Shapes:
    """name -> (base buffer, shape) for tensors (views resolve to their base) and tiles; builds
    (and memoises) the Access of an operand."""

    def __init__(self, program: Program):
        self.tensors = {}
        self.layout = {}  # tensor -> (itemsize, strides or None, offset): flat ranges in bytes
        self.memo: dict = {}
        for t in program.tensors.values():
            base = t
            while base.view is not None and base.view in program.tensors:
                base = program.tensors[base.view]
            self.tensors[t.name] = (f"tensor {base.name}", t.shape)
            self.layout[t.name] = (t.dtype.itemsize, t.strides, t.offset)

    def access(self, ap: Ap, tiles: dict, write: bool) -> Access | None:
        if ap.name in tiles:
            buf, shape = f"tile {ap.name}", tiles[ap.name].shape
        elif ap.name in self.tensors:
            buf, shape = self.tensors[ap.name]
        else:
            return None
        key = (ap, buf, shape, write)
        acc = self.memo.get(key)
        if acc is None:
            dims = _dims(ap, shape)
            flat = _flat(dims, shape) if ap.name in tiles else self._bytes(ap.name, dims, shape)
            acc = self.memo[key] = Access(buf, ap.name, dims, flat, write, str(ap))
        return acc

    def _bytes(self, name: str, dims: tuple, shape: tuple) -> tuple:
        """The byte range [lo, hi) of tensor `name`'s memory the slice `dims` lies in (of a
        strided view: the range from its first to its last element)."""
        isz, strides, offset = self.layout[name]
        if strides is None:
            lo, hi = _flat(dims, shape)
            return lo * isz, hi * isz
        lo = offset + sum(a * s for (a, _b, _c), s in zip(dims, strides))
        hi = offset + sum((a + (len(range(a, b, c)) - 1) * c) * s
                          for (a, b, c), s in zip(dims, strides))  # fmt: skip
        return lo * isz, (hi + 1) * isz


_OPERANDS: dict[type, tuple] = {}


def instr_accesses(ins: Instr, shapes: Shapes, tiles: dict, memo: dict) -> list[Access]:
    """The tile and tensor operands `ins` reads and writes; `memo` caches (operand, write) ->
    Access for one `tiles` (one core program)."""
    fields = _OPERANDS.get(type(ins))
    if fields is None:
        fields = _OPERANDS[type(ins)] = tuple(  # not a barrier's `data`: it only names it
            (f.name, f.name in WRITE_FIELDS) for f in ins.op_fields() if f.metadata["access"]
        )
    out = []
    for name, write in fields:
        v = getattr(ins, name)
        if type(v) is Ap:
            key = (id(v), write)  # the instruction keeps v alive: its id stays its own
            acc = memo.get(key, False)
            if acc is False:
                acc = memo[key] = shapes.access(v, tiles, write)
            if acc is not None:
                out.append(acc)
    return out
