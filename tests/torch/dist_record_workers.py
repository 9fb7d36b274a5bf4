"""Rank processes for test_distributed_record: a DDP step of an MLP on `neuron`, recorded per
rank (`trnsim.torch.record` under torch.distributed) and reported (`torch.neuron.report()`);
each writes what it saw to `out/rank<R>.pt` (started by torch.multiprocessing, a FileStore)."""

from __future__ import annotations

import os

import torch
import torch.nn as nn
from dist_exit import leave
from dist_workers import init

from trnsim.torch.listeners import Listener

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
    torch.save(ddp_timed(rank, size), os.path.join(out, f"rank{rank}_timing.pt"))
    leave()


class _Windows(Listener):
    """The logical core's launches (kernels and copies): (start, end, name) in ps."""

    def __init__(self):
        self.got: list[tuple[int, int, str]] = []

    def launched(self, stream, kernel, start_ps: int, end_ps: int) -> None:
        self.got.append((start_ps, end_ps, getattr(kernel, "name", "")))

    def between(self, lo: int, hi: int) -> list[tuple[int, int, str]]:
        return [w for w in self.got if lo <= w[0] < hi]


T_BATCH, T_WIDTH = 2048, 256
TWO_CHIPS = ("ranks_per_chip=1", "collectives.algorithm=ring")


def ddp_timed(rank: int, size: int) -> dict:
    """The timing acceptance's pieces (test_distributed_record): a step of a bias-free MLP
    (Linear 256x256, ReLU, Linear 256x256, batch 2048: device-bound, the host runs ahead)
    trained plainly (the same script without DDP: its compute alone), the reducer's own ops
    alone (each gradient multiplied by 1/size into a flat bucket, copied back: what DDP's
    reducer does with one bucket), then with DDP (its 512 KiB of gradients: one bucket), on
    chip 0 and then one rank per chip (`TWO_CHIPS`); the second step of each between events,
    the launch windows, and the reports."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    import trnsim.torch

    chip = trnsim.torch.state.get()
    log = _Windows()
    chip.listeners.add(log)
    g = torch.Generator().manual_seed(1 + rank)

    def model_opt():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(T_WIDTH, T_WIDTH, bias=False), nn.ReLU(),
                              nn.Linear(T_WIDTH, T_WIDTH, bias=False)).to("neuron")  # fmt: skip
        return model

    def steps(model) -> tuple[list[int], list]:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step():
            x = torch.randn(T_BATCH, T_WIDTH, generator=g).to("neuron")
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

        step()  # (DDP rebuilds its buckets after the first)
        evs = [torch.neuron.Event(enable_timing=True) for _ in range(3)]
        evs[0].record()
        for e in evs[1:]:
            step()
            e.record()
        evs[-1].synchronize()
        ts = [e.rt.time_ps for e in evs]
        return ts, log.between(ts[1], ts[2])

    plain = model_opt()
    seen = {}
    seen["plain_events"], seen["plain_windows"] = steps(plain)
    # the reducer's ops alone, on the plain model's gradients
    grads = [p.grad for p in plain.parameters()]
    bucket = torch.empty(sum(t.numel() for t in grads), device="neuron")
    views, o = [], 0
    for t in grads:
        views.append(bucket[o : o + t.numel()].view_as(t))
        o += t.numel()
    torch.neuron.synchronize()
    lo = chip.devices[0].env.now
    for t, v in zip(grads, views):
        torch.mul(t, 1 / size, out=v)
    for t, v in zip(grads, views):
        t.copy_(v)
    torch.neuron.synchronize()
    seen["hook_windows"] = log.between(lo, chip.devices[0].env.now + 1)
    model = model_opt()
    ddp = DDP(model)
    seen["ddp_events"], seen["ddp_windows"] = steps(ddp)
    seen["buckets"] = len(ddp.reducer._get_zeros_like_grad_buckets())
    seen["report"] = torch.neuron.report()
    # the same DDP step with one rank per chip (ranks 0 and 1 on chips 0 and 1, a ring forced:
    # test_distributed_record says why): the system the job was configured with, with the
    # overrides of TRNSIM_SYSTEM_SET="ranks_per_chip=1 collectives.algorithm=ring". The chip
    # and LNC are the same, so only the collectives' timing changes (a rank's compute is its
    # own process's, wherever the system places it); swapped here to reuse these processes.
    saved = chip.system
    chip.system = trnsim.torch.state.system_config(saved.name, TWO_CHIPS)
    try:
        model = model_opt()
        ddp = DDP(model)
        seen["ring_events"], seen["ring_windows"] = steps(ddp)
        seen["ring_report"] = torch.neuron.report()
    finally:
        chip.system = saved
    return seen
