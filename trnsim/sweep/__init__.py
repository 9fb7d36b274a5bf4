"""What-if sweeps: `run(traces, chips, grid, ...)` simulates every point of traces x chips x grid
values (chip config keys and trace params) and returns one table, a row per point; locally, on
N worker processes, or on a Dask cluster. `trnsim sweep` is its command; `plot` draws a figure
from a table.

The parts: `grid` (axes and fixed settings), `points` (the cross product, resuming), `execute`
(in this process or on Dask), `runner` (the sweep: rows as points complete), `estimate` (asking
before a big sweep, with its time from its first points), `worker` (one point, where it lands),
`bundle` (a trace and its init files as they travel), `table` (columns, CSV/Parquet), `plot`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trnsim.sweep.runner import Axis, Progress, SweepResult, parse_grid, run_sweep

__all__ = ["run", "run_sweep", "SweepResult", "Axis", "parse_grid"]


def run(
    traces: str | Sequence[str],
    chips: str | Sequence[str] = (),
    grid: Mapping[str, Sequence[Any]] | Sequence[str] = (),
    sets: Sequence[str] = (),
    params: Mapping[str, Any] | Sequence[str] = (),
    mode: str | None = None,
    out: str | Path | None = None,
    workers: int = 1,
    scheduler: str | None = None,
    progress: Progress | None = None,
):
    """Run a sweep and return its rows: a pandas DataFrame when pandas is installed, else a
    list of dicts (column -> value). For example

        run("traces/weight_stream.yaml", chips=["trn2", "trn3"],
            grid={"hbm.bandwidth": ["1TB/s", "2TB/s"], "param.batch": [8, 64]}, mode="timing")

    See `run_sweep` for the arguments."""
    traces = [traces] if isinstance(traces, (str, Path)) else list(traces)
    chips = [chips] if isinstance(chips, str) else list(chips)
    result = run_sweep(
        [str(t) for t in traces], chips, grid, sets, params, mode, out, workers, scheduler, progress
    )
    try:
        import pandas as pd
    except ImportError:
        return result.rows
    return pd.DataFrame(result.rows, columns=result.columns)
