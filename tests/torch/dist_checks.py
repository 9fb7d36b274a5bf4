"""Distributed checks run under torchrun on neuron, several per spawn (test_distributed_parallel):
each check builds the same model or tensors on neuron (the default backend, trnsim's) and on
the CPU over a gloo group in the same process, so "equal to CPU/gloo" needs no second spawn.
CHECKS names the checks (comma-separated); each rank writes {check: what it saw} to
OUT/rank<R>.pt. Only torch APIs in the checks; trnsim is imported for its listener (which CC
stream each collective ran on) and the allocator's figures.

- fsdp_memory: FSDP2 with reshard_after_forward True and False, memory_allocated() around each
  Linear's reshard, after forward and in backward;
- mixed_precision: FSDP2 with MixedPrecisionPolicy(bf16 params, fp32 reduce), 2 steps;
- fsdp_timing: a device-bound FSDP2 step's launches, collectives and report row (its streams
  overlapping its all-gathers and reduce-scatters with compute);
- fsdp_offload: FSDP2 with CPUOffloadPolicy against CPU/gloo without it, 2 steps;
- dtensor: distribute_tensor and redistributions on init_device_mesh("neuron", (2,));
- tp: parallelize_module(ColwiseParallel, RowwiseParallel) on a Linear pair, forward/backward;
- compile_ddp: torch.compile(DDP(model), backend="neuron") against eager DDP, 3 SGD steps;
- compile_fsdp: FSDP2 over Linears each compiled (torch.compile per block, then fully_shard,
  as torchtitan does) against eager FSDP2, 3 SGD steps; and torch.compile of the root;
- funcol: a compiled function calling functional collectives against eager;
- mesh2d (4 ranks): FSDP x TP on init_device_mesh("neuron", (2, 2)), one step.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from dist_exit import leave
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

import trnsim.torch  # noqa: F401  (neuron, and its backend)
from trnsim.torch import state
from trnsim.torch.listeners import Listener

dist.init_process_group()
rank, world = dist.get_rank(), dist.get_world_size()
streams: list = []  # (op, CC stream name, group name) of each timed collective


class _Seen(Listener):
    def collective(self, op, stream, tensors, info):
        streams.append((op, stream.name, info["group"]))


state.get().listeners.add(_Seen())
gloo = dist.new_group(backend="gloo")
cpu_mesh = DeviceMesh.from_group(gloo, "cpu")


def mlp(dev, d_in=16, hidden=32, d_out=16, bias=True):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(d_in, hidden, bias=bias), nn.ReLU(),
                         nn.Linear(hidden, d_out, bias=bias)).to(dev)  # fmt: skip


def batch(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def full(t):
    """A parameter or gradient as a CPU tensor of its full value (DTensor or not)."""
    t = t.full_tensor() if hasattr(t, "full_tensor") else t
    return t.detach().cpu()


# -- FSDP2 --------------------------------------------------------------------------------------


def _watch(model, log: dict) -> None:
    """memory_allocated() into `log` around each Linear's post-forward reshard and at its
    output's gradient."""
    mem = torch.neuron.memory_allocated
    for i in (0, 2):
        # prepend: before FSDP2's own post-forward (which reshards); after it otherwise
        model[i].register_forward_hook(lambda m, a, o, i=i: log.__setitem__(f"fwd{i}", mem()),
                                       prepend=True)  # fmt: skip

        def after(m, a, o, i=i):
            log[f"resharded{i}"] = mem()
            # runs after FSDP2's pre-backward hook on the output (which unshards)
            o.register_hook(lambda g: log.__setitem__(f"bwd{i}", mem()))

        model[i].register_forward_hook(after)


def fsdp_memory() -> dict:
    from torch.distributed.fsdp import fully_shard

    mem = torch.neuron.memory_allocated
    out = {}
    for raf in (True, False):
        model = mlp("neuron", 64, 64, 64)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, reshard_after_forward=raf)
        fully_shard(model)
        log = out[raf] = {}
        _watch(model, log)
        x = batch(1 + rank, 8, 64).to("neuron")
        torch.neuron.synchronize()
        log["start"] = mem()
        y = model(x)
        log["after_forward"] = mem()
        y.sum().backward()
        log["after_backward"] = mem()
        del model, x, y
    return out


def _fsdp_steps(dev, mesh, mp_policy, steps=2):
    from torch.distributed.fsdp import fully_shard

    model = mlp(dev)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, mp_policy=mp_policy)
    fully_shard(model, mesh=mesh, mp_policy=mp_policy)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, grads = [], []
    for s in range(steps):
        x = batch(10 * s + rank, 8, 16).to(dev)
        loss = model(x).float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        grads.append([full(p.grad) for p in model.parameters()])
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "grads": grads, "params": [full(p) for p in model.parameters()],
            "dtypes": [str(p.dtype) for p in model.parameters()]}  # fmt: skip


class _Windows(Listener):
    """Each launch (start, end, stream name) and each timed collective (arrival, end, op,
    bytes) in ps."""

    def __init__(self):
        self.launches: list = []
        self.collectives: list = []

    def launched(self, stream, kernel, start_ps, end_ps):
        self.launches.append((start_ps, end_ps, stream.name))

    def collective(self, op, stream, tensors, info):
        self.collectives.append((info["arrival_ps"], info["end_ps"], info["world_op"],
                                 info["nbytes"], stream.name))  # fmt: skip


TIMED_WIDTH, TIMED_BATCH = 512, 1024


def fsdp_timing() -> dict:
    """FSDP2's streams beside compute: 3 blocks of Linear(512, 512, no bias) + ReLU, batch 1024,
    fp32, fully_shard per block and on the root (reshard_after_forward: FSDP2's default), SGD;
    the second step between events (the end of each optimizer step), its launches and
    collectives, the report's row of it, and FSDP2's own streams; the same with
    CPUOffloadPolicy under "offload"."""
    return {**_fsdp_timed(False), "offload": _fsdp_timed(True)}


def _fsdp_timed(offload: bool) -> dict:
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    chip = state.get()
    log = _Windows()
    chip.listeners.add(log)
    torch.manual_seed(0)
    w, b = TIMED_WIDTH, TIMED_BATCH
    model = nn.Sequential(*[nn.Sequential(nn.Linear(w, w, bias=False), nn.ReLU())
                            for _ in range(3)]).to("neuron")  # fmt: skip
    kw = {"offload_policy": CPUOffloadPolicy()} if offload else {}
    for block in model:
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(s):
        x = batch(100 * s + rank, b, w).to("neuron")
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    evs = [torch.neuron.Event(enable_timing=True) for _ in range(2)]
    for s, e in enumerate(evs):  # the first measures each op once
        step(s)
        e.record()
    evs[-1].synchronize()
    chip.listeners.remove(log)
    t1, t2 = evs[0].rt.time_ps, evs[1].rt.time_ps
    ctx = model._get_fsdp_state()._comm_ctx
    names = {k: getattr(ctx, k) for k in ("all_gather_copy_in_stream", "all_gather_stream",
                                          "reduce_scatter_stream")}  # fmt: skip
    return {
        "step": [
            dict(r, collectives=len(r["collectives"]))
            for r in torch.neuron.report().steps
            if r["end_ps"] == t2
        ],  # fmt: skip
        "start_ps": t1,
        "end_ps": t2,
        "launches": [x for x in log.launches if t1 <= x[0] < t2],
        "collectives": [x for x in log.collectives if t1 <= x[0] < t2],
        "streams": {
            k: (type(v).__module__ + "." + type(v).__name__, v.rt.name) for k, v in names.items()
        },  # fmt: skip
    }


def fsdp_offload() -> dict:
    """FSDP2 with CPUOffloadPolicy (pinned): 2 SGD steps on neuron against the same without
    offloading on CPU/gloo; where the sharded parameters live, and the collectives timed."""
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    def steps(dev, mesh, offload):
        model = mlp(dev)
        kw = {"offload_policy": CPUOffloadPolicy()} if offload else {}
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh, **kw)
        fully_shard(model, mesh=mesh, **kw)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses, n = [], len(streams)
        for s in range(2):
            x = batch(10 * s + rank, 8, 16).to(dev)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return {"losses": losses, "params": [full(p) for p in model.parameters()],
                "devices": [str(p.to_local().device) for p in model.parameters()],
                "collectives": [op for op, _, _ in streams[n:]]}  # fmt: skip

    mesh = init_device_mesh("neuron", (world,))
    return {"neuron": steps("neuron", mesh, True), "cpu": steps("cpu", cpu_mesh, False)}


def mixed_precision() -> dict:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    mesh = init_device_mesh("neuron", (world,))
    return {"neuron": _fsdp_steps("neuron", mesh, mp), "cpu": _fsdp_steps("cpu", cpu_mesh, mp)}


# -- DTensor and tensor parallel ----------------------------------------------------------------


def _redistributions(mesh) -> dict:
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    dev = mesh.device_type
    t = batch(7, 6, 4).to(dev)
    out = {}
    s0 = distribute_tensor(t, mesh, [Shard(0)])
    out["shard0_local"] = s0.to_local()
    out["shard_to_replicate"] = s0.redistribute(mesh, [Replicate()]).to_local()
    r = distribute_tensor(t, mesh, [Replicate()])
    out["replicate_to_shard1"] = r.redistribute(mesh, [Shard(1)]).to_local()
    out["shard0_to_shard1"] = s0.redistribute(mesh, [Shard(1)]).to_local()
    p = DTensor.from_local(batch(20 + rank, 4, 3).to(dev), mesh, [Partial()])
    out["partial_to_replicate"] = p.redistribute(mesh, [Replicate()]).to_local()
    out["partial_to_shard0"] = p.redistribute(mesh, [Shard(0)]).to_local()
    out["full_tensor"] = s0.full_tensor()
    out["matmul"] = (s0 @ r.T.redistribute(mesh, [Replicate()])).full_tensor()
    return {k: v.cpu() for k, v in out.items()}


def dtensor() -> dict:
    mesh = init_device_mesh("neuron", (2,))
    return {"neuron": _redistributions(mesh), "cpu": _redistributions(cpu_mesh),
            "input": batch(7, 6, 4)}  # fmt: skip


def _tp(mesh) -> dict:
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    dev = mesh.device_type
    model = mlp(dev)
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = batch(3, 8, 16).to(dev)  # the same batch on every rank
    y = model(x)
    y.pow(2).sum().backward()
    return {"y": y.detach().cpu(), "grads": [full(p.grad) for p in model.parameters()],
            "local_shapes": [tuple(p.to_local().shape) for p in model.parameters()]}  # fmt: skip


def tp() -> dict:
    mesh = init_device_mesh("neuron", (2,))
    return {"neuron": _tp(mesh), "cpu": _tp(cpu_mesh)}


# -- torch.compile --------------------------------------------------------------------------------


def _ddp_steps(compiled: str) -> dict:
    """3 SGD steps of DDP(mlp): eager, torch.compile(DDP(model)) ("outer") or
    DDP(torch.compile(model)) ("inner"), backend "neuron"; "outer_eager": Dynamo's backend
    "eager" (run first: Dynamo must skip the shim's Python without trnsim's backend loaded)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    inner = mlp("neuron")
    n, graphs = len(streams), _graphs()
    if compiled == "inner":
        model = run = DDP(torch.compile(inner, backend="neuron"))
    else:
        model = run = DDP(inner)
        if compiled.startswith("outer"):
            run = torch.compile(model, backend="eager" if compiled == "outer_eager" else "neuron")
    return _sgd_steps(model, run, n, graphs)


def _sgd_steps(model, run, n: int, graphs: int) -> dict:
    """3 SGD steps of `model` through `run` (it, or a compiled or wrapped form): the losses, the
    parameters, the collectives timed and the graphs compiled since `n` and `graphs`."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for s in range(3):
        x = batch(10 * s + rank, 8, 16).to("neuron")
        loss = run(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "params": [full(p) for p in model.parameters()],
            "collectives": len(streams) - n, "graphs": _graphs() - graphs}  # fmt: skip


def compile_ddp() -> dict:
    return {how: _ddp_steps(how) for how in ("eager", "outer_eager", "outer", "inner")}


def _fsdp_compiled_steps(how: str) -> dict:
    """3 SGD steps of FSDP2 over mlp's Linears and the root: "eager"; "blocks": each Linear
    compiled (backend "neuron") before fully_shard wraps it; "root": torch.compile of the
    fully_shard root."""
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("neuron", (world,))
    model = mlp("neuron")
    for i, layer in enumerate(model):
        if isinstance(layer, nn.Linear):
            if how == "blocks":
                layer = model[i] = torch.compile(layer, backend="neuron")
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    run = torch.compile(model, backend="neuron") if how == "root" else model
    return _sgd_steps(model, run, len(streams), _graphs())


def compile_fsdp() -> dict:
    return {how: _fsdp_compiled_steps(how) for how in ("eager", "blocks", "root")}


def _graphs() -> int:
    """Graphs the "neuron" backend compiled so far in this process (Dynamo's count)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def funcol() -> dict:
    import torch.distributed._functional_collectives as fc

    group = dist.group.WORLD

    def f(x):
        y = fc.all_reduce(x * 2, "sum", group)
        z = fc.all_gather_tensor(y + 1, 0, group)
        return fc.reduce_scatter_tensor(z.relu(), "sum", 0, group) - 1

    x = batch(5 + rank, 4, 3).to("neuron")
    n = len(streams)
    eager = f(x).cpu()
    k = len(streams) - n
    graphs = _graphs()
    compiled = torch.compile(f, backend="neuron", fullgraph=True)(x).cpu()
    return {"eager": eager, "compiled": compiled, "eager_collectives": k,
            "compiled_collectives": len(streams) - n - k, "graphs": _graphs() - graphs}  # fmt: skip


# -- 2-D mesh --------------------------------------------------------------------------------------


def mesh2d() -> dict:
    """FSDP over "dp" (2) x TP over "tp" (2): a Linear pair, one SGD step; the batch of dp rank
    d is batch(100 + d) on both of its TP ranks."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))
    model = mlp("neuron")
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    d = mesh["dp"].get_local_rank()
    n = len(streams)
    x = batch(100 + d, 8, 16).to("neuron")
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    groups = {name: mesh[name].get_group().group_name for name in ("dp", "tp")}
    return {"loss": loss.item(), "params": [full(p) for p in model.parameters()],
            "streams": streams[n:], "groups": groups, "dp_rank": d}  # fmt: skip


CHECKS = {f.__name__: f for f in (fsdp_memory, mixed_precision, dtensor, tp, compile_ddp,
                                  compile_fsdp, funcol, fsdp_timing, fsdp_offload,
                                  mesh2d)}  # fmt: skip
seen = {}
for name in os.environ["CHECKS"].split(","):
    seen[name] = CHECKS[name]()
torch.save(seen, os.path.join(os.environ["OUT"], f"rank{rank}.pt"))
leave()  # (dist_exit: torch's teardown at times aborts a rank)
