"""Initial values of tensors and tiles (`init:` in a trace), drawn from one seeded generator."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trnsim.dtypes import DType, to_dtype
from trnsim.errors import TrnsimError


def initial_values(init, shape: tuple[int, ...], dt: DType, rng: np.random.Generator,
                   base_dir: str | Path = ".", what: str = "") -> np.ndarray:
    """A new array of `shape` and `dt` filled as `init` says.

    init: None or 'zeros', 'ones', 'random' (uniform [0, 1)), 'normal' (standard normal),
    'arange' (0, 1, 2, ... in row-major order), or ('file', path) / {'file': path} for a .npy
    file (relative to base_dir) whose values are cast to dt.
    """
    if init is None or init == "zeros":
        return np.zeros(shape, dt.np)
    if init == "ones":
        return np.ones(shape, dt.np)
    if init == "random":
        return to_dtype(rng.random(shape, dtype=np.float32), dt)
    if init == "normal":
        return to_dtype(rng.standard_normal(shape, dtype=np.float32), dt)
    if init == "arange":
        return to_dtype(np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape), dt)
    path = None
    if isinstance(init, dict):
        path = init.get("file")
    elif isinstance(init, tuple) and len(init) == 2 and init[0] == "file":
        path = init[1]
    if path is None:
        raise TrnsimError(f"{what}: unknown init {init!r}; expected zeros, ones, random, normal, "
                          f"arange or {{file: x.npy}}")
    full = Path(base_dir) / path
    try:
        data = np.load(full)
    except (OSError, ValueError) as e:
        raise TrnsimError(f"{what}: cannot read {full}: {e}") from None
    if tuple(data.shape) != tuple(shape):
        raise TrnsimError(f"{what}: {full} has shape {list(data.shape)}, expected {list(shape)}")
    return data.astype(dt.np) if data.dtype == dt.np or not dt.is_float else to_dtype(
        data.astype(np.float32), dt)
