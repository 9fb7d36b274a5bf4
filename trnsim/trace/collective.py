"""A stream's `collective:` step: one collective (all_reduce, all_gather, ...) that this
stream's rank issues on a group of ranks (docs/trace_extensions.md, "Collectives").

    - collective: {op: all_reduce, group: [0, 1, 2, 3], tensor: g}
    - collective: {op: all_gather, tensor: shard, out: full}           # group: every rank
    - collective: {op: all_reduce, bytes: 64MiB, dtype: bfloat16}      # no values: timing
    - collective: {op: all_to_allv, group: [0, 1], counts: [[1, 3], [2, 0]], tensor: s, out: r}

Checked here, with one-line errors at the key: the op, the group (distinct ranks, or `all`),
a tensor of the trace (in HBM, contiguous: a strided view only with dense strides, as a
recording writes torch's tensors) or a size, the dtype, the reduce op, the algorithm,
`root:` (broadcast), `pairs:` (permute) and `counts:` (all_to_allv), and the sizes of `tensor`
and `out` against each other. What depends on the system (that the ranks exist, that the
stream's rank is in the group, a group of `all`) is checked when the trace is placed on one
(`trace.ranks`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from trnsim.dtypes import DTYPES
from trnsim.inputs.validate import (
    Loc,
    check_keys,
    is_int,
    one_of,
    show,
    unknown,
    want_choice,
    want_int,
    want_list,
    want_map,
)
from trnsim.trace.program import CollectiveSpec, TensorSpec
from trnsim.units import UnitError, parse_bytes

__all__ = ["parse_collective", "OPS", "ALGORITHMS", "REDUCE_OPS", "KEYS"]

# the collectives engine's (trnsim.collectives, a higher layer) ops, algorithms and reductions
OPS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "all_to_allv",
    "broadcast",
    "send_recv",
    "permute",
)
REDUCING = ("all_reduce", "reduce_scatter")
ALGORITHMS = ("auto", "ring", "mesh", "mesh1", "rdh", "kangaring", "hierarchical", "direct")
REDUCE_OPS = ("sum", "max", "min", "prod")
KEYS = ("op", "group", "tensor", "out", "bytes", "dtype", "reduce_op", "algorithm", "root",
        "pairs", "counts")  # fmt: skip
EXPECTED = "{op: all_reduce, group: [0, 1], tensor: g} (or bytes: 64MiB instead of a tensor)"


def parse_collective(arg: Any, loc: Loc, tensors: Mapping[str, TensorSpec]) -> CollectiveSpec:
    """The `collective:` mapping at `loc` as a `CollectiveSpec` (see the module docstring)."""
    c = want_map(arg, loc, EXPECTED)
    check_keys(c, loc, KEYS)
    at = {k: loc.key(c, k) for k in KEYS}
    get = {k: c[k] for k in KEYS if c.get(k) is not None}
    if "op" not in get:
        loc.fail("missing key 'op'", f"op: one of {', '.join(OPS)}")
    op = get["op"]
    if not isinstance(op, str) or op not in OPS:
        at["op"].fail(unknown("collective", op, OPS), one_of(OPS))
    spec = CollectiveSpec(op, line=loc.line)
    spec.group = _group(get.get("group", "all"), at["group"])
    if op == "send_recv" and (spec.group is None or len(spec.group) != 2):
        at["group"].fail(
            f"send_recv on {'every rank' if spec.group is None else show(get['group'])}",
            "a group of two ranks: [source, target]",
        )
    if "reduce_op" in get:
        if op not in REDUCING:
            at["reduce_op"].fail(f"{op} reduces nothing", "reduce_op: only beside all_reduce "
                                 "and reduce_scatter")  # fmt: skip
        spec.reduce_op = want_choice(get["reduce_op"], at["reduce_op"], REDUCE_OPS)
    if "algorithm" in get:
        spec.algorithm = _algorithm(get["algorithm"], at["algorithm"])
    _root_and_pairs(spec, get, at, loc)
    if op == "all_to_allv" or "counts" in get:
        _counts(spec, get, at, loc, tensors)
        return spec
    _data(spec, get, at, loc, tensors)
    return spec


def _counts(spec, get: dict, at: dict, loc: Loc, tensors: Mapping[str, TensorSpec]) -> None:
    """all_to_allv: `counts` (an n x n matrix of element counts, row i what the group's i-th
    rank sends to each, in group order), `tensor` and `out` (values) or neither (timing);
    the size the engine takes: the largest row, in bytes (the same on every rank)."""
    if spec.op != "all_to_allv":
        at["counts"].fail(f"{spec.op} takes no counts", "counts: only beside all_to_allv")
    expected = (
        "a square matrix of element counts, [[c00, c01], [c10, c11]]: row i what the group's "
        "i-th rank sends to each rank of the group, in group order"
    )
    if "counts" not in get:
        loc.fail("missing key 'counts'", f"counts: {expected}")
    rows = want_list(get["counts"], at["counts"], expected)
    n = len(rows)
    if not n or (spec.group is not None and n != len(spec.group)):
        size = "every rank of the system" if spec.group is None else len(spec.group)
        at["counts"].fail(f"{n} rows for a group of {size}", expected)
    counts = []
    for i, row in enumerate(rows):
        iloc = at["counts"].item(rows, i)
        if not isinstance(row, list) or len(row) != n or not all(is_int(c) and c >= 0
                                                                  for c in row):  # fmt: skip
            what = f"has {len(row)} counts" if isinstance(row, list) else f"is {show(row)}"
            if isinstance(row, list) and len(row) == n:
                what = "has a count that is not an integer >= 0"
            iloc.fail(f"row {i} {what}", f"{n} counts >= 0 ({expected})")
        counts.append(tuple(row))
    if not any(sum(row) for row in counts):
        at["counts"].fail("every count is 0", "an all_to_allv that moves some elements")
    spec.counts = tuple(counts)
    if "bytes" in get:
        at["bytes"].fail("bytes: beside all_to_allv", "counts: alone (its sizes), with tensor: "
                         "and out: for values")  # fmt: skip
    if "dtype" in get:
        name = get["dtype"]
        if not isinstance(name, str) or name not in DTYPES:
            at["dtype"].fail(unknown("dtype", name, DTYPES), one_of(DTYPES))
        spec.dtype = DTYPES[name]
    if "tensor" in get or "out" in get:
        if "tensor" not in get or "out" not in get:
            key = "out" if "tensor" in get else "tensor"
            loc.fail(f"missing key '{key}'", "tensor: (what the rank sends) and out: (what it "
                     "receives) beside all_to_allv, or neither (timing)")  # fmt: skip
        t = _tensor(get["tensor"], at["tensor"], tensors)
        o = _tensor(get["out"], at["out"], tensors)
        if spec.dtype is not None and spec.dtype != t.dtype:
            at["dtype"].fail(f"{spec.dtype.name}, but tensor {t.name} is {t.dtype.name}",
                             f"the tensor's dtype ({t.dtype.name}), or no dtype:")  # fmt: skip
        if o.dtype != t.dtype:
            at["out"].fail(f"tensor {o.name} is {o.dtype.name} but {t.name} is "
                           f"{t.dtype.name}", "an output of the input's dtype")  # fmt: skip
        spec.tensor, spec.out, spec.dtype = t.name, o.name, t.dtype
    spec.dtype = spec.dtype or DTYPES["float32"]
    spec.nbytes = max(sum(row) for row in counts) * spec.dtype.itemsize


def _group(value: Any, loc: Loc) -> tuple[int, ...] | None:
    """A list of distinct ranks, or None for `all`."""
    expected = "a list of distinct ranks like [0, 1, 2, 3], or all"
    if value == "all":
        return None
    items = want_list(value, loc, expected)
    if not items:
        loc.fail("an empty group", expected)
    seen: set = set()
    for i, r in enumerate(items):
        iloc = loc.item(items, i)
        want_int(r, iloc, "a rank (an integer >= 0)", minimum=0)
        if r in seen:
            iloc.fail(f"rank {r} is in the group twice", expected)
        seen.add(r)
    return tuple(items)


def _algorithm(value: Any, loc: Loc) -> str | None:
    """An algorithm name (`auto`: None, chosen by size), or hierarchical:INTRA+INTER."""
    expected = f"one of {', '.join(ALGORITHMS)}, or hierarchical:INTRA+INTER"
    if not isinstance(value, str):
        loc.fail(f"got {show(value)}", expected)
    base, colon, pair = value.partition(":")
    if base not in ALGORITHMS or (colon and base != "hierarchical"):
        loc.fail(unknown("algorithm", value, ALGORITHMS), expected)
    if colon:
        intra, plus, inter = pair.partition("+")
        for part in (intra, inter):
            if not plus or part not in ALGORITHMS[1:-1] or part == "hierarchical":
                loc.fail(
                    f"unknown pair {show(pair)} in {show(value)}",
                    "hierarchical:INTRA+INTER, each one of ring, mesh, mesh1, rdh, kangaring",
                )
    return None if value == "auto" else value


def _root_and_pairs(spec: CollectiveSpec, get: dict, at: dict, loc: Loc) -> None:
    op, group = spec.op, spec.group
    if "root" in get:
        if op != "broadcast":
            at["root"].fail(f"{op} has no root", "root: only beside broadcast")
        spec.root = want_int(get["root"], at["root"], "a rank (an integer >= 0)", minimum=0)
        if group is not None and spec.root not in group:
            at["root"].fail(f"rank {spec.root} is not in the group", one_of(group))
    if op != "permute":
        if "pairs" in get:
            at["pairs"].fail(f"{op} takes no pairs", "pairs: only beside permute")
        return
    if "pairs" not in get:
        loc.fail("missing key 'pairs'", "pairs: [[source, target], ...] beside permute")
    expected = "a list of [source, target] rank pairs like [[0, 1], [1, 0]]"
    items = want_list(get["pairs"], at["pairs"], expected)
    if not items:
        at["pairs"].fail("no pairs", expected)
    pairs = []
    for i, p in enumerate(items):
        iloc = at["pairs"].item(items, i)
        if not isinstance(p, list) or len(p) != 2 or not all(is_int(r) and r >= 0 for r in p):
            iloc.fail(f"got {show(p)}", expected)
        for r in p:
            if group is not None and r not in group:
                iloc.fail(f"rank {r} is not in the group", one_of(group))
        pairs.append((p[0], p[1]))
    for k in (0, 1):
        ends = [p[k] for p in pairs]
        if len(set(ends)) != len(ends):
            what = "source" if k == 0 else "target"
            at["pairs"].fail(f"a rank is a {what} twice", f"{expected}, each rank a {what} once")
    spec.pairs = tuple(pairs)


def _data(spec, get: dict, at: dict, loc: Loc, tensors: Mapping[str, TensorSpec]) -> None:
    """`tensor:` (and `out:`) or `bytes:`, and the dtype; the size the engine takes."""
    if "tensor" in get and "bytes" in get:
        at["bytes"].fail("both tensor: and bytes:", "tensor: (values and size) or bytes: (size "
                         "only, no values)")  # fmt: skip
    if "dtype" in get:
        name = get["dtype"]
        if not isinstance(name, str) or name not in DTYPES:
            at["dtype"].fail(unknown("dtype", name, DTYPES), one_of(DTYPES))
        spec.dtype = DTYPES[name]
    if "tensor" not in get:
        if "out" in get:
            at["out"].fail("out: without tensor:", "tensor: and out:, or bytes: alone")
        if "bytes" not in get:
            loc.fail("missing key 'tensor' (or 'bytes')", EXPECTED)
        spec.dtype = spec.dtype or DTYPES["float32"]
        spec.nbytes = _bytes(get["bytes"], at["bytes"], spec.dtype)
        return
    t = _tensor(get["tensor"], at["tensor"], tensors)
    spec.tensor = t.name
    if spec.dtype is not None and spec.dtype != t.dtype:
        at["dtype"].fail(
            f"{spec.dtype.name}, but tensor {t.name} is {t.dtype.name}",
            f"the tensor's dtype ({t.dtype.name}), or no dtype:",
        )
    spec.dtype = t.dtype
    size = math.prod(t.shape) * t.dtype.itemsize
    if "out" not in get:
        spec.nbytes = size
        return
    o = _tensor(get["out"], at["out"], tensors)
    spec.out = o.name
    if o.dtype != t.dtype:
        at["out"].fail(
            f"tensor {o.name} is {o.dtype.name} but {t.name} is {t.dtype.name}",
            "an output of the input's dtype",
        )
    osize = math.prod(o.shape) * o.dtype.itemsize
    n = len(spec.group) if spec.group is not None else None
    if spec.op == "all_gather":
        spec.nbytes = osize  # the engine's size: the output
        _multiple(at["out"], o.name, osize, t.name, size, n, "the input times the group's size")
    elif spec.op == "reduce_scatter":
        spec.nbytes = size
        _multiple(at["out"], t.name, size, o.name, osize, n, "the input over the group's size")
    else:
        spec.nbytes = size
        if osize != size:
            at["out"].fail(
                f"tensor {o.name} has {osize} bytes, {t.name} {size}",
                f"an output of the input's size for {spec.op}",
            )


def _multiple(loc: Loc, big: str, bsize: int, small: str, ssize: int, n, expected: str) -> None:
    """`bsize` must be `n` x `ssize` (any whole multiple when the group is every rank: checked
    again once placed)."""
    if bsize % ssize or (n is not None and bsize != n * ssize):
        loc.fail(
            f"tensor {big} has {bsize} bytes and {small} {ssize}"
            + (f" in a group of {n}" if n is not None else ""),
            f"an output of {expected}",
        )


def _tensor(value: Any, loc: Loc, tensors: Mapping[str, TensorSpec]) -> TensorSpec:
    """A device tensor of the trace by name: whole (no slice), in HBM, contiguous."""
    if not isinstance(value, str) or value not in tensors:
        loc.fail(unknown("tensor", value, tensors), one_of(tensors))
    t = tensors[value]
    if t.on != "hbm":
        loc.fail(f"tensor {value} is host memory", "a device (HBM) tensor")
    if t.strides is not None and tuple(t.strides) != _contiguous(t.shape):
        loc.fail(f"tensor {value} is a strided view", "a contiguous tensor or view")
    return t


def _contiguous(shape) -> tuple[int, ...]:
    """The strides of a dense row-major tensor of `shape` (a view with these strides and any
    offset is contiguous memory: a recorded torch tensor is written so)."""
    return tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))


def _bytes(value: Any, loc: Loc, dtype) -> int:
    """`bytes:` as an int or a size ('64MiB'): a whole number of `dtype` elements, > 0."""
    expected = f"a size like 64MiB or 1048576: a whole number of {dtype.name} elements"
    try:
        n = value if is_int(value) else parse_bytes(value)
    except UnitError:
        loc.fail(f"got {show(value)}", expected)
    if n <= 0 or n % dtype.itemsize:
        loc.fail(f"got {show(value)}", expected)
    return n
