"""Running a sweep: the cross product of traces, chips and grid values, one simulation per
point, in this process or on Dask's distributed scheduler, into one table (`trnsim.sweep.table`).

The submitting process does everything that reads files: it reads each trace (and its init
files) into a `TraceBundle`, reading its document once per set of params for its default chip
and mode (and to report a broken document or param once), and builds each point's chip config
with its overrides. Only
`worker.simulate(bundle, params, config, mode)` runs on the workers, so they need trnsim and
nothing else, and a point gives the same row wherever it runs. A point that fails (a bad
override, a trace that does not load, a simulation error) is a row with its `error`; it never
stops the sweep.

Resuming: when the output table exists, a point already in it without an error is not run
again; an errored one is. A point is identified by its trace's content hash, its chip, its grid
values, the fixed settings (`--set`, `--param`), the mode, the trnsim version and the hash of the
chip config it runs on (so an edited chip file runs again). Rows of other points in the table
are kept, after this sweep's. A CSV table gets each row as it completes, so an interrupted sweep
loses nothing; a Parquet table is written when the sweep ends or is interrupted.

Asking first: given a `confirm` callback, a sweep of more than `estimate.CONFIRM_ABOVE` points to
run asks it before running them, with an estimate of their time from its first points (see
`trnsim.sweep.estimate`). Declined, the sweep stops there: the table holds the points timed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trnsim import __version__
from trnsim.errors import TrnsimError
from trnsim.sweep import estimate, execute, table
from trnsim.sweep.grid import PARAM, Axis, parse_grid, settings
from trnsim.sweep.points import Point, config_hash, points, resume

__all__ = ["Axis", "SweepResult", "parse_grid", "run_sweep", "config_hash", "PARAM"]

Progress = Callable[[int, int, int], None]
"""progress(done, total, failed): points finished and failed so far, of the `total` to run."""


@dataclass
class SweepResult:
    """The table (`columns`, `rows`: this sweep's `points` in grid order, then rows of other
    points found in the output) and what happened: points `ran`, `skipped` (already in the
    output) and `failed` (while running, or before: a trace or config that did not load), and
    whether the `confirm` callback `declined` to run the sweep (after the points it timed)."""

    columns: list[str]
    rows: list[dict]
    ran: int = 0
    skipped: int = 0
    failed: int = 0
    out: str | None = None
    points: int = 0
    declined: bool = False


def run_sweep(
    traces: Sequence[str],
    chips: Sequence[str] = (),
    grid: Sequence[str] | Mapping[str, Sequence[Any]] = (),
    sets: Sequence[str] = (),
    params: Sequence[str] | Mapping[str, Any] = (),
    mode: str | None = None,
    out: str | Path | None = None,
    workers: int = 1,
    scheduler: str | None = None,
    progress: Progress | None = None,
    loading: Mapping[str, Any] | None = None,
    confirm: estimate.Confirm | None = None,
    confirm_above: int | None = None,
    systems: Sequence[str] = (),
) -> SweepResult:
    """Run every point of traces x chips x grid values and return the table (see the module's
    doc). `chips` defaults to each trace's own chip; `sets` (`KEY=VALUE`) and `params`
    (`NAME=VALUE`) apply to every point. `workers` > 1 runs a Dask LocalCluster of that many
    processes; `scheduler` (`tcp://host:port`) submits to a running Dask cluster instead.
    `loading` holds the trace loader's options (`allow_outside_files`, `max_instructions`).
    `confirm` is asked before running more than `confirm_above` points (default
    `estimate.CONFIRM_ABOVE`); without it nothing is asked. `systems` (names or paths) runs
    every point on each of those systems of chips instead of one chip (`chips` must be empty):
    the config keys of `grid` and `sets` are then the system's (`topology.link.bandwidth`),
    the chip's as `chip.KEY`; a trace naming a `system:` runs on it without `systems`. A
    table with a point on a system has a `system` column and the system figures."""
    _check_options(traces, workers, scheduler, mode)
    systems = list(dict.fromkeys(systems))
    if systems and chips:
        raise TrnsimError(
            f"--chip {chips[0]} with --system {systems[0]}: the system's chip runs; expected "
            f"--set chip={chips[0]} to choose it"
        )
    axes = parse_grid(grid)
    fixed = settings(sets, params)
    for axis in axes:
        if any(k == axis.key for k, _ in fixed):
            raise TrnsimError(
                f"--grid {axis.key}: also set with --set or --param; expected "
                "each key in one of them"
            )
    every = points(
        list(dict.fromkeys(traces)),
        list(dict.fromkeys(chips)),
        axes,
        fixed,
        mode,
        loading,
        systems,
    )
    on_systems = bool(systems) or any(p.row["system"] for p in every)
    cols = table.columns([a.key for a in axes], system=on_systems)
    for p in every:  # a sweep on one chip has no system columns
        p.row = {c: p.row[c] for c in cols}
    others = resume(out, cols, every) if out and Path(out).exists() else []
    sweep = _Sweep(every, others, cols, out, progress)
    tasks = [(i, p.task) for i, p in enumerate(sweep.runs)]
    above = estimate.CONFIRM_ABOVE if confirm_above is None else confirm_above
    declined = False
    try:
        if confirm is not None and len(tasks) > above:
            timed: list[estimate.Estimate] = []

            def first() -> estimate.Estimate:
                if not timed:
                    sweep.begin()
                    timed.append(estimate.first(tasks, sweep.finish))
                return timed[0]

            declined = not confirm(len(tasks), first)
            tasks = tasks[timed[0].measured :] if timed else tasks
        if not declined:
            sweep.begin()
            if scheduler or workers > 1:
                execute.on_dask(tasks, sweep.finish, workers, scheduler)
            else:
                execute.in_process(tasks, sweep.finish)
    finally:  # also when interrupted: the table keeps every point done
        rows = sweep.rows()
        if out and sweep.begun:
            table.write(out, rows, cols)
    return SweepResult(
        cols,
        rows,
        ran=sum(p.done for p in sweep.runs),
        skipped=len(every) - sweep.total,
        failed=sweep.failed,
        out=str(out) if out else None,
        points=len(every),
        declined=declined,
    )


def _check_options(traces: Sequence[str], workers: Any, scheduler: str | None, mode: Any) -> None:
    if not traces:
        raise TrnsimError("sweep: no trace given; expected one or more TRACE files")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise TrnsimError(f"--workers {workers}: expected a number of processes >= 1")
    if scheduler and workers != 1:
        raise TrnsimError(
            f"--workers {workers} with --scheduler {scheduler}: the cluster's "
            "workers run the points; expected one of the two options"
        )
    if mode not in (None, "functional", "timing"):
        raise TrnsimError(f"--mode {mode}: expected functional or timing")


class _Sweep:
    """The points of one sweep as they complete: rows, counts, the CSV appended to, progress."""

    def __init__(self, every: list[Point], others: list[dict], cols, out, progress):
        self.every, self.others, self.cols = every, others, cols
        self.out, self.progress = out, progress
        todo = [p for p in every if p.old is None]
        for p in todo:
            p.done = p.task is None  # failed before running (a bad trace or config)
        self.runs = [p for p in todo if p.task is not None]
        self.total = len(todo)
        self.done = self.failed = self.total - len(self.runs)
        self.begun = False

    def begin(self) -> None:
        """Before the first point runs: the table so far written out (a CSV's header, for the
        rows appended), the progress shown. Not before: a sweep refused runs and writes nothing."""
        if not self.begun:
            self.begun = True
            if self.out:
                table.write(self.out, self.rows(), self.cols)
            self.report()

    def finish(self, i: int, res: dict) -> None:
        """Point `runs[i]` finished with `res` (the worker's figures or error)."""
        p = self.runs[i]
        if res["version"] != __version__:
            res = {
                "figures": None,
                "error": f"the worker runs trnsim {res['version']}, this "
                f"sweep {__version__}; expected the same trnsim "
                "on every worker",
            }
        p.row.update(res["figures"] or {})
        p.row["error"] = res["error"]
        p.done = True
        self.done += 1
        self.failed += res["error"] is not None
        if self.out and not table.is_parquet(self.out):
            table.append_csv(self.out, [p.row], self.cols)
        self.report()

    def report(self) -> None:
        if self.progress:
            self.progress(self.done, self.total, self.failed)

    def rows(self) -> list[dict]:
        """The table so far: this sweep's rows in grid order (those done), then the others."""
        return [
            p.old if p.old is not None else p.row for p in self.every if p.old is not None or p.done
        ] + self.others
