"""Rank processes for test_distributed_record: a DDP step of an MLP on `neuron`, recorded per
rank (`trnsim.torch.record` under torch.distributed) and reported (`torch.neuron.report()`);
each writes what it saw to `out/rank<R>.pt` (started by torch.multiprocessing, a FileStore)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from dist_workers import init

BATCH, WIDTH = 64, 256


def ddp_recorded(rank: int, size: int, store_path: str, out: str) -> None:
    """Two warm-up steps (DDP rebuilds its buckets after the first), then two steps recorded to
    `out/ddp_rank<R>.yaml` with values, between timing events; then the report."""
    init(rank, size, store_path)
    from torch.nn.parallel import DistributedDataParallel as DDP

    import trnsim.torch

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.ReLU(), nn.Linear(2 * WIDTH, WIDTH))
    ddp = DDP(model.to("neuron"))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1 + rank)

    def step():
        x = torch.randn(BATCH, WIDTH, generator=g).to("neuron")
        loss = ddp(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(2):
        step()
    torch.neuron.synchronize()
    chip = trnsim.torch.state.get()
    rec0 = len(chip.device.recorder.collectives)
    info0 = len(chip.ops.collectives)
    evs = [torch.neuron.Event(enable_timing=True) for _ in range(3)]
    with trnsim.torch.record(os.path.join(out, "ddp.yaml"), values=True) as rec:
        evs[0].record()
        for e in evs[1:]:
            step()
            e.record()
        rec.output("w0", model[0].weight)
    evs[-1].synchronize()
    report = torch.neuron.report(perfetto=os.path.join(out, f"rank{rank}.json"))
    spans = [tuple(c) for c in chip.device.recorder.collectives[rec0:]]
    infos = [{k: v for k, v in i.items() if k != "event"} for i in chip.ops.collectives[info0:]]
    seen = {
        "path": str(rec.path),
        "summary": rec.summary,
        "times_ps": [round(evs[0].elapsed_time(e) * 1e9) for e in evs[1:]],
        "events_ps": [e.rt.time_ps for e in evs],
        "spans": spans,
        "infos": infos,
        "w0": model[0].weight.detach().cpu(),
        "report": report,
        "text": str(report),
    }
    torch.save(seen, os.path.join(out, f"rank{rank}.pt"))
    dist.destroy_process_group()
