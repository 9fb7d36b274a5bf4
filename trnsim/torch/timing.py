"""Time for every op on the `neuron` device, from the simulated chip.

An op the kernel library lowers (`aten.library_ops`: aten ops mapped to the library's) is lowered
once per (op, shapes, dtypes, chip, lnc), simulated once on a timing-only copy of the chip to
measure its device time, and from then on launched by that duration on the current stream
(`Stream.launch_timed`: host launch cost included, the logical core held as by any kernel). Any
other op (or one the library refuses) is timed by a labelled roofline estimate,
max(FLOPs / peak, bytes / HBM bandwidth) of the logical core, launched the same way and counted
as estimated. Views, metadata ops and scalar reads launch nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from trnsim.dtypes import DTYPES
from trnsim.errors import TrnsimError
from trnsim.kernels import lower_cores
from trnsim.runtime import Device
from trnsim.torch import recording, state
from trnsim.torch.aten import copy_ops, library_ops
from trnsim.trace.program import KernelSpec, OpSpec, TensorSpec
from trnsim.units import seconds_to_ps

Tensor = torch.Tensor
# int64 indices and targets are int32 on the chip (the simulator has no int64): their bytes are
# half PyTorch's, a small part of an embedding's or a loss's traffic
_DTYPE = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16",
          torch.int64: "int32", torch.int32: "int32", torch.bool: "uint8"}  # fmt: skip
_PEAK = {"float32": "float32", "bfloat16": "bfloat16", "float16": "bfloat16"}

# ops that launch nothing: metadata, views are handled by their schema (no launch either)
FREE = {
    "empty", "empty_strided", "resize_", "set_", "_local_scalar_dense", "is_set_to",
    "_has_same_storage_numel", "is_pinned", "_pin_memory", "lift_fresh", "_copy_from",
    "_copy_from_and_resize", "_to_copy",
}  # fmt: skip


def launches(name: str, all_views: bool) -> bool:
    """Does aten op `name` (with overload) run work on the device?"""
    return not all_views and name.partition(".")[0] not in FREE


@dataclass
class OpStats:
    """What ran of one aten op: launches, device time (ps) and whether it was modelled."""

    count: int = 0
    device_ps: int = 0
    modelled: int = 0
    estimated: int = 0


def _spec(name: str, t: Tensor) -> TensorSpec | None:
    dt = _DTYPE.get(t.dtype)
    return TensorSpec(name, tuple(t.shape), DTYPES[dt]) if dt else None


def _tensors(args) -> list[Tensor]:
    out = []
    for a in args:
        if isinstance(a, Tensor):
            out.append(a)
        elif type(a) in (list, tuple):
            out += [x for x in a if isinstance(x, Tensor)]
    return out


class OpTimer:
    """Times ops on the chip's current stream; keeps the per-op statistics for the report."""

    def __init__(self, chip):
        self.chip = chip
        cfg = chip.cfg
        self.scratch = Device(cfg, 0, "timing", chip.lnc)  # where a lowering is measured
        self.hbm_bw = cfg.hbm.bandwidth * chip.lnc / cfg.cores  # this logical core's share
        self.memo: dict = {}  # key -> (duration_ps, modelled, (kernel, views) or None)
        self.simulate = chip.timing == "simulate"
        self.stats: dict[str, OpStats] = {}
        self.refused: dict[str, str] = {}  # aten op -> why the library did not time it (first)
        self.copies = OpStats()
        self.copy_bytes = 0
        self.profiler = None  # a trnsim.torch.profiler.Profile while one records
        self.last = None  # (memo key, stream, kernel) of the last launch (for the profiler)
        self.sink = None  # a compiled graph's (trnsim.torch.graph): takes the ops instead

    def __call__(self, name: str, args, kwargs, r) -> None:
        if self.sink is not None:
            return self.sink(name, args, kwargs, r)
        if self.profiler is not None:
            self.profiler.op(self.time, name, args, kwargs, r)
        else:
            self.time(name, args, kwargs, r)

    def time(self, name: str, args, kwargs, r) -> None:
        """Launch op `name` by its device time (measured on first sight of its signature)."""
        key = (name, *_signature(args), *(_signature(kwargs.values()) if kwargs else ()))
        hit = self.memo.get(key)
        if hit is None:
            base, _, overload = name.partition(".")
            hit = self.memo[key] = self._measure(name, base, overload, args, kwargs, r)
        dur, modelled, program = hit
        stream = self._stream()
        if program is not None and self.simulate:
            kernel = stream.launch(program[0], program[1], timing_only=True)
        else:
            kernel = stream.launch_timed(name, dur)
        self.last = key, stream, kernel
        if recording.active is not None:  # trnsim.torch.record
            recording.active.op(name, args, kwargs, r, modelled, dur, stream)
        st = self.stats.get(name)
        if st is None:
            st = self.stats[name] = OpStats()
        st.count += 1
        st.device_ps += dur
        if modelled:
            st.modelled += 1
        else:
            st.estimated += 1

    def _stream(self):
        chip = self.chip
        s = chip.streams[chip.index]
        return s.rt if s is not None else chip.devices[chip.index].default_stream

    def _measure(self, name, base, overload, args, kwargs, r) -> tuple[int, bool]:
        lowered = None
        if not _empty(args, kwargs, r):  # (nothing to lower: an empty tensor's op moves bytes)
            try:
                lowered = library_ops(base, overload, args, kwargs, r)
            except (TypeError, ValueError, IndexError, KeyError, AttributeError, RuntimeError):
                pass  # arguments the library's ops cannot take (a complex scalar, ...)
        if lowered is not None:
            try:
                dur, kernel, specs = self._simulate(name, *lowered)
                return dur, True, (kernel, self._views(specs)) if self.simulate else None
            except KeyError:
                self.refused.setdefault(name, "a dtype the kernel library does not take")
            except (TrnsimError, ArithmeticError, LookupError, ValueError, TypeError,
                    AttributeError) as e:  # fmt: skip
                shapes = ", ".join(f"{k} {list(t.shape)}" for k, t in lowered[1].items())
                self.refused.setdefault(name, f"{shapes}: {type(e).__name__}: {e}")
        return self.roofline(args, kwargs, r), False, None

    def _views(self, specs: dict) -> dict:
        """Buffers on the chip for a lowered op's launches in "simulate" timing (one set per
        op signature, kept: the launches compute nothing, only their addresses matter)."""
        dev = self.chip.devices[0]
        return {
            k: dev.malloc(max(1, math.prod(s.shape)) * s.dtype.itemsize).view(s.dtype, s.shape)
            for k, s in specs.items()
        }

    def _simulate(self, name: str, ops: list[OpSpec], tensors: dict):
        """(device time, kernel, tensor specs) of the lowered ops, their time measured once on
        the timing-only scratch chip."""
        specs = {}
        for k, t in tensors.items():
            spec = _spec(k, t)
            if spec is None:
                raise KeyError(k)
            specs[k] = spec
        return (*self.measure(name, ops, specs), specs)

    def measure(self, name: str, ops: list[OpSpec], specs: dict) -> tuple[int, KernelSpec]:
        """(device time, kernel) of `ops` on tensors `specs` lowered as one kernel for this
        chip's logical core (for one physical core where the tensors are too small to split)
        and simulated once on the timing-only scratch chip. Raises what the library raises."""
        dev = self.scratch
        try:
            cores = lower_cores(ops, specs, dev.cfg, self.chip.lnc)
        except (TrnsimError, ValueError):
            if self.chip.lnc == 1:
                raise
            cores = lower_cores(ops, specs, dev.cfg, 1)  # too small to split: one core runs it
        kernel = KernelSpec(name, per_core=cores)
        try:
            return self._run(dev, kernel, specs), kernel
        except Exception:
            self.scratch = Device(dev.cfg, 0, "timing", self.chip.lnc)  # left mid-run: a new one
            raise

    @staticmethod
    def _run(dev, kernel: KernelSpec, specs: dict) -> int:
        bufs = {k: dev.malloc(max(1, math.prod(s.shape)) * s.dtype.itemsize)
                for k, s in specs.items()}  # fmt: skip
        views = {k: bufs[k].view(s.dtype, s.shape) for k, s in specs.items()}
        try:
            dev.launch(kernel, views, timing_only=True)
            start = dev.host_time_ps
            dev.synchronize()
            return dev.env.now - start
        finally:
            for b in bufs.values():
                dev.free(b)

    def roofline(self, args, kwargs, r) -> int:
        """max(FLOPs / peak, bytes / HBM bandwidth) of this logical core, in ps."""
        flops, nbytes, dt = roofline_figures(args, kwargs, r)
        peak = self.chip.devices[self.chip.index].peak_flops[dt]
        return seconds_to_ps(max(flops / peak, nbytes / self.hbm_bw))

    def copy(self, src: Tensor, dst: Tensor) -> None:
        if self.profiler is not None:
            self.profiler.copy(self.time_copy, src, dst)
        else:
            self.time_copy(src, dst)

    def time_copy(self, src: Tensor, dst: Tensor) -> None:
        """A copy to, from or within the device: over the host link (its latency and
        bandwidth), or on the device: the kernel library's `copy` (a cast when the dtypes
        differ) for a contiguous one, else bytes / HBM bandwidth (estimated)."""
        if self.sink is not None:
            return self.sink.copy(src, dst)
        nbytes = dst.numel() * dst.element_size()
        self.last = None
        self.copies.count += 1
        self.copy_bytes += nbytes
        if src.is_cpu and dst.is_cpu:
            return
        key = None
        modelled = False
        if src.is_cpu or dst.is_cpu:
            link = self.chip.cfg.host_link
            dur = seconds_to_ps(link.latency + nbytes / link.bandwidth)
        else:
            key, (dur, modelled) = self._device_copy(src, dst)
            self.copies.modelled += modelled
            self.copies.estimated += not modelled
        stream = self._stream()
        host = src.is_cpu or dst.is_cpu  # the host pays a copy call, as memcpy_async does
        self.last = key, stream, stream.launch_timed("copy", dur, copy=host)
        self.copies.device_ps += dur
        if recording.active is not None:  # trnsim.torch.record
            recording.active.copy(src, dst, modelled, dur, stream)
        if dst.is_cpu:  # the host waits for the copy, as a blocking .cpu() does
            self.wait()

    def _device_copy(self, src: Tensor, dst: Tensor) -> tuple[tuple, tuple[int, bool]]:
        key = (
            "copy",
            src.shape,
            src.dtype,
            dst.dtype,
            src.is_contiguous(),
            dst.is_contiguous(),
            None if src.is_contiguous() else src.stride(),
        )
        hit = self.memo.get(key)
        if hit is None:
            hit = None
            lowered = None
            if not src.numel():
                pass  # nothing to lower: an empty copy moves no bytes
            elif key[4] and key[5] and src.shape == dst.shape:
                lowered = [OpSpec("copy", {"x": "x", "out": "out"})], {"x": src, "out": dst}
            elif key[5] and src.shape == dst.shape:
                lowered = copy_ops(src, dst)  # a permuted view made contiguous
            if lowered is not None:
                try:
                    hit = self._simulate("copy", *lowered)[0], True
                except (KeyError, TrnsimError, ArithmeticError, ValueError, LookupError,
                        TypeError):  # fmt: skip
                    pass  # an estimate, never the op's failure
            if hit is None:
                nbytes = src.numel() * src.element_size() + dst.numel() * dst.element_size()
                hit = seconds_to_ps(nbytes / self.hbm_bw), False
            self.memo[key] = hit
        return key, hit

    def wait(self) -> None:
        """The host waits for the current stream (a value read back)."""
        stream = self._stream()
        stream.synchronize()
        if recording.active is not None:
            recording.active.synchronize(stream)


def _empty(args, kwargs, r) -> bool:
    """Whether any tensor of the op (argument or result) has no elements."""
    outs = r if type(r) in (list, tuple) else [r]
    return any(t.numel() == 0 for t in _tensors(args) + _tensors(kwargs.values()) + _tensors(outs))


def roofline_figures(args, kwargs, r) -> tuple[int, int, str]:
    """(FLOPs, bytes, the dtype whose peak bounds it) of the roofline estimate of an op: FLOPs
    2 M N K for a matmul-like op (a convolution's by its weight), one per output element
    otherwise; bytes: inputs + outputs; the dtype: the first input's."""
    ins = _tensors(args) + _tensors(kwargs.values())
    outs = _tensors(r if type(r) in (list, tuple) else [r])
    nbytes = sum(t.numel() * t.element_size() for t in ins + outs)
    flops = sum(t.numel() for t in outs)
    if len(ins) >= 2 and ins[0].dim() >= 2 and ins[1].dim() >= 2 and outs:
        k = ins[0].shape[-1]
        if ins[1].shape[-2] == k:  # matmul-like: 2 M N K
            flops = 2 * outs[0].numel() * k
        if ins[1].dim() >= 3 and ins[0].dim() == ins[1].dim():  # a convolution's weight
            flops = 2 * max(t.numel() for t in outs) * math.prod(ins[1].shape[1:])
    dt = _PEAK.get(ins[0].dtype if ins else torch.float32, "float32")
    return flops, nbytes, dt


def _signature(args) -> list:
    """What an op's time depends on: its tensors' shapes and dtypes, its int, bool and string
    arguments (dims, flags, modes); not float values (an optimizer's step sizes change every
    step and would make every step's ops new)."""
    out = []
    for a in args:
        if isinstance(a, Tensor):
            out.append((a.shape, a.dtype))
        elif type(a) in (list, tuple):
            out.append(tuple(_signature(a)))
        elif type(a) is float:
            out.append(float)
        else:
            out.append(a if isinstance(a, (int, bool, str, type(None))) else str(a))
    return out


def timer() -> OpTimer:
    """The chip's op timer (made on first use)."""
    chip = state._chip or state.get()
    if chip.ops is None:
        chip.ops = OpTimer(chip)
    return chip.ops


def record(name: str, args, kwargs, r) -> None:
    """An op ran on the device (called by every aten kernel)."""
    chip = state._chip
    t = chip.ops if chip is not None else None
    (t or timer())(name, args, kwargs, r)
