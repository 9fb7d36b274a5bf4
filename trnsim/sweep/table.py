"""The sweep table: its columns, a run summary flattened into one row, and reading and writing it
as CSV (always) or Parquet (`.parquet`, with pyarrow).

A row is `trace`, `chip`, one column per grid key (named by the key, holding the value as
given), the figures of the run's summary, `error` (empty unless the point failed), and what
identifies the point for resuming: `mode`, `set` (the fixed --set and --param settings),
`trace_hash` (the trace's content and its init files), `config_hash` (the chip config the point
ran on, after every override) and `trnsim_version`.

Per-engine figures are aggregated by engine kind over the engines of the summary (those of the
cores that ran instructions), so chips with different core counts share columns:
`tensor_util_mean` is the mean utilization of every `core*.tensor` engine, `tensor_util_max`
the largest. DMA queues are summed (`dma_bytes`, `dma_transfers`).

Floats are written as Python's shortest round-trip text, so a table read back holds the very
values written: a sweep's table is the same bytes however it ran.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from trnsim.errors import TrnsimError
from trnsim.isa import Engine
from trnsim.report.files import replacing, replacing_path

ENGINE_KINDS = tuple(e.name.lower() for e in Engine if e is not Engine.DMA)

INT_FIGURES = (
    "flops",
    "hbm_bytes_read",
    "hbm_bytes_written",
    "dma_bytes",
    "dma_transfers",
    "sbuf_peak_bytes",
    "psum_peak_bytes",
    "hbm_peak_bytes",
)
FIGURES = (
    "total_time_ns",
    "device_time_ns",
    "flops",
    "flops_per_s",
    "peak_fraction",
    "hbm_bytes_read",
    "hbm_bytes_written",
    "hbm_bandwidth_bytes_per_s",
    "dma_bytes",
    "dma_transfers",
    *[f"{kind}_util_{agg}" for kind in ENGINE_KINDS for agg in ("mean", "max")],
    "sbuf_peak_bytes",
    "psum_peak_bytes",
    "hbm_peak_bytes",
)
"""The figures of a row, in column order."""
TAIL = ("error", "mode", "set", "trace_hash", "config_hash", "trnsim_version")
"""The columns after the figures."""


def columns(grid_keys: Sequence[str]) -> list[str]:
    """Every column of a sweep table with these grid keys, in order."""
    return ["trace", "chip", *grid_keys, *FIGURES, *TAIL]


def figures(summary: dict) -> dict[str, int | float]:
    """The FIGURES of a run summary (`trnsim.report.summary.summarize`'s dict)."""
    hbm, memory = summary["hbm"], summary["memory"]
    out: dict[str, int | float] = {
        "total_time_ns": summary["total_time_ns"],
        "device_time_ns": summary["device_time_ns"],
        "flops": summary["flops"],
        "flops_per_s": summary["flops_per_s"],
        "peak_fraction": summary["peak_fraction"],
        "hbm_bytes_read": hbm["bytes_read"],
        "hbm_bytes_written": hbm["bytes_written"],
        "hbm_bandwidth_bytes_per_s": hbm["bandwidth_bytes_per_s"],
        "dma_bytes": sum(q["bytes"] for q in summary["dma"].values()),
        "dma_transfers": sum(q["transfers"] for q in summary["dma"].values()),
    }
    for kind in ENGINE_KINDS:
        utils = [
            e["utilization"]
            for name, e in summary["engines"].items()
            if name.rpartition(".")[2] == kind
        ]
        out[f"{kind}_util_mean"] = sum(utils) / len(utils) if utils else 0.0
        out[f"{kind}_util_max"] = max(utils, default=0.0)
    for key in ("sbuf_peak_bytes", "psum_peak_bytes", "hbm_peak_bytes"):
        out[key] = memory[key]
    return out


def _kind(column: str) -> str:
    if column in INT_FIGURES:
        return "int"
    if column in FIGURES:
        return "float"
    return "str"


# -- writing --------------------------------------------------------------------------------------


def is_parquet(path: str | Path) -> bool:
    return str(path).endswith(".parquet")


def _text(value: Any) -> str:
    return "" if value is None else str(value)  # str(float) is its shortest round-trip repr


def csv_lines(rows: Iterable[dict], cols: Sequence[str], header: bool = True) -> str:
    """`rows` as CSV text (with the header line if `header`)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if header:
        w.writerow(cols)
    for row in rows:
        w.writerow([_text(row.get(c)) for c in cols])
    return buf.getvalue()


def write(path: str | Path, rows: Sequence[dict], cols: Sequence[str]) -> None:
    """Write the whole table to `path` (replacing it at once: a reader never sees half)."""
    path = Path(path)
    try:
        if is_parquet(path):
            pa, pq = _pyarrow(path)
            types = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}
            schema = pa.schema([(c, types[_kind(c)]) for c in cols])
            table = pa.Table.from_pylist([{c: r.get(c) for c in cols} for r in rows], schema)
            with replacing_path(path) as tmp:
                pq.write_table(table, tmp)
        else:
            with replacing(path, encoding="utf-8", newline="") as fh:
                fh.write(csv_lines(rows, cols))
    except OSError as e:
        raise TrnsimError(
            f"{path}: cannot write the sweep table ({e.strerror or e}); expected a writable path"
        ) from None


def append_csv(path: str | Path, rows: Iterable[dict], cols: Sequence[str]) -> None:
    """Add rows to the end of a CSV table (its header already written)."""
    with open(path, "a", encoding="utf-8", newline="") as f:
        f.write(csv_lines(rows, cols, header=False))


def _pyarrow(path: Path):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise TrnsimError(
            f"{path}: a Parquet table needs pyarrow (pip install "
            "'trnsim[parquet]'); or name a .csv file"
        ) from None
    return pa, pq


# -- reading --------------------------------------------------------------------------------------


def read(path: str | Path) -> tuple[list[str], list[dict]]:
    """(columns, rows) of a sweep table written by `write` (CSV or Parquet), values typed as
    written: ints, floats, strings; None for an empty cell. A CSV row cut short (a sweep
    killed while writing it) is dropped."""
    path = Path(path)
    if is_parquet(path):
        _, pq = _pyarrow(path)
        try:
            table = pq.read_table(path)
        except Exception as e:  # pyarrow raises its own types for a damaged file
            raise TrnsimError(
                f"{path}: cannot read the table ({type(e).__name__}: {e}); "
                "expected a Parquet table written by trnsim sweep"
            ) from None
        return list(table.column_names), table.to_pylist()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TrnsimError(
            f"{path}: cannot read the table ({type(e).__name__}: {e}); expected "
            "a CSV table written by trnsim sweep"
        ) from None
    if not text.endswith("\n"):  # a sweep killed while writing its last row
        text = text[: text.rfind("\n") + 1]
    lines = list(csv.reader(io.StringIO(text)))
    if not lines:
        raise TrnsimError(
            f"{path}: the file is empty; expected a CSV table written by trnsim "
            "sweep (a header line, then a row per point)"
        )
    cols = lines[0]
    kinds = [_kind(c) for c in cols]
    rows = []
    for n, cells in enumerate(lines[1:], start=2):
        if len(cells) != len(cols):
            continue
        try:
            rows.append({c: _value(v, k) for c, v, k in zip(cols, cells, kinds)})
        except ValueError:
            raise TrnsimError(
                f"{path}:{n}: a cell is not a number where the column "
                "holds numbers; expected a table written by trnsim sweep"
            ) from None
    return cols, rows


def _value(text: str, kind: str):
    if text == "":
        return None
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    return text
