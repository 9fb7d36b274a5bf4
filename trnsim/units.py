"""Quantities with units: parse them into base units, format them for reports, convert to ps.

Layer 0: pure functions, no project imports.

Base units: bytes (int), Hz (int), bytes per second (float), seconds (float), FLOP/s (float),
engine cycles (int). The simulator clock is an integer number of picoseconds; `seconds_to_ps`
and `cycles_to_ps` are the only ways into it.

Unit kinds (the `unit` metadata of config fields): `bytes`, `Hz`, `B/s`, `s`, `FLOP/s`, `cycles`,
`count`, `ratio`. A dimensioned kind needs its unit (`224KiB`, `2.4GHz`), except for zero;
`cycles`, `count` and `ratio` are plain numbers (`64`, `64cycles`, `0.25`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction


class UnitError(ValueError):
    """A value is not a quantity of the expected kind; the message says what was expected."""


_SIZES = {
    "B": 1,
    "KB": 10**3,
    "kB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}
_MICRO = Fraction(1, 10**6)


@dataclass(frozen=True)
class _Kind:
    noun: str  # "a size"
    example: str  # "224KiB"
    units: dict  # unit suffix -> factor to the base unit (Fraction or int)
    integer: bool  # the base value must be whole
    bare: bool  # a number without a unit is allowed
    listed: tuple = ()  # units named in error messages (default: all keys)

    def expected(self) -> str:
        names = self.listed or tuple(u for u in self.units if u)
        suffix = f" ({', '.join(names)})" if names else ""
        return f"{self.noun} like '{self.example}'{suffix}"


KINDS: dict[str, _Kind] = {
    "bytes": _Kind(
        "a size",
        "224KiB",
        _SIZES,
        True,
        False,
        ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"),
    ),
    "Hz": _Kind(
        "a frequency", "2.4GHz", {"Hz": 1, "kHz": 10**3, "MHz": 10**6, "GHz": 10**9}, True, False
    ),
    "B/s": _Kind(
        "a bandwidth",
        "2.9TB/s",
        {**{f"{u}/s": f for u, f in _SIZES.items()}, "B/ns": 10**9},
        False,
        False,
        ("B/s", "KB/s", "MB/s", "GB/s", "TB/s", "KiB/s", "MiB/s", "GiB/s", "TiB/s", "B/ns"),
    ),
    "s": _Kind(
        "a time",
        "1.3us",
        {
            "ps": Fraction(1, 10**12),
            "ns": Fraction(1, 10**9),
            "us": _MICRO,
            "\u00b5s": _MICRO,
            "\u03bcs": _MICRO,
            "ms": Fraction(1, 10**3),
            "s": 1,
        },
        False,
        False,
        ("ps", "ns", "us", "ms", "s"),
    ),
    "FLOP/s": _Kind(
        "a FLOP rate",
        "667TFLOP/s",
        {
            "FLOP/s": 1,
            "GFLOP/s": 10**9,
            "TFLOP/s": 10**12,
            "PFLOP/s": 10**15,
            "FLOPS": 1,
            "GFLOPS": 10**9,
            "TFLOPS": 10**12,
            "PFLOPS": 10**15,
        },
        False,
        False,
        ("GFLOP/s", "TFLOP/s", "PFLOP/s", "TFLOPS"),
    ),
    "cycles": _Kind(
        "a cycle count", "64", {"": 1, "cycles": 1, "cycle": 1}, True, True, ("cycles",)
    ),
    "count": _Kind("a whole number", "128", {"": 1}, True, True),
    "ratio": _Kind("a number", "0.25", {"": 1}, False, True),
}

_QUANTITY = re.compile(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(\S*?)\s*")


def expected(kind: str) -> str:
    """What a value of `kind` looks like, for error messages: "a size like '224KiB' (B, ...)"."""
    return KINDS[kind].expected()


MAX_DIGITS = 400
MAX_EXPONENT = 400
"""Longer numbers, or larger exponents, are refused before they are read (`1e999999999` would
take minutes to turn into an exact fraction); every sane quantity is far inside."""


def _brief(value: object, limit: int = 60) -> str:
    """`repr(value)`, cut to `limit` characters (a value may be a whole file)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _exact(kind: str, value: object) -> Fraction:
    """Parse `value` as a quantity of `kind`, exactly, in base units."""
    k = KINDS[kind]
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Fraction)):
        raise UnitError(f"expected {k.expected()}, got {_brief(value)}")
    if isinstance(value, str):
        m = _QUANTITY.fullmatch(value)
        if m is None:
            raise UnitError(f"expected {k.expected()}, got {_brief(value)}")
        digits, _, exponent = m.group(1).lower().partition("e")
        if len(digits) > MAX_DIGITS or abs(int(exponent or 0)) > MAX_EXPONENT:
            raise UnitError(
                f"expected {k.expected()} of at most {MAX_DIGITS} digits and an exponent "
                f"within +-{MAX_EXPONENT}, got {_brief(value)}"
            )
        number, unit = Fraction(m.group(1)), m.group(2)
    else:
        try:
            number, unit = Fraction(value), ""
        except (ValueError, OverflowError):
            raise UnitError(f"expected {k.expected()}, got {_brief(value)}") from None
    if unit not in k.units and not (unit == "" and number == 0):
        missing = " with no unit" if unit == "" else ""
        raise UnitError(f"expected {k.expected()}, got {_brief(value)}{missing}")
    result = number * k.units.get(unit, 1)
    if k.integer and result.denominator != 1:
        of = {"bytes": " of bytes", "Hz": " of Hz", "cycles": " of cycles"}.get(kind, "")
        raise UnitError(f"expected a whole number{of}, got {_brief(value)}")
    return result


MAX_INT = 2**63 - 1
"""The largest whole quantity (bytes, Hz, cycles, counts): what int64 arrays and numpy sizes
hold."""
MAX_TIME_PS = 2**53
"""The longest time, in picoseconds (~9007 s): times are kept as float seconds, which hold every
picosecond exactly only up to 2**53 of them, and converted to the integer-ps clock."""


def parse_quantity(kind: str, value: object) -> int | float:
    """Parse `value` (a string like '224KiB', or a number) as `kind`, into its base unit.

    Whole kinds (`bytes`, `Hz`, `cycles`, `count`) return int, the others float. Values too
    large to hold without overflow or loss are refused: whole ones above MAX_INT, floats
    beyond the float range, times above MAX_TIME_PS picoseconds.
    Raises UnitError naming the expected form.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown unit kind {kind!r}; known: {', '.join(KINDS)}")
    exact = _exact(kind, value)
    k = KINDS[kind]
    if k.integer:
        if abs(exact) > MAX_INT:
            raise UnitError(
                f"expected {k.noun} of at most {MAX_INT} (2**63 - 1), got {_brief(value)}"
            )
        return int(exact)
    if kind == "s" and abs(exact) * PS_PER_S > MAX_TIME_PS:
        raise UnitError(
            f"expected a time of at most {MAX_TIME_PS // PS_PER_S}s (2**53 ps, beyond which "
            f"a time loses picoseconds), got {_brief(value)}"
        )
    try:
        return float(exact)
    except OverflowError:
        raise UnitError(
            f"expected {k.noun} within the float range (below 1.8e308 in base units), got "
            f"{_brief(value)}"
        ) from None


def parse_bytes(value: object) -> int:
    """'224KiB' -> 229376 bytes (KB, MB, GB, TB decimal; KiB, MiB, GiB, TiB binary)."""
    return parse_quantity("bytes", value)


def parse_hz(value: object) -> int:
    """'2.4GHz' -> 2400000000 Hz (Hz, kHz, MHz, GHz)."""
    return parse_quantity("Hz", value)


def parse_bandwidth(value: object) -> float:
    """'2.9TB/s' -> 2.9e12 bytes/s (B/s ... TiB/s, and B/ns: 23B/ns = 23e9 bytes/s)."""
    return parse_quantity("B/s", value)


def parse_time(value: object) -> float:
    """'1.3us' -> 1.3e-6 seconds (ps, ns, us or µs, ms, s)."""
    return parse_quantity("s", value)


def parse_flops(value: object) -> float:
    """'667TFLOP/s' -> 6.67e14 FLOP/s (FLOP/s, GFLOP/s, TFLOP/s, PFLOP/s; or ...FLOPS)."""
    return parse_quantity("FLOP/s", value)


def parse_cycles(value: object) -> int:
    """'64' or '64cycles' -> 64 engine cycles."""
    return parse_quantity("cycles", value)


def parse_count(value: object) -> int:
    """'128' or 128 -> 128: a whole number with no unit."""
    return parse_quantity("count", value)


def parse_ratio(value: object) -> float:
    """'0.25' or 0.25 -> 0.25: a number with no unit."""
    return parse_quantity("ratio", value)


# ---------------------------------------------------------------------------------------------
# into the simulator clock (integer picoseconds)

PS_PER_S = 10**12


def seconds_to_ps(seconds: float | int | Fraction) -> int:
    """Seconds -> integer picoseconds, rounded to the nearest picosecond."""
    return round(Fraction(seconds) * PS_PER_S)


def cycles_to_ps(cycles: int | float | Fraction, hz: int | float | Fraction) -> int:
    """Engine cycles at `hz` -> picoseconds, rounded up: ceil(cycles * 1e12 / hz).

    Exact integer arithmetic when `cycles` and `hz` are ints (the common case); fractional
    cycles (e.g. N/4 in a fast mode) are converted exactly through Fraction.
    """
    if cycles < 0 or hz <= 0:
        raise ValueError(f"cycles must be >= 0 and hz > 0, got {cycles} cycles at {hz} Hz")
    if isinstance(cycles, int) and isinstance(hz, int):
        return -(-cycles * PS_PER_S // hz)
    return math.ceil(Fraction(cycles) * PS_PER_S / Fraction(hz))


# ---------------------------------------------------------------------------------------------
# formatting for reports


def _scaled(x: float, steps: tuple[tuple[float, str], ...]) -> str:
    for factor, unit in steps:
        if abs(x) >= factor:
            try:
                return f"{x / factor:.4g} {unit}"
            except OverflowError:  # an int beyond float range (a shape of 10**400 elements)
                digits = str(abs(x) // factor)
                return f"{'-' if x < 0 else ''}{digits[0]}.{digits[1:4]}e+{len(digits) - 1} {unit}"
    factor, unit = steps[-1]
    return f"{x / factor:.4g} {unit}"


def fmt_bytes(n: int | float) -> str:
    """Bytes in binary units: 229376 -> '224 KiB', 1536 -> '1.5 KiB', 100 -> '100 B'."""
    if abs(n) < 1024:
        return f"{n:.4g} B"
    return _scaled(n, ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")))


def fmt_time_ns(ns: float) -> str:
    """Nanoseconds in the best unit: 1416 -> '1.416 us', 0.5 -> '500 ps', 2.5e6 -> '2.5 ms'."""
    return _scaled(ns, ((1e9, "s"), (1e6, "ms"), (1e3, "us"), (1, "ns"), (1e-3, "ps")))


def fmt_rate(bytes_per_s: float) -> str:
    """Bytes/s in decimal units: 2.9e12 -> '2.9 TB/s', 23e9 -> '23 GB/s'."""
    return _scaled(
        bytes_per_s, ((1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "KB/s"), (1, "B/s"))
    )


def fmt_flops(x: float) -> str:
    """FLOP/s: 7.86432e13 -> '78.64 TFLOP/s', 1.299e15 -> '1.299 PFLOP/s'."""
    return _scaled(
        x, ((1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s"), (1, "FLOP/s"))
    )


def fmt_hz(hz: float) -> str:
    """Hz: 2.4e9 -> '2.4 GHz', 9.6e8 -> '960 MHz'."""
    return _scaled(hz, ((1e9, "GHz"), (1e6, "MHz"), (1e3, "kHz"), (1, "Hz")))
