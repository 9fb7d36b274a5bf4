"""One sweep point, run where it lands: in this process, or on a Dask worker.

`simulate` takes everything it needs as arguments (the trace bundle, its params, the chip config
or the system config already built with every override, the mode) and returns plain data, so a
worker needs trnsim installed and nothing else: no files, no configs of its own.
"""

from __future__ import annotations

from collections.abc import Mapping

from trnsim import __version__
from trnsim.config import ChipConfig, SystemConfig
from trnsim.errors import TrnsimError
from trnsim.runtime.session import run_program
from trnsim.runtime.system_run import run_on_system
from trnsim.sweep.bundle import TraceBundle
from trnsim.sweep.table import figures


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def simulate(
    bundle: TraceBundle,
    params: Mapping[str, str],
    cfg: ChipConfig | SystemConfig,
    mode: str | None,
) -> dict:
    """{"version": the worker's trnsim version, "figures": the row's figures or None,
    "error": None or the one-line message of what went wrong}. Never raises for a bad point:
    a failed point is a row with its error."""
    try:
        if isinstance(cfg, SystemConfig):
            result = run_on_system(bundle.load(params), cfg, mode)
        else:
            result = run_program(bundle.load(params), cfg, mode)
        return {"version": __version__, "figures": figures(result.summary), "error": None}
    except TrnsimError as e:
        error = one_line(e)
    except MemoryError:
        error = "out of memory on the worker (try --mode timing)"
    except Exception as e:  # a bug in trnsim: the sweep goes on, the row says what happened
        error = f"internal error: {type(e).__name__}: {one_line(e)} (a bug in trnsim)"
    return {"version": __version__, "figures": None, "error": error}
