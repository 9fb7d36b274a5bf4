"""Initial values of tensors and tiles (`init:` in a trace), drawn from one seeded generator."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from trnsim.dtypes import DType, to_dtype
from trnsim.errors import TrnsimError
from trnsim.inputs.npy import NpyError, as_declared, check_integer_values, open_npy
from trnsim.units import fmt_bytes

CHUNK_ELEMENTS = 1 << 20
"""Values are generated and converted this many at a time, so that the fp32/fp64 temporaries
stay small whatever the tensor's size: memory use is the result array plus a few MiB (a 4 GiB
int8 `arange` would otherwise need 32 GiB of float64 on the way). Chunked draws give exactly
the values of one whole-array draw (the generator's stream continues across calls)."""


def initial_values(
    init, shape: tuple[int, ...], dt: DType, rng: np.random.Generator, what: str = ""
) -> np.ndarray:
    """A new array of `shape` and `dt` filled as `init` says.

        init: None or 'zeros', 'ones', 'random' (uniform [0, 1)), 'normal' (standard normal),
        'arange' (0, 1, 2, ... in row-major order), or ('file', path) / {'file': path} for a .npy
        file (absolute, or relative to the working directory; the trace loader makes the paths of
        a trace's init files absolute) whose values are cast to dt (bfloat16 and fp8 files, which
    numpy saves as raw records, are read as the declared type; an integer dt refuses NaN and values
    out of its range: `trnsim.inputs.npy`). Raises TrnsimError (naming `what`)
        when the array does not fit in this machine's memory or the file cannot be used.
    """
    if init is None or init == "zeros":
        return _alloc(np.zeros, shape, dt, what)
    if init == "ones":
        return _alloc(np.ones, shape, dt, what)
    if init in ("random", "normal", "arange"):
        out = _alloc(np.empty, shape, dt, what)
        flat = out.reshape(-1)
        for lo in range(0, flat.size, CHUNK_ELEMENTS):
            n = min(CHUNK_ELEMENTS, flat.size - lo)
            if init == "random":
                v = rng.random(n, dtype=np.float32)
            elif init == "normal":
                v = rng.standard_normal(n, dtype=np.float32)
            else:
                v = np.arange(lo, lo + n, dtype=np.float64)
            flat[lo : lo + n] = to_dtype(v, dt)
        return out
    path = None
    if isinstance(init, dict):
        path = init.get("file")
    elif isinstance(init, tuple) and len(init) == 2 and init[0] == "file":
        path = init[1]
    if path is None:
        raise TrnsimError(
            f"{what}: unknown init {init!r}; expected zeros, ones, random, normal, "
            f"arange or {{file: x.npy}}"
        )
    full = Path(path)
    try:
        data = as_declared(open_npy(full), dt)
        if tuple(data.shape) != tuple(shape):
            raise NpyError(f"has shape {list(data.shape)}", f"shape {list(shape)}")
        check_integer_values(data, dt)
    except NpyError as e:
        raise TrnsimError(f"{what}: {full}: {e}") from None
    out = _alloc(np.empty, shape, dt, what)
    if out.ndim == 0:
        out[()] = _convert(np.asarray(data), dt)
        return out
    rows = max(1, CHUNK_ELEMENTS // max(1, math.prod(shape[1:])))
    for lo in range(0, shape[0], rows):
        out[lo : lo + rows] = _convert(np.asarray(data[lo : lo + rows]), dt)
    return out


def _convert(data: np.ndarray, dt: DType) -> np.ndarray:
    """File values cast to dt: as-is for equal dtypes and integer targets, else through fp32."""
    if data.dtype == dt.np or not dt.is_float:
        return data.astype(dt.np)
    return to_dtype(data.astype(np.float32), dt)


def _alloc(make, shape: tuple[int, ...], dt: DType, what: str) -> np.ndarray:
    try:
        return make(shape, dt.np)
    except (MemoryError, ValueError):  # ValueError: "array is too big" for numpy itself
        nbytes = math.prod(shape) * dt.itemsize
        raise TrnsimError(
            f"{what}: {list(shape)} {dt.name} needs {fmt_bytes(nbytes)} for its "
            f"values, more than this machine can allocate; run with --mode "
            f"timing (shapes only) or use smaller shapes"
        ) from None
