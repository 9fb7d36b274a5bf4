"""A 64-chip Trn2 UltraServer all-reduce of 1 GiB over all 256 ranks, simulated in full (DMA
engines, HBM, reduce rate, slices) and with links only: wall time, simulated time, algorithm.

    python benchmarks/bench_collectives.py [--system trn2-ultraserver] [--bytes 1GiB]
"""

from __future__ import annotations

import argparse
import time

from trnsim.collectives import World
from trnsim.config import load_system
from trnsim.units import parse_bytes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", default="trn2-ultraserver")
    p.add_argument("--bytes", default="1GiB")
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args()
    cfg = load_system(args.system)
    nbytes = parse_bytes(args.bytes)
    for links_only in (False, True):
        t0 = time.perf_counter()
        w = World.from_config(cfg, links_only=links_only)
        r = w.collective("all_reduce", range(cfg.ranks), nbytes, args.dtype)
        wall = time.perf_counter() - t0
        mode = "links only" if links_only else "full model"
        print(
            f"{cfg.name}, {cfg.ranks} ranks, all_reduce {args.bytes} {args.dtype}, {mode}: "
            f"{r.algorithm}, {r.steps} steps, {r.transfers} transfers; simulated "
            f"{r.time_ps / 1e6:.1f} us, algbw {r.algbw / 2**30:.1f} GiB/s, busbw "
            f"{r.busbw / 2**30:.1f} GiB/s; wall {wall:.2f} s, {w.system.fluid.updates} "
            f"fluid updates"
        )


if __name__ == "__main__":
    main()
