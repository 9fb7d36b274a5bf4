"""`torch.neuron.report()`: what ran on the simulated chip so far, as `trnsim run` summarises a
trace: simulated time (device and host), each aten op's launches and device time and whether
the kernel library modelled it or a roofline estimated it, copies, memory."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from trnsim.report.perfetto import write_chrome_trace
from trnsim.torch import state
from trnsim.torch.timing import timer
from trnsim.units import fmt_bytes, fmt_time_ns

TOP = 25  # ops shown in the text table (all are in `ops`)
ESTIMATED_WARN = 0.10  # report() warns when estimated ops take more of the device time


@dataclass
class Report:
    """The figures of a run on the `neuron` device (times in ps)."""

    chip: str
    lnc: int
    device_ps: int  # the chip's clock: when its last work finished
    host_ps: int  # the host thread's clock
    ops: dict = field(default_factory=dict)  # aten op -> {count, device_ps, modelled, estimated}
    copies: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    refused: dict = field(default_factory=dict)  # aten op -> why the library did not time it

    @property
    def modelled(self) -> int:
        return sum(o["modelled"] for o in self.ops.values())

    @property
    def estimated(self) -> int:
        return sum(o["estimated"] for o in self.ops.values())

    @property
    def estimated_share(self) -> float:
        """The part of the ops' device time that roofline estimates account for."""
        total = sum(o["device_ps"] for o in self.ops.values())
        return sum(o["estimated_ps"] for o in self.ops.values()) / total if total else 0.0

    def estimate_warning(self) -> str | None:
        """Why the figures are less certain, when estimated ops exceed ESTIMATED_WARN of the
        device time: the share and the largest estimated ops."""
        share = self.estimated_share
        if share <= ESTIMATED_WARN:
            return None
        top = sorted((o["estimated_ps"], n) for n, o in self.ops.items() if o["estimated_ps"])
        names = ", ".join(n for _, n in reversed(top[-3:]))
        return (
            f"{share:.0%} of the ops' device time is roofline estimates, not the kernel "
            f"library's lowerings (most: {names}); the step time is less certain"
        )

    def __str__(self) -> str:
        total = sum(o["device_ps"] for o in self.ops.values()) or 1
        lines = [
            f"neuron device: {self.chip}, lnc={self.lnc}",
            f"simulated time: {fmt_time_ns(self.device_ps / 1e3)} on the device, "
            f"{fmt_time_ns(self.host_ps / 1e3)} on the host",
            f"op launches: {self.modelled + self.estimated} ({self.modelled} modelled by the "
            f"kernel library, {self.estimated} estimated by roofline)",
            f"copies: {self.copies['count']} ({fmt_bytes(self.copies['bytes'])}, "
            f"{fmt_time_ns(self.copies['device_ps'] / 1e3)}; on the device: "
            f"{self.copies['modelled']} modelled, {self.copies['estimated']} estimated)",
            f"memory: {fmt_bytes(self.memory['allocated'])} allocated "
            f"(peak {fmt_bytes(self.memory['peak'])}), {fmt_bytes(self.memory['reserved'])} "
            f"reserved",
            "",
            f"{'op':<36} {'count':>7} {'device time':>12} {'share':>6}  timed by",
        ]
        warning = self.estimate_warning()
        if warning:
            lines[-2:-2] = [f"warning: {warning}"]
        ranked = sorted(self.ops.items(), key=lambda kv: (-kv[1]["device_ps"], kv[0]))
        for name, o in ranked[:TOP]:
            how = (
                "kernel library" if not o["estimated"]
                else "roofline (estimated)" if not o["modelled"]
                else "both"
            )  # fmt: skip
            lines.append(
                f"{name:<36} {o['count']:>7} {fmt_time_ns(o['device_ps'] / 1e3):>12} "
                f"{o['device_ps'] / total:>6.1%}  {how}"
            )
        if len(ranked) > TOP:
            lines.append(f"... and {len(ranked) - TOP} more ops")
        if self.refused:
            lines += ["", "lowered by the kernel library but estimated (the first reason):"]
            lines += [f"  {name}: {why}"[:160] for name, why in sorted(self.refused.items())]
        return "\n".join(lines)


def report(perfetto=None) -> Report:
    """Synchronize, then summarise; `perfetto`: a path for the Chrome trace of the host's calls
    and the device's work (open it in ui.perfetto.dev)."""
    chip = state.get()
    t = timer()
    dev = chip.devices[0]
    dev.synchronize()
    a = chip.allocator
    ops = {
        name: {"count": s.count, "device_ps": s.device_ps, "modelled": s.modelled,
               "estimated": s.estimated, "estimated_ps": s.estimated_ps}
        for name, s in t.stats.items()
    }  # fmt: skip
    rep = Report(
        chip.cfg.name,
        chip.lnc,
        dev.env.now,
        dev.host_time_ps,
        ops,
        {
            "count": t.copies.count,
            "bytes": t.copy_bytes,
            "device_ps": t.copies.device_ps,
            "modelled": t.copies.modelled,
            "estimated": t.copies.estimated,
        },  # fmt: skip
        {"allocated": a.allocated, "peak": a.allocated_peak, "reserved": a.reserved},
        dict(t.refused),
    )
    if perfetto is not None:
        write_chrome_trace(dev.recorder, perfetto, chip.cfg.name)
    warning = rep.estimate_warning()
    if warning:
        warnings.warn(f"torch.neuron.report: {warning}", stacklevel=2)
    return rep
