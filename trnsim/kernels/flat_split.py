"""Which tensors of an LNC 2 kernel the elementwise ops may share between the two physical cores by
flat elements instead of by rows.

Every op of a kernel gives each physical core its share of the rows of the tensors it computes,
`layout.core_rows`, a function of the row count alone, so that a core reads back only rows it
wrote itself and the cores need not meet between ops. Rows are cut at multiples of 128 (a
matmul's cores each stream all of B, so a share under 128 rows is not worth it): a tensor of 128
rows or fewer, a vector (one row) above all, is then all one core's. Elementwise ops do not care
which element is where, so they could cut the elements evenly instead (`layout.flat_share`), but
only if no other op of the kernel touches those elements by rows: a matmul that wrote a [16,
2^20] tensor on one core, read by an elementwise op on both, would race. `flat_shapes` lists the
shapes whose every tensor is touched only by the ops of FLAT (elementwise ops on operands of one
shape and numbers: `elementwise`, `fusion`, the backward ops of `backward` and the optimizer's
of `optim`, all walking `layout.flat_blocks`) and none of which the kernel touches under
another name too (a view and its base, two views of one base whose bytes overlap: `_aliased`)
or is a view with other strides than dense row-major ones; a broadcast (`add` of a tensor and a
row or column) counts for out's shape (`broadcast` walks any flat share), never for its row or
column, which it reads whole (`column_shapes`: a row broadcast's out over few long rows is cut
by columns, so each core reads half of its row). A shape is a coarser key than a tensor, and an
op outside FLAT excludes every shape it touches, so what is not known to be safe keeps the rows.
"""

from __future__ import annotations

import math

from trnsim.kernels.backward import ELEMENTWISE_BACKWARD
from trnsim.kernels.elementwise import BINARY, UNARY
from trnsim.kernels.layout import Part, by_columns
from trnsim.kernels.optim import OPTIM
from trnsim.trace.ops import OPS
from trnsim.trace.program import OpSpec, TensorSpec

__all__ = ["FLAT", "flat_shapes", "column_shapes", "part"]

FLAT = frozenset({*UNARY, *BINARY, "where", "masked_fill", *ELEMENTWISE_BACKWARD, *OPTIM})


def flat_shapes(ops: list[OpSpec], tensors: dict[str, TensorSpec]) -> frozenset:
    """The shapes whose tensors the kernel's ops may share by flat elements (module doc)."""
    flat, rows = set(), set()
    aliased = _aliased(ops, tensors)
    for op in ops:
        rec = OPS.get(op.op)
        if rec is None:
            continue  # an unknown op is refused when it is lowered
        names = [n for _, n, _ in rec.accesses(op.args, tensors)]
        if op.op not in FLAT:
            rows.update(tuple(tensors[n].shape) for n in names)
            continue
        out = op.args.get("out")
        shape = tuple(tensors[out].shape) if isinstance(out, str) and out in tensors else None
        bcast = op.op in BINARY and len({tuple(tensors[n].shape) for n in names}) > 1
        for n in names:
            s = tuple(tensors[n].shape)
            if n in aliased or (bcast and s != shape):
                rows.add(s)  # a broadcast's row or column, read whole
            else:
                flat.add(s)
    return frozenset(flat - rows)


def _aliased(ops: list[OpSpec], tensors: dict[str, TensorSpec]) -> set[str]:
    """The tensors the kernel's ops touch under another name too (a view and its base, two views
    of one base whose bytes overlap: one memory that another name may split otherwise), and the
    views whose strides are not a dense row-major layout. A view the kernel touches by no other
    name (a recording's tensor, a view of its storage block) is memory of its own to the kernel,
    as a tensor is."""
    touched: dict[str, None] = {}
    for op in ops:
        rec = OPS.get(op.op)
        if rec is not None:
            touched.update((n, None) for _, n, _ in rec.accesses(op.args, tensors))
    spans: dict[str, list] = {}  # the base memory (a tensor that is no view) -> (lo, hi, name)
    out = set()
    for n in touched:
        t = tensors[n]
        if t.strides is not None and tuple(t.strides) != _dense(t.shape):
            out.add(n)
        base, seen = n, set()
        while tensors[base].view is not None and base not in seen and tensors[base].view in tensors:
            seen.add(base)
            base = tensors[base].view
        spans.setdefault(base, []).append((*_bytes(t, base), n))
    for group in spans.values():
        group.sort()
        for i, (_, hi, n) in enumerate(group):
            for lo2, _, n2 in group[i + 1 :]:
                if lo2 >= hi:
                    break
                out.update((n, n2))
    return out


def _bytes(t: TensorSpec, base: str) -> tuple[float, float]:
    """The bytes [lo, hi) of `base` that `t` may touch: a strided view of the base itself, from
    its offset to its last element (two such views of one block that do not overlap, FSDP2's
    gradients in its reduce-scatter's output, are memory of their own, as two tensors are);
    the base, a view without strides or a view of a view, all of it."""
    if t.strides is None or t.view != base:
        return 0, math.inf
    if 0 in t.shape:
        return 0, 0
    last = sum((d - 1) * abs(s) for d, s in zip(t.shape, t.strides))
    first = t.offset + sum((d - 1) * s for d, s in zip(t.shape, t.strides) if s < 0)
    lo = first * t.dtype.itemsize
    return lo, lo + (last + 1) * t.dtype.itemsize


def _dense(shape) -> tuple[int, ...]:
    """A row-major tensor's strides, in elements."""
    strides, step = [], 1
    for d in reversed(tuple(shape)):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def column_shapes(ops: list[OpSpec], tensors: dict[str, TensorSpec], cores: int) -> frozenset:
    """The shapes of row broadcasts' outs that `layout.by_columns` would have the cores share by
    columns (every op of the kernel on a shape of `flat_shapes` walks the same columns)."""
    out = set()
    for op in ops:
        o = op.args.get("out")
        if op.op not in BINARY or not isinstance(o, str) or o not in tensors:
            continue
        shape = tuple(tensors[o].shape)
        for k in ("a", "b"):
            v = op.args.get(k)
            vs = tuple(tensors[v].shape) if isinstance(v, str) and v in tensors else None
            row = vs is not None and vs != shape and vs[-1:] == shape[-1:]
            if row and math.prod(vs) == shape[-1] and by_columns(shape, cores):
                out.add(shape)
    return frozenset(out)


def part(core: int, cores: int, ops: list[OpSpec], tensors: dict[str, TensorSpec]) -> Part:
    """Physical core `core` of `cores` for `KernelBuilder.part`, carrying the kernel's
    `flat_shapes` and `column_shapes` for `layout.flat_ranges`."""
    if cores == 1:
        return Part(core, cores)
    return Part(core, cores, flat_shapes(ops, tensors), column_shapes(ops, tensors, cores))
