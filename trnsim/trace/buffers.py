"""The `tensors:` and `tiles:` sections of a trace: device and host tensors (with views of them)
and the SBUF/PSUM tiles a low-level kernel declares.

Tensors and tiles need `shape` and `dtype`; a view inherits both from the tensor it views when
omitted (and a view of a view resolves to the root tensor). Their names are identifiers, so that
operands like `x[0:128, :]` can refer to them. `init:` is one of INITS or `{file: name.npy}`,
resolved against the trace's folder, inside which it must lie (symlinks resolved) unless
allowed otherwise (`--allow-outside-files`); the file's shape must match, its values must suit
the dtype (`trnsim.inputs.npy`). Errors are `TraceError`s.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

from trnsim.dtypes import ALIASES, DTYPES, DType, dtype
from trnsim.inputs.npy import NpyError, as_declared, check_integer_values, inside, open_npy
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

__all__ = ["parse_tensors", "parse_tiles", "parse_init"]

TENSOR_KEYS = ("shape", "dtype", "init", "on", "view", "strides", "offset")
TILE_KEYS = ("memory", "shape", "dtype", "init")
INITS = ("zeros", "ones", "random", "normal", "arange")
PLACES = ("hbm", "host")
MEMORIES = ("sbuf", "psum")


Files = tuple[Path, bool]
"""Where init files may be: (the trace's folder, whether files outside it are allowed)."""


def parse_tensors(section: Any, loc: Loc, files: Files) -> dict[str, TensorSpec]:
    """The `tensors:` section at `loc` -> name -> TensorSpec, views resolved, in the order
    written; init files resolve against the folder of `files`."""
    section = want_map(section, loc, "a mapping of tensor name -> {shape, dtype, ...}")
    entries, specs = {}, {}
    for name, entry in section.items():
        tloc = loc.key(section, name)
        want_name(name, tloc, "tensor", ident=True)
        entry = want_map(entry, tloc, "{shape: [...], dtype: ..., init: ...}")
        check_keys(entry, tloc, TENSOR_KEYS)
        entries[name] = (entry, tloc)
        if entry.get("view") is None:
            shape, dt = _shape(entry, tloc), _dtype(entry, tloc)
            on = entry["on"] if entry.get("on") is not None else "hbm"
            on = want_choice(on, tloc.key(entry, "on"), PLACES)
            init = _init(entry, tloc, shape, dt, files)
            specs[name] = TensorSpec(name, shape, dt, init, on, line=tloc.line)
    for name in entries:
        _view(name, entries, specs, ())
    return {name: specs[name] for name in section}


def parse_tiles(
    section: Any, loc: Loc, tensors: Collection[str], files: Files
) -> dict[str, TileSpec]:
    """A `tiles:` section at `loc` -> name -> TileSpec; no tile may take the name of one of
    `tensors`. Init files resolve against the folder of `files`."""
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
        dt = _dtype(entry, tloc)
        init = _init(entry, tloc, shape, dt, files)
        tiles[name] = TileSpec(name, memory, shape, dt, init, tloc.line)
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
    if entry.get("strides") is not None or entry.get("offset") is not None:
        specs[name] = _strided(name, entry, loc, root)
        return specs[name]
    if root.strides is not None:
        vloc.fail(f"a view of strided view {target!r}", "a view of the tensor it views")
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


def parse_init(entry: dict, key: str, loc: Loc, spec: TensorSpec, files: Files) -> Any:
    """`entry[key]` at `loc` as the values of tensor `spec` (what `init:` takes)."""
    return _init(entry, loc, spec.shape, spec.dtype, files, key)


def _strided(name: str, entry: dict, loc: Loc, root: TensorSpec) -> TensorSpec:
    """A strided view (docs/trace_extensions.md): `shape`, `strides` (elements; default
    contiguous), `offset` (elements of its dtype, default 0) into the memory of a tensor that has
    its own; its dtype may differ (the bytes read as another type); it must lie inside."""
    vloc = loc.key(entry, "view")
    if root.view is not None or root.on != "hbm":
        what = "a view" if root.view is not None else "a host tensor"
        vloc.fail(
            f"a strided view (strides:/offset:) of {what}, {entry['view']!r}",
            "the name of a device tensor with its own memory (not a view, not on: host)",
        )
    shape = _shape(entry, loc)
    dt = _dtype(entry, loc) if entry.get("dtype") is not None else root.dtype
    if entry.get("strides") is None:
        strides = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
    else:
        sloc = loc.key(entry, "strides")
        items = want_list(entry["strides"], sloc, "a list of integers >= 0, one per dim")
        if len(items) != len(shape):
            sloc.fail(f"{len(items)} strides for {len(shape)} dims", "one stride per dim")
        strides = tuple(
            want_int(s, sloc.item(items, i), "an integer >= 0", minimum=0)
            for i, s in enumerate(items)
        )
    offset = 0
    if entry.get("offset") is not None:
        offset = want_int(entry["offset"], loc.key(entry, "offset"), "an integer >= 0", minimum=0)
    end = (offset + 1 + sum((n - 1) * s for n, s in zip(shape, strides))) * dt.itemsize
    size = math.prod(root.shape) * root.dtype.itemsize
    if end > size:
        loc.key(entry, "shape").fail(
            f"the view reaches byte {end} of {root.name!r}, which has {size}",
            "shape, strides and offset inside the viewed tensor",
        )
    return TensorSpec(name, shape, dt, None, "hbm", root.name, loc.line, strides, offset)


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


def _init(
    entry: dict, loc: Loc, shape: tuple[int, ...], dt: DType, files: Files, key: str = "init"
) -> Any:
    """`init:` (or `entry[key]`) -> None | one of INITS | ('file', path); a file must lie in
    the trace's folder (unless allowed), hold `shape`, and values `dt` can take."""
    value = entry.get(key)
    if value is None:
        return None
    iloc = loc.key(entry, key)
    expected = f"{one_of(INITS)}, or {{file: name.npy}}"
    if isinstance(value, str):
        return want_choice(value, iloc, INITS)
    if not isinstance(value, dict):
        iloc.fail(f"got {show(value)}", expected)
    check_keys(value, iloc, ("file",))
    if value.get("file") is None:
        iloc.fail("missing key 'file'", "{file: name.npy}")
    floc = iloc.key(value, "file")
    base_dir, allow_outside = files
    name = want_str(value["file"], floc, "a path to a .npy file")
    path = base_dir / name
    if not allow_outside and not inside(path, base_dir):
        floc.fail(
            f"{show(name, 200)} is outside the trace's folder {str(base_dir)!r}",
            "a .npy file inside the trace's folder (or run with --allow-outside-files)",
        )
    if not path.is_file():
        floc.fail(f"no file {str(path)!r}", "a .npy file (relative to the trace's folder)")
    try:
        array = open_npy(path)
        if tuple(array.shape) != shape:
            floc.fail(f"the file holds shape {list(array.shape)}", f"shape {list(shape)}")
        check_integer_values(as_declared(array, dt), dt)
    except NpyError as e:
        floc.fail(f"{str(path)!r}: {e.what}", e.expected)
    return ("file", str(path))
