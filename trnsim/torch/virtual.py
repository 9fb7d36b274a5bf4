"""A virtual world size for torch.distributed on `neuron` (docs/distributed.md, "Virtual world
size"): `TRNSIM_VIRTUAL_WORLD_SIZE=N` or `trnsim.torch.configure(virtual_world_size=N)` makes
`dist.init_process_group()` give one process a default group of N ranks, for systems larger
than this machine can run as processes.

The process is rank RANK (the environment's, else 0) of N; the other N-1 ranks are replicas of
it: they hold this rank's data, so every collective's values are those of a job whose ranks all
see the same data (all_reduce SUM is N x, AVG x, an all_gather N copies, a reduce_scatter this
rank's chunk times N, ...): not the real job's values, but the right shapes, so DDP's checks,
FSDP2's shards and DeviceMesh's groups work. Timing is the real lockstep path's (`_Timer`) with
every rank arriving when this one does; a mesh dimension's group is timed together with the
replicas' groups of that dimension (`_concurrent_groups`: they share links). Several processes
(torchrun) are independent, each its own rank of N with its own local store.
"""

from __future__ import annotations

import functools
import inspect
import os

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from trnsim.torch import state
from trnsim.torch.distributed import NeuronGroup, system_of
from trnsim.trace.replicate import mesh_group

ENV = "TRNSIM_VIRTUAL_WORLD_SIZE"

_size: list = [None]  # the virtual world size of the process's default group (None: real)


def world_size() -> int | None:
    """The virtual world size asked for (configure, else TRNSIM_VIRTUAL_WORLD_SIZE), or None."""
    n = state.virtual_world_size_setting()
    if n is not None:
        return n
    v = os.environ.get(ENV) or None
    if v is None:
        return None
    if not v.isdigit() or int(v) < 1:
        raise RuntimeError(f"{ENV}={v!r}: expected a whole number of ranks >= 1")
    return int(v)


def active() -> bool:
    """Whether the default group was made virtual (its groups are `VirtualGroup`s)."""
    return _size[0] is not None


def wrap_init(original):
    """`original` (torch.distributed's `init_process_group`) wrapped: with a virtual world size
    it makes the default group of N ranks over a local store; without, it is `original`'s call.
    (`wrappers.init_process_group` puts it in torch's place.)"""
    sig = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        n = world_size()
        if n is None:
            _size[0] = None
            return original(*args, **kwargs)
        a = sig.bind(*args, **kwargs).arguments
        _check(n, a)
        a["world_size"] = n
        a["rank"] = _rank(n, a.get("rank", -1))
        a["init_method"] = None
        if a.get("store") is None:
            a["store"] = dist.HashStore()
        _size[0] = n
        try:
            return original(**a)
        except BaseException:
            _size[0] = None
            raise

    init_process_group._trnsim = True
    return init_process_group


def _check(n: int, a: dict) -> None:
    backend = a.get("backend")
    if backend not in (None, "undefined", "neuron"):
        raise RuntimeError(f"{ENV}={n}: init_process_group(backend={backend!r}): a virtual world "
                           "is the neuron backend's; give no backend or 'neuron'")  # fmt: skip
    ws = a.get("world_size", -1)
    if ws not in (-1, n):
        raise RuntimeError(f"{ENV}={n}: init_process_group(world_size={ws}) disagrees; give no "
                           "world_size (the virtual world's is used)")  # fmt: skip
    cfg = system_of(state.get())
    if cfg is not None and n > cfg.ranks:
        raise RuntimeError(f"{ENV}={n}: the system {cfg.name} has {cfg.ranks} ranks; choose a "
                           "larger system (TRNSIM_SYSTEM) or fewer ranks")  # fmt: skip


def _rank(n: int, given: int) -> int:
    if given is None or given < 0:
        v = os.environ.get("RANK", "0")
        if not v.isdigit():
            raise RuntimeError(f"RANK={v!r}: expected a whole number (this rank of {ENV}={n})")
        given = int(v)
    if given >= n:
        raise RuntimeError(f"{ENV}={n}: rank {given} (RANK or rank=) is not one of its ranks "
                           f"0 to {n - 1}")  # fmt: skip
    return given


# -- values ---------------------------------------------------------------------------------------


def reduced(t: torch.Tensor, op, n: int) -> torch.Tensor:
    """The reduction by `op` over n replicas of `t` (a new tensor): SUM n t, AVG t, PREMUL_SUM
    n f t, MAX and MIN t, PRODUCT t^n, and the bitwise ones."""
    k = getattr(op, "op", op)
    boolean = t.dtype == torch.bool
    if k == ReduceOp.SUM:
        return t.clone() if boolean else t * n
    if k == ReduceOp.PREMUL_SUM:
        f = op.factor
        if isinstance(f, torch.Tensor):
            from trnsim.torch.tensors import cpu_view

            f = cpu_view(f) if f.device.type == "neuron" else f
        return (t * f) * n
    if k == ReduceOp.PRODUCT:
        return t.clone() if boolean else t**n
    if k == ReduceOp.BXOR:
        return t.clone() if n % 2 else torch.zeros_like(t)
    return t.clone()  # AVG (n t / n), MAX, MIN, BAND, BOR


class _Done:
    def wait(self, timeout=None) -> bool:
        return True


class Replicas:
    """What gloo does in a real group, for a group whose other ranks are replicas of this one
    (the methods `NeuronGroup` calls on its `_gloo`, on CPU tensors)."""

    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else ReduceOp.SUM
        for t in tensors:
            t.copy_(reduced(t, op, self.size))
        return _Done()

    allreduce_coalesced = allreduce

    def broadcast(self, tensors, opts=None):
        return _Done()  # the root's tensors are this rank's

    def allgather(self, output_lists, inputs):
        for outs, x in zip(output_lists, inputs):
            for o in outs:
                o.copy_(x.reshape(o.shape))
        return _Done()

    def gather(self, output_lists, inputs, opts=None):
        return self.allgather(output_lists, inputs) if output_lists else _Done()

    def scatter(self, outputs, input_lists, opts=None):
        for o, ins in zip(outputs, input_lists):  # (nothing on a non-root: no list to copy)
            o.copy_(ins[self.rank])
        return _Done()

    def alltoall_base(self, output, input, output_splits, input_splits, opts=None):
        """Every rank sends its chunk r to rank r: rank r gets n copies of chunk r of its own
        input (the replicas' chunks r)."""
        n, r = self.size, self.rank
        ins = list(input_splits) or [input.shape[0] // n] * n
        outs = list(output_splits) or [output.shape[0] // n] * n
        if any(o != ins[r] for o in outs):
            raise RuntimeError(f"{ENV}={n}: all_to_all with output splits {outs}: the "
                               f"replicas of rank {r} each send it {ins[r]} rows (its input "
                               "split)")  # fmt: skip
        start = sum(ins[:r])
        chunk = input[start : start + ins[r]]
        for j in range(n):
            output[j * ins[r] : (j + 1) * ins[r]].copy_(chunk)
        return _Done()

    def alltoall(self, outputs, inputs, opts=None):
        for o in outputs:
            o.copy_(inputs[self.rank])
        return _Done()

    def barrier(self, opts=None):
        return _Done()

    def send(self, *args, **kwargs):
        raise _no_p2p()

    recv = send


def _no_p2p() -> RuntimeError:
    return RuntimeError(f"neuron backend: send/recv under {ENV}: a virtual world's other ranks "
                        "are replicas of this one, with no program of their own to pair with; "
                        "run real ranks (torchrun) for point-to-point")  # fmt: skip


class VirtualGroup(NeuronGroup):
    """A group of the virtual world: this rank and replicas of it. Values by `Replicas`, no
    meeting (every replica arrives when this rank does), timing as a real group's."""

    def _values(self, store, rank: int, size: int):
        return Replicas(rank, size)

    def _meet(self, op: str, mine: dict, peers=None) -> list[dict]:
        if peers is not None:
            raise _no_p2p()
        return [mine] * self.size()

    def _concurrent_groups(self, group: tuple) -> tuple:
        """The replicas' groups of the same mesh dimension (every rank's group playing the part
        this one plays for this rank: `mesh_group`), which do the collective at the same time
        as it and share the system's links with it; none for the whole world or a group that
        is no mesh dimension's (`new_group([0, 1, 2])`: its replicas are unknown)."""
        n = dist.get_world_size()
        me = self._ranks[self.rank()]
        if len(group) >= n or mesh_group(list(group), me, me, n) is None:
            return ()
        out = {tuple(mesh_group(list(group), me, d, n)) for d in range(n)}
        out.discard(tuple(group))
        return tuple(sorted(out))

    def _reduce(self, tensors: list, op) -> None:
        for t in tensors:
            t.copy_(reduced(t, op, self.size()))

    def send(self, tensors, dst: int, tag: int = 0):
        raise _no_p2p()

    def recv(self, tensors, src: int, tag: int = 0):
        raise _no_p2p()

    def __repr__(self) -> str:
        return (f"VirtualGroup({self._name!r}, rank {self.rank()} of {list(self._ranks)}, "
                "the others replicas)")  # fmt: skip
