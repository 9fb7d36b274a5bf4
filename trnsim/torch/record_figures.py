"""The FLOPs and HBM bytes of a recorded op's lowering (the timer keeps only its time):
simulated once per signature on a timing-only scratch chip, on the trace's tensors (one tensor
passed as two arguments is read as one, as the replay reads it)."""

from __future__ import annotations

import math

from trnsim.errors import TrnsimError
from trnsim.isa import Engine
from trnsim.kernels import lower_cores
from trnsim.runtime import Device
from trnsim.torch.timing import _spec
from trnsim.trace.program import KernelSpec

ENGINES = {e.label for e in Engine if e is not Engine.DMA}


class Figures:
    """(FLOPs, HBM bytes, physical cores) of lowerings on `chip` (the shim's `state.Chip`)."""

    def __init__(self, chip):
        self.chip = chip
        self.memo: dict[str, tuple] = {}
        self.scratch = None

    def __call__(self, ops, tensors: dict) -> tuple[int, int, int]:
        """(FLOPs, HBM bytes, physical cores) of a lowering on the trace's tensors (two
        arguments on one tensor are read as one, as the replay reads them), simulated once per
        signature on a timing-only scratch chip (the timer keeps only the time)."""
        specs = {k: _spec(k, t) for k, t in tensors.items()}
        for s in specs.values():
            s.shape = s.shape or (1,)  # a 0-dim tensor is [1] in the trace
        key = repr((ops, [(k, s.shape, s.dtype.name) for k, s in specs.items()]))
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self._simulate(ops, specs)
        return hit

    def _simulate(self, ops, specs: dict) -> tuple[int, int, int]:
        cfg, lnc = self.chip.cfg, self.chip.lnc
        if self.scratch is None:
            self.scratch = Device(cfg, 0, "timing", lnc)
        dev, cores = self.scratch, lnc
        try:
            programs = lower_cores(ops, specs, cfg, lnc)
        except (TrnsimError, ValueError):
            if lnc == 1:
                raise
            programs, cores = lower_cores(ops, specs, cfg, 1), 1
        rec = dev.recorder
        n0, b0 = rec.span_count, rec.hbm_bytes_read + rec.hbm_bytes_written
        bufs = {
            k: dev.malloc(max(1, math.prod(s.shape)) * s.dtype.itemsize) for k, s in specs.items()
        }
        views = {k: bufs[k].view(s.dtype, s.shape) for k, s in specs.items()}
        dev.launch(KernelSpec("figures", per_core=programs), views, timing_only=True)
        dev.synchronize()
        for b in bufs.values():
            dev.free(b)
        flops = sum(s.flops for s in rec.recorded[n0:] if s.track in ENGINES)
        return flops, rec.hbm_bytes_read + rec.hbm_bytes_written - b0, cores
