"""The `trnsim` command line: the only code in trnsim that prints.

Every user-facing error (a TrnsimError) is printed as one line, `error: <message>`, on stderr,
with exit code 2 and no traceback. Commands that take a chip use `chip_option` (or a CHIP
argument) and `set_option` so that `--set key.path=value` works the same everywhere. This module
holds the command group, the shared options and the program's entry point; the commands live
beside it (`traces`, `sweep`, `configs`).
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import sys
import threading

import click

from trnsim import __version__
from trnsim.config import ChipConfig, load_chip
from trnsim.errors import TrnsimError
from trnsim.report.files import WRITE_REFUSED
from trnsim.trace import MAX_INSTRUCTIONS
from trnsim.trace import load as load_trace
from trnsim.trace.document import MAX_TRACE_BYTES
from trnsim.trace.params import parse_param_args
from trnsim.trace.program import Program
from trnsim.trace.races import check_races
from trnsim.units import fmt_time_ns

EXIT_CLOSED_PIPE = 128 + 13  # a shell's status for a process that SIGPIPE ended

chip_option = click.option(
    "--chip",
    "chip",
    metavar="NAME|PATH",
    default=None,
    help="Chip config: a bundled name (trn1, trn2, trn3) or a path to a YAML file. Default: the "
    f"trace's `chip:`, or {Program.chip} for a trace without one.",
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
    """`--allow-outside-files`, `--max-instructions` and `--max-trace-bytes`, for commands
    that load traces (the last kept in the click context's meta, read by `_load_trace`)."""
    f = click.option(
        "--max-trace-bytes",
        type=click.IntRange(min=1),
        metavar="N",
        default=MAX_TRACE_BYTES,
        show_default=True,
        expose_value=False,
        callback=lambda ctx, _param, value: ctx.meta.__setitem__("max_trace_bytes", value),
        help="The largest trace file read (a regular file by its size, before reading; a "
        "device or a pipe stops being read there).",
    )(f)
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
    ctx = click.get_current_context(silent=True)
    return load_trace(
        trace_file,
        parse_param_args(params),
        allow_outside_files=allow_outside,
        max_instructions=most or MAX_INSTRUCTIONS,
        max_bytes=(ctx.meta.get("max_trace_bytes") if ctx else None) or MAX_TRACE_BYTES,
    )


def clean(text: str, keep: str = "\n") -> str:
    """`text` safe to show on a terminal: every control or format character but those in `keep`
    (ESC, the bidirectional overrides such as U+202E) escaped as Python writes it (`\\x1b`,
    `\\u202e`), so a name in a trace can neither recolour the terminal nor reorder what it shows."""
    plain = text
    for c in keep:
        plain = plain.replace(c, "")
    if plain.isprintable():  # the usual case, at C speed (a 64-rank --json summary: 16 MB)
        return text
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)


def echo(text: str = "", err: bool = False, nl: bool = True) -> None:
    """click.echo of `clean(text)`: every line trnsim prints goes through here."""
    click.echo(clean(text), err=err, nl=nl)


def _one_line(e: BaseException) -> str:
    """The message on one line: line breaks become spaces, other controls (even those that
    `str.split` takes for spaces, such as \\t or \\x1f) are escaped."""
    return " ".join(clean(str(e)).split())


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so that the flush at exit does not fail again (the pattern of
    Python's signal module documentation)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # no real stdout (CliRunner)
        pass


def _quiet_exit_on_closed_pipe() -> None:
    """The reader of stdout went away (`trnsim ... | head -1`): end quietly, as a Unix tool
    killed by SIGPIPE does (exit 141)."""
    _stdout_to_devnull()
    sys.exit(EXIT_CLOSED_PIPE)


def _from_stdout(e: BaseException) -> bool:
    """Whether `e` was raised writing stdout: every line goes through click.echo, whose frame,
    the innermost the error left, holds the stream it wrote (`file`)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and any(v is sys.stdout for v in tb.tb_frame.f_locals.values())


def _refused_write(e: BaseException) -> str | None:
    """The message for a write the machine refused (a full disk or /dev/full: `WRITE_REFUSED`,
    the user's condition, not a bug) that no output file claimed: on standard output (then
    pointed at /dev/null), or on the file the OS names. None for any other error."""
    if not isinstance(e, OSError) or e.errno not in WRITE_REFUSED:
        return None
    reason = os.strerror(e.errno)
    if _from_stdout(e):
        _stdout_to_devnull()
        return f"standard output: {reason}"
    return f"{e.filename}: {reason}" if e.filename else reason


class _Group(click.Group):
    """A click group that turns every TrnsimError (and a MemoryError, and a write the machine
    refused) into `error: <message>` and exit code 2, a closed stdout into a quiet exit, and
    lists its commands with whole summaries."""

    group_class = type  # subgroups (`configs`) are _Groups too

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TrnsimError as e:
            click.echo(f"error: {_one_line(e)}", err=True)
            ctx.exit(2)
        except BrokenPipeError:
            _quiet_exit_on_closed_pipe()
        except click.ClickException as e:  # usage errors, which may quote a user's value
            e.message = clean(e.message)
            raise
        except (click.exceptions.Exit, click.Abort):
            raise
        except MemoryError:  # not a bug: the work does not fit this machine
            click.echo(
                "error: this machine ran out of memory; try --mode timing (shapes only, no "
                "values), a smaller workload, or a lower --max-instructions",
                err=True,
            )
            ctx.exit(2)
        except Exception as e:  # a bug in trnsim (a refused write aside): one line, unless --debug
            refused = _refused_write(e)
            if refused:
                click.echo(f"error: {_one_line(refused)}", err=True)
                ctx.exit(2)
            if ctx.find_root().params.get("debug"):
                raise
            click.echo(
                f"internal error: {type(e).__name__}: {_one_line(e)} "
                f"(a bug in trnsim; rerun with `trnsim --debug ...` for a traceback)",
                err=True,
            )
            ctx.exit(3)

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        """As click's, but a closed pipe or a full stdout while parsing (`trnsim --help | head
        -1`, `trnsim --help > /dev/full`) ends as one while running does, not with click's own
        exit code 1 or a traceback."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except BrokenPipeError:
            _quiet_exit_on_closed_pipe()
        except OSError as e:
            refused = _refused_write(e)
            if not refused:
                raise
            click.echo(f"error: {_one_line(refused)}", err=True)
            sys.exit(2)

    def format_commands(self, ctx: click.Context, formatter) -> None:
        """Each command with its whole `short_help` (click would cut it to fit one line)."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.short_help or cmd.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=_Group,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="trnsim")
@click.option("--debug", is_flag=True, help="Show a traceback on internal errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
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

    The trace format: docs/trace_format.md.
    """
    if ctx.invoked_subcommand is None:  # bare `trnsim`: the help, and success
        click.echo(ctx.get_help())


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


def race_warnings(program, allow: bool) -> list[str]:
    """The race and deadlock check of docs/races.md (a kernel the library lowered counted by its
    ops' tensors: its instructions are the library's, race-checked by its tests): its error, or
    its warning lines."""
    return check_races(program, allow, library=False)


def _check_races(program, allow: bool) -> None:
    """`race_warnings`, the warnings on stderr."""
    for line in race_warnings(program, allow):
        echo(line, err=True)


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
    """The `trnsim` program: `main` with the cyclic garbage collector off for the whole process,
    ended by `_exit` (no object-by-object teardown).

    A command is short-lived and makes few garbage cycles, but the collector would walk all its
    objects three times: when loading and running end (their pauses, `trnsim.gcpause`) and at
    interpreter exit, ~1.6 s of a 100,000-instruction run. `main` itself, as tests and other
    programs call it, keeps the collector as it finds it.
    """
    gc.disable()
    try:
        main(prog_name="trnsim")  # also when started as `python cli.py`
        code = 0
    except SystemExit as e:
        code = e.code
    _exit(code)


def _exit(code: int | str | None) -> None:
    """End the process as `sys.exit(code)` would, but without the interpreter's teardown, which
    frees every object one by one: ~3 s of a 14 s Llama prefill layer's run (1 GB of objects),
    ~0.4 s of a 100,000-instruction trace's. The exit hooks (`atexit`) still run and the output
    is flushed (a full stdout is then an error, exit 2, as while running); with other threads
    alive (they may hold work to finish) the exit is the usual one."""
    if threading.active_count() > 1:
        sys.exit(code)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): the message on stderr, status 1
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:  # the reader went away: as _quiet_exit_on_closed_pipe
            status = EXIT_CLOSED_PIPE
        except OSError as e:
            if stream is sys.stdout and e.errno in WRITE_REFUSED and status == 0:
                print(f"error: standard output: {os.strerror(e.errno)}", file=sys.stderr)
                status = 2
        except ValueError:
            pass
    os._exit(status)
