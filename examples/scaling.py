"""Weak scaling of the small GPT's DDP and FSDP2 steps from 1 to 16 chips of a simulated system:
runs examples/ddp.py and examples/fsdp2.py unchanged, once per size, and prints each step's
time, tokens/s, MFU and scaling efficiency (the 1-chip step time over this one: each rank trains
its own batch, so ideal weak scaling keeps the step time).

    python examples/scaling.py                      # trn2-48xl, 1-16 chips, both examples
    python examples/scaling.py --system trn3-ultraserver --chips 1,4,16
    python examples/scaling.py -- --width 512 --layers 4 --batch 16   # the examples' flags

Each size is one process standing for every rank (TRNSIM_VIRTUAL_WORLD_SIZE, docs/distributed.md
"Virtual world size"): its collectives are timed by the system over all the ranks, as if every
rank arrived with it; the other ranks are its replicas (the values are those of a job whose
ranks all see this rank's data, which does not change the timing of these examples). A chip
holds the system's ranks_per_chip ranks (every logical core; --ranks-per-chip to change it,
TRNSIM_SYSTEM_SET), chips 0..n-1 of the system by its rank map.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NUM = r"([0-9][0-9,.]*)"
STEP = re.compile(rf"step (\d+): loss {NUM}, {NUM} ms simulated, {NUM} tokens/s \((\d+) ranks\), "
                  rf"MFU {NUM}%")  # fmt: skip


def ranks_per_chip(system: str, sets: list[str]) -> int:
    """The system's ranks a chip (after `sets`)."""
    from trnsim.config import load_system

    return load_system(system, sets).ranks_per_chip


def run(example: str, system: str, ranks: int, sets: list[str], extra: list[str]) -> dict:
    """One run of examples/<example>.py as `ranks` virtual ranks: its last step's figures."""
    env = {**os.environ, "TRNSIM_TORCH_AUTOLOAD": "1", "TRNSIM_SYSTEM": system,
           "TRNSIM_VIRTUAL_WORLD_SIZE": str(ranks), "OMP_NUM_THREADS": "1"}  # fmt: skip
    if sets:
        env["TRNSIM_SYSTEM_SET"] = " ".join(sets)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    cmd = [sys.executable, str(HERE / f"{example}.py"), *extra]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        sys.exit(f"examples/scaling.py: {example}.py at {ranks} ranks on {system} failed: {tail}")
    steps = STEP.findall(p.stdout)
    if not steps:
        sys.exit(f"examples/scaling.py: {example}.py printed no step: {p.stdout[-500:]}")
    _, _, ms, tps, world, mfu = steps[-1]
    return {"ms": float(ms), "tokens_s": float(tps.replace(",", "")), "mfu": float(mfu),
            "ranks": int(world)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", default="trn2-48xl", help="a bundled system (trnsim systems list)")
    ap.add_argument("--chips", default="1,2,4,8,16", help="chip counts (default 1,2,4,8,16)")
    ap.add_argument("--examples", default="ddp,fsdp2", help="ddp, fsdp2 or both (default)")
    ap.add_argument("--ranks-per-chip", type=int, help="ranks a chip (default: the system's)")
    ap.add_argument("extra", nargs="*", help="after --: the examples' flags (--width, --batch ...)")
    args = ap.parse_args()
    sets = [f"ranks_per_chip={args.ranks_per_chip}"] if args.ranks_per_chip else []
    try:
        chips = [int(c) for c in args.chips.split(",")]
    except ValueError:
        sys.exit(f"examples/scaling.py: --chips {args.chips!r}: expected numbers, e.g. 1,2,4")
    per_chip = ranks_per_chip(args.system, sets)
    extra = args.extra or ["--steps", "3"]
    print(f"{args.system}, {per_chip} ranks a chip; the examples' flags: {' '.join(extra)}")
    print("| example | chips | ranks | step | tokens/s | MFU | scaling efficiency |")
    print("|---|---|---|---|---|---|---|")
    for example in args.examples.split(","):
        base = None
        for n in chips:
            r = run(example, args.system, n * per_chip, sets, extra)
            base = base or r["ms"]
            print(f"| {example} | {n} | {r['ranks']} | {r['ms']:.3f} ms | {r['tokens_s']:,.0f} "
                  f"| {r['mfu']:.2f}% | {base / r['ms']:.1%} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
