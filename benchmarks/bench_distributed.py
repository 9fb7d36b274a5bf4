"""A 64-rank DDP step of the example GPT on a simulated 16-chip trn2.48xlarge, from 2 real
processes: the wall time of each part, on this machine.

    python benchmarks/bench_distributed.py [--ranks 64] [--procs 2] [--system trn2-48xl]

1. `--procs` rank processes (torch.multiprocessing, a FileStore) train examples/torch_gpt.py's
   GPT with DDP on `neuron` (bf16 autocast, AdamW), and record one step each after two warm-up
   steps (`trnsim.torch.record`, timing only: no values, so every rank's file has the same
   tensor names and the replay holds one copy of them);
2. `trnsim ranks replicate` writes `--ranks` rank files from them (DDP: every rank runs the
   same program; the whole-world group becomes ranks 0..N-1);
3. `trnsim run --system` replays every rank together on one simulated system (links, RDH and
   ring schedules, every rank's timeline in one simulation).

Prints the wall time of each part (2 cores shared: other load counts), the replayed step per
rank, and the collectives (op, bytes, algorithm, time, busbw) at `--procs` and at `--ranks`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rank_proc(rank: int, size: int, store: str, out: str, system: str) -> None:
    os.environ["TRNSIM_SYSTEM"] = system
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    import trnsim.torch

    sys.path.insert(0, str(ROOT / "examples"))
    import torch_gpt

    dist.init_process_group(store=dist.FileStore(store, size), rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=600))  # fmt: skip
    torch.manual_seed(0)
    model = torch_gpt.build(torch, nn).to("neuron")
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-4)
    g = torch.Generator().manual_seed(1 + rank)

    def step():
        data = torch.randint(0, torch_gpt.VOCAB, (torch_gpt.BATCH, torch_gpt.CONTEXT + 1),
                             generator=g)  # fmt: skip
        ids, target = data[:, :-1].to("neuron"), data[:, 1:].to("neuron")
        opt.zero_grad()
        with torch.autocast("neuron", dtype=torch.bfloat16):
            logits = ddp(ids)
        loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), target.flatten())
        loss.backward()
        opt.step()

    for _ in range(2):
        step()
    with trnsim.torch.record(os.path.join(out, "ddp.yaml")):
        start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
        start.record()
        step()
        end.record()
    end.synchronize()
    if rank == 0:
        with open(os.path.join(out, "live.json"), "w") as fh:
            json.dump({"step_ms": start.elapsed_time(end)}, fh)
    dist.destroy_process_group()


def record(procs: int, out: Path, system: str) -> None:
    import torch.multiprocessing as mp

    ctx = mp.start_processes(rank_proc, args=(procs, str(out / "store"), str(out), system),
                             nprocs=procs, join=False, start_method="spawn")  # fmt: skip
    while not ctx.join(timeout=600):
        pass


def trnsim(*args) -> str:
    cmd = [sys.executable, "-c", "from trnsim.cli import entry; entry()", *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"trnsim {' '.join(map(str, args))}: {p.stderr.strip()}")
    return p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64, help="ranks replayed (default 64)")
    ap.add_argument("--procs", type=int, default=2, help="rank processes recorded (default 2)")
    ap.add_argument("--system", default="trn2-48xl")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=ROOT / "benchmarks") as tmp:
        out = Path(tmp)
        t0 = time.perf_counter()
        record(args.procs, out, args.system)
        t1 = time.perf_counter()
        files = sorted(out.glob("ddp_rank*.yaml"))
        small = json.loads(trnsim("run", "--system", args.system, *files, "--json"))
        t2 = time.perf_counter()
        trnsim("ranks", "replicate", *files, "--ranks", f"0-{args.ranks - 1}", "-o", out / "n")
        t3 = time.perf_counter()
        big = json.loads(trnsim("run", "--system", args.system, *sorted((out / "n").glob(
            "*.yaml")), "--json"))  # fmt: skip
        t4 = time.perf_counter()
        live = json.loads((out / "live.json").read_text())["step_ms"]
    print(f"DDP step of examples/torch_gpt.py's GPT on {args.system}, {args.procs} rank "
          f"processes recorded, {args.ranks} ranks replayed")  # fmt: skip
    print(f"  wall: record {t1 - t0:.1f} s ({args.procs} processes), replay of {args.procs} "
          f"ranks {t2 - t1:.1f} s, replicate {t3 - t2:.1f} s, replay of {args.ranks} ranks "
          f"{t4 - t3:.1f} s")  # fmt: skip
    print(f"  step (live, rank 0, {args.procs} ranks): {live * 1e3:,.1f} us")
    for name, res in ((f"{args.procs} ranks", small), (f"{args.ranks} ranks", big)):
        steps = [v["ns"] for v in res.get("timings", {}).values()]
        print(
            f"  replay, {name}: step (each rank's recorded events) {min(steps) / 1e3:,.1f} to "
            f"{max(steps) / 1e3:,.1f} us, device time {res['device_time_ns'] / 1e3:,.1f} us"
        )
        for c in res["collectives"]:
            print(
                f"    {c['op']:<11} {c['ranks']:>3} ranks {c['bytes']:>10,} B "
                f"{c['algorithm']:<6} {c['time_ns'] / 1e3:>8.2f} us  busbw "
                f"{c['busbw_bytes_per_s'] / 1e9:>7.2f} GB/s"
            )


if __name__ == "__main__":
    main()
