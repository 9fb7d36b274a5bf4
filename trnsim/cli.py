"""The `trnsim` command line: the only code in trnsim that prints.

Every user-facing error (a TrnsimError) is printed as one line, `error: <message>`, on stderr,
with exit code 2 and no traceback. Commands that take a chip use `chip_option` (or a CHIP
argument) and `set_option` so that `--set key.path=value` works the same everywhere.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import sys
import time

import click

from trnsim import __version__
from trnsim.config import ChipConfig, derived, list_chips, load_chip, to_dict
from trnsim.errors import TrnsimError
from trnsim.report.perfetto import write_chrome_trace
from trnsim.report.profile import write_profile
from trnsim.report.summary import format_comparison, format_summary
from trnsim.runtime.session import check_program, run_program, save_outputs
from trnsim.sweep import run_sweep
from trnsim.sweep import table as sweep_table
from trnsim.sweep.plot import plot as plot_table
from trnsim.trace import load as load_trace
from trnsim.trace.params import parse_param_args
from trnsim.trace.races import check_races
from trnsim.units import fmt_bytes, fmt_flops, fmt_hz, fmt_rate, fmt_time_ns

chip_option = click.option(
    "--chip",
    "chip",
    metavar="NAME|PATH",
    default=None,
    help="Chip config: a bundled name (trn1, trn2, trn3) or a path to a YAML file.",
)

set_option = click.option(
    "--set",
    "overrides",
    metavar="KEY=VALUE",
    multiple=True,
    help="Override one chip config key, with its unit (repeatable), e.g. "
    "--set core.sbuf.partition_bytes=448KiB --set hbm.bandwidth=4TB/s.",
)

param_option = click.option(
    "--param",
    "params",
    metavar="NAME=VALUE",
    multiple=True,
    help="Set one of the trace's params: (repeatable), e.g. --param batch=64 --param seq=512.",
)


def _load_trace(trace_file: str, params: tuple[str, ...]):
    """The trace at `trace_file`, with `--param`s set."""
    return load_trace(trace_file, parse_param_args(params))


class _Group(click.Group):
    """A click group that turns every TrnsimError into `error: <message>` and exit code 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TrnsimError as e:
            click.echo(f"error: {' '.join(str(e).split())}", err=True)
            ctx.exit(2)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as e:  # a bug in trnsim: still one line, unless --debug
            if ctx.params.get("debug"):
                raise
            click.echo(
                f"internal error: {type(e).__name__}: {' '.join(str(e).split())} "
                f"(a bug in trnsim; rerun with `trnsim --debug ...` for a traceback)",
                err=True,
            )
            ctx.exit(3)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trnsim")
@click.option("--debug", is_flag=True, help="Show a traceback on internal errors.")
def main(debug: bool) -> None:
    """trnsim: an emulator and timing simulator of AWS Trainium chips.

    \b
    Examples:
      trnsim run traces/gemm_double_buffered.yaml
      trnsim run traces/gemm_double_buffered.yaml --chip trn3 --perfetto out.json
      trnsim validate traces/two_streams.yaml
      trnsim compare traces/gemm_double_buffered.yaml --chip trn2 --chip trn3
      trnsim configs show trn2 --set hbm.bandwidth=4TB/s
      trnsim sweep traces/weight_stream.yaml --chip trn2 --chip trn3 --grid param.batch=8,64
      trnsim plot sweep.csv --x hbm.bandwidth --y device_time_ns --hue chip
    """


mode_option = click.option(
    "--mode",
    type=click.Choice(["functional", "timing"]),
    default=None,
    help="functional computes values; timing keeps shapes only (for workloads too large for "
    "this machine's memory). Default: the trace's `mode:`.",
)


allow_races_option = click.option(
    "--allow-races",
    "allow_races",
    is_flag=True,
    help="Report races (unordered conflicting accesses, docs/races.md) as warnings, not errors.",
)


def _check_races(program, allow: bool) -> None:
    """The race and deadlock check of docs/races.md; warnings go to stderr."""
    for line in check_races(program, allow):
        click.echo(line, err=True)


def _chip_for(program, chip: str | None, overrides) -> ChipConfig:
    return load_chip(chip or program.chip, overrides)


def _progress(quiet: bool):
    """A progress callback for long runs, shown only on an interactive terminal."""
    if quiet or not sys.stderr.isatty():
        return None

    def show(now_ps: int, steps: int) -> None:
        click.echo(
            f"\rsimulating: {fmt_time_ns(now_ps / 1000)} simulated, {steps:,} events",
            err=True,
            nl=False,
        )

    return show


@main.command()
@click.argument("trace_file", metavar="TRACE", type=click.Path(dir_okay=False))
@chip_option
@set_option
@param_option
@mode_option
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option(
    "--perfetto",
    "perfetto_file",
    metavar="FILE",
    default=None,
    help="Write the timeline as Chrome trace JSON (open it in ui.perfetto.dev).",
)
@click.option(
    "--profile",
    "profile_file",
    metavar="FILE",
    default=None,
    help="Write one row per instruction: FILE.csv, or FILE.parquet with pyarrow.",
)
@click.option(
    "--check", is_flag=True, help="Compare each high-level op's output with its numpy reference."
)
@click.option(
    "--out-dir",
    metavar="DIR",
    default=None,
    help="Save the trace's `outputs:` (all HBM tensors if none) as DIR/<name>.npy.",
)
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors (and --json).")
@click.option(
    "--check-races",
    is_flag=True,
    help="Run validate's race and deadlock check (docs/races.md) before simulating. "
    "Off by default for now: on large traces it costs about as much as the "
    "simulation; `trnsim validate` always runs it.",
)
@allow_races_option
def run(
    trace_file,
    chip,
    overrides,
    params,
    mode,
    as_json,
    perfetto_file,
    profile_file,
    check,
    out_dir,
    quiet,
    check_races,
    allow_races,
) -> None:
    """Simulate TRACE (a trace YAML file) and report time, engine utilization, DMA and HBM
    traffic, FLOP/s against the chip's peak, and memory high-water marks.

    \b
    Examples:
      trnsim run traces/gemm_double_buffered.yaml
      trnsim run traces/gemm_double_buffered.yaml --chip trn3 --set hbm.bandwidth=6TB/s
      trnsim run traces/llama70b_layer_timing.yaml --json > summary.json
      trnsim run traces/softmax_rows.yaml --perfetto timeline.json --profile instrs.csv
      trnsim run traces/weight_stream.yaml --param batch=32
    """
    program = _load_trace(trace_file, params)
    if check_races:
        _check_races(program, allow_races)
    cfg = _chip_for(program, chip, overrides)
    if out_dir and (mode or program.mode) == "timing":
        raise TrnsimError(
            f"--out-dir {out_dir}: a timing-mode run computes no values to save; "
            f"run with --mode functional"
        )
    result = run_program(program, cfg, mode, progress=_progress(quiet), check=check)
    if _progress(quiet):
        click.echo("\r" + " " * 70 + "\r", err=True, nl=False)
    if perfetto_file:
        write_chrome_trace(result.device.recorder, perfetto_file, cfg.name)
    if profile_file:
        write_profile(result.device.recorder, profile_file)
    saved = save_outputs(result, out_dir) if out_dir else []
    if as_json:
        click.echo(json.dumps(result.summary, indent=2))
    elif not quiet:
        click.echo(format_summary(result.summary))
        for label, path in (("timeline", perfetto_file), ("profile", profile_file)):
            if path:
                click.echo(f"{label:<16}{path}")
        if out_dir:
            click.echo(
                f"{'outputs':<16}{len(saved)} tensors saved in {out_dir}"
                + ("" if saved else " (the trace has no HBM tensors)")
            )


@main.command()
@click.argument("trace_file", metavar="TRACE", type=click.Path(dir_okay=False))
@chip_option
@set_option
@param_option
@allow_races_option
def validate(trace_file, chip, overrides, params, allow_races) -> None:
    """Load and check TRACE without simulating it: the YAML, every key, operand and semaphore,
    and (against the chip) every instruction's shapes, memories and limits.

    \b
    Example:
      trnsim validate traces/two_streams.yaml --chip trn3
      trnsim validate traces/weight_stream.yaml --param tiles=64
    """
    program = _load_trace(trace_file, params)
    cfg = _chip_for(program, chip, overrides)
    n = check_program(program, cfg)
    _check_races(program, allow_races)
    click.echo(
        f"{trace_file}: ok on {cfg.name}: kernels {len(program.kernels)}, instructions "
        f"{n}, streams {len(program.streams)}"
    )


@main.command()
@click.argument("trace_file", metavar="TRACE", type=click.Path(dir_okay=False))
@click.option(
    "--chip",
    "chips",
    metavar="NAME|PATH",
    multiple=True,
    required=True,
    help="A chip to run on (repeat: --chip trn2 --chip trn3).",
)
@set_option
@param_option
@mode_option
@click.option("--json", "as_json", is_flag=True, help="Print the summaries as JSON.")
def compare(trace_file, chips, overrides, params, mode, as_json) -> None:
    """Run TRACE on several chips and show the results side by side, with ratios to the first.

    \b
    Example:
      trnsim compare traces/gemm_double_buffered.yaml --chip trn2 --chip trn3
    """
    program = _load_trace(trace_file, params)
    results = [run_program(program, load_chip(c, overrides), mode).summary for c in chips]
    if as_json:
        click.echo(json.dumps({s["chip"]: s for s in results}, indent=2))
        return
    click.echo(format_comparison(results))


@main.command()
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
    "--grid",
    "grid",
    metavar="KEY=V1,V2,...",
    multiple=True,
    help="Sweep a chip config key over values with their units, e.g. --grid "
    "hbm.bandwidth=1TB/s,2TB/s,4TB/s, or a trace param, e.g. --grid "
    "param.batch=8,64. Repeat it: the sweep runs every combination.",
)
@click.option(
    "--set",
    "overrides",
    metavar="KEY=VALUE",
    multiple=True,
    help="Set a chip config key (or param.NAME) for every point, e.g. --set "
    "core.sbuf.partition_bytes=448KiB (repeatable).",
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
def sweep(traces, chips, grid, overrides, params, mode, out, workers, scheduler, quiet) -> None:
    """Simulate every combination of TRACEs, --chips and --grid values, and write one table: a
    row per point with its trace, chip and grid values, the run's figures (total and device
    time, FLOP/s and peak fraction, HBM bytes and bandwidth, DMA, per-engine-kind utilization
    mean and max, memory peaks), an error column (a failed point never stops the sweep), and
    the mode, settings, trace and config hashes and trnsim version that identify it.

    \b
    Examples:
      trnsim sweep traces/weight_stream.yaml --chip trn1 --chip trn2 --chip trn3 \\
          --grid hbm.bandwidth=0.5TB/s,1TB/s,2TB/s,4TB/s --mode timing --out hbm.csv
      trnsim sweep traces/weight_stream.yaml --grid param.batch=8,32,128 \\
          --grid core.sbuf.partition_bytes=224KiB,448KiB --workers 2 --out batch.parquet
      trnsim sweep traces/*.yaml --chip trn2 --mode timing --scheduler tcp://10.0.0.5:8786
    """
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
        progress=_sweep_progress(quiet),
    )
    if _sweep_progress(quiet):
        click.echo("\r" + " " * 78 + "\r", err=True, nl=False)
    if not out:
        click.echo(sweep_table.csv_lines(result.rows, result.columns), nl=False)
    if quiet:
        return
    line = f"sweep: {result.points} points: {result.ran} run"
    if result.skipped:
        line += f", {result.skipped} already in {out}"
    line += f", {result.failed} failed" + (f"; table in {out}" if out else "")
    click.echo(line, err=not out)
    failed = [r for r in result.rows[: result.points] if r.get("error")]
    for r in failed[:5]:
        point = " ".join(
            str(r[c]) for c in result.columns[: result.columns.index(sweep_table.FIGURES[0])]
        )
        click.echo(f"  failed: {point}: {r['error']}", err=True)
    if len(failed) > 5:
        click.echo(f"  ... and {len(failed) - 5} more (see the error column)", err=True)


def _sweep_progress(quiet: bool):
    """A progress bar with points done, failures and an ETA, on an interactive terminal only."""
    if quiet or not sys.stderr.isatty():
        return None
    start = time.monotonic()

    def show(done: int, total: int, failed: int) -> None:
        width = 24
        filled = width * done // total if total else width
        eta = ""
        if 0 < done < total:
            left = (time.monotonic() - start) / done * (total - done)
            eta = f", ETA {int(left // 60)}:{int(left % 60):02d}"
        click.echo(
            f"\rsweep [{'#' * filled}{'.' * (width - filled)}] {done}/{total} points, "
            f"{failed} failed{eta}   ",
            err=True,
            nl=False,
        )

    return show


@main.command()
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
    target = plot_table(table_file, x, y, hue, out, logx, logy, title)
    click.echo(f"wrote {target}")


@main.group()
def configs() -> None:
    """List and inspect the chip configs (configs/*.yaml).

    \b
    Examples:
      trnsim configs list
      trnsim configs show trn3 --json
    """


@configs.command("list")
def configs_list() -> None:
    """One line per bundled chip: name, cores x NeuronCore version, description.

    \b
    Example:
      trnsim configs list
    """
    for name in list_chips():
        cfg = load_chip(name)
        click.echo(f"{name:<6} {cfg.cores} x {cfg.core.version:<6} {cfg.description}")


@configs.command("show")
@click.argument("chip", metavar="CHIP")
@set_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON: every key in base units (bytes, Hz, bytes/s, s), plus 'derived'.",
)
def configs_show(chip: str, overrides: tuple[str, ...], as_json: bool) -> None:
    """Show chip config CHIP (a name or a YAML path) with units, and the figures derived from
    it (peak FLOP/s per dtype, SBUF/PSUM/DMA/HBM totals) beside the published ones.

    \b
    Examples:
      trnsim configs show trn2
      trnsim configs show trn2 --set core.sbuf.partition_bytes=448KiB --set hbm.bandwidth=4TB/s
      trnsim configs show my-chip.yaml --json
    """
    cfg = load_chip(chip, overrides)
    if as_json:
        click.echo(json.dumps({**to_dict(cfg), "derived": derived(cfg)}, indent=2))
        return
    for line in _describe(cfg):
        click.echo(line)


# ---------------------------------------------------------------------------------------------
# the readable view

_FORMAT = {
    "bytes": fmt_bytes,
    "Hz": fmt_hz,
    "B/s": fmt_rate,
    "s": lambda s: fmt_time_ns(s * 1e9),
    "FLOP/s": lambda x: fmt_flops(x) if x else "not published",
    "cycles": lambda c: f"{c} cycles",
    "bool": lambda b: "true" if b else "false",
    "list": lambda xs: ", ".join(str(x) for x in xs),
    "ratio": lambda r: f"{r:g}",
}


def _describe(cfg: ChipConfig) -> list[str]:
    lines = [f"{cfg.name}: {cfg.description}", f"source: {cfg.source}"]
    lines += _section(cfg, "chip")
    lines += ["", "derived"] + _derived_lines(cfg)
    return lines


def _section(obj, title: str) -> list[str]:
    """A titled block of `key  value  # help`, followed by its subsections."""
    rows, subsections = [], []
    for f in dataclasses.fields(obj):
        unit, value = f.metadata["unit"], getattr(obj, f.name)
        if unit == "section":
            subsections += _section(value, f"{title}.{f.name}" if title != "chip" else f.name)
        elif f.name not in ("name", "description", "source"):
            text = _FORMAT.get(unit, str)(value)
            rows.append(f"  {f.name:<26} {text:<16} # {f.metadata['help']}")
    return ["", title, *rows, *subsections]


def _derived_lines(cfg: ChipConfig) -> list[str]:
    d = derived(cfg)
    flops = d["peak_flops"]
    lines = [f"  {'peak FLOP/s':<12} {'core':>15} {'chip':>15} {'published':>15} {'gap':>8}"]
    for dtype, chip in flops["chip"].items():
        published, gap = flops["published"][dtype], flops["gap"][dtype]
        lines.append(
            f"  {dtype:<12} {fmt_flops(flops['core'][dtype]):>15} {fmt_flops(chip):>15} "
            f"{fmt_flops(published) if published else '-':>15} "
            f"{f'{gap:+.1%}' if gap is not None else '-':>8}"
        )
    dma = d["dma_bandwidth"]
    hbm = d["hbm"]
    lines += [
        f"  {'sbuf':<12} {fmt_bytes(d['sbuf_bytes']['core'])} per core, "
        f"{fmt_bytes(d['sbuf_bytes']['chip'])} per chip",
        f"  {'psum':<12} {fmt_bytes(d['psum_bytes']['core'])} per core, "
        f"{fmt_bytes(d['psum_bytes']['chip'])} per chip",
        f"  {'dma':<12} {fmt_rate(dma['core'])} per core ({cfg.core.dma.engines} engines x "
        f"{fmt_rate(cfg.core.dma.engine_bandwidth)}), {fmt_rate(dma['chip'])} per chip "
        f"(published {fmt_rate(dma['published'])}, gap {dma['gap']:+.1%})",
        f"  {'hbm':<12} {fmt_bytes(hbm['capacity'])} in {cfg.hbm.stacks} stacks, "
        f"{fmt_rate(hbm['bandwidth_per_stack'])} per stack",
        f"  {'logical':<12} {d['logical_cores']} logical cores at lnc={cfg.lnc}",
    ]
    return lines


def entry() -> None:
    """The `trnsim` program: `main` with the cyclic garbage collector off for the whole process.

    A command is short-lived and makes few garbage cycles, but the collector would walk all its
    objects three times: when loading and running end (their pauses, `trnsim.gcpause`) and at
    interpreter exit, ~1.6 s of a 100,000-instruction run. `main` itself, as tests and other
    programs call it, keeps the collector as it finds it.
    """
    gc.disable()
    main()
