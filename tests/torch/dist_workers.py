"""Rank processes for the torch.distributed tests (test_distributed_backend): started by
torch.multiprocessing with a FileStore; each writes what it saw to `out/rank<R>.pt`."""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
from dist_exit import leave

SYSTEM = "trn2-48xl"


def init(rank: int, size: int, store_path: str, timeout: float = 300.0):
    os.environ.setdefault("TRNSIM_SYSTEM", SYSTEM)
    import trnsim.torch  # noqa: F401  (registers neuron and its backend)

    store = dist.FileStore(store_path, size)
    dist.init_process_group(store=store, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout))  # fmt: skip


def _both(fn, make, gloo):
    """`fn(tensors, group)` on neuron copies (default group) and on CPU ones (gloo): both
    results as CPU tensors."""
    mine = [t.to("neuron") for t in make()]
    ref = make()
    fn(mine, None)
    fn(ref, gloo)
    return [t.cpu() for t in mine], ref


def collectives(rank: int, size: int, store_path: str, out: str) -> None:
    """Every collective's values on neuron against gloo on CPU, AVG and PREMUL_SUM against
    their definitions, the object collectives, a timed all_reduce, an async one beside a
    matmul, a straggler, and a collective rank 1 never reaches."""
    init(rank, size, store_path)
    gloo = dist.new_group(backend="gloo")
    seen = {"backend": type(dist.group.WORLD).__name__}

    def rnd(*shape):
        return torch.randn(
            *shape, generator=torch.Generator().manual_seed(hash(shape) % 1000 + rank)
        )

    n = size
    cases = {
        "all_reduce": (lambda ts, grp: dist.all_reduce(ts[0], group=grp), lambda: [rnd(5, 3)]),
        "all_reduce_max": (
            lambda ts, grp: dist.all_reduce(ts[0], dist.ReduceOp.MAX, group=grp),
            lambda: [rnd(7)],
        ),
        "all_gather_single": (
            lambda ts, grp: dist.all_gather_single(ts[0], ts[1], group=grp),
            lambda: [torch.empty(n * 6), rnd(6)],
        ),
        "all_gather_list": (
            lambda ts, grp: dist.all_gather(ts[:n], ts[n], group=grp),
            lambda: [torch.empty(4) for _ in range(n)] + [rnd(4)],
        ),
        "reduce_scatter_single": (
            lambda ts, grp: dist.reduce_scatter_single(ts[0], ts[1], group=grp),
            lambda: [torch.empty(3), rnd(n * 3)],
        ),
        "reduce_scatter_list": (
            lambda ts, grp: dist.reduce_scatter(ts[0], ts[1:], group=grp),
            lambda: [torch.empty(5)] + [rnd(5) + i for i in range(n)],
        ),
        "broadcast": (
            lambda ts, grp: dist.broadcast(ts[0], src=n - 1, group=grp),
            lambda: [rnd(9)],
        ),
        "all_to_all_single": (
            lambda ts, grp: dist.all_to_all_single(ts[0], ts[1], group=grp),
            lambda: [torch.empty(n * 2), rnd(n * 2)],
        ),
        "all_to_all_uneven": (
            lambda ts, grp: dist.all_to_all_single(
                ts[0], ts[1], [r + 1 for r in range(n)], [rank + 1] * n, group=grp
            ),
            lambda: [torch.empty(sum(r + 1 for r in range(n))), rnd((rank + 1) * n)],
        ),
        "reduce": (lambda ts, grp: dist.reduce(ts[0], dst=0, group=grp), lambda: [rnd(4)]),
        "gather": (
            lambda ts, grp: dist.gather(ts[0], ts[1:] if rank == 0 else None, dst=0, group=grp),
            lambda: [rnd(3)] + ([torch.zeros(3) for _ in range(n)] if rank == 0 else []),
        ),
        "scatter": (
            lambda ts, grp: dist.scatter(ts[0], ts[1:] if rank == 0 else None, src=0, group=grp),
            lambda: [torch.zeros(3)] + ([rnd(3) + i for i in range(n)] if rank == 0 else []),
        ),
        "send_recv": (
            lambda ts, grp: (
                dist.send(ts[0], dst=1, group=grp)
                if rank == 0
                else dist.recv(ts[0], src=0, group=grp)
                if rank == 1
                else None
            ),
            lambda: [rnd(6)],
        ),
        "strided": (lambda ts, grp: dist.all_reduce(ts[0], group=grp), lambda: [rnd(4, 6).t()]),
        "bf16": (
            lambda ts, grp: dist.all_reduce(ts[0], group=grp),
            lambda: [rnd(8).to(torch.bfloat16)],
        ),
    }
    values = {}
    for name, (fn, make) in cases.items():
        values[name] = _both(fn, make, gloo)
    x = rnd(6)
    avg = x.to("neuron")
    dist.all_reduce(avg, dist.ReduceOp.AVG)
    pre = x.to("neuron")
    dist.all_reduce(pre, dist._make_nccl_premul_sum(0.25))
    rs = torch.empty(3, device="neuron")
    dist.reduce_scatter_single(rs, rnd(n * 3).to("neuron"), dist.ReduceOp.AVG)
    allx = [torch.empty(6) for _ in range(n)]
    dist.all_gather(allx, x, group=gloo)
    allr = [torch.empty(n * 3) for _ in range(n)]
    dist.all_gather(allr, rnd(n * 3), group=gloo)
    seen["avg"] = (avg.cpu(), torch.stack(allx).sum(0) / n)
    seen["premul"] = (pre.cpu(), (torch.stack(allx) * 0.25).sum(0))
    seen["rs_avg"] = (rs.cpu(), (torch.stack(allr).sum(0) / n)[rank * 3 : rank * 3 + 3])
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank})
    seen["objects"] = objs
    bl = [f"from {rank}"]
    dist.broadcast_object_list(bl, src=0)
    seen["broadcast_object"] = bl[0]
    async_work = dist.all_reduce(torch.ones(2, device="neuron"), async_op=True)
    async_work.wait()
    dist.barrier()
    seen["values"] = values
    seen.update(_timing(rank, size))
    # a collective rank 1 never reaches: the others fail naming it, within the timeout
    short = dist.new_group(backend="neuron", timeout=datetime.timedelta(seconds=3))
    if rank == 1:
        torch.save(seen, os.path.join(out, f"rank{rank}.pt"))
        leave()
    try:
        dist.all_reduce(torch.ones(2, device="neuron"), group=short)
        seen["missing"] = "no error"
    except RuntimeError as e:
        seen["missing"] = str(e)
    torch.save(seen, os.path.join(out, f"rank{rank}.pt"))
    leave()


def _timing(rank: int, size: int) -> dict:
    """Simulated times: a synchronous all_reduce, an async one beside a matmul, a straggler."""
    from trnsim.torch import state
    from trnsim.torch.listeners import Listener

    infos = []

    class Seen(Listener):
        def collective(self, op, stream, tensors, info):
            infos.append((op, stream.name, {k: v for k, v in info.items() if k != "event"}))

    chip = state.get()
    chip.listeners.add(Seen())
    ev = lambda: torch.neuron.Event(enable_timing=True)  # noqa: E731
    out = {}
    x = torch.ones(1 << 20, device="neuron")  # 4 MiB
    a = torch.ones(512, 512, device="neuron")
    torch.neuron.synchronize()
    s, e = ev(), ev()
    s.record()
    dist.all_reduce(x)
    e.record()
    e.synchronize()
    out["sync_ms"] = s.elapsed_time(e)
    s.record()
    y = a @ a
    e.record()
    e.synchronize()
    out["mm_ms"] = s.elapsed_time(e)
    s.record()
    w = dist.all_reduce(x, async_op=True)
    y = a @ a
    m = ev()
    m.record()  # the compute stream's end, before it waits for the collective
    w.wait()
    e.record()
    e.synchronize()
    out["async_ms"] = s.elapsed_time(e)
    # picoseconds (the exact tests): the same async pair, then beside a small matmul (the
    # collective longer than the compute), each compute measured alone in this process
    ps = lambda s, e: e.rt.time_ps - s.rt.time_ps  # noqa: E731
    out["ps"] = ps_ = {"event_cost": chip.device.ctx.costs.event}
    ps_["sync"], ps_["mm"] = round(out["sync_ms"] * 1e9), round(out["mm_ms"] * 1e9)
    ps_["async"], ps_["async_compute"] = ps(s, e), ps(s, m)
    b = torch.ones(128, 128, device="neuron")
    torch.neuron.synchronize()
    s.record()
    y = b @ b
    e.record()
    e.synchronize()
    ps_["small"] = ps(s, e)
    s.record()
    w = dist.all_reduce(x, async_op=True)
    y = b @ b
    m.record()
    w.wait()
    e.record()
    e.synchronize()
    ps_["async_small"], ps_["async_small_compute"] = ps(s, e), ps(s, m)
    s.record()  # the straggler's extra compute alone (both ranks: their clocks stay together)
    y = a @ a @ a @ a
    e.record()
    e.synchronize()
    ps_["extra"] = ps(s, e)
    s.record()
    if rank == 1:  # a straggler: three matmuls more before the collective
        y = a @ a @ a @ a
    dist.all_reduce(x)
    e.record()
    e.synchronize()
    out["straggler_ms"] = s.elapsed_time(e)
    ps_["straggler"], ps_["straggler_start"] = ps(s, e), s.rt.time_ps
    del y
    out["infos"] = infos
    return out
