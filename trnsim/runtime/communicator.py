"""A communicator: ranks of a system of chips running collectives, for Python programs.

    from trnsim.runtime import Communicator
    comm = Communicator("trn2-48xl", ranks=range(4))          # a group of 4 ranks (one chip)
    xs = [comm.device(r).malloc(1 << 20).view("float32") for r in comm.ranks]
    works = [comm.all_reduce(r, x) for r, x in zip(comm.ranks, xs)]   # each rank its part
    works[0].synchronize()                                    # the host waits for rank 0's
    works[0].result.time_ps, works[0].result.busbw

NCCL's model, with every rank in one Python process: a rank is a logical NeuronCore of one of
the system's chips (`device(rank)`, a `Device` with its memory, streams and events); a
collective is enqueued by each rank of the group on one of its streams (by default the rank's
CC stream, `stream(rank)`) and runs when every rank has reached it, without holding a compute
queue; the k-th collective a rank enqueues on a group meets the k-th of the others (the same
op, size and dtype, else the run stops with an error naming the ranks, the op and the sequence
number). Each call returns a `Work` (torch.distributed's name): an event recorded on the stream
right after the collective, to wait for, query or synchronize, and the collective's `Result`.
Calls are checked as they are made (`InvalidValueError`); what only the run can tell (the
other ranks' calls) is raised by the next synchronizing call (docs/runtime.md, "Errors").
"""

from __future__ import annotations

from trnsim.collectives import Result
from trnsim.config import SystemConfig, load_system
from trnsim.runtime.device import Device
from trnsim.runtime.errors import InvalidValueError
from trnsim.runtime.event import Event
from trnsim.runtime.memory import TensorView
from trnsim.runtime.multichip import CollectiveCall, SystemContext
from trnsim.runtime.stream import Stream

__all__ = ["Communicator", "Work"]


class Work:
    """A collective one rank enqueued: `event` is recorded on its stream right after it."""

    def __init__(self, call: CollectiveCall, stream: Stream, event: Event):
        self.call, self.stream, self.event = call, stream, event

    def query(self) -> bool:
        """Is the collective complete at the host's present? (Never blocks.)"""
        return self.event.query()

    def synchronize(self) -> None:
        """Block the host until the collective is complete (raises a run's errors)."""
        self.event.synchronize()

    def wait(self, stream: Stream | None = None) -> None:
        """Make `stream` (default: the rank's default stream) wait for the collective, as
        torch.distributed's `work.wait()` makes the current stream wait."""
        (stream or self.stream.device.default_stream).wait_event(self.event)

    @property
    def result(self) -> Result | None:
        """The collective's `Result` (time, algorithm, algbw, busbw; `outputs` in functional
        mode), once it is complete; None before."""
        return self.call.sink[0] if self.call.sink else None


class Communicator:
    """The ranks `ranks` (default: every rank) of a system (a name such as "trn2-48xl", a YAML
    path, a `SystemConfig`, or the `SystemContext` of another communicator: `split`)."""

    def __init__(
        self,
        system: str | SystemConfig | SystemContext = "trn2-48xl",
        ranks=None,
        mode: str = "functional",
        seed: int = 0,
        overrides=(),
    ):
        if isinstance(system, SystemContext):
            ctx = system
        else:
            cfg = system if isinstance(system, SystemConfig) else load_system(system, overrides)
            ctx = SystemContext(cfg, mode, seed)
        self.ctx = ctx
        n = ctx.cfg.ranks
        group = tuple(range(n)) if ranks is None else tuple(int(r) for r in ranks)
        if not group or len(set(group)) != len(group) or not all(0 <= r < n for r in group):
            raise InvalidValueError(
                f"Communicator: ranks {list(group)}: expected distinct ranks of "
                f"{ctx.cfg.name}, 0..{n - 1}"
            )
        self.ranks = group
        self._streams: dict[int, Stream] = {}

    def split(self, ranks) -> Communicator:
        """A communicator of `ranks` on the same system (same clock, memory and World)."""
        return Communicator(self.ctx, ranks)

    @property
    def size(self) -> int:
        return len(self.ranks)

    def device(self, rank: int) -> Device:
        """Rank `rank`'s Device: its logical core of its chip."""
        self._member(rank, "device")
        return self.ctx.device(rank)

    def stream(self, rank: int) -> Stream:
        """Rank `rank`'s CC stream (made on first use), where its collectives go by default."""
        self._member(rank, "stream")
        s = self._streams.get(rank)
        if s is None:
            s = self._streams[rank] = self.device(rank).stream("cc")
        return s

    def synchronize(self) -> None:
        """Block the host until every stream of the system is done."""
        self.ctx.root.run_all()

    # -- collectives ---------------------------------------------------------------------------

    def all_reduce(self, rank, tensor, out=None, op: str = "sum", algorithm=None, stream=None):
        """`tensor` reduced (`op`: sum, max, min, prod) over the ranks, into `out` or in place."""
        return self.collective(rank, "all_reduce", tensor, out, reduce_op=op,
                               algorithm=algorithm, stream=stream)  # fmt: skip

    def all_gather(self, rank, tensor, out=None, algorithm=None, stream=None):
        """Every rank's `tensor` concatenated in rank order into `out` (n x its size); in place
        (no `out`), `tensor` is the whole and the rank's part its unit in it."""
        return self.collective(rank, "all_gather", tensor, out, algorithm=algorithm,
                               stream=stream)  # fmt: skip

    def reduce_scatter(self, rank, tensor, out=None, op="sum", algorithm=None, stream=None):
        """The rank's unit of `tensor` reduced over the ranks, into `out` (1/n of its size) or
        into that unit of `tensor`."""
        return self.collective(rank, "reduce_scatter", tensor, out, reduce_op=op,
                               algorithm=algorithm, stream=stream)  # fmt: skip

    def all_to_all(self, rank, tensor, out=None, stream=None):
        """Unit j of the rank's `tensor` to rank j; `out` gets unit i from rank i."""
        return self.collective(rank, "all_to_all", tensor, out, stream=stream)

    def broadcast(self, rank, tensor, root: int, out=None, stream=None):
        """The root's `tensor` into every rank's `out` (or `tensor`)."""
        return self.collective(rank, "broadcast", tensor, out, root=root, stream=stream)

    def collective(
        self,
        rank: int,
        op: str,
        tensor: TensorView | None = None,
        out: TensorView | None = None,
        *,
        nbytes: int | None = None,
        dtype: str = "float32",
        reduce_op: str = "sum",
        algorithm: str | None = None,
        root: int | None = None,
        pairs=(),
        group=None,
        stream: Stream | None = None,
    ) -> Work:
        """Rank `rank`'s part of `op` on `group` (default: the communicator's ranks), over its
        `tensor` (into `out`, or in place) or, without one, `nbytes` of `dtype` (no values).
        `send_recv` takes a group of [source, target], `permute` its `pairs`. Enqueued on
        `stream` (default: the rank's CC stream), followed by the `Work`'s event."""
        self._member(rank, op)
        group = self.ranks if group is None else tuple(int(r) for r in group)
        dev = self.ctx.device(rank)
        stream = stream or self.stream(rank)
        if stream.device is not dev:
            raise InvalidValueError(f"{op} of rank {rank}: stream {stream.name} is not on rank "
                                    f"{rank}'s device")  # fmt: skip
        src = self._bound(dev, tensor, op, "tensor")
        dst = self._bound(dev, out, op, "out")
        if src is not None:
            dt = src.dtype
            nbytes = self.ctx.engine_bytes(op, len(group), src, dst)
        else:
            if nbytes is None:
                raise InvalidValueError(f"{op} of rank {rank}: give a tensor or nbytes")
            dt = self.ctx.dtype(dtype, op)
        if op == "broadcast" and root is None:
            root = group[0]
        call = CollectiveCall(rank, op, group, nbytes, dt, reduce_op, algorithm,
                              root or 0, tuple(map(tuple, pairs)), src, dst,
                              f"{op} (rank {rank})", [])  # fmt: skip
        self.ctx.check_call(call)
        stream.collective(call)
        event = dev.event(enable_timing=True, name="")
        stream.record_event(event)
        return Work(call, stream, event)

    def _member(self, rank: int, what: str) -> None:
        if rank not in self.ranks:
            raise InvalidValueError(f"{what}: rank {rank} is not in this communicator "
                                    f"({len(self.ranks)} ranks)")  # fmt: skip

    def _bound(self, dev: Device, view, op: str, which: str):
        if view is None:
            return None
        if not isinstance(view, TensorView):
            raise InvalidValueError(f"{op}: {which}: expected a TensorView of the rank's "
                                    f"device, got {type(view).__name__}")  # fmt: skip
        dev._own(view, f"{op}: {which}")
        if not view.is_contiguous:
            raise InvalidValueError(f"{op}: {which}: {view!r} is strided; expected a contiguous "
                                    f"view")  # fmt: skip
        return view.bound(f"{op}.{which}", values=dev.functional)
