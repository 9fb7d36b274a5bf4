"""The dtype table: trace names -> numpy dtypes (bf16 and fp8 through ml_dtypes).

Storage uses these dtypes; arithmetic on Vector/Scalar/GpSimd and matmul accumulation happen in
fp32 (`isa.md` section 3), so a value written to a bf16 tile is rounded to nearest even by the cast.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    """One storage type: its trace name, numpy dtype and size."""

    name: str
    np: np.dtype
    itemsize: int
    is_float: bool

    @property
    def is_fp8(self) -> bool:
        return self.is_float and self.itemsize == 1

    @property
    def is_16bit_float(self) -> bool:
        return self.is_float and self.itemsize == 2


def _d(name: str, np_type, is_float: bool) -> DType:
    dt = np.dtype(np_type)
    return DType(name, dt, dt.itemsize, is_float)


# float8_e4m3 is Trainium's legacy fp8 (inf/NaN, max 240): ml_dtypes.float8_e4m3 has exactly that
# range; the hardware encoding is not published (isa.md open question 12), so this is an assumption.
DTYPES: dict[str, DType] = {
    "float32": _d("float32", np.float32, True),
    "bfloat16": _d("bfloat16", ml_dtypes.bfloat16, True),
    "float16": _d("float16", np.float16, True),
    "float8_e4m3": _d("float8_e4m3", ml_dtypes.float8_e4m3, True),
    "float8_e4m3fn": _d("float8_e4m3fn", ml_dtypes.float8_e4m3fn, True),
    "float8_e5m2": _d("float8_e5m2", ml_dtypes.float8_e5m2, True),
    "int32": _d("int32", np.int32, False),
    "int16": _d("int16", np.int16, False),
    "int8": _d("int8", np.int8, False),
    "uint32": _d("uint32", np.uint32, False),
    "uint16": _d("uint16", np.uint16, False),
    "uint8": _d("uint8", np.uint8, False),
}

ALIASES = {
    "bf16": "bfloat16",
    "fp32": "float32",
    "fp16": "float16",
    "fp8": "float8_e4m3",
    "float": "float32",
    "half": "float16",
}


def dtype(name: str) -> DType:
    """Look up a dtype by trace name (or a short alias such as `bf16`); KeyError if unknown."""
    return DTYPES[ALIASES.get(name, name)]


def to_dtype(values: np.ndarray, dt: DType) -> np.ndarray:
    """Convert fp32 results to a storage dtype the way the hardware's output cast does.

    Floats round to nearest even (ml_dtypes). Integers round to nearest and saturate at the
    type's range: the hardware rule is unpublished (isa.md section 3, item 6), so this is an
    assumption; NaN becomes 0.
    """
    if dt.is_float:
        with np.errstate(over="ignore", invalid="ignore"):
            return values.astype(dt.np)
    info = np.iinfo(dt.np)
    v = np.nan_to_num(np.rint(values.astype(np.float64)), nan=0.0)
    return np.clip(v, info.min, info.max).astype(dt.np)
