"""`trnsim run`, `validate` and `compare`: one trace on one or several chips."""

from __future__ import annotations

import json
from pathlib import Path

import click

from trnsim.cli.app import (
    _check_races,
    _chip_for,
    _load_trace,
    _progress,
    allow_races_option,
    chip_option,
    echo,
    files_options,
    main,
    mode_option,
    param_option,
    race_warnings,
    set_option,
)
from trnsim.cli.background import Background
from trnsim.config import load_chip
from trnsim.errors import TrnsimError
from trnsim.report.files import check_distinct, check_file, check_folder
from trnsim.report.perfetto import write_chrome_trace
from trnsim.report.perfetto_system import write_system_trace
from trnsim.report.profile import check_format, write_profile, write_system_profile
from trnsim.report.provenance import provenance
from trnsim.report.text import format_comparison, format_summary, format_system_summary
from trnsim.runtime.session import check_fits, check_program, lowered, run_program, save_outputs
from trnsim.runtime.system_run import (
    check_fits_system,
    check_program_system,
    placed_and_lowered,
    run_on_system,
    system_of,
)
from trnsim.trace import rank_files
from trnsim.trace.ranks import place

system_option = click.option(
    "--system",
    "system_name",
    metavar="NAME|PATH",
    default=None,
    help="Run on a system of chips (docs/systems.md: trn2-48xl, trn2-ultraserver, ... or a "
    "YAML path), each stream on its rank, collectives between them; overrides the trace's "
    "`system:`. --set then takes the system's keys (--set nodes=2), the chip's as chip.KEY "
    "(--set chip.hbm.bandwidth=4TB/s).",
)


@main.command(short_help="Simulate a trace and report its time, traffic and memory use.")
@click.argument(
    "trace_files", metavar="TRACE...", nargs=-1, required=True, type=click.Path(dir_okay=False)
)
@chip_option
@system_option
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
    "--no-race-check",
    "skip_races",
    is_flag=True,
    help="Skip the race and deadlock check (docs/races.md) that runs before simulating "
    "(~0.3 s on the Llama trace; on a trace of 20,000 or more written-out instructions it runs "
    "beside the simulation, in a second process); a deadlock is then found by the simulation.",
)
@allow_races_option
@files_options
def run(
    trace_files,
    chip,
    system_name,
    overrides,
    params,
    mode,
    as_json,
    perfetto_file,
    profile_file,
    check,
    out_dir,
    quiet,
    skip_races,
    allow_races,
    allow_outside_files,
    max_instructions,
) -> None:
    """Simulate TRACE (a trace YAML or JSON file; the format: docs/trace_format.md) and report
    time, engine utilization, DMA and HBM traffic, FLOP/s against the chip's peak, and memory
    high-water marks. Races and deadlocks are checked first (docs/races.md).

    Several TRACE files run together on a system of chips (--system, or the files' system:),
    one file per rank: each names its rank at the top (rank: 3), and its streams, events and
    kernels are that rank's; collectives match across the files as across the streams of one
    trace (docs/trace_extensions.md, "A trace per rank").

    \b
    Examples:
      trnsim run traces/gemm_double_buffered.yaml
      trnsim run traces/gemm_double_buffered.yaml --chip trn3 --set hbm.bandwidth=6TB/s
      trnsim run traces/llama70b_layer_timing.yaml --json > summary.json
      trnsim run traces/softmax_rows.yaml --perfetto timeline.json --profile instrs.csv
      trnsim run traces/weight_stream.yaml --param batch=32
      trnsim run traces/ddp_allreduce.yaml --system trn2-48xl --check
      trnsim run traces/ranks/rank*.yaml --check
    """
    _check_outputs(perfetto_file, profile_file, out_dir, [*trace_files, chip, system_name])
    program, system = _load_traces(trace_files, params, allow_outside_files, max_instructions,
                                   system_name, chip, overrides)  # fmt: skip
    _check_outputs_of(program, perfetto_file, profile_file, out_dir)
    if system is not None:
        outputs = (as_json, perfetto_file, profile_file, out_dir, quiet)
        _run_system(program, system, mode, check, outputs, skip_races, allow_races)
        return
    cfg = _chip_for(program, chip, overrides)
    check_fits(program, cfg)  # sizes first: nothing is lowered or allocated for a bomb
    with _race_check(program, cfg, allow_races, skip_races) as races:
        if out_dir and (mode or program.mode) == "timing":
            raise TrnsimError(
                f"--out-dir {out_dir}: a timing-mode run computes no values to save; "
                f"run with --mode functional"
            )
        progress = _polling(_progress(quiet), races)
        result = run_program(program, cfg, mode, progress=progress, check=check)
        if _progress(quiet):
            click.echo("\r" + " " * 70 + "\r", err=True, nl=False)  # the progress line, erased
        for line in races.result():
            echo(line, err=True)
    meta = provenance(cfg)
    if perfetto_file:
        write_chrome_trace(result.device.recorder, perfetto_file, cfg.name, meta)
    if profile_file:
        write_profile(result.device.recorder, profile_file, meta)
    saved = save_outputs(result, out_dir) if out_dir else []
    if as_json:
        echo(json.dumps(result.summary, indent=2))
    elif not quiet:
        echo(format_summary(result.summary))
        for label, path in (("timeline", perfetto_file), ("profile", profile_file)):
            if path:
                echo(f"{label:<16}{path}")
        if out_dir:
            echo(
                f"{'outputs':<16}{len(saved)} tensors saved in {out_dir}"
                + ("" if saved else " (the trace has no HBM tensors)")
            )
    failed = [k for k, c in result.summary.get("check", {}).items() if not c["ok"]]
    if failed:
        raise TrnsimError(
            f"--check: {len(failed)} op(s) differ from their numpy reference beyond the "
            f"tolerance of their dtype: {', '.join(failed)}"
        )


def _load_traces(files, params, allow_outside, most, system_name, chip, overrides):
    """(program, its SystemConfig or None): one trace file as it is; several, one per rank
    (`trace.rank_files`), each loaded and placed on the system alone (errors name its file),
    then merged and their collectives checked against each other."""
    if len(files) == 1:
        program = _load_trace(files[0], params, allow_outside, most)
        return program, _system_for(program, system_name, chip, overrides)
    programs = [_load_trace(f, params, allow_outside, most) for f in files]
    merged, sources = rank_files.merge(programs, system_name)
    if merged.system is None:
        raise TrnsimError(
            f"{len(files)} trace files: a trace per rank runs on a system of chips; expected "
            f"--system NAME (or system: NAME in the files)"
        )
    system = _system_for(merged, system_name, chip, overrides)
    for p in programs:
        place(p, system)
    rank_files.check_collectives(place(merged, system), sources)
    return merged, system


def _system_for(program, name, chip, overrides):
    """The SystemConfig of `--system` or the trace's `system:` (whose errors name its line),
    or None for a run on one chip; `--chip` does not go with a system (its chip is the
    system's: --set chip=NAME)."""
    if name is None and program.system is None:
        return None
    if chip:
        raise TrnsimError(
            f"--chip {chip} with a system ({name or program.system}): the system's chip runs; "
            f"expected --set chip={chip} to change it"
        )
    if name is not None:
        return system_of(program, name, overrides)
    try:
        return system_of(program, None, overrides)
    except TrnsimError as e:
        if any(str(e).startswith(f"--set {o.split('=')[0]}") for o in overrides):
            raise
        line = program.lines.get("system", 0)
        raise type(e)(f"{program.source}:{line}: system: {e}") from None


def _run_system(program, system, mode, check, outputs, skip_races, allow_races) -> None:
    """`run` on a system of chips: placed, checked (sizes, races and deadlocks, collectives
    included), simulated; its summary, timeline (a process per chip), profile and outputs
    (DIR/rank<r>/<name>.npy)."""
    as_json, perfetto_file, profile_file, out_dir, quiet = outputs
    check_fits_system(program, system)
    if out_dir and (mode or program.mode) == "timing":
        raise TrnsimError(
            f"--out-dir {out_dir}: a timing-mode run computes no values to save; "
            f"run with --mode functional"
        )
    if not skip_races:
        for line in race_warnings(placed_and_lowered(program, system), allow_races):
            echo(line, err=True)
    result = run_on_system(program, system, mode, progress=_progress(quiet), check=check)
    if _progress(quiet):
        click.echo("\r" + " " * 70 + "\r", err=True, nl=False)
    meta = provenance(system)
    recorders = {int(c): result.system.context(int(c)).recorder for c in result.summary["chips"]}
    if perfetto_file:
        write_system_trace(recorders, perfetto_file, system.name, system.chip.name, meta)
    if profile_file:
        write_system_profile(recorders, profile_file, meta)
    saved = save_outputs(result, out_dir) if out_dir else []
    if as_json:
        echo(json.dumps(result.summary, indent=2))
    elif not quiet:
        echo(format_system_summary(result.summary))
        for label, path in (("timeline", perfetto_file), ("profile", profile_file)):
            if path:
                echo(f"{label:<16}{path}")
        if out_dir:
            echo(f"{'outputs':<16}{len(saved)} tensors saved in {out_dir} (a folder per rank)")
    failed = [k for k, c in result.summary.get("check", {}).items() if not c["ok"]]
    if failed:
        raise TrnsimError(
            f"--check: {len(failed)} collective(s) differ from numpy's result beyond the "
            f"tolerance of their dtype: {', '.join(failed)}"
        )


FORK_RACE_CHECK = 20_000
"""Instructions the race check analyses one by one (those of kernels written in a trace) from
which `run` checks them in a forked process beside the simulation (`cli.background`): below,
the check takes a few hundredths of a second and a fork is not worth it."""


def _race_check(program, cfg, allow: bool, skip: bool) -> Background:
    """`race_warnings` of the lowered program, beside the simulation for a large trace; its
    `result()` is the warnings to print."""
    if skip:
        return Background(list, fork=False)
    prog = lowered(program, cfg, program.lnc or cfg.lnc)  # cached: the run lowers nothing again
    n = sum(
        len(p.instructions)
        for k in prog.kernels.values()
        if k.low_level and not k.ops
        for p in k.per_core
    )
    return Background(
        lambda: race_warnings(prog, allow), fork=n >= FORK_RACE_CHECK, what="the race check"
    )


def _polling(show, check: Background):
    """The simulation's progress callback: `show` (None off a terminal), and while the race
    check runs beside it, a look at whether it has failed (`Background.poll`), so that its
    error stops the simulation within 100,000 events."""
    if not check.pending:
        return show

    def progress(now_ps: int, steps: int) -> None:
        check.poll()
        if show is not None:
            show(now_ps, steps)

    return progress


@main.command(short_help="Check a trace against a chip without simulating it.")
@click.argument(
    "trace_files", metavar="TRACE...", nargs=-1, required=True, type=click.Path(dir_okay=False)
)
@chip_option
@system_option
@set_option
@param_option
@allow_races_option
@files_options
def validate(
    trace_files,
    chip,
    system_name,
    overrides,
    params,
    allow_races,
    allow_outside_files,
    max_instructions,
) -> None:
    """Load and check TRACE without simulating it: the YAML, every key, operand and semaphore,
    and (against the chip) every instruction's shapes, memories and limits. Several TRACE
    files are a trace per rank, as for trnsim run.

    \b
    Example:
      trnsim validate traces/two_streams.yaml --chip trn3
      trnsim validate traces/weight_stream.yaml --param tiles=64
      trnsim validate traces/ddp_allreduce.yaml --system trn2-48xl
    """
    program, system = _load_traces(trace_files, params, allow_outside_files,
                                   max_instructions, system_name, chip, overrides)  # fmt: skip
    trace_file = " ".join(trace_files)
    if system is not None:
        n = check_program_system(program, system)
        _check_races(placed_and_lowered(program, system), allow_races)
        echo(
            f"{trace_file}: ok on {system.name}: kernels {len(program.kernels)}, instructions "
            f"{n}, streams {len(program.streams)}"
        )
        return
    cfg = _chip_for(program, chip, overrides)
    n = check_program(program, cfg)
    _check_races(lowered(program, cfg, program.lnc or cfg.lnc), allow_races)
    echo(
        f"{trace_file}: ok on {cfg.name}: kernels {len(program.kernels)}, instructions "
        f"{n}, streams {len(program.streams)}"
    )


@main.command(short_help="Run a trace on several chips and show the results side by side.")
@click.argument("trace_file", metavar="TRACE", type=click.Path(dir_okay=False))
@click.option(
    "--chip",
    "chips",
    metavar="NAME|PATH[,KEY=VALUE...]",
    multiple=True,
    required=True,
    help="A column: a chip to run on, optionally with its own overrides after commas (repeat: "
    "--chip trn2 --chip trn2,hbm.bandwidth=4TB/s --chip trn3).",
)
@click.option(
    "--system",
    "system_name",
    metavar="NAME|PATH",
    default=None,
    hidden=True,
    help="Not supported: compare runs one chip per column (systems: trnsim sweep --system).",
)
@set_option
@param_option
@mode_option
@click.option("--json", "as_json", is_flag=True, help="Print the summaries as JSON.")
@files_options
def compare(
    trace_file,
    chips,
    system_name,
    overrides,
    params,
    mode,
    as_json,
    allow_outside_files,
    max_instructions,
) -> None:
    """Run TRACE on several chips and show the results side by side, with ratios to the first
    column that ran. A trace on a system of chips (system:) is compared with trnsim sweep
    --grid over the system's keys instead.

    Each column is labelled by its --chip (a config file by its name, overrides appended); a
    column that cannot run (an lnc the chip does not support, a tile that does not fit) shows
    why instead of values. `--set` applies to every column, a column's own overrides after it.

    \b
    Examples:
      trnsim compare traces/gemm_double_buffered.yaml --chip trn2 --chip trn3
      trnsim compare traces/weight_stream.yaml --chip trn2 --chip trn2,hbm.bandwidth=4TB/s
    """
    if system_name is not None:
        raise TrnsimError(
            f"compare --system {system_name}: compare runs a trace on one chip per column; "
            f"expected trnsim sweep {trace_file} --system {system_name} --grid KEY=V1,V2 to "
            f"compare a system's settings side by side"
        )
    program = _load_trace(trace_file, params, allow_outside_files, max_instructions)
    if program.system is not None:
        raise TrnsimError(
            f"{program.source}:{program.lines.get('system', 0)}: system: {program.system}: "
            f"compare runs a trace on one chip per column, not on a system of chips; expected "
            f"trnsim sweep {trace_file} --grid KEY=V1,V2 to compare the system's settings"
        )
    columns = _columns(chips, overrides)
    results = {}
    for label, cfg in columns.items():
        try:
            results[label] = run_program(program, cfg, mode).summary
        except TrnsimError as e:
            results[label] = {"chip": cfg.name, "error": " ".join(str(e).split())}
    if all("error" in s for s in results.values()):
        raise TrnsimError("; ".join(f"{k}: {s['error']}" for k, s in results.items()))
    if as_json:
        echo(json.dumps(results, indent=2))
        return
    echo(format_comparison(results))


def _check_outputs(perfetto_file, profile_file, out_dir, inputs) -> None:
    """Every path `run` will write, checked before it loads or simulates anything: one-line
    errors naming the option (a folder where a file goes, a missing or read-only folder, an
    unknown profile format, an output named twice or naming one of the run's `inputs`)."""
    if perfetto_file:
        check_file("--perfetto", perfetto_file)
    if profile_file:
        check_file("--profile", profile_file)
        try:
            check_format(profile_file)
        except TrnsimError as e:
            raise TrnsimError(f"--profile {e}") from None
    if out_dir:
        check_folder("--out-dir", out_dir)
    _check_distinct([("--perfetto", perfetto_file), ("--profile", profile_file)], inputs)


def _check_outputs_of(program, perfetto_file, profile_file, out_dir) -> None:
    """Once the trace is loaded: no output, the .npy files --out-dir writes included, names a
    file the trace's tensors or tiles are initialised from (`init: {file: x.npy}`)."""
    outputs = [("--perfetto", perfetto_file), ("--profile", profile_file)]
    if out_dir:
        names = program.outputs or [n for n, t in program.tensors.items() if t.on == "hbm"]
        outputs += [("--out-dir", Path(out_dir, f"{n}.npy")) for n in names]
    specs = [*program.tensors.values()]
    specs += [t for k in program.kernels.values() for c in k.per_core for t in c.tiles.values()]
    files = [s.init[1] for s in specs if isinstance(s.init, tuple) and s.init[0] == "file"]
    _check_distinct(outputs, files)


def _check_distinct(outputs, inputs) -> None:
    check_distinct(outputs, [i for i in inputs if i and Path(i).is_file()])


def _columns(chips, overrides) -> dict:
    """label -> ChipConfig, one per --chip (labels made distinct: `trn2`, `mychip`,
    `trn2 hbm.bandwidth=4TB/s`, `trn2 #2`)."""
    out: dict = {}
    for spec in chips:
        name, *own = [x.strip() for x in spec.split(",")]
        cfg = load_chip(name, (*overrides, *own))
        label = Path(name).stem if name.endswith((".yaml", ".yml")) or "/" in name else name
        label = " ".join([label, *own])
        n, unique = 1, label
        while unique in out:
            n += 1
            unique = f"{label} #{n}"
        out[unique] = cfg
    return out
