"""An ordinary DDP script (no trnsim in it): an MLP, 3 SGD steps, on DEVICE (cpu: gloo;
neuron: the backend init_process_group() picks); WRAP names the wrappers to train with, one
after the other (comma-separated: ddp, fsdp2 for FSDP2's fully_shard). Writes each rank's
parameters, losses and step times per wrapper to OUT/rank<R>.pt. Run by test_distributed_ddp
under torchrun."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from dist_exit import leave
from torch.nn.parallel import DistributedDataParallel as DDP

dev = os.environ.get("DEVICE", "cpu")
dist.init_process_group("gloo" if dev == "cpu" else None)
rank = dist.get_rank()


def train(wrap: str) -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(dev)
    if wrap == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        ddp = fully_shard(model)
    else:
        ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1 + rank)
    losses, times = [], []
    for _ in range(3):
        x = torch.randn(8, 16, generator=g).to(dev)
        y = torch.randn(8, 4, generator=g).to(dev)
        if dev == "neuron":
            start = torch.neuron.Event(enable_timing=True)
            end = torch.neuron.Event(enable_timing=True)
            start.record()
        loss = ((ddp(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if dev == "neuron":
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        losses.append(loss.item())
    params = [getattr(p, "full_tensor", p.detach)().detach().cpu() for p in model.parameters()]
    return {"params": params, "losses": losses, "times": times}


out = {wrap: train(wrap) for wrap in os.environ.get("WRAP", "ddp").split(",")}
torch.save(out, os.path.join(os.environ["OUT"], f"rank{rank}.pt"))
leave()  # (dist_exit: torch's teardown at times aborts a rank)
