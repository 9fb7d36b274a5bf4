"""`trnsim nccom`'s outputs: nccom-test's table (fixed-width columns, GB/s meaning GiB/s, the
average bus bandwidth last), CSV and JSON, from `Row`s."""

from __future__ import annotations

import csv
import io

from trnsim.cli.nccom_run import Job, Row
from trnsim.dtypes import DType

GiB = 2**30

SHORT = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float8_e4m3": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3fn",
    "float8_e5m2": "fp8_e5m2",
}
"""The `type` column's names (nccom-test's short ones); other dtypes keep their names."""

HEADER = (
    "size(B)",
    "count(elems)",
    "type",
    "time(us)",
    "algbw(GB/s)",
    "busbw(GB/s)",
    "algorithm",
    "check",
)
WIDTHS = (14, 14, 10, 12, 13, 13)
"""The numeric columns' widths, right-aligned (the algorithm and check follow, left-aligned)."""


def short(dt: DType) -> str:
    return SHORT.get(dt.name, dt.name)


def average_busbw(rows: list[Row]) -> float:
    """The mean of the rows' bus bandwidths, B/s (nccom-test's last line)."""
    return sum(r.busbw for r in rows) / len(rows)


def cells(r: Row) -> tuple[str, ...]:
    """A row's cells as the table shows them (time in us, bandwidths in GiB/s)."""
    return (
        str(r.size),
        str(r.count),
        short(r.dtype),
        f"{r.time_ps / 1e6:.2f}",
        f"{r.algbw / GiB:.2f}",
        f"{r.busbw / GiB:.2f}",
        r.algorithm,
        r.check or "",
    )


def row_line(cells: tuple[str, ...], show_algorithm: bool, check: bool) -> str:
    """One line of the table (the header's or a row's cells)."""
    line = "".join(c.rjust(w) for c, w in zip(cells, WIDTHS))
    extra = ([cells[6].ljust(26) if check else cells[6]] if show_algorithm else []) + (
        [cells[7]] if check else []
    )
    return "   ".join([line, *extra])


def _record(r: Row) -> dict:
    rec = {
        "size_bytes": r.size,
        "count": r.count,
        "type": short(r.dtype),
        "time_us": r.time_ps / 1e6,
        "algbw_GiBps": _finite(r.algbw / GiB),
        "busbw_GiBps": _finite(r.busbw / GiB),
        "algorithm": r.algorithm,
    }
    return rec | ({"check": r.check} if r.check else {})


def _finite(x: float) -> float | None:
    """x, or None (JSON's null, an empty CSV cell) for an infinite bandwidth."""
    return x if x != float("inf") else None


def csv_text(rows: list[Row]) -> str:
    """One CSV row per size: size_bytes, count, type, time_us, algbw_GiBps, busbw_GiBps,
    algorithm (and check)."""
    out = io.StringIO()
    records = [_record(r) for r in rows]
    writer = csv.DictWriter(out, fieldnames=list(records[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    return out.getvalue()


def json_doc(job: Job, rows: list[Row], settings: dict) -> dict:
    return {
        "op": job.op,
        "system": job.cfg.name,
        "nodes": job.cfg.nodes,
        "ranks": job.ranks,
        "system_ranks": job.cfg.ranks,
        "dtype": job.dtype.name,
        "settings": settings,
        "rows": [_record(r) | {"time_ps": r.time_ps} for r in rows],
        "avg_busbw_GiBps": _finite(average_busbw(rows) / GiB),
    }
