"""DDP training of the small GPT of examples/torch_gpt.py on a simulated system of Trainium
chips: an ordinary torchrun script (it never imports trnsim), run on `neuron` by
TRNSIM_TORCH_AUTOLOAD=1, its collectives timed on the system TRNSIM_SYSTEM names.

    TRNSIM_TORCH_AUTOLOAD=1 TRNSIM_SYSTEM=trn2-48xl \\
        torchrun --standalone --nproc-per-node 2 examples/ddp.py [--steps 3 --batch 8 ...]

Rank 0 prints each step's simulated time, tokens/s over all ranks and MFU (the model's FLOPs
over the step time at the ranks' bf16 peak), then torch.neuron.report()'s split of each step:
compute (the rank's device busy), communication exposed (the core idle waiting for it) and
overlapped (under compute), idle (neither: the host launching, eager mode). Weak scaling: each
rank trains its own --batch, so with R ranks a step processes R times the tokens;
scaling efficiency is the 1-rank step time over this one (give it with --base-ms).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402  (the model: build())


def args_of(description: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--steps", type=int, default=3, help="training steps (default 3)")
    ap.add_argument("--batch", type=int, default=torch_gpt.BATCH, help="sequences per rank")
    ap.add_argument("--context", type=int, default=torch_gpt.CONTEXT, help="tokens a sequence")
    ap.add_argument("--width", type=int, default=torch_gpt.WIDTH, help="model width")
    ap.add_argument("--layers", type=int, default=torch_gpt.LAYERS, help="transformer layers")
    ap.add_argument("--base-ms", type=float, help="the 1-rank step time, for the efficiency")
    return ap.parse_args()


def model_of(args) -> nn.Module:
    torch_gpt.WIDTH, torch_gpt.LAYERS, torch_gpt.CONTEXT = args.width, args.layers, args.context
    torch_gpt.HEADS = max(1, args.width // 32)
    torch.manual_seed(0)
    return torch_gpt.build(torch, nn).to("neuron")


def train(args, wrapped: nn.Module, model: nn.Module, name: str) -> None:
    """Train `wrapped` (the model under DDP or FSDP2) and print rank 0's figures."""
    rank, world = dist.get_rank(), dist.get_world_size()
    opt = torch.optim.AdamW(wrapped.parameters(), lr=3e-4)
    params = sum(p.numel() for p in model.parameters())  # (a DTensor's numel: the whole's)
    tokens = args.batch * args.context  # a rank's
    flops = 6 * params * tokens + 12 * args.layers * args.width * args.context * tokens
    peak = torch.neuron.get_device_properties().peak_flops["bfloat16"]
    g = torch.Generator().manual_seed(1 + rank)
    times = []
    for step in range(args.steps):
        data = torch.randint(0, torch_gpt.VOCAB, (args.batch, args.context + 1), generator=g)
        ids, target = data[:, :-1].to("neuron"), data[:, 1:].to("neuron")
        start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
        start.record()
        opt.zero_grad()
        with torch.autocast("neuron", dtype=torch.bfloat16):
            logits = wrapped(ids)
        loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), target.flatten())
        loss.backward()
        opt.step()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        times.append(ms)
        if rank == 0:
            eff = f", scaling efficiency {args.base_ms / ms:.1%}" if args.base_ms else ""
            print(f"{name} step {step}: loss {loss.item():.3f}, {ms:.3f} ms simulated, "
                  f"{world * tokens / ms * 1e3:,.0f} tokens/s ({world} ranks), "
                  f"MFU {flops / (ms / 1e3) / peak:.2%}{eff}", flush=True)  # fmt: skip
    rep = torch.neuron.report()
    if rank == 0:
        system = os.environ.get("TRNSIM_SYSTEM", "the chip's default system")
        print(f"{name}: {params:,} parameters, {world} ranks on {system}; the report's steps "
              "(from the previous optimizer step's end, us):")  # fmt: skip
        print(f"{'step':>5} {'time':>10} {'compute':>10} {'comm':>10} {'exposed':>10} "
              f"{'overlapped':>10} {'idle':>10} {'collectives':>11}")  # fmt: skip
        for s in rep.steps[-args.steps :]:
            us = [s[k] / 1e6 for k in ("time_ps", "compute_ps", "communication_ps", "exposed_ps",
                                      "overlapped_ps", "idle_ps")]  # fmt: skip
            print(f"{s['step']:>5} " + " ".join(f"{x:>10.1f}" for x in us)
                  + f" {len(s['collectives']):>11}")  # fmt: skip


def main() -> None:
    args = args_of(__doc__.splitlines()[0])
    if not hasattr(torch, "neuron"):
        sys.exit("examples/ddp.py: no `neuron` device: run with TRNSIM_TORCH_AUTOLOAD=1 "
                 "(trnsim installed)")  # fmt: skip
    dist.init_process_group()
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = model_of(args)
    train(args, DDP(model), model, "DDP")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
