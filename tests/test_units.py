"""trnsim.units: parsing quantities into base units, formatting, conversion to picoseconds."""

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trnsim.units import (
    UnitError,
    cycles_to_ps,
    fmt_bytes,
    fmt_flops,
    fmt_hz,
    fmt_rate,
    fmt_time_ns,
    parse_bandwidth,
    parse_bytes,
    parse_count,
    parse_cycles,
    parse_flops,
    parse_hz,
    parse_quantity,
    parse_ratio,
    parse_time,
    seconds_to_ps,
)

PARSES = [
    (parse_bytes, "224KiB", 229376),
    (parse_bytes, "24MiB", 25165824),
    (parse_bytes, "24 GiB", 24 * 2**30),
    (parse_bytes, "1TiB", 2**40),
    (parse_bytes, "2KB", 2000),
    (parse_bytes, "1.5MB", 1500000),
    (parse_bytes, "3GB", 3 * 10**9),
    (parse_bytes, "1TB", 10**12),
    (parse_bytes, "512B", 512),
    (parse_bytes, "1.5KiB", 1536),
    (parse_bytes, 0, 0),
    (parse_hz, "2.4GHz", 2_400_000_000),
    (parse_hz, "0.96GHz", 960_000_000),
    (parse_hz, "1.12GHz", 1_120_000_000),
    (parse_hz, "1400MHz", 1_400_000_000),
    (parse_hz, "32kHz", 32_000),
    (parse_hz, "100Hz", 100),
    (parse_bandwidth, "2.9TB/s", 2.9e12),
    (parse_bandwidth, "23B/ns", 23e9),
    (parse_bandwidth, "820GB/s", 820e9),
    (parse_bandwidth, "820GiB/s", 820.0 * 2**30),
    (parse_bandwidth, "1MiB/s", float(2**20)),
    (parse_bandwidth, "10KB/s", 1e4),
    (parse_bandwidth, "5B/s", 5.0),
    (parse_time, "1.3us", 1.3e-6),
    (parse_time, "1.3\u00b5s", 1.3e-6),
    (parse_time, "600ns", 6e-7),
    (parse_time, "250ps", 2.5e-10),
    (parse_time, "2ms", 2e-3),
    (parse_time, "1s", 1.0),
    (parse_flops, "667TFLOP/s", 6.67e14),
    (parse_flops, "667TFLOPS", 6.67e14),
    (parse_flops, "2.5PFLOP/s", 2.5e15),
    (parse_flops, "100GFLOP/s", 1e11),
    (parse_flops, "7FLOP/s", 7.0),
    (parse_flops, 0, 0.0),
    (parse_cycles, "64", 64),
    (parse_cycles, "64cycles", 64),
    (parse_cycles, 64, 64),
    (parse_count, 128, 128),
    (parse_count, "128", 128),
    (parse_ratio, 0.25, 0.25),
    (parse_ratio, "0.5", 0.5),
    (parse_ratio, 2, 2.0),
]


@pytest.mark.parametrize(("parse", "text", "value"), PARSES)
def test_parse(parse, text, value):
    result = parse(text)
    assert result == value
    assert type(result) is type(value)


ERRORS = [
    (
        parse_bytes,
        "224Kb",
        "expected a size like '224KiB' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got '224Kb'",
    ),
    (
        parse_bytes,
        224,
        "expected a size like '224KiB' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), "
        "got 224 with no unit",
    ),
    (parse_bytes, "1.5B", "expected a whole number of bytes, got '1.5B'"),
    (
        parse_hz,
        "2.4",
        "expected a frequency like '2.4GHz' (Hz, kHz, MHz, GHz), got '2.4' with no unit",
    ),
    (parse_hz, "2.4Ghz", "expected a frequency like '2.4GHz' (Hz, kHz, MHz, GHz), got '2.4Ghz'"),
    (parse_bandwidth, "2.9TB", "expected a bandwidth like '2.9TB/s'"),
    (parse_time, "1.3", "expected a time like '1.3us' (ps, ns, us, ms, s), got '1.3' with no unit"),
    (parse_flops, "667TF", "expected a FLOP rate like '667TFLOP/s'"),
    (parse_cycles, "64.5", "expected a whole number of cycles, got '64.5'"),
    (parse_count, True, "expected a whole number like '128', got True"),
    (parse_count, "1.5", "expected a whole number, got '1.5'"),
    (parse_count, None, "expected a whole number like '128', got None"),
    (parse_ratio, "half", "expected a number like '0.25', got 'half'"),
    (parse_ratio, float("nan"), "expected a number like '0.25', got nan"),
    (parse_bandwidth, float("inf"), "expected a bandwidth like '2.9TB/s'"),
    # too large to hold: beyond the float range, 2**53 ps, or 2**63 - 1
    (
        parse_bandwidth,
        "1e400TB/s",
        "expected a bandwidth within the float range (below 1.8e308 in base units), got "
        "'1e400TB/s'",
    ),
    (
        parse_time,
        "1e30s",
        "expected a time of at most 9007s (2**53 ps, beyond which a time loses picoseconds), "
        "got '1e30s'",
    ),
    (parse_time, "9008s", "expected a time of at most 9007s"),
    (parse_hz, "1e30GHz", "expected a frequency of at most 9223372036854775807 (2**63 - 1)"),
    (parse_bytes, "9223372036854775808B", "expected a size of at most"),
    (parse_bandwidth, "1e999999999TB/s", "expected a bandwidth like '2.9TB/s' (B/s"),
    (parse_count, "9" * 401, "expected a whole number like '128' of at most 400 digits"),
]


def test_the_largest_values_that_hold_are_accepted():
    assert parse_time("9007s") == 9007.0 and parse_time("-9007s") == -9007.0
    assert parse_bytes(f"{2**63 - 1}B") == 2**63 - 1
    assert parse_bandwidth("1e290TB/s") == 1e302


@pytest.mark.parametrize(("parse", "text", "message"), ERRORS)
def test_parse_errors(parse, text, message):
    with pytest.raises(UnitError) as info:
        parse(text)
    assert str(info.value).startswith(message)
    assert isinstance(info.value, ValueError)


def test_parse_quantity_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown unit kind 'furlongs'"):
        parse_quantity("furlongs", "1")


@pytest.mark.parametrize(
    ("fmt", "value", "text"),
    [
        (fmt_bytes, 229376, "224 KiB"),
        (fmt_bytes, 1536, "1.5 KiB"),
        (fmt_bytes, 100, "100 B"),
        (fmt_bytes, 96 * 2**30, "96 GiB"),
        (fmt_bytes, 28 * 2**20, "28 MiB"),
        (fmt_time_ns, 1416, "1.416 us"),
        (fmt_time_ns, 0.5, "500 ps"),
        (fmt_time_ns, 12.5, "12.5 ns"),
        (fmt_time_ns, 2.5e6, "2.5 ms"),
        (fmt_time_ns, 3e9, "3 s"),
        (fmt_rate, 2.9e12, "2.9 TB/s"),
        (fmt_rate, 23e9, "23 GB/s"),
        (fmt_flops, 78.6432e12, "78.64 TFLOP/s"),
        (fmt_flops, 1.299e15, "1.299 PFLOP/s"),
        (fmt_hz, 2.4e9, "2.4 GHz"),
        (fmt_hz, 0.96e9, "960 MHz"),
    ],
)
def test_format(fmt, value, text):
    assert fmt(value) == text


def test_seconds_to_ps_rounds_to_nearest():
    assert seconds_to_ps(1.3e-6) == 1_300_000
    assert seconds_to_ps(2e-9) == 2000
    assert seconds_to_ps(0) == 0
    assert seconds_to_ps(Fraction(1, 3 * 10**12)) == 0
    assert seconds_to_ps(Fraction(2, 3 * 10**12)) == 1


def test_cycles_to_ps_rounds_up():
    assert cycles_to_ps(64, 2_400_000_000) == 26_667  # 26,666.67 ps
    assert cycles_to_ps(24, 2_400_000_000) == 10_000  # exact
    assert cycles_to_ps(1, 960_000_000) == 1042  # 1,041.67 ps
    assert cycles_to_ps(0, 1_200_000_000) == 0
    assert cycles_to_ps(16.5, 1_200_000_000) == 13_750  # fractional cycles (a fast mode)
    assert cycles_to_ps(Fraction(64, 3), 1_200_000_000) == 17_778  # 17,777.78 ps
    with pytest.raises(ValueError):
        cycles_to_ps(-1, 1_200_000_000)


@given(st.integers(0, 10**15), st.integers(1, 10**10))
def test_cycles_to_ps_is_exact_for_ints(cycles, hz):
    ps = cycles_to_ps(cycles, hz)
    assert ps == math.ceil(Fraction(cycles * 10**12, hz))
    assert (ps - 1) * hz < cycles * 10**12 <= ps * hz
