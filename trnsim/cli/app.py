"""The `trnsim` command line: the only code in trnsim that prints.

Every user-facing error (a TrnsimError) is printed as one line, `error: <message>`, on stderr,
with exit code 2 and no traceback. Commands that take a chip use `chip_option` (or a CHIP
argument) and `set_option` so that `--set key.path=value` works the same everywhere. This module
holds the command group, the shared options and the program's entry point; the commands live
beside it (`traces`, `sweep`, `configs`).
"""

from __future__ import annotations

import gc
import sys

import click

from trnsim import __version__
from trnsim.config import ChipConfig, load_chip
from trnsim.errors import TrnsimError
from trnsim.trace import MAX_INSTRUCTIONS
from trnsim.trace import load as load_trace
from trnsim.trace.params import parse_param_args
from trnsim.trace.races import check_races
from trnsim.units import fmt_time_ns

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


def files_options(f):
    """`--allow-outside-files` and `--max-instructions`, for commands that load traces."""
    f = click.option(
        "--max-instructions",
        type=click.IntRange(min=1),
        metavar="N",
        default=MAX_INSTRUCTIONS,
        show_default=True,
        help="The most instructions the trace's low-level kernels and repeat: blocks may "
        "expand to (checked before expanding; ~800 bytes each to run).",
    )(f)
    return click.option(
        "--allow-outside-files",
        is_flag=True,
        help="Let init: {file: ...} name .npy files outside the trace's folder.",
    )(f)


def _load_trace(
    trace_file: str, params: tuple[str, ...], allow_outside: bool = False, most: int | None = None
):
    """The trace at `trace_file`, with `--param`s set (and the files options)."""
    return load_trace(
        trace_file,
        parse_param_args(params),
        allow_outside_files=allow_outside,
        max_instructions=most or MAX_INSTRUCTIONS,
    )


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
    """--chip, or the trace's `chip:` (whose errors name its line)."""
    if chip or "chip" not in program.lines:
        return load_chip(chip or program.chip, overrides)
    try:
        return load_chip(program.chip, overrides)
    except TrnsimError as e:
        if any(str(e).startswith(f"--set {o.split('=')[0]}") for o in overrides):
            raise
        raise type(e)(f"{program.source}:{program.lines['chip']}: chip: {e}") from None


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


def entry() -> None:
    """The `trnsim` program: `main` with the cyclic garbage collector off for the whole process.

    A command is short-lived and makes few garbage cycles, but the collector would walk all its
    objects three times: when loading and running end (their pauses, `trnsim.gcpause`) and at
    interpreter exit, ~1.6 s of a 100,000-instruction run. `main` itself, as tests and other
    programs call it, keeps the collector as it finds it.
    """
    gc.disable()
    main()
