"""TensorE warm-up: the dI/dt throttle of the PE array on Trn2/Trn3 (trainium.md 2.2, 3.5).

After idle, bursts start at `warmup_start_rate` (~50%) of full throughput and ramp to full over
`warmup_time` (~3 us) of busy time; the throttle re-engages when utilization falls below 50%
over a ~3 us window. Modelled with a warmth `w` in [0, 1]: the array runs at
`a + (1 - a) * w` of full speed (`a` = warmup_start_rate); `w` rises by 1 per `warmup_time` of
busy time and falls by 1 per `warmup_time` of idle time (an assumption: the published rule only
says the throttle re-engages below 50% utilization, which this symmetric rate reproduces: `w`
falls exactly when the engine is idle more than half of the time). A linear ramp is assumed.

Pure arithmetic on integer picoseconds, done by the run loop as instructions start (it depends
on when they run, so it cannot be costed before the clock starts); floats are rounded up to whole
ps, so runs are deterministic.
"""

from __future__ import annotations

import math


class Warmup:
    """One PE array's warmth: `stretch(start, work)` gives the duration of an instruction that
    needs `work` ps at full speed and starts at `start` (not before the previous one's end)."""

    __slots__ = ("a", "t", "w", "free")

    def __init__(self, start_rate: float, warmup_ps: int):
        self.a = start_rate
        self.t = float(warmup_ps)
        self.w = 0.0  # cold at the start of the run
        self.free = 0  # ps the previous instruction ended

    def stretch(self, start: int, work: int) -> int:
        a, t = self.a, self.t
        w = self.w
        if start > self.free:
            w = max(0.0, w - (start - self.free) / t)  # cools while idle
        if w >= 1.0 or a >= 1.0 or work <= 0:
            self.w, self.free = (1.0 if w >= 1.0 or a >= 1.0 else w), start + work
            return work
        ramp = (1.0 - w) * t  # busy ps until full speed
        ramp_work = ramp * (a + (1.0 - a) * w) + (1.0 - a) * ramp * ramp / (2.0 * t)
        if work >= ramp_work:
            dur = ramp + (work - ramp_work)
            w = 1.0
        else:
            # (1 - a) / (2t) x^2 + (a + (1 - a) w) x = work
            c, b = (1.0 - a) / (2.0 * t), a + (1.0 - a) * w
            dur = (math.sqrt(b * b + 4.0 * c * work) - b) / (2.0 * c)
            w = min(1.0, w + dur / t)
        ps = max(work, math.ceil(dur - 1e-6))
        self.w, self.free = w, start + ps
        return ps
