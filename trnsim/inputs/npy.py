""".npy files given as initial values (`init: {file: x.npy}`): opened without pickles, their
dtype matched to the tensor's, and their values checked before an integer tensor takes them.

numpy has no bfloat16 or fp8 types: an array of `ml_dtypes.bfloat16` saved with `numpy.save`
is written as raw 2-byte records (`|V2`, and fp8 as `|V1`), so such a file is read as the
declared 2-byte (bfloat16) or 1-byte (fp8) float type; raw records of any other size, or into
any other type, are refused. Every problem raises `NpyError`, whose message says what is wrong
with the file without naming it (the caller adds the file and the trace's line).
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np

from trnsim.dtypes import DType

__all__ = ["NpyError", "open_npy", "as_declared", "check_integer_values", "inside"]

MAGIC = b"\x93NUMPY"
"""The first bytes of every .npy file."""
MAX_HEADER = 1 << 16
"""The longest header read (numpy's own limit is 10,000 bytes unless told otherwise)."""
CHUNK = 1 << 20
"""Values are checked this many at a time (memory stays small whatever the file's size)."""


class NpyError(ValueError):
    """A file cannot give a tensor its values: `what` is wrong, `expected` what would do."""

    def __init__(self, what: str, expected: str = "a .npy file saved by numpy.save"):
        super().__init__(f"{what}; expected {expected}")
        self.what, self.expected = what, expected


def open_npy(path: str | Path) -> np.ndarray:
    """The array of the .npy file at `path`, memory-mapped, never unpickled. Files of 1-byte
    floats, which numpy writes (`<f1`, for ml_dtypes' float8_e5m2) but cannot read, come as raw
    1-byte records, like the other fp8 types' `|V1`."""
    header, offset = _header(path)
    descr = header.get("descr")
    if isinstance(descr, str) and descr[1:] == "f1":
        shape = tuple(header.get("shape", ()))
        order = "F" if header.get("fortran_order") else "C"
        if math.prod(shape) == 0:
            return np.zeros(shape, "V1")
        raw = np.memmap(path, "V1", "r", offset, shape or (1,), order)
        return raw.reshape(shape)
    try:
        objects = np.dtype(descr).hasobject
    except (TypeError, ValueError):
        objects = False  # numpy's own load words it
    if objects:
        raise NpyError(
            "holds Python objects (a pickle), which trnsim never unpickles",
            "a .npy file of numbers",
        )
    try:
        data = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as e:  # noqa: BLE001  truncated, a bad header ...
        what = " ".join(str(e).split())[:120]
        raise NpyError(f"numpy cannot read it ({e.__class__.__name__}: {what})") from None
    if not isinstance(data, np.ndarray):
        raise NpyError("does not hold one array")
    return data


def _header(path: str | Path) -> tuple[dict, int]:
    """The header of a .npy file (a Python literal: read without evaluating anything) and where
    its data starts."""
    try:
        with open(path, "rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                raise NpyError(
                    "not a .npy file (it does not start with numpy's header: a text file?)"
                )
            major = f.read(2)[:1]
            size = 2 if major == b"\x01" else 4
            n = int.from_bytes(f.read(size), "little")
            if n > MAX_HEADER:
                raise NpyError(f"its header claims {n} bytes (at most {MAX_HEADER})")
            text = f.read(n).decode("utf-8" if major == b"\x03" else "latin1")
            offset = f.tell()
    except OSError as e:
        raise NpyError(f"cannot be read ({e.strerror})") from None
    try:
        header = ast.literal_eval(text)
    except (ValueError, SyntaxError, RecursionError, MemoryError, UnicodeError):
        header = None
    if not isinstance(header, dict):
        raise NpyError("numpy's header of it cannot be read")
    return header, offset


def as_declared(data: np.ndarray, dt: DType) -> np.ndarray:
    """`data` as numbers for a tensor of `dt`: raw records (`|V2`, `|V1`, how numpy saves
    ml_dtypes' bfloat16 and fp8) viewed as `dt` when it is the float type of their size."""
    kind = data.dtype.kind
    if kind in "biuf":
        return data
    if kind == "V" and data.dtype.names is None:
        raw = data.dtype.itemsize
        if dt.is_float and dt.itemsize == raw and (dt.is_fp8 or dt.name == "bfloat16"):
            return data.view(dt.np)
        names = {2: "bfloat16", 1: "an fp8 type"}
        if raw not in names:
            raise NpyError(f"holds raw {raw}-byte records", f"numbers to convert to {dt.name}")
        raise NpyError(
            f"holds raw {raw}-byte records (how numpy saves ml_dtypes {names[raw]}), which "
            f"cannot be read as {dt.name}",
            f"the tensor declared {names[raw]}, or a file of numbers",
        )
    raise NpyError(f"holds {data.dtype} values", f"numbers to convert to {dt.name}")


def check_integer_values(data: np.ndarray, dt: DType) -> None:
    """Refuse NaN, infinities and values outside `dt`'s range when `dt` is an integer type
    (a cast would change them silently)."""
    if dt.is_float or data.dtype.kind == "b":
        return
    info = np.iinfo(dt.np)
    if data.dtype.kind in "iu" and np.iinfo(data.dtype).min >= info.min:
        if np.iinfo(data.dtype).max <= info.max:
            return  # every value of the file's type fits
    flat = data.reshape(-1)
    for lo in range(0, flat.size, CHUNK):
        part = np.asarray(flat[lo : lo + CHUNK])
        if part.dtype.kind == "f" and not np.isfinite(part).all():
            i = _first(~np.isfinite(part))
            raise NpyError(
                f"holds {part[i]} at element {lo + i}, which {dt.name} cannot hold",
                "finite values for an integer tensor",
            )
        outside = (part < info.min) | (part > info.max)
        if outside.any():
            i = _first(outside)
            raise NpyError(
                f"holds {part[i]} at element {lo + i}, outside {dt.name}'s range",
                f"values from {info.min} to {info.max}",
            )


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def inside(path: Path, folder: Path) -> bool:
    """Whether `path` lies inside `folder` once both are resolved (symlinks followed)."""
    return Path(path).resolve().is_relative_to(Path(folder).resolve())
