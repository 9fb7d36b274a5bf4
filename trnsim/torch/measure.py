"""One measurement per op signature, from one service: what an op costs on the chip.

`Measurements` answers, for an aten op, a copy, or a list of the kernel library's ops on given
tensors: its device time, FLOPs and HBM bytes, the physical cores it ran on and, on demand, its
instructions (`detail`). An op the library lowers is lowered once per signature (op, shapes,
dtypes, int/bool/str arguments; chip, lnc) and simulated once, timing-only, on a scratch copy
of the chip; anything else gets a labelled roofline estimate, max(FLOPs / peak, bytes / HBM
bandwidth) of the logical core. The op timer (`timing`), the profiler, a recording and a
compiled graph all ask this service; none simulates on its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from trnsim.dtypes import DTYPES
from trnsim.errors import TrnsimError
from trnsim.isa import Engine
from trnsim.kernels import lower_cores
from trnsim.runtime import Device
from trnsim.torch.aten import copy_ops, library_ops
from trnsim.trace.program import KernelSpec, OpSpec, TensorSpec
from trnsim.units import seconds_to_ps

Tensor = torch.Tensor
# int64 indices and targets are int32 on the chip (the simulator has no int64): their bytes are
# half PyTorch's, a small part of an embedding's or a loss's traffic
_DTYPE = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16",
          torch.int64: "int32", torch.int32: "int32", torch.bool: "uint8"}  # fmt: skip
_PEAK = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "bfloat16"}
ENGINES = {e.label for e in Engine if e is not Engine.DMA}
# what a lowering may raise for arguments or tensors the library cannot take: the op is then
# estimated (and the reason kept for the report), never failed
REFUSALS = (TrnsimError, ArithmeticError, LookupError, ValueError, TypeError, AttributeError)


class Detail(NamedTuple):
    """One simulation of a lowering on the scratch chip, relative to its launch's start:
    spans, DMA data phases and HBM samples (times in ps from the start), and the scratch's
    first physical core (cores are counted from it)."""

    spans: list
    moves: list
    hbm: list
    core0: int


@dataclass
class Measurement:
    """What one op signature costs: device time (ps), whether the library modelled it (else a
    roofline estimate), FLOPs, HBM bytes, the physical cores it runs on, and for a lowered op
    its kernel and tensor specs (what a `timing="simulate"` launch runs)."""

    duration_ps: int
    modelled: bool
    flops: int = 0
    bytes: int = 0
    cores: int = 0
    dtype: str = "float32"  # the dtype whose peak bounds an estimate
    kernel: KernelSpec | None = None
    specs: dict | None = None
    ops: list | None = None  # the library ops (for a detail simulated again)
    detail: Detail | None = None
    views: dict | None = None  # device buffers for `timing="simulate"` launches (kept)


def spec(name: str, t: Tensor) -> TensorSpec | None:
    """The trace's tensor for torch tensor `t` (None: a dtype the chip does not have)."""
    dt = _DTYPE.get(t.dtype)
    return TensorSpec(name, tuple(t.shape), DTYPES[dt]) if dt else None


def tensors_in(args) -> list[Tensor]:
    """The tensors among `args`, lists included."""
    out = []
    for a in args:
        if isinstance(a, Tensor):
            out.append(a)
        elif type(a) in (list, tuple):
            out += [x for x in a if isinstance(x, Tensor)]
    return out


def results(r) -> list[Tensor]:
    return tensors_in(r if type(r) in (list, tuple) else [r])


def signature(args) -> list:
    """What an op's time depends on: its tensors' shapes and dtypes (and a strided view's
    strides: it may lower otherwise, as a transposed q's rotary multiply does), its int, bool
    and string arguments (dims, flags, modes); not float values (an optimizer's step sizes
    change every step and would make every step's ops new)."""
    out = []
    for a in args:
        if isinstance(a, Tensor):
            out.append((a.shape, a.dtype) if a.is_contiguous() else (a.shape, a.dtype, a.stride()))
        elif type(a) in (list, tuple):
            out.append(tuple(signature(a)))
        elif type(a) is float:
            out.append(float)
        else:
            out.append(a if isinstance(a, (int, bool, str, type(None))) else str(a))
    return out


def op_key(name: str, args, kwargs) -> tuple:
    return (name, *signature(args), *(signature(kwargs.values()) if kwargs else ()))


# the matmul family: aten op (without overload) -> the argument whose last dim is K
MATMULS = {"mm": 0, "bmm": 0, "matmul": 0, "linear": 0, "mv": 0, "dot": 0, "vdot": 0,
           "addmm": 1, "baddbmm": 1, "addbmm": 1, "addmv": 1, "_addmm_activation": 1,
           "_scaled_mm": 0, "_int_mm": 0}  # fmt: skip
# in-place fills: they write self without reading it (its bytes count once, as written)
FILLS = ("zero_", "fill_", "normal_", "uniform_", "random_", "exponential_", "cauchy_",
         "log_normal_", "geometric_")  # fmt: skip
CONVOLUTIONS = ("convolution_overrideable", "convolution", "_convolution")
CONVOLUTION_BACKWARDS = ("convolution_backward_overrideable", "convolution_backward")


def roofline_figures(name: str, args, kwargs, r) -> tuple[int, int, str]:
    """(FLOPs, bytes, the dtype whose peak bounds it) of the roofline estimate of aten op
    `name`, decided by the op, never by its tensors' shapes: the matmul family 2 M N K; a
    convolution 2 x (output elements) x (input channels per group x kernel elements) (a
    transposed one by its input elements), its backward that per gradient it computes (the
    bias's: one per output element); any other op one per output element. Bytes: inputs +
    outputs (an in-place fill, `FILLS`, does not read self); the dtype: the first input's."""
    ins = tensors_in(args) + tensors_in(kwargs.values())
    outs = results(r)
    base = name.partition(".")[0]
    read = ins[1:] if base in FILLS and ins else ins
    nbytes = sum(t.numel() * t.element_size() for t in read + outs)
    flops = sum(t.numel() for t in outs)
    if base in MATMULS and outs and len(ins) > MATMULS[base]:
        flops = 2 * outs[0].numel() * ins[MATMULS[base]].shape[-1]
        if base == "addbmm":  # the batch is summed into out: K per batch item
            flops *= ins[1].shape[0]
    elif base in CONVOLUTIONS and len(ins) >= 2 and outs:
        flops = 2 * _conv_elements(args, ins[0], outs[0]) * math.prod(ins[1].shape[1:])
    elif base in CONVOLUTION_BACKWARDS and len(ins) >= 3:
        grad_out, x, w = ins[:3]
        per = 2 * _conv_elements(args, x, grad_out) * math.prod(w.shape[1:])
        grads = r if type(r) in (list, tuple) else [r]
        flops = sum(per for g in grads[:2] if g is not None)
        if len(grads) > 2 and grads[2] is not None:
            flops += grad_out.numel()
    dt = _PEAK.get(ins[0].dtype if ins else torch.float32, "float32")
    return flops, nbytes, dt


def _conv_elements(args, x: Tensor, out: Tensor) -> int:
    """The elements a convolution's multiply-adds are counted over: its output's, or for a
    transposed one (an argument `True` after the tensors) its input's."""
    transposed = any(a is True for a in args if not isinstance(a, Tensor))
    return (x if transposed else out).numel()


def _empty(args, kwargs, r) -> bool:
    """Whether any tensor the op reads, or its (first) result, has no elements: nothing to
    lower. A later result may be empty by design (batch_norm's saved statistics in inference
    mode)."""
    outs = results(r)
    ins = tensors_in(args) + tensors_in(kwargs.values())
    return any(t.numel() == 0 for t in ins) or bool(outs and outs[0].numel() == 0)


class Measurements:
    """The measurement service of one shim chip (`state.Chip`); see the module docstring.
    `refused` keeps, per aten op, why the library's lowering was not used (the first reason)."""

    def __init__(self, chip):
        self.chip = chip
        cfg = chip.cfg
        self.scratch = Device(cfg, 0, "timing", chip.lnc)  # where lowerings are measured
        self.hbm_bw = cfg.hbm.bandwidth * chip.lnc / cfg.cores  # this logical core's share
        self.memo: dict = {}
        self.refused: dict[str, str] = {}
        self.keep_details = False  # keep each simulation's instructions (a profiler listens)

    # -- what the shim asks ----------------------------------------------------------------------

    def op(self, name: str, args, kwargs, r) -> tuple[tuple, Measurement]:
        """(signature, measurement) of aten op `name` (with overload) on these arguments."""
        key = op_key(name, args, kwargs)
        m = self.memo.get(key)
        if m is None:
            m = self.memo[key] = self._op(name, args, kwargs, r)
        return key, m

    def copy(self, src: Tensor, dst: Tensor) -> tuple[tuple | None, Measurement]:
        """A copy over the host link (its latency and bandwidth; not memoised: key None), or on
        the device: the library's `copy` (a cast when the dtypes differ) or `permute` for a
        contiguous destination, else bytes / HBM bandwidth (estimated)."""
        if src.is_cpu or dst.is_cpu:
            link = self.chip.cfg.host_link
            nbytes = dst.numel() * dst.element_size()
            return None, Measurement(seconds_to_ps(link.latency + nbytes / link.bandwidth), False,
                                     bytes=nbytes)  # fmt: skip
        key = ("copy", src.shape, src.dtype, dst.dtype, src.is_contiguous(), dst.is_contiguous(),
               None if src.is_contiguous() else src.stride())  # fmt: skip
        m = self.memo.get(key)
        if m is None:
            m = self.memo[key] = self._device_copy(src, dst, key)
        return key, m

    def lowering(self, name: str, ops: list[OpSpec], specs: dict, refuse_as: str | None = None):
        """The measurement of the library's `ops` on tensors `specs` (name -> TensorSpec), lowered
        as one kernel for the logical core (for one physical core where the tensors are too
        small to split); None where the library refuses (the reason noted under `refuse_as`
        when given). Memoised by the ops and the tensors."""
        key = ("lowering", repr(ops), tuple((k, tuple(s.shape), s.dtype.name)
                                            for k, s in specs.items()))  # fmt: skip
        if key in self.memo:
            return self.memo[key]
        try:
            m = self._simulate(name, ops, specs)
        except REFUSALS as e:
            m = None
            if refuse_as is not None:
                shapes = ", ".join(f"{k} {list(s.shape)}" for k, s in specs.items())
                self.refused.setdefault(refuse_as, f"{shapes}: {type(e).__name__}: {e}")
        self.memo[key] = m
        return m

    def estimate(self, name: str, args, kwargs, r) -> Measurement:
        """The roofline estimate of aten op `name`: max(FLOPs / peak, bytes / HBM bandwidth) of
        the logical core (`roofline_figures`: decided by the op, not by its shapes)."""
        flops, nbytes, dt = roofline_figures(name, args, kwargs, r)
        peak = self.chip.devices[self.chip.index].peak_flops[dt]
        dur = seconds_to_ps(max(flops / peak, nbytes / self.hbm_bw))
        return Measurement(dur, False, flops, nbytes, dtype=dt)

    def instructions(self, m: Measurement) -> Detail | None:
        """The instructions of lowered measurement `m` relative to its launch (simulated again,
        once, when they were not kept)."""
        if m.detail is None and m.kernel is not None:
            try:
                self._run(m.kernel, m.specs, keep=True, into=m)
            except Exception:  # noqa: BLE001 - the op shows as one span
                self.scratch = Device(self.chip.cfg, 0, "timing", self.chip.lnc)
                return None
        return m.detail

    def buffers(self, m: Measurement) -> dict:
        """Device buffers for lowered measurement `m`'s launches in `timing="simulate"` (one
        set per signature, kept: the launches compute nothing, only their addresses matter)."""
        if m.views is None:
            dev = self.chip.devices[0]
            m.views = {
                k: dev.malloc(max(1, math.prod(s.shape)) * s.dtype.itemsize).view(s.dtype, s.shape)
                for k, s in m.specs.items()
            }
        return m.views

    # -- how ---------------------------------------------------------------------------------------

    def _op(self, name: str, args, kwargs, r) -> Measurement:
        base, _, overload = name.partition(".")
        lowered = None
        if not _empty(args, kwargs, r):  # (nothing to lower: an empty tensor's op moves bytes)
            try:
                lowered = library_ops(base, overload, args, kwargs, r)
            except (TypeError, ValueError, IndexError, KeyError, AttributeError, RuntimeError):
                pass  # arguments the library's ops cannot take (a complex scalar, ...)
        if lowered is not None:
            ops, tensors = lowered
            specs = {k: spec(k, t) for k, t in tensors.items()}
            if any(s is None for s in specs.values()):
                self.refused.setdefault(name, "a dtype the kernel library does not take")
            else:
                m = self.lowering(name, ops, specs, refuse_as=name)
                if m is not None:
                    return m
        return self.estimate(name, args, kwargs, r)

    def _device_copy(self, src: Tensor, dst: Tensor, key: tuple) -> Measurement:
        lowered = None
        if not src.numel():
            pass  # nothing to lower: an empty copy moves no bytes
        elif key[4] and key[5] and src.shape == dst.shape:
            lowered = [OpSpec("copy", {"x": "x", "out": "out"})], {"x": src, "out": dst}
        elif key[5] and src.shape == dst.shape:
            lowered = copy_ops(src, dst)  # a permuted view made contiguous
        if lowered is not None:
            specs = {k: spec(k, t) for k, t in lowered[1].items()}
            if all(s is not None for s in specs.values()):
                m = self.lowering("copy", lowered[0], specs)
                if m is not None:
                    return m
        nbytes = src.numel() * src.element_size() + dst.numel() * dst.element_size()
        return Measurement(seconds_to_ps(nbytes / self.hbm_bw), False, 0, nbytes)

    def _simulate(self, name: str, ops: list[OpSpec], specs: dict) -> Measurement:
        cfg, lnc = self.chip.cfg, self.chip.lnc
        cores = lnc
        try:
            programs = lower_cores(ops, specs, cfg, lnc)
        except (TrnsimError, ValueError):
            if lnc == 1:
                raise
            programs, cores = lower_cores(ops, specs, cfg, 1), 1  # too small to split
        m = Measurement(0, True, cores=cores, kernel=KernelSpec(name, per_core=programs),
                        specs=specs, ops=ops)  # fmt: skip
        try:
            self._run(m.kernel, specs, keep=self.keep_details, into=m)
        except Exception:
            self.scratch = Device(cfg, 0, "timing", lnc)  # left mid-run: a new one
            raise
        return m

    def _run(self, kernel: KernelSpec, specs: dict, keep: bool, into: Measurement) -> None:
        """Simulate `kernel` once on the scratch chip: its time, FLOPs and HBM bytes into
        `into`, and its instructions (`detail`) when `keep`."""
        dev = self.scratch
        rec = dev.ctx.recorder
        n_spans, n_moves, n_hbm = rec.span_count, len(rec.dma_moves), len(rec.hbm_samples)
        b0 = rec.hbm_bytes_read + rec.hbm_bytes_written
        bufs = {k: dev.malloc(max(1, math.prod(s.shape)) * s.dtype.itemsize)
                for k, s in specs.items()}  # fmt: skip
        views = {k: bufs[k].view(s.dtype, s.shape) for k, s in specs.items()}
        try:
            dev.launch(kernel, views, timing_only=True)
            start = dev.host_time_ps
            dev.synchronize()
            into.duration_ps = dev.env.now - start
        finally:
            for b in bufs.values():
                dev.free(b)
        spans = rec.recorded[n_spans:]
        into.flops = sum(s.flops for s in spans if s.track in ENGINES)
        into.bytes = rec.hbm_bytes_read + rec.hbm_bytes_written - b0
        if keep:
            t0 = start
            into.detail = Detail(
                [s._replace(start_ps=s.start_ps - t0, end_ps=s.end_ps - t0) for s in spans],
                [
                    m._replace(start_ps=m.start_ps - t0, end_ps=m.end_ps - t0)
                    for m in rec.dma_moves[n_moves:]
                ],  # fmt: skip
                [h._replace(ps=h.ps - t0) for h in rec.hbm_samples[n_hbm:]],
                min(c.index for c in dev.ctx.chip.physical(dev.index)),
            )
