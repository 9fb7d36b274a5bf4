"""Run the tests that use processes, signals or timing many times beside a CPU hog: a flaky test
is a red CI that blocks every other change, so these must pass every time on a loaded machine.

    python benchmarks/flake.py                 # 20 rounds, one CPU hog per CPU
    python benchmarks/flake.py --rounds 5 --hogs 0
    python benchmarks/flake.py -- -k background   # extra pytest arguments after --

Each round is one `pytest -q -p no:cacheprovider` over the files below (in a fresh process),
with `--hogs` busy-looping processes beside it. Prints one line per round and exits 1 if any
round failed, with its output.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FILES = [  # every test file that forks, signals, starts processes or measures time
    "tests/cli/test_background.py",
    "tests/cli/test_cli_exit.py",
    "tests/cli/test_cli_full_disk.py",
    "tests/e2e/test_huge_tensors.py",
    "tests/e2e/test_bombs.py",
    "tests/sweep/test_quick_exit.py",
]


def _hog() -> None:
    while True:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 1, help="CPU hogs beside")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args()
    files = [f for f in FILES if (ROOT / f).exists()]
    hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(args.hogs)]
    for h in hogs:
        h.start()
    failed = 0
    try:
        for r in range(1, args.rounds + 1):
            t = time.monotonic()
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
            p = subprocess.run(cmd + args.pytest_args, cwd=ROOT, capture_output=True, text=True)
            last = (p.stdout.strip().splitlines() or ["(no output)"])[-1]
            print(f"round {r:2}/{args.rounds}: exit {p.returncode} in "
                  f"{time.monotonic() - t:5.1f} s  {last}", flush=True)  # fmt: skip
            if p.returncode != 0:
                failed += 1
                print(p.stdout[-4000:], p.stderr[-2000:], sep="\n", flush=True)
    finally:
        for h in hogs:
            h.terminate()
    print(f"{args.rounds - failed} of {args.rounds} rounds passed, {args.hogs} CPU hogs beside")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
