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

A sweep with points on a system of chips (`trnsim sweep --system`, or a trace naming a
`system:`) has a `system` column before `chip` (the system's name; empty for a point on one
chip) and the SYSTEM_FIGURES after the figures. A system point's chip figures add up its chips:
flops, HBM and DMA bytes summed (the rates over the system's device time), utilization over
every engine of every chip that ran, memory peaks and `peak_fraction` the largest chip's.

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
SYSTEM_FIGURES = (
    "collectives",
    "collective_ns",
    "overlapped_ns",
    "exposed_ns",
    "exposed_fraction",
    "link_bytes",
    "link_utilization_max",
    "busbw_max_bytes_per_s",
)
"""The figures of a point on a system (the run's `communication` and `collectives`): the
collectives completed, the ranks' communication time, the part of it compute hid and the rest
(docs/trace_format.md, "Exposed and overlapped"), the bytes every link carried, the busiest
link's utilisation over any collective, the largest bus bandwidth."""
INT_SYSTEM_FIGURES = ("collectives",)
TAIL = ("error", "mode", "set", "trace_hash", "config_hash", "trnsim_version")
"""The columns after the figures."""


def columns(grid_keys: Sequence[str], system: bool = False) -> list[str]:
    """Every column of a sweep table with these grid keys, in order (`system`: a sweep with
    points on a system of chips)."""
    if system:
        return ["trace", "system", "chip", *grid_keys, *FIGURES, *SYSTEM_FIGURES, *TAIL]
    return ["trace", "chip", *grid_keys, *FIGURES, *TAIL]


def grid_keys(cols: Sequence[str]) -> list[str]:
    """The grid keys of a table's columns: those between `chip` and the figures."""
    return list(cols[cols.index("chip") + 1 : cols.index(FIGURES[0])])


def figures(summary: dict) -> dict[str, int | float]:
    """The FIGURES of a run summary (`trnsim.report.summary.summarize`'s dict), and the
    SYSTEM_FIGURES too for a run on a system (`report.system_summary.summarize_system`'s)."""
    if "collectives" in summary:
        return _system_figures(summary)
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


def _system_figures(summary: dict) -> dict[str, int | float]:
    """A system run's figures (see the module's doc): its chips' added up, then its own."""
    chips = [figures(s) for s in summary["chips"].values()]
    device_s = summary["device_time_ns"] * 1e-9
    out: dict[str, int | float] = {
        "total_time_ns": summary["total_time_ns"],
        "device_time_ns": summary["device_time_ns"],
    }
    for key in ("flops", "hbm_bytes_read", "hbm_bytes_written", "dma_bytes", "dma_transfers"):
        out[key] = sum(c[key] for c in chips)
    out["flops_per_s"] = out["flops"] / device_s if device_s else 0.0
    moved = out["hbm_bytes_read"] + out["hbm_bytes_written"]
    out["hbm_bandwidth_bytes_per_s"] = moved / device_s if device_s else 0.0
    fractions = [c["peak_fraction"] for c in chips if c["peak_fraction"] is not None]
    out["peak_fraction"] = max(fractions) if fractions else None  # None: no FLOPs, as one chip's
    for kind in ENGINE_KINDS:
        utils = [
            e["utilization"]
            for s in summary["chips"].values()
            for name, e in s["engines"].items()
            if name.rpartition(".")[2] == kind
        ]
        out[f"{kind}_util_mean"] = sum(utils) / len(utils) if utils else 0.0
        out[f"{kind}_util_max"] = max(utils, default=0.0)
    for key in ("sbuf_peak_bytes", "psum_peak_bytes", "hbm_peak_bytes"):
        out[key] = max((c[key] for c in chips), default=0)
    comm, rows = summary["communication"], summary["collectives"]
    out |= {
        "collectives": len(rows),
        "collective_ns": comm["collective_ns"],
        "overlapped_ns": comm["overlapped_ns"],
        "exposed_ns": comm["exposed_ns"],
        "exposed_fraction": comm["exposed_fraction"],
        "link_bytes": float(sum(summary["links"].values())),
        "link_utilization_max": max((r["link_utilization"] for r in rows), default=0.0),
        "busbw_max_bytes_per_s": max((r["busbw_bytes_per_s"] for r in rows), default=0.0),
    }
    return out


def _kind(column: str) -> str:
    if column in INT_FIGURES or column in INT_SYSTEM_FIGURES:
        return "int"
    if column in FIGURES or column in SYSTEM_FIGURES:
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
