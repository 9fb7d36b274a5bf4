"""The one process of the virtual-world tests (test_distributed_virtual): started by
torch.multiprocessing (the shim's settings are per process), it runs a virtual world of 64
ranks on trn2-48xl (collectives' times, a mesh), then one of 8 (collectives' values, DDP and
FSDP2 of an MLP against single-process training, a recording), and the errors; writes what it saw to
`out/virtual.pt`."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from dist_exit import leave
from torch import nn

SYSTEM = "trn2-48xl"
BYTES = 1 << 16  # the timed collectives' size (each rank's input of an all_reduce / all_gather)


def main(_index: int, out: str) -> None:
    os.environ.pop("RANK", None)
    os.environ["TRNSIM_SYSTEM"] = SYSTEM
    import trnsim.torch

    trnsim.torch.configure(system=SYSTEM, virtual_world_size=64)
    seen: dict = {}
    seen["errors"] = {}
    _expect_error(seen, "backend", lambda: dist.init_process_group("gloo"))
    _expect_error(seen, "world_size", lambda: dist.init_process_group(world_size=2, rank=0))
    dist.init_process_group()
    seen["world"] = (dist.get_world_size(), dist.get_rank(), type(dist.group.WORLD).__name__)
    seen["timing"] = _timing()
    _expect_error(seen, "send", lambda: dist.send(torch.ones(2, device="neuron"), dst=1))
    seen["mesh"] = _mesh()
    dist.destroy_process_group()

    trnsim.torch.configure(virtual_world_size=65)
    _expect_error(seen, "too_many", lambda: dist.init_process_group())
    trnsim.torch.configure(virtual_world_size=8)
    dist.init_process_group()
    seen["values"] = _values(8)
    seen["ddp"] = _ddp()
    seen["fsdp2"] = _fsdp2()
    seen["record"] = _record(out)
    seen["tp"] = _tp_fsdp(out)
    dist.destroy_process_group()
    trnsim.torch.configure(virtual_world_size=1)
    dist.init_process_group()
    seen["fsdp2_record"] = _record_fsdp2(out)
    dist.destroy_process_group()
    torch.save(seen, os.path.join(out, "virtual.pt"))
    leave()


def _expect_error(seen: dict, name: str, fn) -> None:
    try:
        fn()
        seen["errors"][name] = "no error"
    except (RuntimeError, ValueError) as e:
        seen["errors"][name] = str(e)


def _values(n: int) -> dict:
    """(got, want) of each collective: neuron results against their replica definitions."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, generator=g)
    out = {}

    def red(op):
        t = x.to("neuron")
        dist.all_reduce(t, op)
        return t.cpu()

    out["sum"] = (red(dist.ReduceOp.SUM), x * n)
    out["avg"] = (red(dist.ReduceOp.AVG), x)
    out["max"] = (red(dist.ReduceOp.MAX), x)
    out["min"] = (red(dist.ReduceOp.MIN), x)
    out["premul"] = (red(dist._make_nccl_premul_sum(0.25)), x * 0.25 * n)
    i = torch.arange(5, dtype=torch.int32)
    ti = i.to("neuron")
    dist.all_reduce(ti, dist.ReduceOp.AVG)
    out["avg_int"] = (ti.cpu(), i)
    ag = torch.empty(n * 6, device="neuron")
    dist.all_gather_single(ag, x.to("neuron"))
    out["all_gather"] = (ag.cpu(), x.repeat(n))
    lst = [torch.empty(6, device="neuron") for _ in range(n)]
    dist.all_gather(lst, x.to("neuron"))
    out["all_gather_list"] = (torch.stack([t.cpu() for t in lst]), x.repeat(n, 1))
    whole = torch.randn(n * 3, generator=g)
    rs = torch.empty(3, device="neuron")
    dist.reduce_scatter_single(rs, whole.to("neuron"))
    out["reduce_scatter"] = (rs.cpu(), whole[:3] * n)
    dist.reduce_scatter_single(rs, whole.to("neuron"), dist.ReduceOp.AVG)
    out["reduce_scatter_avg"] = (rs.cpu(), whole[:3])
    b = x.to("neuron")
    dist.broadcast(b, src=5)
    out["broadcast"] = (b.cpu(), x)
    a2a = torch.empty(n * 2, device="neuron")
    dist.all_to_all_single(a2a, whole[: n * 2].to("neuron"))
    out["all_to_all"] = (a2a.cpu(), whole[:2].repeat(n))
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": dist.get_rank()})
    out["objects"] = objs
    dist.barrier()
    return out


def _timing() -> dict:
    """Event pairs (ps) around a synchronous all_reduce, all_gather and reduce_scatter of BYTES
    (each rank's input; a reduce_scatter's input is the whole, BYTES x 64), and the listener's
    info of each."""
    from trnsim.torch import state
    from trnsim.torch.listeners import Listener

    infos = []

    class Seen(Listener):
        def collective(self, op, stream, tensors, info):
            infos.append((op, stream.name, {k: v for k, v in info.items() if k != "event"}))

    chip = state.get()
    chip.listeners.add(Seen())
    n = BYTES // 4
    x = torch.ones(n, device="neuron")
    whole = torch.ones(n * 64, device="neuron")
    part = torch.empty(n, device="neuron")
    torch.neuron.synchronize()
    calls = {
        "all_reduce": lambda: dist.all_reduce(x),
        "all_gather": lambda: dist.all_gather_single(whole, x),
        "reduce_scatter": lambda: dist.reduce_scatter_single(part, whole),
    }
    out = {"event_cost": chip.device.ctx.costs.event}
    for name, call in calls.items():
        s, e = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
        s.record()
        call()
        e.record()
        e.synchronize()
        out[name] = e.rt.time_ps - s.rt.time_ps
    out["infos"] = infos
    return out


def _mesh() -> dict:
    """A 2-D DeviceMesh (16 x 4) and a new_group: their groups' ranks and an all_reduce on each."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("neuron", (16, 4), mesh_dim_names=("dp", "tp"))
    out = {}
    for dim in ("dp", "tp"):
        grp = mesh[dim].get_group()
        t = torch.ones(4, device="neuron")
        dist.all_reduce(t, group=grp)
        out[dim] = (dist.get_process_group_ranks(grp), t.cpu())
    grp = dist.new_group([0, 1, 2])
    t = torch.ones(4, device="neuron")
    dist.all_reduce(t, group=grp)
    out["new_group"] = (dist.get_process_group_ranks(grp), t.cpu())
    return out


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))


def _batches(steps: int = 3):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g))
            for _ in range(steps)]  # fmt: skip


def _train(model, params, batches, before=None) -> list:
    """SGD steps of `model` on `batches` on neuron; the losses. `before(step)` runs first."""
    opt = torch.optim.SGD(params, lr=0.1)
    losses = []
    for x, y in batches:
        if before is not None:
            before()
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x.to("neuron")), y.to("neuron"))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _ddp() -> dict:
    """DDP at a virtual 8 ranks against plain training on the same data (DDP divides each
    gradient by 8 and all-reduces by sum: 8 x (g / 8) = g, exact for a power of two)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    batches = _batches()
    plain = _mlp().to("neuron")
    plain_losses = _train(plain, plain.parameters(), batches)
    model = _mlp().to("neuron")
    ddp = DDP(model)
    losses = _train(ddp, ddp.parameters(), batches)
    return {"losses": (losses, plain_losses),
            "params": [(p.cpu(), q.cpu()) for p, q in zip(model.parameters(),
                                                           plain.parameters())]}  # fmt: skip


def _fsdp2() -> dict:
    """FSDP2 at a virtual 8 ranks against a single-process run of what its replicas mean:
    every rank holds rank 0's shard (dim-0 chunk 0 of each parameter), so each step the whole
    parameter is that chunk repeated 8 times, and rank 0 updates its chunk by the chunk of the
    gradient (averaged over 8 equal replicas). The reference does exactly that on one device."""
    from torch.distributed.fsdp import fully_shard

    n = dist.get_world_size()
    batches = _batches()
    model = _mlp().to("neuron")
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    losses = _train(model, model.parameters(), batches)
    shards = [p.to_local().cpu() for p in model.parameters()]

    ref = _mlp().to("neuron")
    params = list(ref.parameters())

    def tile():
        with torch.no_grad():
            for p in params:
                rows = p.shape[0] // n
                p.copy_(p[:rows].repeat(n, *([1] * (p.dim() - 1))))

    ref_losses = _train(ref, params, batches, before=tile)
    return {"losses": (losses, ref_losses),
            "shards": [(s, p[: p.shape[0] // n].cpu()) for s, p in zip(shards, params)]}  # fmt: skip


def _recorded(model, out: str, name: str) -> dict:
    """Two warm-up steps of `model`, then one recorded as OUT/<name>.yaml (timing): the rank's
    file and the step's live time."""
    import trnsim.torch

    batches = _batches(3)
    _train(model, model.parameters(), batches[:2])
    s, e = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    with trnsim.torch.record(os.path.join(out, f"{name}.yaml")):
        s.record()
        _train(model, model.parameters(), batches[2:])
        e.record()
    e.synchronize()
    return {"file": os.path.join(out, f"{name}_rank0.yaml"), "step_ps": e.rt.time_ps - s.rt.time_ps}


def _record(out: str) -> dict:
    """A DDP step of the MLP recorded at a virtual 8 ranks (timing): its file and live time."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    return _recorded(DDP(_mlp().to("neuron")), out, "mlp")


def _record_fsdp2(out: str) -> dict:
    """An FSDP2 step of the MLP recorded in a world of 1 rank (timing), after two warm-up
    steps: its file and live time. Its gradients are views of the reduce-scatters' outputs,
    one flat block a unit, which SGD's `_foreach_add_` reads."""
    from torch.distributed.fsdp import fully_shard

    model = _mlp().to("neuron")
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    return _recorded(model, out, "fsdp2")


def _tp_fsdp(out: str) -> dict:
    """FSDP x TP on a (4, 2) mesh of the 8 virtual ranks (a Linear pair, Colwise and Rowwise on
    tp, fully_shard on dp), one step recorded after one warm-up: the file and the live
    collectives (call, group ranks, bytes, time)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    import trnsim.torch
    from trnsim.torch import state
    from trnsim.torch.listeners import Listener

    mesh = init_device_mesh("neuron", (4, 2), mesh_dim_names=("dp", "tp"))
    model = _mlp().to("neuron")
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    batches = _batches(2)
    _train(model, model.parameters(), batches[:1])
    infos = []

    class Seen(Listener):
        def collective(self, op, stream, tensors, info):
            infos.append((info["world_op"], info["ranks"], info["nbytes"], info["time_ps"]))

    seen = Seen()
    state.get().listeners.add(seen)
    with trnsim.torch.record(os.path.join(out, "tp.yaml")):
        _train(model, model.parameters(), batches[1:])
    state.get().listeners.remove(seen)
    return {"file": os.path.join(out, "tp_rank0.yaml"), "collectives": infos}
