"""The per-instruction profile table: one row per span, for analysis in pandas.

CSV always; Parquet when pyarrow is installed (the `parquet` extra).
"""

from __future__ import annotations

import csv
from pathlib import Path

from trnsim.errors import TrnsimError
from trnsim.report.files import replacing, replacing_path
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


def check_format(path: str | Path) -> str:
    """'csv' or 'parquet' by the extension of `path`; raises TrnsimError for any other, or for
    Parquet without pyarrow (checked before a run, so that it does not fail after it)."""
    suffix = Path(path).suffix
    if suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise TrnsimError(
                f"{path}: writing Parquet needs pyarrow "
                f"(pip install 'trnsim[parquet]'); or use a .csv file"
            ) from None
        return "parquet"
    if suffix != ".csv":
        raise TrnsimError(f"{path}: unknown profile format '{suffix}'; expected .csv or .parquet")
    return "csv"


def write_profile(rec: Recorder, path: str | Path, meta: dict | None = None) -> None:
    """Write the table; the format follows the extension (.csv or .parquet). `meta` (the
    report's provenance: trnsim version, config hash) adds one column per key, the same value
    in every row. The file appears whole or not at all (`files.replacing`)."""
    _write(path, COLUMNS, rows(rec), meta)


def write_system_profile(recorders: dict, path: str | Path, meta: dict | None = None) -> None:
    """`write_profile` of a system's chips (`recorders`: chip index -> its recorder): a first
    column `chip`, the rows chip by chip."""
    data = [(c, *r) for c, rec in sorted(recorders.items()) for r in rows(rec)]
    _write(path, ("chip", *COLUMNS), data, meta)


def _write(path, columns: tuple, data: list, meta: dict | None) -> None:
    fmt = check_format(path)
    if meta:
        columns = (*columns, *meta)
        data = [(*r, *meta.values()) for r in data]
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({c: [r[i] for r in data] for i, c in enumerate(columns)})
        with replacing_path(path) as tmp:
            pq.write_table(table, tmp)
        return
    with replacing(path, newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        w.writerows(data)
