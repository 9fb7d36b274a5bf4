"""`with trnsim.torch.record("run.yaml"):` writes what the `neuron` device ran as a trace that
`trnsim run` replays without PyTorch (docs/torch.md, "Record and replay").

The trace holds: each block of device memory the ops touched as an HBM tensor of bytes
(`m<n>: {shape: [bytes], dtype: uint8}`), each tensor an op or a copy used as a strided view of
it (dtype, shape, strides, offset, as torch keeps them; int64 as int32, bool as uint8, as the
timer times them); each op the kernel library lowers as a kernel of the library's `ops:` (the
OpSpecs `aten.library_ops` gives), each other op as an `estimate:` kernel (its roofline FLOPs,
bytes and time); host<->device copies as `copy:` steps from or to host tensors; the streams,
events and the host's waits, issued in order by one host thread (a step's `stream:`), as
PyTorch's one thread issues them. Identical kernels are written once.

In a torch.distributed job each rank writes its own trace (the rank in its path, `rank:` and
`system:` at the top), each collective of the backend a `collective:` step on the group's CC
stream after a wait for what the issuing stream enqueued (docs/distributed.md, "Record and
replay").

With `values=True` the values are kept beside the trace (`<stem>_values/*.npy`): the bytes of
every block at the start, what each host copy sent, what each estimated op left (`writes:`),
so that a functional replay computes what PyTorch did.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from trnsim.report.files import OutputError, check_file, check_folder
from trnsim.torch import state
from trnsim.torch.aten import library_ops, permuted
from trnsim.torch.listeners import Listener, OpRun
from trnsim.torch.measure import spec
from trnsim.torch.record_tensors import DTYPES, TraceTensors, _array, _ident, _np
from trnsim.torch.tensors import contiguous_stride
from trnsim.torch.timing import timer
from trnsim.trace.ops import OPS
from trnsim.trace.program import OpSpec

Tensor = torch.Tensor
_KEPT = "the recording is kept: rec.save(path) writes it to another file"


def record(path, values: bool = False, names: dict | None = None) -> Recording:
    """Context manager: record the device's work inside the block to trace `path` (YAML, or
    JSON when it ends in .json). `values`: keep the values (.npy files beside the trace), so
    that a functional replay reproduces the outputs. `names`: trace names for tensors (e.g.
    `dict(model.named_parameters())`); `Recording.output(name, tensor)` adds one and lists it
    in the trace's `outputs:`. `path` is checked on entry (TrnsimError: a folder, an unwritable
    place); a write that fails at the end (a full disk) keeps the recording: `rec.save(path)`."""
    return Recording(path, values, names)


class Recording(TraceTensors, Listener):
    """What the device ran between `__enter__` and `__exit__` (see the module docstring);
    `summary` the recorded run's figures once written."""

    def __init__(self, path, values: bool = False, names: dict | None = None):
        self.rank = _rank()
        self.world_size = _world_size()
        self.path, self.values = _rank_path(Path(path), self.rank), values
        self.names = names or {}
        self.summary: dict = {}

    # -- the block -------------------------------------------------------------------------------

    def __enter__(self) -> Recording:
        chip = state.get()
        if any(isinstance(x, Recording) for x in chip.listeners.all):
            raise RuntimeError("trnsim.torch.record: a recording is already in progress")
        self._check(self.path)
        import trnsim.torch.module as neuron

        neuron.synchronize()  # the recording starts from an idle device
        self.chip = chip
        self.measure = timer().measure
        self._reset()
        self.start_ps = chip.devices[0].host_time_ps
        if self.values:
            for blk in chip.allocator.blocks.values():
                self.images[id(blk)] = blk.base.numpy().copy()
        for n, t in self.names.items():
            self.rename[self.tensor(t, "")] = _ident(n)
        chip.listeners.add(self)
        return self

    def __exit__(self, *exc) -> bool:
        self.chip.listeners.remove(self)
        if exc[0] is None:
            self._settle()
            self.chip.devices[0].synchronize()
            self.summary["time_ps"] = self.chip.devices[0].env.now - self.start_ps
            self._write()
        return False

    def save(self, path) -> None:
        """Write the recording to `path` (and its values beside it): after the block, whose own
        write may have failed (a full disk), the recording is still here."""
        if "time_ps" not in self.summary:
            raise RuntimeError("trnsim.torch.record: save() is for a recording whose block ended")
        self._check(Path(path))
        self.path = Path(path)
        self._write()

    def _check(self, path: Path) -> None:
        """Before any work: the trace can be written at `path` (missing folders are made), and
        its values folder, if kept, too."""
        check_file("trnsim.torch.record", path, make_folders=True)
        if self.values:
            values = path.parent / f"{path.stem}_values"
            check_folder("trnsim.torch.record: values folder", values, make_folders=True)

    def _reset(self) -> None:
        self.blocks: dict[int, tuple] = {}  # id(block) -> (block, root name)
        self.by_host: dict[int, object] = {}  # host pointer of a block's bytes -> block
        self.images: dict[int, np.ndarray] = {}  # id(block) -> its bytes at the start
        self.tensors: dict[str, dict] = {}  # trace name -> its entry
        self.views: dict[tuple, str] = {}  # (root, dtype, shape, strides, offset) -> name
        self.kernels: dict[str, dict] = {}
        self.kernel_of: dict[str, str] = {}  # the entry as JSON -> kernel name
        self.steps: list[tuple[str, dict]] = []  # (stream, step)
        self.streams: dict[object, str] = {}  # runtime stream -> trace stream
        self.cores: dict[str, int] = {}
        self.event_names: dict[int, tuple] = {}  # id(runtime event) -> (event, name)
        self.recorded: set[str] = set()
        self.timed: list[str] = []  # timing events, in the order first recorded
        self.pending: list[tuple[Tensor, str]] = []  # results not yet on the device
        self.rename: dict[str, str] = {}
        self.alias: dict[str, str] = {}  # a result's name -> the view it landed on
        self.count = 0
        self.outputs: list[str] = []
        self.files: dict[str, np.ndarray] = {}  # file name -> values
        estimated = {"launches": 0, "flops": 0, "bytes": 0, "time_ps": 0}
        self.summary = {"launches": 0, "modelled": 0, "flops": 0, "bytes": 0, "copies": 0,
                        "estimated": estimated}  # fmt: skip

    def output(self, name: str, t: Tensor) -> None:
        """Name device tensor `t` in the trace and list it in `outputs:` (what `trnsim run
        --out-dir` saves)."""
        internal = self.tensor(t, "")
        internal = self.alias.get(internal, internal)
        self.rename[internal] = _ident(name)
        if internal not in self.outputs:
            self.outputs.append(internal)

    # -- streams, events, the host ---------------------------------------------------------------

    def stream(self, rt) -> str:
        name = self.streams.get(rt)
        if name is None:
            name = self.streams[rt] = rt.name
            self.cores[name] = rt.core
        return name

    def _step(self, rt, step: dict) -> None:
        self.steps.append((self.stream(rt), step))

    def _event(self, ev) -> str:
        hit = self.event_names.get(id(ev))
        if hit is None:
            hit = self.event_names[id(ev)] = (ev, f"ev{len(self.event_names)}")
        return hit[1]

    def record_event(self, rt, ev) -> None:
        name = self._event(ev)
        self._step(rt, {"record": name})
        if ev.enable_timing and name not in self.recorded:
            self.timed.append(name)
        self.recorded.add(name)

    def wait_event(self, rt, ev) -> None:
        name = self._event(ev)
        if name in self.recorded:  # recorded before the recording: done, a no-op
            self._step(rt, {"wait": name})

    def wait_stream(self, rt, other) -> None:
        name = f"ev{len(self.event_names)}"
        self.event_names[-len(self.event_names) - 1] = (None, name)  # no torch event
        self._step(other, {"record": name})
        self.recorded.add(name)
        self._step(rt, {"wait": name})

    def synchronize(self, rt) -> None:
        """The host waited for stream `rt` (None: every stream)."""
        for s in [rt] if rt is not None else list(self.streams):
            self._step(s, {"synchronize": None})

    def collective(self, op: str, rt, tensors, info: dict) -> None:
        """A collective of torch.distributed's backend on CC stream `rt`: the CC stream waits
        for what the issuing stream (the current one) enqueued before it, then a `collective:`
        step, then the record of the event the issuing stream's later wait names."""
        issuing = timer().stream()
        if issuing is not rt:
            name = f"ev{len(self.event_names)}"
            self.event_names[-len(self.event_names) - 1] = (None, name)  # no torch event
            self._step(issuing, {"record": name})
            self.recorded.add(name)
            self._step(rt, {"wait": name})
        self._step(rt, {"collective": self._collective(op, rt, tensors, info)})
        done = self._event(info["event"])
        self._step(rt, {"record": done})
        self.recorded.add(done)
        self.summary["collectives"] = self.summary.get("collectives", 0) + 1

    def _collective(self, op: str, rt, tensors, info: dict) -> dict:
        """The `collective:` step (docs/trace_extensions.md): the World's op on the group's
        system ranks; with values, the tensor itself where the trace's op computes what the
        backend did (an in-place all_reduce by sum, max, min or prod; a broadcast), else its
        size and dtype (timing: the replay leaves the tensors as they were)."""
        wop = info["world_op"]
        c: dict = {"op": wop, "group": list(info["ranks"])}
        if info.get("counts"):
            c["counts"] = [list(r) for r in info["counts"]]
            c["dtype"] = info["dtype"]
            return c
        if wop in ("all_reduce", "reduce_scatter"):
            c["reduce_op"] = info.get("reduce_op", "sum")
        if wop == "broadcast":
            c["root"] = info.get("root", c["group"][0])
        exact = (
            op in ("allreduce", "broadcast")
            and len(tensors) == 1
            and (op == "broadcast" or info.get("exact_reduce", True))
        )
        t = tensors[0] if tensors else None
        if (self.values and exact and isinstance(t, Tensor) and t.is_contiguous()
                and t.numel() * t.element_size() == info["nbytes"]
                and DTYPES.get(t.dtype) == info["dtype"]):  # fmt: skip
            c["tensor"] = self.tensor(t, self.stream(rt))
            return c
        c["bytes"] = info["nbytes"]
        c["dtype"] = info["dtype"]
        return c

    def event_synchronize(self, ev) -> None:
        """The host waited for an event: for the stream it was last recorded on."""
        name = self._event(ev)
        for s, step in reversed(self.steps):
            if step.get("record") == name:
                self.steps.append((s, {"synchronize": None}))
                return

    # -- ops and copies --------------------------------------------------------------------------

    def op(self, run: OpRun) -> None:
        """An aten op ran on stream `run.stream`: the library's ops, or its estimate."""
        name, args, kwargs, r, m, rt = (run.name, run.args, run.kwargs, run.result,
                                        run.measurement, run.stream)  # fmt: skip
        stream = self.stream(rt)
        lowered = None
        if m.modelled:
            base, _, overload = name.partition(".")
            lowered = library_ops(base, overload, args, kwargs, r)
        results = [x for x in (r if type(r) in (list, tuple) else [r]) if isinstance(x, Tensor)]
        if lowered is not None:
            self._ops(name, *lowered, rt, stream, results)
            return
        outs = {}
        for x in results:
            outs[self.tensor(x, stream, results)] = x
        self._estimate(name, m.flops, m.bytes, m.dtype, m.duration_ps, outs, rt)

    def copy(self, run: OpRun) -> None:
        """A copy to, from or on the device (`OpTimer.copy`)."""
        (src, dst), m, rt = run.args, run.measurement, run.stream
        modelled, dur = m.modelled, m.duration_ps
        stream = self.stream(rt)
        self.summary["copies"] += 1
        if src.is_cpu or dst.is_cpu:
            host, dev = (src, dst) if src.is_cpu else (dst, src)
            h = self._host(host, src.is_cpu)
            d = self.tensor(dev, stream)
            self._step(rt, {"copy": {"src": h, "dst": d} if src.is_cpu else {"src": d, "dst": h}})
            dt = self.tensors[d]["dtype"]
            self.summary["bytes"] += dev.numel() * np.dtype(_np(dt)).itemsize
            return
        if modelled:
            lowered = self._copy_ops(src, dst)
            if lowered is not None:
                self._ops("copy", *lowered, rt, stream, ())
                return
        nbytes = src.numel() * src.element_size() + dst.numel() * dst.element_size()
        self._estimate("copy", 0, nbytes, "float32", dur, {self.tensor(dst, stream): dst}, rt)

    @staticmethod
    def _copy_ops(src: Tensor, dst: Tensor):
        """The library op `OpTimer` timed the copy as, on the tensors it reads and writes."""
        if src.is_contiguous() and dst.is_contiguous():
            return [OpSpec("copy", {"x": "x", "out": "out"})], {"x": src, "out": dst}
        p = permuted(src)
        if p is None:
            return None
        dense = torch.as_strided(src, tuple(p[0].shape), contiguous_stride(p[0].shape))
        return [OpSpec("permute", {"x": "x", "out": "out", "dims": p[1]})], {"x": dense, "out": dst}

    def _ops(self, label: str, ops, tensors: dict, rt, stream: str, results) -> None:
        """A kernel of the library's ops on the trace's tensors; results the ops do not
        write (a loss's value, nll_loss's total weight) are its `writes:` when values are
        kept."""
        res = [self.tensor(x, stream, results) for x in results]  # in the order allocated
        names = {k: self.tensor(t, stream, results) for k, t in tensors.items()}
        ops = [OpSpec(op.op, _renamed(op, names)) for op in ops]
        flops, nbytes, cores = self._figures(ops, {names[k]: t for k, t in tensors.items()})
        entry: dict = {"ops": [{op.op: op.args} for op in ops]}
        if cores < self.chip.lnc:
            entry["cores"] = cores
        extra = [(n, x) for n, x in zip(res, results)
                 if not any(x is t or _same(x, t) for t in tensors.values())]  # fmt: skip
        if self.values and extra:
            k = len(self.files)
            entry["writes"] = {
                n: {"file": self._file(f"w{k}_{n}", _array(x, DTYPES.get(x.dtype, "float32")))}
                for n, x in extra
            }
        self._launch(label, entry, rt)
        self.summary["modelled"] += 1
        self.summary["flops"] += flops
        self.summary["bytes"] += nbytes

    def _figures(self, ops, tensors: dict) -> tuple[int, int, int]:
        """(FLOPs, HBM bytes, physical cores) of the kernel as the trace holds it (two
        arguments on one tensor are read as one, as the replay reads them; a 0-dim tensor is
        [1]), from the measurement service."""
        specs = {}
        for k, t in tensors.items():
            s = specs[k] = spec(k, t)
            s.shape = s.shape or (1,)
        m = self.measure.lowering("figures", ops, specs)
        if m is None:
            raise RuntimeError(f"trnsim.torch.record: the recorded kernel {ops} does not lower")
        return m.flops, m.bytes, m.cores

    def _estimate(self, label, flops, nbytes, dt, dur, outs: dict, rt) -> None:
        e = {"op": label, "flops": int(flops), "bytes": int(nbytes), "dtype": dt, "time_ps": dur}
        if self.values and outs:
            n = len(self.files)
            e["writes"] = {
                t: {"file": self._file(f"w{n}_{t}", _array(x, DTYPES.get(x.dtype, "float32")))}
                for t, x in outs.items()
            }
        self._launch(label, {"estimate": e}, rt)
        s = self.summary["estimated"]
        s["launches"] += 1
        s["flops"] += int(flops)
        s["bytes"] += int(nbytes)
        s["time_ps"] += dur

    def _launch(self, label: str, entry: dict, rt) -> None:
        key = json.dumps(entry, sort_keys=True)
        name = self.kernel_of.get(key)
        if name is None:
            name = self.kernel_of[key] = f"k{len(self.kernels)}_{_ident(label.split('.')[0])}"
            self.kernels[name] = entry
        self._step(rt, {"launch": name})
        self.summary["launches"] += 1

    # -- the trace ---------------------------------------------------------------------------------

    def _write(self) -> None:
        """`record_write.write`; a failure names the file and how to write the recording again."""
        from trnsim.torch.record_write import write

        named = "trnsim.torch.record "
        try:
            write(self)
        except OutputError as e:
            raise OutputError(e.path, f"{e.reason}; {_KEPT}", named) from e
        except OSError as e:
            raise OutputError(e.filename or self.path, f"{e.strerror or e}; {_KEPT}", named) from e


def _rank() -> int | None:
    """This process's rank in a torch.distributed job (None outside one)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return None


def _world_size() -> int | None:
    """The job's world size (a virtual world's N: trnsim.torch.virtual), None outside one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return None


def _rank_path(path: Path, rank: int | None) -> Path:
    """The trace of rank `rank`: `{rank}` in the path replaced by it, else `_rank<R>` before
    the suffix (run.yaml -> run_rank3.yaml); the path as given outside a job."""
    if rank is None:
        return path
    if "{rank}" in str(path):
        return Path(str(path).replace("{rank}", str(rank)))
    return path.with_name(f"{path.stem}_rank{rank}{path.suffix}")


def _renamed(op: OpSpec, names: dict) -> dict:
    """An op's arguments with the library's tensor names replaced by the trace's."""
    return OPS[op.op].renamed(op.args, names)


def _same(x: Tensor, t: Tensor) -> bool:
    """Whether `t` is `x` seen in another shape (`aten._trailing`'s [rows, n] views): the same
    elements of one storage, both contiguous."""
    return (t.device.type != "meta" and x.numel() == t.numel() and x.is_contiguous()
            and t.is_contiguous() and x.storage_offset() == t.storage_offset()
            and x.untyped_storage().data_ptr() == t.untyped_storage().data_ptr())  # fmt: skip
