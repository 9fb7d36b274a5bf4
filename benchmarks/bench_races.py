"""The race and deadlock check (trnsim.trace.races) on the Llama trace and on bench_load's ring.

    python benchmarks/bench_races.py                 # llama and a 32,768-step ring (98,304 instrs)
    python benchmarks/bench_races.py --steps 8192    # a smaller ring

Figures are process CPU seconds of `find_races` alone (the trace loaded first), best of
`--repeats`, with the cyclic garbage collector off as `trnsim` runs it.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import bench_load  # noqa: E402

from trnsim.trace import load, loads  # noqa: E402
from trnsim.trace.races import find_races  # noqa: E402


def best(program, repeats: int) -> tuple[float, int]:
    times, found = [], 0
    for _ in range(repeats):
        t = time.process_time()
        found = len(find_races(program))
        times.append(time.process_time() - t)
    return min(times), found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=32768)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    gc.disable()
    programs = {
        "llama70b_layer_timing": load(ROOT / "traces" / "llama70b_layer_timing.yaml"),
        f"bench_load ring, {args.steps} steps": loads(
            json.dumps(bench_load.document(args.steps)), "big.json"
        ),
    }
    for name, program in programs.items():
        n = sum(len(c.instructions) for k in program.kernels.values() for c in k.per_core)
        s, found = best(program, args.repeats)
        print(f"{name:<34} {n:>7} instructions  {s:6.2f} s  {found} races")


if __name__ == "__main__":
    main()
