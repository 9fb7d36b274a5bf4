"""`trnsim sweep` on one process against a local Dask cluster of two worker processes.

    python benchmarks/bench_sweep.py                  # 32 points of ~1 s, 1 worker then 2
    python benchmarks/bench_sweep.py --repeat 3       # the best of 3 runs of each
    python benchmarks/bench_sweep.py --tiles 256      # lighter points

The sweep: traces/weight_stream.yaml in timing mode with `tiles` N-tiles of 512 columns (512 by
default: a 256 MiB weight, 2,560 DMA transfers and 2,560 compute instructions, about a second a
point on a 2-core machine), on trn2 and trn3, at 8 HBM bandwidths and 2 batch sizes: 2 x 8 x 2 =
32 points. Both runs go through `trnsim.sweep.run_sweep`, as `trnsim sweep --workers N` does;
the 2-worker time includes starting and stopping the LocalCluster (about 2-4 s: the workers'
processes import Dask and trnsim). The two tables must be equal row for row.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from trnsim.sweep import run_sweep  # noqa: E402

TRACE = str(ROOT / "traces" / "weight_stream.yaml")
CHIPS = ["trn2", "trn3"]
GRID = ["hbm.bandwidth=0.25TB/s,0.5TB/s,0.75TB/s,1TB/s,1.5TB/s,2TB/s,3TB/s,4TB/s",
        "param.batch=8,32"]


def sweep(workers: int, tiles: int):
    start = time.perf_counter()
    result = run_sweep([TRACE], CHIPS, GRID, params=[f"tiles={tiles}"], mode="timing",
                       workers=workers)
    return time.perf_counter() - start, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs of each; the best is reported")
    ap.add_argument("--tiles", type=int, default=512, help="the trace's tiles param (even)")
    args = ap.parse_args()
    best: dict[int, float] = {}
    tables = {}
    for _ in range(args.repeat):
        for workers in (1, 2):
            seconds, result = sweep(workers, args.tiles)
            best[workers] = min(best.get(workers, seconds), seconds)
            tables[workers] = result.rows
            if result.failed:
                errors = {r["error"] for r in result.rows if r["error"]}
                sys.exit(f"{result.failed} points failed: {sorted(errors)[:3]}")
    assert tables[1] == tables[2], "the 1-worker and 2-worker tables differ"
    points = len(tables[1])
    one, two = best[1], best[2]
    runs = f" (best of {args.repeat})" if args.repeat > 1 else ""
    print(f"sweep of {points} points (weight_stream, tiles={args.tiles}, timing mode){runs}")
    print(f"  1 worker (in process):       {one:6.1f} s  ({one / points:.2f} s a point)")
    print(f"  2 workers (Dask LocalCluster): {two:6.1f} s  (cluster start and stop included)")
    print(f"  speedup {one / two:.2f}x (target >= 1.6x); tables identical")


if __name__ == "__main__":
    main()
