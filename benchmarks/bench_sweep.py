"""`trnsim sweep` on one process against a local Dask cluster of two worker processes.

    python benchmarks/bench_sweep.py                  # 32 points of ~1 s, 1 worker then 2
    python benchmarks/bench_sweep.py --repeat 3       # the best of 3 runs of each
    python benchmarks/bench_sweep.py --tiles 512      # lighter points

The sweep: traces/weight_stream.yaml in timing mode with `tiles` N-tiles of 512 columns (2048 by
default: a 1 GiB weight, 10,240 DMA transfers and 10,240 compute instructions, about a second a
point on a 2-core machine; 512 tiles took 0.6-1 s a point until the DMA model's speed-ups of
2026-12-04, 0.22 s after, and points that short measure the cluster's start more than the
sweep), on trn2 and trn3, at 8 HBM bandwidths and 2 batch sizes: 2 x 8 x 2 = 32 points. Both
runs go through `trnsim.sweep.run_sweep`, as `trnsim sweep --workers N` does; the 2-worker time
includes starting and stopping the LocalCluster (about 0.6 s: the workers' processes import
Dask and trnsim; stopping took 1 s more until the workers' exits skipped collecting their
garbage, `sweep.quick_exit`). The two tables must be equal row for row. The CPU seconds (this
process and its finished children, the workers) show how many cores the machine gave the
sweep, and a calibration before and after (two processes against one on plain Python work) how
much parallelism the machine had to give: other work on it lowers both.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from trnsim.sweep import run_sweep  # noqa: E402

TRACE = str(ROOT / "traces" / "weight_stream.yaml")
CHIPS = ["trn2", "trn3"]
GRID = [
    "hbm.bandwidth=0.25TB/s,0.5TB/s,0.75TB/s,1TB/s,1.5TB/s,2TB/s,3TB/s,4TB/s",
    "param.batch=8,32",
]


def _spin(n: int) -> float:
    start = time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i % 7
    return time.perf_counter() - start


def parallelism(n: int = 6_000_000) -> float:
    """How much faster two processes get a fixed amount of pure-Python work done than one, on
    this machine now: 2 on two idle cores, about 1 when other work keeps one core busy. The
    ceiling for the 2-worker speedup."""
    with ProcessPoolExecutor(2) as pool:
        pool.submit(_spin, 1000).result()  # the processes are up
        one = pool.submit(_spin, n).result()
        start = time.perf_counter()
        both = [pool.submit(_spin, n) for _ in range(2)]
        for f in both:
            f.result()
        two = time.perf_counter() - start
    return 2 * one / two


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the LocalCluster's workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def sweep(workers: int, tiles: int):
    """(wall seconds, CPU seconds, result) of one sweep."""
    start, cpu = time.perf_counter(), cpu_seconds()
    result = run_sweep(
        [TRACE], CHIPS, GRID, params=[f"tiles={tiles}"], mode="timing", workers=workers
    )
    return time.perf_counter() - start, cpu_seconds() - cpu, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs of each; the best is reported")
    ap.add_argument("--tiles", type=int, default=2048, help="the trace's tiles param (even)")
    args = ap.parse_args()
    best: dict[int, tuple[float, float]] = {}
    tables = {}
    load = os.getloadavg()[0]
    ceiling = [parallelism()]
    for _ in range(args.repeat):
        for workers in (1, 2):
            seconds, cpu, result = sweep(workers, args.tiles)
            best[workers] = min(best.get(workers, (seconds, cpu)), (seconds, cpu))
            tables[workers] = result.rows
            if result.failed:
                errors = {r["error"] for r in result.rows if r["error"]}
                sys.exit(f"{result.failed} points failed: {sorted(errors)[:3]}")
    ceiling.append(parallelism())
    assert tables[1] == tables[2], "the 1-worker and 2-worker tables differ"
    points = len(tables[1])
    (one, one_cpu), (two, two_cpu) = best[1], best[2]
    runs = f" (best of {args.repeat})" if args.repeat > 1 else ""
    print(
        f"sweep of {points} points (weight_stream, tiles={args.tiles}, timing mode){runs}, "
        f"{os.cpu_count()} CPUs, load average {load:.1f} before"
    )
    print(
        f"  1 worker (in process):         {one:6.1f} s  ({one / points:.2f} s a point; "
        f"CPU {one_cpu:.1f} s)"
    )
    print(
        f"  2 workers (Dask LocalCluster): {two:6.1f} s  (cluster start and stop included; "
        f"CPU {two_cpu:.1f} s = {two_cpu / two:.2f} cores busy)"
    )
    print(f"  speedup {one / two:.2f}x (target >= 1.6x); tables identical")
    print(
        f"  2 processes vs 1 on plain Python work, before and after: "
        f"{ceiling[0]:.2f}x, {ceiling[1]:.2f}x (2.00x on two idle cores)"
    )


if __name__ == "__main__":
    main()
