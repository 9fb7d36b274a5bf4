"""A 64-rank DDP and FSDP2 step of the example GPT on a simulated 16-chip trn2.48xlarge, from
at most 2 real processes: the wall time of each part, on this machine.

    python benchmarks/bench_distributed.py [--ranks 64] [--procs 2] [--system trn2-48xl]
                                           [--paths real,ddp,fsdp2]

Three paths, each printing its wall times, the step and the collectives (op, bytes, algorithm,
time, busbw):

- `real`: `--procs` rank processes (torch.multiprocessing, a FileStore) train examples/
  torch_gpt.py's GPT with DDP on `neuron` (bf16 autocast, AdamW) and record one step each after
  two warm-up steps (`trnsim.torch.record`, timing only: every rank's file has the same tensor
  names and the replay holds one copy of them); `trnsim ranks replicate` writes `--ranks` rank
  files from them (DDP: every rank runs the same program); `trnsim run --system` replays every
  rank together on one simulated system (links, RDH and ring schedules, every rank's timeline
  in one simulation);
- `ddp`, `fsdp2`: one process is rank 0 of a virtual world of `--ranks`
  (`configure(virtual_world_size=...)`, docs/distributed.md, "Virtual world size"): the live
  step (lockstep timing, every replica arriving with rank 0) of DDP or FSDP2 (as
  examples/fsdp2.py: each layer and the model sharded, bf16 parameters, fp32 reduction), its
  third step recorded (`world_size:` the target's), replicated to every rank and replayed.

Wall times are of this machine's 2 cores, shared: other load counts; the CPU seconds beside
them (the children's user + system time) do not count it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rank_proc(rank: int, size: int, store: str | None, out: str, system: str,
              kind: str = "ddp") -> None:  # fmt: skip
    """One rank of the job (`store`: a FileStore of `size` processes), or, with `store` None,
    one process of a virtual world of `size` ranks: two warm-up steps of DDP or FSDP2 (`kind`),
    then a recorded one, its live time in `out/live.json`."""
    os.environ["TRNSIM_SYSTEM"] = system
    import torch
    import torch.distributed as dist
    from torch import nn

    import trnsim.torch

    sys.path.insert(0, str(ROOT / "examples"))
    import torch_gpt

    timeout = datetime.timedelta(seconds=600)
    if store is None:
        trnsim.torch.configure(system=system, virtual_world_size=size)
        dist.init_process_group(timeout=timeout)
    else:
        dist.init_process_group(store=dist.FileStore(store, size), rank=rank, world_size=size,
                                timeout=timeout)  # fmt: skip
    torch.manual_seed(0)
    model = torch_gpt.build(torch, nn).to("neuron")
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        wrapped = DDP(model)
    else:  # as examples/fsdp2.py
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.blocks.layers:
            fully_shard(layer, mp_policy=mp)
        wrapped = fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(wrapped.parameters(), lr=3e-4)
    g = torch.Generator().manual_seed(1 + rank)

    def step():
        data = torch.randint(0, torch_gpt.VOCAB, (torch_gpt.BATCH, torch_gpt.CONTEXT + 1),
                             generator=g)  # fmt: skip
        ids, target = data[:, :-1].to("neuron"), data[:, 1:].to("neuron")
        opt.zero_grad()
        with torch.autocast("neuron", dtype=torch.bfloat16):
            logits = wrapped(ids)
        loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), target.flatten())
        loss.backward()
        opt.step()

    for _ in range(2):
        step()
    with trnsim.torch.record(os.path.join(out, f"{kind}.json")):  # (JSON: fast for 64 copies)
        start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
        start.record()
        step()
        end.record()
    end.synchronize()
    if rank == 0:
        with open(os.path.join(out, "live.json"), "w") as fh:
            json.dump({"step_ms": start.elapsed_time(end)}, fh)
    dist.destroy_process_group()


def record(procs: int, out: Path, system: str, kind: str = "ddp", virtual: int = 0) -> None:
    """`procs` rank processes of a real job, or (`virtual`) one process of a virtual world."""
    import torch.multiprocessing as mp

    if virtual:
        args, procs = (virtual, None, str(out), system, kind), 1
    else:
        args = (procs, str(out / "store"), str(out), system, kind)
    ctx = mp.start_processes(rank_proc, args=args, nprocs=procs, join=False,
                             start_method="spawn")  # fmt: skip
    while not ctx.join(timeout=600):
        pass


def trnsim(*args) -> str:
    cmd = [sys.executable, "-c", "from trnsim.cli import entry; entry()", *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"trnsim {' '.join(map(str, args))}: {p.stderr.strip()}")
    return p.stdout


class Clock:
    """Wall and CPU seconds (this process's children: the rank processes and trnsim commands,
    which a loaded machine's other work does not add to) since the last `lap`."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), self._cpu()

    @staticmethod
    def _cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), self._cpu()
        out = (wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return out


def fmt(t: tuple[float, float]) -> str:
    return f"{t[0]:.1f} s (cpu {t[1]:.1f} s)"


def replay(system: str, files: list) -> dict:
    return json.loads(trnsim("run", "--system", system, *files, "--json"))


def show(name: str, res: dict) -> None:
    """The replay's step (each rank's recorded events) and its collectives."""
    steps = [v["ns"] for v in res.get("timings", {}).values()]
    dev = res["device_time_ns"] / 1e3
    print(f"  replay, {name}: step (each rank's recorded events) {min(steps) / 1e3:,.1f} to "
          f"{max(steps) / 1e3:,.1f} us, device time {dev:,.1f} us")  # fmt: skip
    seen = {}
    for c in res["collectives"]:  # one row per group: show each distinct one once
        key = (c["op"], c["ranks"], c["bytes"], c["algorithm"], c["time_ns"])
        seen[key] = seen.get(key, 0) + 1
    for (op, ranks, nbytes, alg, t), n in seen.items():
        bw = next(c["busbw_bytes_per_s"] for c in res["collectives"] if c["time_ns"] == t)
        print(f"    {op:<14} {ranks:>3} ranks {nbytes:>10,} B {alg:<6} {t / 1e3:>8.2f} us  "
              f"busbw {bw / 1e9:>7.2f} GB/s" + (f"  (x{n})" if n > 1 else ""))  # fmt: skip


def real_path(args, out: Path) -> None:
    """DDP recorded from `--procs` processes, replicated to `--ranks`, replayed."""
    clock = Clock()
    record(args.procs, out, args.system)
    t_rec = clock.lap()
    files = sorted(out.glob("ddp_rank*.json"))
    small = replay(args.system, files)
    t_small = clock.lap()
    trnsim("ranks", "replicate", *files, "--ranks", f"0-{args.ranks - 1}", "-o", out / "n")
    t_rep = clock.lap()
    big = replay(args.system, sorted((out / "n").glob("*.json")))
    t_big = clock.lap()
    live = json.loads((out / "live.json").read_text())["step_ms"]
    print(f"DDP step of examples/torch_gpt.py's GPT on {args.system}, {args.procs} rank "
          f"processes recorded, {args.ranks} ranks replayed")  # fmt: skip
    print(f"  wall: record {fmt(t_rec)} ({args.procs} processes), replay of {args.procs} "
          f"ranks {fmt(t_small)}, replicate {fmt(t_rep)}, replay of {args.ranks} ranks "
          f"{fmt(t_big)}")  # fmt: skip
    print(f"  step (live, rank 0, {args.procs} ranks): {live * 1e3:,.1f} us")
    show(f"{args.procs} ranks", small)
    show(f"{args.ranks} ranks", big)


def virtual_path(args, out: Path, kind: str) -> None:
    """One process of a virtual world of `--ranks` (live, recording its third step), then
    `trnsim ranks replicate` of its one file to every rank, and the replay."""
    clock = Clock()
    record(1, out, args.system, kind, virtual=args.ranks)
    t_live = clock.lap()
    (rank0,) = out.glob(f"{kind}_rank*.json")
    trnsim("ranks", "replicate", rank0, "--ranks", f"0-{args.ranks - 1}", "-o", out / "n")
    t_rep = clock.lap()
    big = replay(args.system, sorted((out / "n").glob("*.json")))
    t_big = clock.lap()
    live = json.loads((out / "live.json").read_text())["step_ms"]
    total = (t_live[0] + t_rep[0] + t_big[0], t_live[1] + t_rep[1] + t_big[1])
    print(f"{kind.upper()} step of examples/torch_gpt.py's GPT on {args.system}, a virtual "
          f"world of {args.ranks} ranks from one process")  # fmt: skip
    print(f"  live (virtual; 3 steps, the third recorded): wall {fmt(t_live)}; step "
          f"{live * 1e3:,.1f} us")  # fmt: skip
    print(f"  record -> replicate -> replay: {fmt(t_live)} + {fmt(t_rep)} + {fmt(t_big)} = "
          f"{fmt(total)}")  # fmt: skip
    show(f"{args.ranks} ranks", big)


PATHS = ("real", "ddp", "fsdp2")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64, help="ranks replayed (default 64)")
    ap.add_argument("--procs", type=int, default=2, help="rank processes recorded (default 2)")
    ap.add_argument("--system", default="trn2-48xl")
    ap.add_argument("--paths", default=",".join(PATHS),
                    help=f"which paths, of {', '.join(PATHS)} (default all)")  # fmt: skip
    args = ap.parse_args()
    paths = args.paths.split(",")
    if any(p not in PATHS for p in paths):
        sys.exit(f"--paths {args.paths}: expected some of {', '.join(PATHS)}")
    for p in paths:
        with tempfile.TemporaryDirectory(dir=ROOT / "benchmarks") as tmp:
            if p == "real":
                real_path(args, Path(tmp))
            else:
                virtual_path(args, Path(tmp), p)


if __name__ == "__main__":
    main()
