"""The per-instruction profile table: one row per span, for analysis in pandas.

CSV always; Parquet when pyarrow is installed (the `parquet` extra).
"""

from __future__ import annotations

import csv
from pathlib import Path

from trnsim.errors import TrnsimError
from trnsim.report.recorder import Recorder

COLUMNS = (
    "core",
    "track",
    "kernel",
    "index",
    "op",
    "dtype",
    "start_ns",
    "end_ns",
    "duration_ns",
    "bytes",
    "flops",
)


def rows(rec: Recorder) -> list[tuple]:
    """The profile rows in timeline order."""
    return [
        (
            s.core,
            s.track,
            s.kernel,
            s.index,
            s.op,
            s.dtype,
            s.start_ps / 1000,
            s.end_ps / 1000,
            s.duration_ps / 1000,
            s.bytes,
            s.flops,
        )
        for s in rec.spans
    ]


def write_profile(rec: Recorder, path: str | Path, meta: dict | None = None) -> None:
    """Write the table; the format follows the extension (.csv or .parquet). `meta` (the
    report's provenance: trnsim version, config hash) adds one column per key, the same value
    in every row."""
    path = Path(path)
    data = rows(rec)
    columns = COLUMNS
    if meta:
        columns = (*COLUMNS, *meta)
        data = [(*r, *meta.values()) for r in data]
    if path.suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise TrnsimError(
                f"{path}: writing Parquet needs pyarrow "
                f"(pip install 'trnsim[parquet]'); or use a .csv file"
            ) from None
        table = pa.table({c: [r[i] for r in data] for i, c in enumerate(columns)})
        pq.write_table(table, path)
        return
    if path.suffix != ".csv":
        raise TrnsimError(
            f"{path}: unknown profile format '{path.suffix}'; expected .csv or .parquet"
        )
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        w.writerows(data)
