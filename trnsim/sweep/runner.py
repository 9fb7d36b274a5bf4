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
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trnsim import __version__
from trnsim.config import ChipConfig, load_chip, to_dict
from trnsim.errors import TrnsimError
from trnsim.sweep import table
from trnsim.sweep.bundle import TraceBundle, forget
from trnsim.sweep.worker import one_line, simulate
from trnsim.trace.params import parse_param_args

__all__ = ["Axis", "SweepResult", "parse_grid", "run_sweep", "config_hash", "PARAM"]

PARAM = "param."
"""Grid and --set keys with this prefix set one of the trace's params; the others are chip
config keys."""

CONNECT_TIMEOUT = "10s"
"""How long to try to reach a --scheduler."""

Progress = Callable[[int, int, int], None]
"""progress(done, total, failed): points finished and failed so far, of the `total` to run."""


@dataclass(frozen=True)
class Axis:
    """One --grid option: a key and its values, as given."""

    key: str
    values: tuple[str, ...]


@dataclass
class SweepResult:
    """The table (`columns`, `rows`: this sweep's `points` in grid order, then rows of other
    points found in the output) and what happened: points `ran`, `skipped` (already in the
    output) and `failed` (while running, or before: a trace or config that did not load)."""

    columns: list[str]
    rows: list[dict]
    ran: int = 0
    skipped: int = 0
    failed: int = 0
    out: str | None = None
    points: int = 0


def parse_grid(specs: Sequence[str] | Mapping[str, Sequence[Any]]) -> list[Axis]:
    """`["hbm.bandwidth=2TB/s,4TB/s", ...]` (or a mapping key -> values) -> axes. Values split
    at commas outside brackets, so a list value like `[1,2]` stays whole."""
    if isinstance(specs, Mapping):
        pairs = [(str(k), [_plain(v) for v in vs]) for k, vs in specs.items()]
        where = {k: f"grid {k}" for k, _ in pairs}
    else:
        pairs, where = [], {}
        for text in specs:
            key, eq, values = str(text).partition("=")
            key = key.strip()
            if not eq or not key or not values.strip():
                raise TrnsimError(
                    f"--grid {text}: expected KEY=V1,V2,... like --grid hbm.bandwidth=2TB/s,4TB/s"
                )
            pairs.append((key, _split(values)))
            where[key] = f"--grid {text}"
    axes: list[Axis] = []
    reserved = table.columns([])
    for key, values in pairs:
        if key in reserved:
            raise TrnsimError(
                f"{where[key]}: {key} is a column of the table; expected a chip "
                "config key like hbm.bandwidth or a param like param.batch"
            )
        if any(a.key == key for a in axes):
            raise TrnsimError(
                f"{where[key]}: key {key} is swept twice; expected each key in one --grid"
            )
        if not values or any(v == "" for v in values):
            raise TrnsimError(
                f"{where[key]}: an empty value; expected values separated by "
                "commas, like 2TB/s,4TB/s"
            )
        if len(set(values)) != len(values):
            raise TrnsimError(f"{where[key]}: a value is given twice; expected distinct values")
        axes.append(Axis(key, tuple(values)))
    return axes


def _plain(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _split(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch in "[{(") - (ch in "]})")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()]


def _settings(sets: Sequence[str], params: Sequence[str] | Mapping[str, Any]) -> list[tuple]:
    """The fixed settings as (key, value): --set KEY=V, then --param NAME=V as param.NAME."""
    out = []
    for text in sets:
        key, eq, value = str(text).partition("=")
        if not eq or not key.strip():
            raise TrnsimError(f"--set {text}: expected KEY=VALUE like --set hbm.bandwidth=4TB/s")
        out.append((key.strip(), value.strip()))
    if isinstance(params, Mapping):
        params = [f"{k}={_plain(v)}" for k, v in params.items()]
    out += [(PARAM + k, v) for k, v in parse_param_args(params).items()]
    for i, (key, _) in enumerate(out):
        if any(k == key for k, _ in out[:i]):
            raise TrnsimError(f"--set {key}: set twice; expected each key once")
    return out


def config_hash(cfg: ChipConfig) -> str:
    """A short hash of everything in a chip config that a run depends on (not its file path)."""
    data = {k: v for k, v in to_dict(cfg).items() if k != "source"}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class _Point:
    row: dict
    key: tuple
    task: tuple | None = None  # (bundle, params, config, mode) when it runs
    old: dict | None = field(default=None)  # its row in the table resumed, when done there
    done: bool = False  # its row is complete: figures or an error


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
) -> SweepResult:
    """Run every point of traces x chips x grid values and return the table (see the module's
    doc). `chips` defaults to each trace's own chip; `sets` (`KEY=VALUE`) and `params`
    (`NAME=VALUE`) apply to every point. `workers` > 1 runs a Dask LocalCluster of that many
    processes; `scheduler` (`tcp://host:port`) submits to a running Dask cluster instead."""
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
    axes = parse_grid(grid)
    fixed = _settings(sets, params)
    for axis in axes:
        if any(k == axis.key for k, _ in fixed):
            raise TrnsimError(
                f"--grid {axis.key}: also set with --set or --param; expected "
                "each key in one of them"
            )
    cols = table.columns([a.key for a in axes])
    points = _points(list(dict.fromkeys(traces)), list(dict.fromkeys(chips)), axes, fixed, mode)
    result = SweepResult(cols, [], out=str(out) if out else None)
    others = _resume(out, cols, points) if out and Path(out).exists() else []
    todo = [p for p in points if p.old is None]
    for p in todo:
        p.done = p.task is None  # failed before running (a bad trace or config)
    runs = [p for p in todo if p.task is not None]
    total = len(todo)
    state = {"done": total - len(runs), "failed": total - len(runs)}

    def finish(i: int, res: dict) -> None:
        p = runs[i]
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
        state["done"] += 1
        state["failed"] += res["error"] is not None
        if out and not table.is_parquet(out):
            table.append_csv(out, [p.row], cols)
        if progress:
            progress(state["done"], total, state["failed"])

    def rows() -> list[dict]:
        """The table so far: this sweep's rows in grid order (those done), then the others."""
        return [
            p.old if p.old is not None else p.row for p in points if p.old is not None or p.done
        ] + others

    if out:
        table.write(out, rows(), cols)
    if progress:
        progress(state["done"], total, state["failed"])
    try:
        tasks = [(i, p.task) for i, p in enumerate(runs)]
        if scheduler or workers > 1:
            _on_dask(tasks, finish, workers, scheduler)
        else:
            _in_process(tasks, finish)
    finally:  # also when interrupted: the table keeps every point done
        result.rows = rows()
        if out:
            table.write(out, result.rows, cols)
    result.points = len(points)
    result.ran = len(runs)
    result.skipped = len(points) - total
    result.failed = state["failed"]
    return result


def _points(
    traces: list[str], chips: list[str], axes: list[Axis], fixed: list[tuple], mode: str | None
) -> list[_Point]:
    """Every point in grid order (traces, then chips, then each axis's values, the last axis
    fastest), each with its row's identifying columns and its task, or its error."""
    fixed_params = {k[len(PARAM) :]: v for k, v in fixed if k.startswith(PARAM)}
    fixed_cfg = [f"{k}={v}" for k, v in fixed if not k.startswith(PARAM)]
    set_text = " ".join(f"{k}={v}" for k, v in fixed)
    combos = list(itertools.product(*[a.values for a in axes]))

    def params_of(values: tuple) -> dict[str, str]:
        swept = {a.key[len(PARAM) :]: v for a, v in zip(axes, values) if a.key.startswith(PARAM)}
        return {**fixed_params, **swept}

    configs: dict[tuple, ChipConfig | TrnsimError] = {}
    points = []
    for trace in traces:
        try:
            bundle, found = TraceBundle.read(trace, [params_of(v) for v in combos])
        except TrnsimError as e:
            bundle, found = None, {}
            unreadable = one_line(e)
        for chip_given, values in itertools.product(chips or [None], combos):
            params = params_of(values)
            doc = found.get(tuple(sorted(params.items())))
            error = (
                unreadable
                if bundle is None
                else (one_line(doc) if isinstance(doc, TrnsimError) else None)
            )
            chip = chip_given or (doc[0] if not error else "")
            point_mode = mode or (doc[1] if not error else "")
            swept = [f"{a.key}={v}" for a, v in zip(axes, values) if not a.key.startswith(PARAM)]
            overrides = fixed_cfg + swept
            cfg = None
            if chip and (chip_given or not error):
                ck = (chip, tuple(overrides))
                if ck not in configs:
                    try:
                        configs[ck] = load_chip(chip, overrides)
                    except TrnsimError as e:
                        configs[ck] = e
                if isinstance(configs[ck], TrnsimError):
                    msg = one_line(configs[ck])
                    for text in swept:  # the config names every override --set
                        msg = msg.replace(f"--set {text}", f"--grid {text}")
                    error = error or msg
                else:
                    cfg = configs[ck]
            row = dict.fromkeys(table.columns([a.key for a in axes]))
            row |= {
                "trace": trace,
                "chip": chip,
                **{a.key: v for a, v in zip(axes, values)},
                "error": error,
                "mode": point_mode,
                "set": set_text,
                "trace_hash": bundle.digest if bundle else "",
                "config_hash": config_hash(cfg) if cfg else "",
                "trnsim_version": __version__,
            }
            task = None if error else (bundle, params, cfg, point_mode)
            points.append(_Point(row, _key(row, axes), task))
    return points


def _key(row: dict, axes: Sequence[Axis]) -> tuple:
    """What identifies a point (see the module's doc)."""
    return (
        row["trace_hash"],
        row["chip"],
        *[row[a.key] for a in axes],
        row["set"],
        row["mode"],
        row["trnsim_version"],
        row["config_hash"],
    )


def _resume(out, cols: list[str], points: list[_Point]) -> list[dict]:
    """Mark the points already in table `out` without an error; return its other rows."""
    old_cols, old_rows = table.read(out)
    if old_cols != cols:
        missing = [c for c in cols if c not in old_cols]
        extra = [c for c in old_cols if c not in cols]
        what = "; ".join(
            s
            for s in (
                missing and f"it lacks {', '.join(missing)}",
                extra and f"it has {', '.join(extra)}",
            )
            if s
        )
        raise TrnsimError(
            f"{out}: the table's columns are not this sweep's "
            f"({what or 'another order'}); expected a table of a sweep with the "
            "same --grid keys, or a new --out file"
        )
    axes = [Axis(c, ()) for c in cols[2 : cols.index(table.FIGURES[0])]]
    by_key = {
        _key({**r, **{c: _str(r.get(c)) for c in table.TAIL if c != "error"}}, axes): r
        for r in old_rows
    }
    mine = {p.key for p in points}
    for p in points:
        old = by_key.get(p.key)
        if (
            old is not None
            and not old.get("error")
            and old.get(table.FIGURES[0]) is not None
            and p.task is not None
        ):
            p.old = {
                **old,
                **{c: p.row[c] for c in p.row if c not in table.FIGURES and c != "error"},
            }
    return [r for k, r in by_key.items() if k not in mine]


def _str(value) -> str:
    return "" if value is None else str(value)


# -- executing ----------------------------------------------------------------------------------


def _in_process(tasks: list[tuple[int, tuple]], finish) -> None:
    try:
        for i, task in tasks:
            finish(i, simulate(*task))
    finally:
        forget()


def _on_dask(tasks: list[tuple[int, tuple]], finish, workers: int, scheduler: str | None) -> None:
    """Run the tasks on a Dask cluster: a LocalCluster of `workers` processes (one thread
    each: a simulation holds the GIL), or the running one at `scheduler`."""
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        what = f"--scheduler {scheduler}" if scheduler else f"--workers {workers}"
        raise TrnsimError(
            f"{what} runs the sweep on Dask, which is not installed; expected "
            "pip install 'trnsim[sweep]' (or --workers 1)"
        ) from None
    cluster = None
    try:
        if scheduler:
            try:
                client = Client(scheduler, timeout=CONNECT_TIMEOUT)
            except (OSError, TimeoutError, ValueError) as e:
                raise TrnsimError(
                    f"--scheduler {scheduler}: cannot connect ({one_line(e)}); "
                    "expected the address of a running Dask scheduler, like "
                    "tcp://10.0.0.5:8786"
                ) from None
        else:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cluster = LocalCluster(
                        n_workers=workers,
                        threads_per_worker=1,
                        processes=True,
                        dashboard_address=None,
                        silence_logs=logging.CRITICAL,
                    )
            except Exception as e:
                raise TrnsimError(
                    f"--workers {workers}: cannot start a local Dask cluster "
                    f"({type(e).__name__}: {one_line(e)}); expected a script "
                    "that runs under `if __name__ == '__main__':` (worker "
                    "processes import it again), or --workers 1"
                ) from None
            client = Client(cluster)
        with client:
            shared: dict[str, Any] = {}
            futures: dict[str, int] = {}
            submitted = []
            for n, (i, (bundle, params, cfg, mode)) in enumerate(tasks):
                if bundle.digest not in shared:  # each trace travels once, then is shared
                    shared[bundle.digest] = client.scatter(bundle)
                fut = client.submit(
                    simulate, shared[bundle.digest], params, cfg, mode, pure=False, priority=-n
                )
                futures[fut.key] = i
                submitted.append(fut)
            for fut in as_completed(submitted):
                i = futures[fut.key]
                if fut.status == "finished":
                    res = fut.result()
                else:
                    e = fut.exception()
                    res = {
                        "version": __version__,
                        "figures": None,
                        "error": f"the point's task failed on its worker: "
                        f"{type(e).__name__}: {one_line(e)}",
                    }
                fut.release()
                finish(i, res)
    finally:
        if cluster is not None:
            cluster.close()
