"""Estimated ops: a trace's `estimate:` kernel (an op a recording could only estimate) replayed
by the roofline it came from, on the chip it runs on.

Its time is max(FLOPs / peak of its dtype, bytes / HBM bandwidth) of the logical core (the
chip's peak and bandwidth shared as `trnsim.torch` shares them), so on the recorded chip it is
the recorded time and on another chip the same estimate for that chip. It holds its logical core
for that long, as a timed kernel, and when it ends writes the values it left (functional mode,
when the recording kept them) and is reported as estimated (`Recorder.estimates`).
"""

from __future__ import annotations

import numpy as np

from trnsim.config import ChipConfig
from trnsim.memory.init import initial_values
from trnsim.report.recorder import EstimateSpan
from trnsim.trace.program import KernelSpec
from trnsim.units import seconds_to_ps

__all__ = ["Estimated", "Writes", "estimate_ps"]


def estimate_ps(cfg: ChipConfig, lnc: int, flops: int, nbytes: int, dtype: str) -> int:
    """The roofline time of `flops` at `dtype`'s peak and `nbytes` of HBM traffic on one
    logical core of `lnc` physical cores."""
    peak = getattr(cfg.peak_flops, dtype) / (cfg.cores // lnc)
    hbm_bw = cfg.hbm.bandwidth * lnc / cfg.cores
    return seconds_to_ps(max(flops / peak, nbytes / hbm_bw))


class Writes:
    """Recorded values a kernel leaves in its tensors (`writes:`), written when it ends
    (functional runs; a timing run holds no values). Called by the stream."""

    def __init__(self, kernel: KernelSpec, writes: dict, ctx, tensors: dict):
        self.writes = []
        self.__name__ = f"{kernel.name} writes"
        if ctx.functional:
            for t, init in writes.items():
                buf = tensors[t]
                what = f"kernel {kernel.name}: writes.{t}"
                self.writes.append((buf, initial_values(init, buf.shape, buf.dtype, None, what)))

    def __call__(self) -> None:
        for buf, values in self.writes:
            if buf.array is not None:
                np.copyto(buf.array, values, casting="unsafe")


class Estimated:
    """One estimate kernel bound to a run: its time on the run's chip and the values to write
    into its tensors (Buffers bound by name) when it ends."""

    def __init__(self, kernel: KernelSpec, ctx, tensors: dict):
        e = self.spec = kernel.estimate
        self.name = kernel.name
        self.duration_ps = estimate_ps(ctx.cfg, ctx.chip.lnc, e.flops, e.bytes, e.dtype)
        self.writes = Writes(kernel, e.writes, ctx, tensors)

    def done(self, ctx, stream, start_ps: int, end_ps: int) -> None:
        """It ran from `start_ps` to `end_ps` on `stream`'s logical core."""
        self.writes()
        core = ctx.chip.physical(stream.core)[0].index
        e = self.spec
        ctx.recorder.estimate(
            EstimateSpan(self.name, e.op, core, start_ps, end_ps, e.flops, e.bytes, e.dtype)
        )
