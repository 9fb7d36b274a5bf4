"""`trnsim sweep` and `trnsim plot`: what-if tables over chips, config keys and params."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from trnsim.cli.app import (
    echo,
    files_options,
    main,
    mode_option,
    param_option,
)
from trnsim.errors import TrnsimError
from trnsim.report.files import check_distinct, check_file
from trnsim.sweep import estimate, run_sweep
from trnsim.sweep import table as sweep_table
from trnsim.sweep.plot import plot as plot_table


@main.command(short_help="Run traces over chips and config values into one table.")
@click.argument(
    "traces", metavar="TRACE...", nargs=-1, required=True, type=click.Path(dir_okay=False)
)
@click.option(
    "--chip",
    "chips",
    metavar="NAME|PATH",
    multiple=True,
    help="A chip to run every point on (repeat: --chip trn2 --chip trn3). Default: "
    "the chip: each trace names.",
)
@click.option(
    "--system",
    "systems",
    metavar="NAME|PATH",
    multiple=True,
    help="Run every point on a system of chips (trn2-48xl, ... or a YAML path; repeat for "
    "several), each trace's streams on their ranks, as trnsim run --system does; --grid and "
    "--set then take the system's keys (topology.link.bandwidth, nodes, "
    "collectives.algorithm), the chip's as chip.KEY (--set chip=NAME swaps it). A trace "
    "naming a system: "
    "runs on it without --system. Not with --chip.",
)
@click.option(
    "--grid",
    "grid",
    metavar="KEY=V1,V2,...",
    multiple=True,
    help="Sweep a chip config key over values with their units, e.g. --grid "
    "hbm.bandwidth=1TB/s,2TB/s,4TB/s, a system key on a system (--grid "
    "topology.link.bandwidth=64GB/s,128GB/s), or a trace param, e.g. --grid "
    "param.batch=8,64. Repeat it: the sweep runs every combination.",
)
@click.option(
    "--set",
    "overrides",
    metavar="KEY=VALUE",
    multiple=True,
    help="Set a chip config key (a system key on a system, or param.NAME) for every point, "
    "e.g. --set core.sbuf.partition_bytes=448KiB (repeatable).",
)
@param_option
@mode_option
@click.option(
    "--out",
    metavar="FILE",
    default=None,
    help="Write the table to FILE: .csv, or .parquet (with pyarrow). If FILE exists "
    "the sweep resumes: its points without an error are not run again. Without "
    "--out the table is printed as CSV.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="Run the points on N local worker processes (a Dask LocalCluster; needs "
    "pip install 'trnsim[sweep]'). 1 runs them here, one after another.",
)
@click.option(
    "--scheduler",
    metavar="ADDRESS",
    default=None,
    help="Run the points on a running Dask cluster, e.g. --scheduler "
    "tcp://10.0.0.5:8786; its workers need trnsim installed, and nothing else "
    "(each point carries its trace, init files and chip config).",
)
@click.option(
    "--quiet",
    "-q",
    is_flag=True,
    help="No progress bar and no summary line; errors only (and the CSV without --out).",
)
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help=f"Run a sweep of more than {estimate.CONFIRM_ABOVE:,} points without asking first "
    "(needed when stdin is not a terminal).",
)
@files_options
@click.pass_context
def sweep(
    ctx: click.Context,
    traces,
    chips,
    systems,
    grid,
    overrides,
    params,
    mode,
    out,
    workers,
    scheduler,
    quiet,
    yes,
    allow_outside_files,
    max_instructions,
) -> None:
    """Simulate every combination of TRACEs, --chips and --grid values, and write one table: a
    row per point with its trace, chip and grid values, the run's figures (total and device
    time, FLOP/s and peak fraction, HBM bytes and bandwidth, DMA, per-engine-kind utilization
    mean and max, memory peaks), an error column (a failed point never stops the sweep), and
    the mode, settings, trace and config hashes and trnsim version that identify it.

    On a system of chips (--system, or a trace's system:) the grid's keys are the system
    file's (topology.link.bandwidth, topology.levels.NAME.bandwidth, efa.bandwidth, nodes,
    collectives.algorithm, ...; the chip's as chip.KEY), the table gains a system column and
    the communication figures (collectives, collective_ns, overlapped_ns, exposed_ns,
    exposed_fraction, link_bytes, link_utilization_max, busbw_max_bytes_per_s), and the chip
    figures add up the system's chips (docs/systems.md, "Sweeps").

    More than 10,000 points to run: the sweep times its first points (kept in the table) and
    asks, with the estimated time, whether to run the rest; --yes runs them without asking.

    Exit status: 0 when no point failed; 1 when any point failed (the table is written all the
    same; stderr says how many, its error column why) or the question was answered no; 2 for a
    usage error (a bad option or grid, an unwritable --out, a big sweep with no terminal to ask
    and no --yes), nothing run.

    \b
    Examples:
      trnsim sweep traces/weight_stream.yaml --chip trn1 --chip trn2 --chip trn3 \\
          --grid hbm.bandwidth=0.5TB/s,1TB/s,2TB/s,4TB/s --mode timing --out hbm.csv
      trnsim sweep traces/weight_stream.yaml --grid param.batch=8,32,128 \\
          --grid core.sbuf.partition_bytes=224KiB,448KiB --workers 2 --out batch.parquet
      trnsim sweep traces/*.yaml --chip trn2 --mode timing --scheduler tcp://10.0.0.5:8786
      trnsim sweep traces/ddp_allreduce.yaml --system trn2-48xl \\
          --grid topology.link.bandwidth=32GB/s,64GB/s,128GB/s --grid chip.hbm.bandwidth=2TB/s,4TB/s
    """
    if out:
        check_file("--out", out)
        check_distinct([("--out", out)], [*traces, *chips])
    progress = _sweep_progress(quiet)
    result = run_sweep(
        list(traces),
        list(chips),
        list(grid),
        list(overrides),
        list(params),
        mode,
        out,
        workers,
        scheduler,
        progress=progress,
        loading={
            "allow_outside_files": allow_outside_files,
            "max_instructions": max_instructions,
        },
        confirm=None if yes else _ask(progress, workers, scheduler),
        systems=list(systems),
    )
    if progress:
        _clear_progress()
    if result.declined:
        timed = f"the {result.ran} points timed are" if result.ran > 1 else "the point timed is"
        kept = f"; {timed} in {out}" if out and result.ran else ""
        click.echo(f"sweep: not run (answered no){kept}", err=True)
        ctx.exit(1)
    if not out:
        click.echo(sweep_table.csv_lines(result.rows, result.columns), nl=False)
    if not quiet:
        _say_what_it_did(result, out)
    if result.failed:
        where = out or "the table"
        click.echo(
            f"error: {result.failed} of {result.points} points failed; "
            f"see the error column of {where}",
            err=True,
        )
        ctx.exit(1)


def _say_what_it_did(result, out) -> None:
    line = f"sweep: {result.points} points: {result.ran} run"
    if result.skipped:
        line += f", {result.skipped} already in {out}"
    line += f", {result.failed} failed" + (f"; table in {out}" if out else "")
    echo(line, err=not out)
    failed = [r for r in result.rows[: result.points] if r.get("error")]
    for r in failed[:5]:
        point = " ".join(
            str(r[c]) for c in result.columns[: result.columns.index(sweep_table.FIGURES[0])]
        )
        echo(f"  failed: {point}: {r['error']}", err=True)
    if len(failed) > 5:
        click.echo(f"  ... and {len(failed) - 5} more (see the error column)", err=True)


def _interactive() -> bool:
    """Whether there is someone to ask (tests replace it: CliRunner's stdin is no terminal)."""
    return sys.stdin.isatty()


def _ask(bar: _Bar | None, workers: int, scheduler: str | None) -> estimate.Confirm:
    """The question before a big sweep (`trnsim.sweep.estimate`): on a terminal, y/N with the
    time estimated from the first points; with no terminal, a usage error before any point runs
    (the answer cannot be given, so timing points for it would only delay the refusal)."""

    def confirm(n: int, first) -> bool:
        if not _interactive():
            raise TrnsimError(
                f"sweep: {n:,} points to run, more than {estimate.CONFIRM_ABOVE:,}, and no "
                "terminal to ask whether to run them; expected --yes to run them"
            )
        e = first()
        if bar:
            _clear_progress()
        if e.measured > 1:
            timed = f"the first {e.measured} took {e.each:.3g} s each"
            timed += f", {e.failed} of them failed" if e.failed else ""
        else:
            timed = f"the first took {e.each:.3g} s" + (" and failed" if e.failed else "")
        where = f"{workers} processes" if workers > 1 else "1 process"
        if scheduler:
            where = "1 process (the cluster runs several at a time)"
        answer = click.confirm(
            f"sweep: {n:,} points to run; {timed}: the rest about "
            f"{_duration(e.seconds_left(workers))} on {where}. Run them?",
            default=False,
            err=True,
        )
        if bar:
            bar.restart()
        return answer

    return confirm


def _duration(seconds: float) -> str:
    """`45 s`, `12 min`, `3 h 05 min`: an estimate's precision."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _clear_progress() -> None:
    click.echo("\r" + " " * 78 + "\r", err=True, nl=False)


def _sweep_progress(quiet: bool) -> _Bar | None:
    """A progress bar with points done, failures and an ETA, on an interactive terminal only."""
    if quiet or not sys.stderr.isatty():
        return None
    return _Bar()


class _Bar:
    """The progress bar: `bar(done, total, failed)` draws it. Its ETA is the rate since it was
    first drawn (the sweep's points built: not their time) or `restart()`ed (after the question
    before a big sweep, whose wait is no point's)."""

    def __init__(self) -> None:
        self.last: int | None = None

    def restart(self) -> None:
        self.start, self.base = time.monotonic(), self.last

    def __call__(self, done: int, total: int, failed: int) -> None:
        if self.last is None:
            self.last = done
            self.restart()
        self.last = done
        width = 24
        filled = width * done // total if total else width
        eta = ""
        if self.base < done < total:
            left = (time.monotonic() - self.start) / (done - self.base) * (total - done)
            eta = f", ETA {int(left // 60)}:{int(left % 60):02d}"
        click.echo(
            f"\rsweep [{'#' * filled}{'.' * (width - filled)}] {done}/{total} points, "
            f"{failed} failed{eta}   ",
            err=True,
            nl=False,
        )


@main.command(short_help="Draw a figure from a sweep table.")
@click.argument("table_file", metavar="TABLE", type=click.Path(dir_okay=False))
@click.option(
    "--x",
    "x",
    metavar="KEY",
    required=True,
    help="The column on the x axis: a grid key such as hbm.bandwidth or "
    "param.batch (values with units are placed by size), or any column.",
)
@click.option(
    "--y",
    "y",
    metavar="METRIC",
    required=True,
    help="The figure on the y axis, e.g. device_time_ns, flops_per_s, "
    "peak_fraction, hbm_bandwidth_bytes_per_s, tensor_util_max.",
)
@click.option(
    "--hue",
    metavar="KEY",
    default=None,
    help="One line per value of this column, e.g. --hue chip. Every other "
    "identifying column that varies in the table splits the lines too.",
)
@click.option(
    "--out",
    metavar="FILE",
    default=None,
    help="The image: .png, .svg or .pdf. Default: TABLE with .png.",
)
@click.option("--logx", is_flag=True, help="A logarithmic x axis.")
@click.option("--logy", is_flag=True, help="A logarithmic y axis.")
@click.option(
    "--title",
    metavar="TEXT",
    default=None,
    help="The title. Default: '<METRIC> against <KEY>: <traces>'.",
)
def plot(table_file, x, y, hue, out, logx, logy, title) -> None:
    """Draw a figure from a sweep TABLE (CSV or Parquet, written by trnsim sweep) with
    matplotlib: METRIC against KEY, a line per value of --hue. Rows with an error are left
    out. Needs pip install 'trnsim[plot]'.

    \b
    Examples:
      trnsim plot hbm.csv --x hbm.bandwidth --y device_time_ns --hue chip --out hbm.png
      trnsim plot batch.parquet --x param.batch --y peak_fraction --hue chip --logx
    """
    out = out or str(Path(table_file).with_suffix(".png"))
    check_file("--out", out)
    check_distinct([("--out", out)], [table_file])
    target = plot_table(table_file, x, y, hue, out, logx, logy, title)
    echo(f"wrote {target}")
