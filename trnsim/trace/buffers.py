"""The `tensors:` and `tiles:` sections of a trace: device and host tensors (with views of them)
and the SBUF/PSUM tiles a low-level kernel declares.

Tensors and tiles need `shape` and `dtype`; a view inherits both from the tensor it views when
omitted (and a view of a view resolves to the root tensor). Their names are identifiers, so that
operands like `x[0:128, :]` can refer to them. `init:` is one of INITS or `{file: name.npy}`,
resolved against the trace's folder; the file's shape must match. Errors are `TraceError`s.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

from trnsim.dtypes import ALIASES, DTYPES, DType, dtype
from trnsim.inputs.validate import (
    Loc,
    check_keys,
    one_of,
    show,
    unknown,
    want_choice,
    want_int,
    want_list,
    want_map,
    want_name,
    want_str,
)
from trnsim.trace.program import TensorSpec, TileSpec

__all__ = ["parse_tensors", "parse_tiles"]

TENSOR_KEYS = ("shape", "dtype", "init", "on", "view")
TILE_KEYS = ("memory", "shape", "dtype", "init")
INITS = ("zeros", "ones", "random", "normal", "arange")
PLACES = ("hbm", "host")
MEMORIES = ("sbuf", "psum")


def parse_tensors(section: Any, loc: Loc, base_dir: Path) -> dict[str, TensorSpec]:
    """The `tensors:` section at `loc` -> name -> TensorSpec, views resolved, in the order
    written; init files resolve against `base_dir`."""
    section = want_map(section, loc, "a mapping of tensor name -> {shape, dtype, ...}")
    entries, specs = {}, {}
    for name, entry in section.items():
        tloc = loc.key(section, name)
        want_name(name, tloc, "tensor", ident=True)
        entry = want_map(entry, tloc, "{shape: [...], dtype: ..., init: ...}")
        check_keys(entry, tloc, TENSOR_KEYS)
        entries[name] = (entry, tloc)
        if entry.get("view") is None:
            shape = _shape(entry, tloc)
            on = entry["on"] if entry.get("on") is not None else "hbm"
            on = want_choice(on, tloc.key(entry, "on"), PLACES)
            specs[name] = TensorSpec(
                name,
                shape,
                _dtype(entry, tloc),
                _init(entry, tloc, shape, base_dir),
                on,
                line=tloc.line,
            )
    for name in entries:
        _view(name, entries, specs, ())
    return {name: specs[name] for name in section}


def parse_tiles(
    section: Any, loc: Loc, tensors: Collection[str], base_dir: Path
) -> dict[str, TileSpec]:
    """A `tiles:` section at `loc` -> name -> TileSpec; no tile may take the name of one of
    `tensors`. Init files resolve against `base_dir`."""
    section = want_map(section, loc, "a mapping of tile name -> {memory, shape, dtype}")
    tiles = {}
    for name, entry in section.items():
        tloc = loc.key(section, name)
        want_name(name, tloc, "tile", ident=True)
        if name in tensors:
            tloc.fail(f"tile {name!r} has the name of a tensor", "a name no tensor uses")
        entry = want_map(entry, tloc, "{memory: sbuf, shape: [128, 512], dtype: ...}")
        check_keys(entry, tloc, TILE_KEYS)
        if entry.get("memory") is None:
            tloc.fail("missing key 'memory'", one_of(MEMORIES))
        memory = want_choice(entry["memory"], tloc.key(entry, "memory"), MEMORIES)
        shape = _shape(entry, tloc)  # the chip's config bounds shape[0] (memory.onchip)
        tiles[name] = TileSpec(
            name, memory, shape, _dtype(entry, tloc), _init(entry, tloc, shape, base_dir), tloc.line
        )
    return tiles


def _view(name: str, entries: dict, specs: dict, chain: tuple) -> TensorSpec:
    """Resolve tensor `name` (a view of a view resolves to the root tensor)."""
    if name in specs:
        return specs[name]
    entry, loc = entries[name]
    vloc = loc.key(entry, "view")
    target = entry["view"]
    if not isinstance(target, str) or target not in entries:
        vloc.fail(unknown("tensor", target, entries), one_of(entries))
    if target in chain or target == name:
        vloc.fail(
            f"views form a cycle: {' -> '.join((*chain, name, target))}",
            "a view of a tensor with its own memory",
        )
    root = _view(target, entries, specs, (*chain, name))
    if entry.get("init") is not None:
        loc.key(entry, "init").fail("a view cannot have init", "init on the viewed tensor")
    shape = _shape(entry, loc) if entry.get("shape") is not None else root.shape
    if math.prod(shape) != math.prod(root.shape):
        loc.key(entry, "shape").fail(
            f"{math.prod(shape)} elements in a view of {root.name!r} with {math.prod(root.shape)}",
            "the same number of elements as the viewed tensor",
        )
    if entry.get("dtype") is not None and _dtype(entry, loc) != root.dtype:
        loc.key(entry, "dtype").fail(
            f"{entry['dtype']} differs from {root.name!r}", f"{root.dtype.name} (or no dtype)"
        )
    if entry.get("on") is not None and entry["on"] != root.on:
        loc.key(entry, "on").fail(f"got {show(entry['on'])}", f"{root.on} (as {root.name})")
    specs[name] = TensorSpec(
        name, shape, root.dtype, None, root.on, root.view or root.name, loc.line
    )
    return specs[name]


def _shape(entry: dict, loc: Loc) -> tuple[int, ...]:
    if entry.get("shape") is None:
        loc.fail("missing key 'shape'", "shape: a list of positive integers")
    sloc = loc.key(entry, "shape")
    shape = want_list(entry["shape"], sloc, "a list of positive integers like [128, 512]")
    if not shape:
        sloc.fail("got an empty list", "a list of positive integers like [128, 512]")
    return tuple(
        want_int(n, sloc.item(shape, i), "a positive integer", minimum=1)
        for i, n in enumerate(shape)
    )


def _dtype(entry: dict, loc: Loc) -> DType:
    if entry.get("dtype") is None:
        loc.fail("missing key 'dtype'", one_of(DTYPES))
    name = entry["dtype"]
    try:
        return dtype(name)
    except (KeyError, TypeError):
        names = [*DTYPES, *ALIASES]
        loc.key(entry, "dtype").fail(unknown("dtype", name, names), one_of(DTYPES))


def _init(entry: dict, loc: Loc, shape: tuple[int, ...], base_dir: Path) -> Any:
    """`init:` -> None | one of INITS | ('file', path); a file's shape must be `shape`."""
    value = entry.get("init")
    if value is None:
        return None
    iloc = loc.key(entry, "init")
    expected = f"{one_of(INITS)}, or {{file: name.npy}}"
    if isinstance(value, str):
        return want_choice(value, iloc, INITS)
    if not isinstance(value, dict):
        iloc.fail(f"got {show(value)}", expected)
    check_keys(value, iloc, ("file",))
    if value.get("file") is None:
        iloc.fail("missing key 'file'", "{file: name.npy}")
    floc = iloc.key(value, "file")
    path = base_dir / want_str(value["file"], floc, "a path to a .npy file")
    if not path.is_file():
        floc.fail(f"no file {str(path)!r}", "a .npy file (relative to the trace's folder)")
    try:
        array = np.load(path, mmap_mode="r")
        file_shape = tuple(array.shape)
    except Exception as e:  # not .npy, pickled objects, a .npz archive, truncated ...
        floc.fail(
            f"cannot read {str(path)!r} ({e.__class__.__name__}: {e})",
            "a .npy file saved by numpy.save",
        )
    if file_shape != shape:
        floc.fail(f"the file holds shape {list(file_shape)}", f"shape {list(shape)}")
    return ("file", str(path))
