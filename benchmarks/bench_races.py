"""The race and deadlock check (trnsim.trace.races) against the simulation it guards.

    python benchmarks/bench_races.py                  # every case below
    python benchmarks/bench_races.py --only counting  # one case (a substring of its name)
    python benchmarks/bench_races.py --steps 8192     # a smaller bench_load ring

Cases: the Llama layer (traces/llama70b_layer_timing.yaml); bench_load's ring of --steps steps;
the counting-semaphore matmul of counting_matmul.py (99,328 instructions on trn1, counts that
climb to 32,768: the trace whose check once grew to 21 GB); 10,000 streams each launching a
one-instruction kernel on core 0 (their stream clocks were once 10,000 x 10,000).

Each case runs in fresh processes: one loads the trace and runs `find_races` (process CPU
seconds, best of --repeats, and the peak resident memory of that process), one loads it and
simulates it (`run_program`, CPU seconds), and for the streams `trnsim validate` and `trnsim
run` end to end (wall seconds). The goals: the check faster than the simulation and under 500
MB; the streams' validate and run under 5 s. The cyclic garbage collector is off, as `trnsim`
runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import bench_load  # noqa: E402
import counting_matmul  # noqa: E402

CHECK = """\
import gc, resource, sys, time
gc.disable()
from trnsim.trace import load
from trnsim.trace.races import find_races
program = load(sys.argv[1])
best, found = None, 0
for _ in range(int(sys.argv[2])):
    t = time.process_time()
    found = len(find_races(program))
    s = time.process_time() - t
    best = s if best is None else min(best, s)
print(best, found, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""

SIMULATE = """\
import gc, sys, time
gc.disable()
from trnsim.config import load_chip
from trnsim.runtime.session import run_program
from trnsim.trace import load
program = load(sys.argv[1])
t = time.process_time()
run_program(program, load_chip(program.chip or "trn2"))
print(time.process_time() - t)
"""


def streams_document(n: int) -> dict:
    """n streams, each launching one one-instruction kernel (a memset of a tile) on core 0."""
    kernel = {
        "tiles": {"t": {"memory": "sbuf", "shape": [128, 512], "dtype": "float32"}},
        "instructions": [{"op": "memset", "dst": "t", "value": 0}],
    }
    return {
        "trnsim": 1,
        "name": "many-streams",
        "chip": "trn2",
        "mode": "timing",
        "kernels": {"k": kernel},
        "streams": [{"name": f"s{i}", "core": 0, "do": [{"launch": "k"}]} for i in range(n)],
    }


def _python(script: str, *args: str) -> str:
    p = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                       cwd=ROOT, check=True)  # fmt: skip
    return p.stdout.split()


def _wall(*args: str) -> float:
    t = time.monotonic()
    subprocess.run([sys.executable, "cli.py", *args], cwd=ROOT, check=True, capture_output=True)
    return time.monotonic() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=32768, help="bench_load ring steps")
    ap.add_argument("--streams", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_races_"))
    cases = {
        "llama70b_layer_timing": lambda: ROOT / "traces" / "llama70b_layer_timing.yaml",
        f"bench_load ring, {args.steps} steps": lambda: _write(
            tmp / "ring.json", bench_load.document(args.steps)
        ),
        "counting-semaphore matmul": lambda: _write(tmp / "cm.json", counting_matmul.document()),
        f"{args.streams} streams": lambda: _write(
            tmp / "streams.json", streams_document(args.streams)
        ),
    }
    print(f"{'case':<30} {'check':>8} {'peak':>8} {'simulate':>9}  races  end to end")
    for name, make in cases.items():
        if args.only not in name:
            continue
        path = str(make())
        check_s, found, peak = _python(CHECK, path, str(args.repeats))
        (sim_s,) = _python(SIMULATE, path)
        line = (f"{name:<30} {float(check_s):7.2f}s {int(peak) / 2**20:6.0f}MB "
                f"{float(sim_s):8.2f}s  {found:>5}")  # fmt: skip
        if "streams" in name:
            line += f"  validate {_wall('validate', path):.2f} s, run {_wall('run', path):.2f} s"
        print(line, flush=True)


def _write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


if __name__ == "__main__":
    main()
