"""torch.distributed on `neuron`: the process-group backend "neuron" (docs/distributed.md).

`import trnsim.torch` registers it for the devices "neuron" and "cpu", so both
`init_process_group("neuron")` and `init_process_group()` (no backend) take it. A group is a
Python `ProcessGroup` (`NeuronGroup`) whose values move through gloo on zero-copy CPU views of
device memory (copies where gloo needs contiguous tensors): every value is gloo's on the CPU.
`ReduceOp.AVG` and `PREMUL_SUM` have NCCL's meaning (a sum divided by the group's size; each
input multiplied by the factor, then summed), which gloo lacks.

Both names of each collective are implemented (torch 2.13's Python API calls the new ones,
`all_gather_single`, `reduce_scatter_single`, `*_single_coalesced`; its C++ paths, DDP's
reducer, functional collectives, `all_to_all_single`, the old virtuals `_allgather_base`,
`_reduce_scatter_base`, `allgather_into_tensor_coalesced`, `reduce_scatter_tensor_coalesced`,
`alltoall_base`, `allreduce`, `broadcast`).

Timing (`_Timer`): a collective on neuron tensors is timed by the system of chips the shim is
configured with (`trnsim.torch.configure(system=...)`, TRNSIM_SYSTEM, or the chip's default
system), on the group's CC stream, in lockstep with the group's other ranks: each rank's CC
stream reaches the collective (`runtime.lockstep.arrive`), the ranks exchange those moments
through the job's store, a `World` of the system times the collective from them (the
straggler's delay included) and the CC stream holds until the rank's end. The issuing stream
waits for it at `work.wait()` (a synchronous call waits at once) or at the next op reading or
writing one of its tensors; compute issued in between overlaps it.

Before any collective the group's ranks meet at the store (`_meet`): a rank that never reaches
it makes the others fail after the group's timeout with an error naming the op and the ranks
missing, not hang.
"""

from __future__ import annotations

import datetime
import json

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from trnsim.torch import state
from trnsim.torch.tensors import cpu_view

BACKEND = "neuron"
# the system whose model times collectives when none is configured, by chip and lnc
DEFAULT_SYSTEMS = {("trn1", 1): "trn1-32xl", ("trn2", 2): "trn2-48xl",
                   ("trn3", 2): "trn3-ultraserver"}  # fmt: skip
# torch dtype -> the simulator's dtype of the same size (collective timing counts bytes)
DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16",
          torch.int32: "int32", torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8",
          torch.bool: "uint8"}  # fmt: skip
REDUCE = {ReduceOp.SUM: "sum", ReduceOp.MAX: "max", ReduceOp.MIN: "min", ReduceOp.PRODUCT: "prod"}

_registered = False


def register() -> None:
    """Register the backend "neuron" (once per process)."""
    global _registered
    if _registered or not dist.is_available():
        return
    if "neuron" not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True,
                                      devices=["neuron", "cpu"])  # fmt: skip
    from trnsim.torch import wrappers

    wrappers.init_process_group()  # TRNSIM_VIRTUAL_WORLD_SIZE: N ranks in one process
    _registered = True


def _create(opts, backend_options=None) -> NeuronGroup:
    from trnsim.torch import virtual

    cls = virtual.VirtualGroup if virtual.active() else NeuronGroup
    return cls(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                       opts.group_id, list(opts.global_ranks_in_group))  # fmt: skip


# -- values -----------------------------------------------------------------------------------


def _neuron(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "neuron"


class _Host:
    """CPU tensors for gloo over the given tensors: a neuron tensor's zero-copy view, or, where
    gloo needs a contiguous tensor, a contiguous copy written back by `back()`."""

    def __init__(self):
        self.back_to: list = []

    def __call__(self, t: torch.Tensor, write: bool = True) -> torch.Tensor:
        v = cpu_view(t) if _neuron(t) else t
        if v.is_contiguous():
            return v
        c = v.contiguous()
        if write:
            self.back_to.append((v, c))
        return c

    def many(self, ts, write: bool = True) -> list:
        return [self(t, write) for t in ts]

    def back(self) -> None:
        for v, c in self.back_to:
            v.copy_(c)


def _kind(op) -> object:
    """The reduction type of a ReduceOp (or a RedOpType)."""
    return getattr(op, "op", op)


def _premul(tensors: list, op) -> list:
    """PREMUL_SUM's inputs: each multiplied by its factor (new tensors: inputs stay as given)."""
    f = op.factor
    if isinstance(f, torch.Tensor):
        f = cpu_view(f) if _neuron(f) else f
    return [t * f for t in tensors]


def _sum_opts(cls, op):
    """Options of class `cls` for gloo: AVG and PREMUL_SUM become SUM."""
    o = cls()
    k = _kind(op)
    o.reduceOp = ReduceOp.SUM if k in (ReduceOp.AVG, ReduceOp.PREMUL_SUM) else op
    return o


def _finish_avg(tensors: list, op, n: int) -> None:
    if _kind(op) == ReduceOp.AVG:
        for t in tensors:
            if t.is_floating_point() or t.is_complex():
                t.div_(n)
            else:
                t.copy_(torch.div(t, n, rounding_mode="trunc"))


class _Work(dist.Work):
    """A collective already complete in values; `wait()` makes the current neuron stream wait
    for its simulated end (`_Timer`), as NCCL's makes the current CUDA stream wait."""

    def __init__(self, result, timed=None):
        super().__init__()
        self._result = result
        self._timed = timed
        self._fut = torch.futures.Future()
        self._fut.set_result(result)

    def wait(self, timeout=None) -> bool:
        if self._timed is not None:
            self._timed.wait()
        return True

    def get_future(self):
        return self._fut

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self):
        return None

    def result(self):
        return self._result

    def synchronize(self) -> None:
        self.wait()


class NeuronGroup(dist.ProcessGroup):
    """A process group of the "neuron" backend (see the module docstring)."""

    def __init__(self, store, rank: int, size: int, timeout, name: str = "", ranks=None):
        super().__init__(rank, size)
        self._store = store
        self._timeout = timeout if isinstance(timeout, datetime.timedelta) else \
            datetime.timedelta(seconds=float(timeout))  # fmt: skip
        self._gloo = self._values(store, rank, size)
        self._name = name or "neuron"
        self._ranks = tuple(ranks) if ranks else tuple(range(size))
        self._set_group_name(self._name)
        self._seq = 0
        self._p2p: dict[int, int] = {}
        self._timer = _Timer(self)

    def _concurrent_groups(self, group: tuple) -> tuple:
        """Other groups whose ranks do this collective at the same time, timed with it: none
        (the other processes' collectives are their own; docs/distributed.md, "Approximations
        of the live path")."""
        return ()

    def _values(self, store, rank: int, size: int):
        """What moves the values: gloo over the job's store."""
        return dist.ProcessGroupGloo(dist.PrefixStore("gloo", store), rank, size, self._timeout)

    # -- what torch asks of a group --------------------------------------------------------------

    def getBackendName(self) -> str:
        return BACKEND

    def _get_backend_name(self) -> str:
        return BACKEND

    @property
    def group_name(self) -> str:
        return self._name

    @property
    def pg_name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"NeuronGroup({self._name!r}, rank {self.rank()} of {list(self._ranks)})"

    # -- meeting ---------------------------------------------------------------------------------

    def _meet(self, op: str, mine: dict, peers=None) -> list[dict]:
        """Every rank of the group (or `peers`, group ranks of a send/recv) reaches collective
        `op`: each posts `mine` to the store, and gets everyone's (group order). A rank that
        does not come within the group's timeout: RuntimeError naming the op and the ranks."""
        me = self.rank()
        if peers is None:
            seq, prefix = self._seq, f"trnsim/{self._seq}"
            self._seq += 1
            peers = range(self.size())
        else:
            other = peers[0] if peers[1] == me else peers[1]
            seq = self._p2p.get(other, 0)
            self._p2p[other] = seq + 1
            prefix = f"trnsim/p2p{min(peers)}-{max(peers)}/{seq}"
        store = self._store
        store.set(f"{prefix}/{me}", json.dumps(mine))
        keys = [f"{prefix}/{r}" for r in peers]
        try:
            store.wait(keys, self._timeout)
        except Exception:  # noqa: BLE001 - a store's timeout (DistStoreError) or a lost peer
            missing = [self._ranks[r] for r, k in zip(peers, keys) if not _has(store, k)]
            raise RuntimeError(
                f"neuron backend: {op} #{seq} on group {self._name!r} (ranks "
                f"{list(self._ranks)}): rank(s) {missing} did not reach it within "
                f"{self._timeout.total_seconds():g} s (rank {self._ranks[me]} waits for them)"
            ) from None
        vals = [json.loads(v) for v in store.multi_get(keys)]
        if seq:  # every rank has read the previous meeting: it posted this one after
            try:
                store.delete_key(f"{prefix.rpartition('/')[0]}/{seq - 1}/{me}")
            except Exception:  # noqa: BLE001 - a store without delete keeps its keys
                pass
        return vals

    def _run(self, op: str, inputs: list, outputs: list, fn, timing: dict, peers=None):
        """Meet, time (neuron tensors), then compute the values by `fn()`; a `_Work`."""
        t = self._timer
        arrival = t.arrive(op, inputs + outputs)
        extra = timing.pop("extra", None)
        vals = self._meet(op, {"a": arrival, "x": extra}, peers)
        result = fn()
        timed = None
        if arrival is not None:
            timed = t.time(op, vals, outputs or inputs, peers=peers, **timing)
        return _Work(result, timed)

    # -- collectives -----------------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else ReduceOp.SUM
        return self._allreduce("allreduce", tensors, op)

    def allreduce_coalesced(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else ReduceOp.SUM
        return self._allreduce("allreduce_coalesced", tensors, op)

    def _allreduce(self, name, tensors, op):
        def values():
            h = _Host()
            self._reduce(h.many(tensors), op)
            h.back()
            return list(tensors)

        return self._run(name, list(tensors), [], values,
                         {"world_op": "all_reduce", "reduce": op})  # fmt: skip

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0

        def values():
            h = _Host()
            o = dist.BroadcastOptions()
            o.rootRank, o.rootTensor = root, 0
            self._gloo.broadcast(h.many(tensors), o).wait()
            h.back()
            return list(tensors)

        return self._run("broadcast", list(tensors), [], values,
                         {"world_op": "broadcast", "root": root})  # fmt: skip

    def allgather(self, output_tensors, input_tensors, opts=None):
        """output_tensors: [[one per rank]] for each input (torch's list form)."""

        def values():
            h = _Host()
            outs = [h.many(o) for o in output_tensors]
            self._gloo.allgather(outs, h.many(input_tensors, False)).wait()
            h.back()
            return output_tensors

        flat = [t for o in output_tensors for t in o]
        return self._run("allgather", list(input_tensors), flat, values,
                         {"world_op": "all_gather"})  # fmt: skip

    def _allgather_base(self, output, input, opts=None):
        def values():
            h = _Host()
            out = h(output)
            inp = h(input, False)
            parts = list(out.view(self.size(), -1).unbind(0)) if out.numel() else []
            if parts and inp.numel():
                self._gloo.allgather([parts], [inp.reshape(-1)]).wait()
            h.back()
            return [output]

        return self._run("_allgather_base", [input], [output], values,
                         {"world_op": "all_gather"})  # fmt: skip

    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return _last(works, outputs)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        works = [self.allgather([o], [i], opts) for o, i in zip(output_lists, input_list)]
        return _last(works, output_lists)

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        """output_tensors[i] gets the reduction over ranks of input_lists[i][rank]."""
        op = opts.reduceOp if opts is not None else ReduceOp.SUM

        def values():
            h = _Host()
            for out, ins in zip(output_tensors, input_lists):
                o = h(out)
                flat = torch.cat([(cpu_view(x) if _neuron(x) else x).reshape(-1) for x in ins])
                self._reduce_scatter_flat(o.view(-1), flat, op)
            h.back()
            return list(output_tensors)

        flat_in = [t for ins in input_lists for t in ins]
        # timed by its input (n x the output), as the World and a trace size a reduce_scatter
        return self._run("reduce_scatter", flat_in, list(output_tensors), values,
                         {"world_op": "reduce_scatter", "reduce": op,
                          "scale": self.size()})  # fmt: skip

    def _reduce(self, tensors: list, op) -> None:
        """The all-reduce by `op` of each of `tensors` (CPU, contiguous) over the group, in place:
        gloo's sum, max, min or product; AVG and PREMUL_SUM as NCCL defines them."""
        src = _premul(tensors, op) if _kind(op) == ReduceOp.PREMUL_SUM else tensors
        if len(src) > 1:
            self._gloo.allreduce_coalesced(
                src, _sum_opts(dist.AllreduceCoalescedOptions, op)
            ).wait()
        else:
            self._gloo.allreduce(src, _sum_opts(dist.AllreduceOptions, op)).wait()
        for t, s in zip(tensors, src):
            if s is not t:
                t.copy_(s)
        _finish_avg(tensors, op, self.size())

    def _reduce_scatter_flat(self, out: torch.Tensor, flat: torch.Tensor, op) -> None:
        """Rank r's unit of the sum (op) over ranks of `flat` (1-D CPU), into 1-D `out`."""
        flat = flat.clone()  # reduced in place; the input stays as given
        self._reduce([flat], op)
        n = out.numel()
        out.copy_(flat[self.rank() * n : (self.rank() + 1) * n])

    def _reduce_scatter_base(self, output, input, opts=None):
        op = opts.reduceOp if opts is not None else ReduceOp.SUM

        def values():
            h = _Host()
            o = h(output)
            self._reduce_scatter_flat(o.view(-1), h(input, False).reshape(-1), op)
            h.back()
            return [output]

        return self._run("_reduce_scatter_base", [input], [output], values,
                         {"world_op": "reduce_scatter", "reduce": op,
                          "scale": self.size()})  # fmt: skip

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return _last(works, outputs)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def reduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else ReduceOp.SUM
        root = opts.rootRank if opts is not None else 0

        def values():
            h = _Host()
            views = h.many(tensors)
            src = [v.clone() for v in views]
            self._reduce(src, op)
            if self.rank() == root:
                for v, s in zip(views, src):
                    v.copy_(s)
                h.back()
            return list(tensors)

        return self._run("reduce", list(tensors), [], values,
                         {"world_op": "all_reduce", "reduce": op})  # fmt: skip

    def gather(self, output_lists, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0

        def values():
            h = _Host()
            o = dist.GatherOptions()
            o.rootRank = root
            outs = [h.many(x) for x in output_lists] if self.rank() == root else []
            self._gloo.gather(outs, h.many(input_tensors, False), o).wait()
            h.back()
            return output_lists

        flat = [t for o in output_lists for t in o]
        whole = sum(t.numel() * t.element_size() for t in input_tensors) * self.size()
        return self._run("gather", list(input_tensors), flat, values,
                         {"world_op": "all_gather", "nbytes": whole})  # fmt: skip

    def scatter(self, output_tensors, input_lists, opts=None):
        root = opts.rootRank if opts is not None else 0

        def values():
            h = _Host()
            o = dist.ScatterOptions()
            o.rootRank = root
            ins = [h.many(x, False) for x in input_lists] if self.rank() == root else []
            self._gloo.scatter(h.many(output_tensors), ins, o).wait()
            h.back()
            return list(output_tensors)

        return self._run("scatter", [], list(output_tensors), values,
                         {"world_op": "all_gather", "scale": self.size()})  # fmt: skip

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        def values():
            h = _Host()
            o = dist.AllToAllOptions()
            self._gloo.alltoall_base(h(output), h(input, False), list(output_split_sizes),
                                     list(input_split_sizes), o).wait()  # fmt: skip
            h.back()
            return [output]

        n = self.size()
        rows = input.shape[0] if input.dim() else 1
        per_row = input.numel() // rows if rows else 0
        sends = list(input_split_sizes) or [rows // n] * n
        counts = [s * per_row for s in sends]
        return self._run("alltoall_base", [input], [output], values,
                         {"world_op": "all_to_all", "extra": counts})  # fmt: skip

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        def values():
            h = _Host()
            self._gloo.alltoall(h.many(output_tensors), h.many(input_tensors, False)).wait()
            h.back()
            return list(output_tensors)

        counts = [t.numel() for t in input_tensors]
        return self._run("alltoall", list(input_tensors), list(output_tensors), values,
                         {"world_op": "all_to_all", "extra": counts})  # fmt: skip

    def send(self, tensors, dst: int, tag: int = 0):
        me = self.rank()

        def values():
            h = _Host()
            self._gloo.send(h.many(tensors, False), dst, tag).wait()
            return list(tensors)

        return self._run("send", list(tensors), [], values,
                         {"world_op": "send_recv", "pair": (me, dst)}, peers=(me, dst))  # fmt: skip

    def recv(self, tensors, src: int, tag: int = 0):
        me = self.rank()

        def values():
            h = _Host()
            self._gloo.recv(h.many(tensors), src, tag).wait()
            h.back()
            return list(tensors)

        return self._run("recv", [], list(tensors), values,
                         {"world_op": "send_recv", "pair": (src, me)}, peers=(src, me))  # fmt: skip

    def recv_anysource(self, tensors, tag: int = 0):
        raise RuntimeError("neuron backend: recv from any source is not supported; name the "
                           "source rank (dist.recv(tensor, src=...))")  # fmt: skip

    def barrier(self, opts=None):
        def values():
            self._gloo.barrier().wait()
            return []

        return self._run("barrier", [], [], values, {"world_op": "all_reduce", "nbytes": 4})


def _has(store, key: str) -> bool:
    try:
        return store.check([key])
    except Exception:  # noqa: BLE001
        return False


def _last(works: list, result) -> _Work:
    """One work for coalesced calls: waiting for it waits for each (their CC stream is one)."""
    timed = [w._timed for w in works if w._timed is not None]
    return _Work(result, _Many(timed) if timed else None)


class _Many:
    def __init__(self, timed: list):
        self.timed = timed

    def wait(self) -> None:
        for t in self.timed:
            t.wait()


# -- time ---------------------------------------------------------------------------------------


class _Timed:
    """A timed collective: its end event on the CC stream, and the storages it writes."""

    def __init__(self, timer, event, ptrs):
        self.timer, self.event, self.ptrs = timer, event, ptrs

    def wait(self) -> None:
        """The current neuron stream waits for the collective's end."""
        chip = state.get()
        ops = _ops(chip)
        stream = ops.stream()
        stream.wait_event(self.event)
        if chip.listeners:
            chip.listeners.wait_event(stream, self.event)
        for p in self.ptrs:
            if ops.after.get(p) is self.event:
                del ops.after[p]


def system_of(chip):
    """The SystemConfig timing the collectives of `chip` (state.Chip): the configured one, or
    the chip's default system (DEFAULT_SYSTEMS); None: collectives untimed."""
    if chip.system is not None:
        return chip.system
    name = DEFAULT_SYSTEMS.get((chip.cfg.name, chip.lnc))
    return state.system_config(name) if name else None


def _ops(chip):
    from trnsim.torch.timing import timer

    return chip.ops or timer()


class _Timer:
    """Times a group's collectives on neuron tensors (see the module docstring)."""

    def __init__(self, group: NeuronGroup):
        self.group = group
        self.cc = {}  # logical core -> this group's CC stream on it
        self.count = 0

    def system(self):
        return system_of(state.get())

    def arrive(self, op: str, tensors: list):
        """The moment (ps) this rank's CC stream reaches collective `op`, or None when it is
        not timed (no neuron tensor among `tensors`, and not a barrier on a started device)."""
        if not any(_neuron(t) for t in tensors) and not (op == "barrier" and state.started()):
            return None
        from trnsim.runtime.lockstep import arrive

        chip = state.get()
        if self.system() is None:
            return None
        ops = _ops(chip)
        dev = chip.device
        cc = self.cc.get(chip.index)
        if cc is None:
            cc = self.cc[chip.index] = dev.stream(f"cc {self.group._name}")
        self._stream = cc
        self._arrival = arrive(ops.stream(), cc, f"{op} ({self.group._name})")
        return self._arrival

    def time(self, op, vals, tensors, world_op, reduce=ReduceOp.SUM, root=0, nbytes=None,
             scale=1, pair=None, peers=None):  # fmt: skip
        """The collective timed from every rank's arrival (`vals`, group order); returns the
        `_Timed` of this rank's part."""
        from trnsim.report.recorder import CollectiveSpan
        from trnsim.runtime.lockstep import hold

        g = self.group
        arrivals = [v["a"] for v in vals]
        if any(a is None for a in arrivals):
            who = [g._ranks[(peers or range(g.size()))[i]] for i, a in enumerate(arrivals)
                   if a is None]  # fmt: skip
            raise RuntimeError(
                f"neuron backend: {op} on group {g._name!r}: rank(s) {who} "
                f"issued it on CPU tensors and the others on neuron tensors"
            )
        cfg = self.system()
        if peers is not None:
            group = tuple(g._ranks[r] for r in pair)
        else:
            group = g._ranks
        if max(group) >= cfg.ranks:
            raise RuntimeError(
                f"neuron backend: rank {max(group)} does not exist on system "
                f"{cfg.name} ({cfg.ranks} ranks); choose a larger system "
                f"(TRNSIM_SYSTEM or trnsim.torch.configure(system=...))"
            )
        ref = next((t for t in tensors if isinstance(t, torch.Tensor)), None)
        dtype = DTYPES.get(ref.dtype, "uint8") if ref is not None else "float32"
        if nbytes is None:
            nbytes = sum(t.numel() * t.element_size() for t in tensors) * scale
        itemsize = {"float32": 4, "int32": 4, "bfloat16": 2, "float16": 2, "int16": 2}.get(dtype, 1)
        if nbytes % itemsize:
            dtype, itemsize = "uint8", 1
        nbytes = max(nbytes, itemsize)
        counts = ()
        if world_op == "all_to_all":
            rows = [v["x"] for v in vals]
            if len({tuple(r) for r in rows}) > 1 or len(set(rows[0])) > 1:
                per = (ref.element_size() // itemsize) if ref is not None else 1
                counts = tuple(tuple(max(0, c) * per for c in r) for r in rows)
                world_op = "all_to_allv"
                nbytes = max(sum(r) for r in counts) * itemsize or itemsize
                if not any(any(r) for r in counts):
                    counts = ()
                    world_op = "all_to_all"
        kind = _kind(reduce)
        red = REDUCE.get(kind, "sum") if not isinstance(kind, str) else "sum"
        if world_op == "broadcast":
            root = g._ranks[root]
        a0 = min(arrivals)
        delays = tuple(a - a0 for a in arrivals)
        others = g._concurrent_groups(group) if peers is None else ()
        res = _world_time(cfg, world_op, group, nbytes, dtype, red, root, counts, delays, others)
        me = g._ranks[g.rank()]
        end = a0 + res["end"][me]
        chip = state.get()
        cc = self._stream
        start = self._arrival
        core = cc.device.chip.physical(cc.core)[0].index
        span = CollectiveSpan(core, cc.name, me, world_op, res["algorithm"], len(group), nbytes,
                              dtype, self.count, start, end, f"{op} ({g._name})")  # fmt: skip
        self.count += 1
        ev = hold(cc, end, span)
        ptrs = {t.untyped_storage().data_ptr() for t in tensors if _neuron(t)}
        ops = _ops(chip)
        for p in ptrs:
            ops.after[p] = ev
        info = {"group": g._name, "ranks": group, "world_op": world_op, "nbytes": nbytes,
                "dtype": dtype, "algorithm": res["algorithm"], "arrival_ps": start,
                "start_ps": a0 + res["start"], "end_ps": end, "busbw": res["busbw"],
                "time_ps": res["time"], "seq": span.seq, "reduce_op": red, "root": root,
                "counts": counts, "event": ev, "exact_reduce": kind in REDUCE,
                "call": op}  # fmt: skip
        ops.collective(info)  # the report's rows and steps (trnsim.torch.report)
        if chip.listeners:
            chip.listeners.collective(op, cc, tensors, info)
        return _Timed(self, ev, ptrs)


_WORLDS: dict = {}
_TIMES: dict = {}


def _world_time(cfg, op, group, nbytes, dtype, reduce_op, root, counts, delays,
                others=()) -> dict:  # fmt: skip
    """A World of system `cfg` (one a process) times `op` on `group` with ranks `delays` ps
    late: each rank's end and the start, relative to the earliest arrival; memoised (by the
    config itself: a system and the same with overrides share a name). `others`: groups doing
    the same collective at the same time (a virtual world's replicas: they share links)."""
    key = (id(cfg), op, group, nbytes, dtype, reduce_op, root, counts, delays, others)
    out = _TIMES.get(key)
    if out is not None:
        return out
    from trnsim.collectives import World

    w = _WORLDS.get(id(cfg))
    if w is None:
        w = _WORLDS[id(cfg)] = World.from_config(cfg)  # (state's cache keeps cfg alive)
    t0 = w.env.now
    if others:
        handles = [w.post(r, op, grp, nbytes, dtype, reduce_op, None, delays[i] / 1e12,
                          root=grp[group.index(root)] if root in group else root,
                          counts=counts)
                   for grp in (group, *others) for i, r in enumerate(grp)]  # fmt: skip
        w.run()
        res = handles[0].result
    else:
        res = w.collective(op, group, nbytes, dtype, reduce_op, None, [d / 1e12 for d in delays],
                           root=root, counts=counts)  # fmt: skip
    out = {"end": {r: e - t0 for r, e in res.rank_end_ps.items()}, "start": res.start_ps - t0,
           "algorithm": res.algorithm, "busbw": res.busbw, "time": res.time_ps}  # fmt: skip
    if len(_TIMES) > 4096:
        _TIMES.clear()
    _TIMES[key] = out
    return out
