"""Executing a sweep's simulations: one after another in this process, or on Dask (a
LocalCluster of worker processes, or a running cluster at a scheduler's address). Each finished
point is handed to `finish(i, result)` as it completes."""

from __future__ import annotations

import gc
import logging
import warnings
from typing import Any

from trnsim import __version__
from trnsim.errors import TrnsimError
from trnsim.sweep.bundle import forget
from trnsim.sweep.worker import one_line, simulate

__all__ = ["CONNECT_TIMEOUT", "in_process", "on_dask"]

CONNECT_TIMEOUT = "10s"
"""How long to try to reach a --scheduler."""


def in_process(tasks: list[tuple[int, tuple]], finish, until=None) -> int:
    """Run the tasks one after another (stopping early once `until(points done)` is true) and
    return how many ran. The `trnsim` command runs with the cyclic collector off
    (`trnsim.cli.app.entry`): here it collects after each point, when the point's objects are
    gone and the walk is short, so a long sweep's few cycles do not pile up."""
    done = 0
    try:
        for i, task in tasks:
            finish(i, simulate(*task))
            done += 1
            if not gc.isenabled():
                gc.collect()
            if until is not None and until(done):
                break
    finally:
        forget()
    return done


def on_dask(tasks: list[tuple[int, tuple]], finish, workers: int, scheduler: str | None) -> None:
    """Run the tasks on a Dask cluster: a LocalCluster of `workers` processes (one thread
    each: a simulation holds the GIL), or the running one at `scheduler`."""
    try:
        from distributed import Client, as_completed
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
            cluster = _local_cluster(workers)
            client = Client(cluster)
            from trnsim.sweep.quick_exit import QuickExit  # (imports Dask)

            client.register_plugin(QuickExit(), name="trnsim-quick-exit")
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


def _local_cluster(workers: int):
    """A LocalCluster of `workers` single-threaded processes, quiet (no dashboard, no logs)."""
    from distributed import LocalCluster

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return LocalCluster(
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
