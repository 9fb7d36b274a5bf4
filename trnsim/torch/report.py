"""`torch.neuron.report()`: what ran on the simulated chip so far, as `trnsim run` summarises a
trace: simulated time (device and host), each aten op's launches and device time and whether
the kernel library modelled it or a roofline estimated it, copies, memory.

In a torch.distributed job (docs/distributed.md, "The report"), also each collective the rank
timed (op, bytes, algorithm, time, busbw: the World's figures) and, per training step, its
compute time and its communication exposed and overlapped: a `StepLog` starts with the job's
first timed collective and keeps the rank's launch windows and the end of each
`optimizer.step()` on the device (a step is the work between two optimizer steps).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from trnsim.report.perfetto import write_chrome_trace
from trnsim.report.system_summary import _overlap, _union
from trnsim.torch import state
from trnsim.torch.listeners import Listener
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
    collectives: list = field(default_factory=list)  # each timed collective (`_row`)
    steps: list = field(default_factory=list)  # per optimizer step (`StepLog.per_step`)

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
        lines += _steps_text(self.steps) + _collectives_text(self.collectives)
        return "\n".join(lines)


def _us(ps) -> str:
    return fmt_time_ns(ps / 1e3)


def _steps_text(steps: list) -> list[str]:
    if not steps:
        return []
    out = ["", "steps (between optimizer steps; communication: the rank's collectives in flight)",
           f"{'step':>5} {'time':>11} {'compute':>11} {'comm':>11} {'exposed':>11} "
           f"{'overlapped':>11} {'idle':>11} {'collectives':>11}"]  # fmt: skip
    for s in steps:
        out.append(
            f"{s['step']:>5} {_us(s['time_ps']):>11} {_us(s['compute_ps']):>11} "
            f"{_us(s['communication_ps']):>11} {_us(s['exposed_ps']):>11} "
            f"{_us(s['overlapped_ps']):>11} {_us(s['idle_ps']):>11} {len(s['collectives']):>11}"
        )
    return out


def _collectives_text(rows: list) -> list[str]:
    if not rows:
        return []
    out = ["", f"collectives: {len(rows)} (time: from this rank's arrival to its end; busbw: "
               "the system model's, nccom-test's columns)",
           f"{'call':<28} {'op':<14} {'ranks':>5} {'bytes':>10} {'algorithm':<12} {'time':>11} "
           f"{'busbw':>12}"]  # fmt: skip
    shown = rows if len(rows) <= TOP else rows[-TOP:]
    if len(rows) > TOP:
        out.append(f"... the last {TOP} of {len(rows)}")
    for r in shown:
        out.append(
            f"{r['call'][:28]:<28} {r['op']:<14} {len(r['group']):>5} "
            f"{fmt_bytes(r['bytes']):>10} {r['algorithm']:<12} {_us(r['time_ps']):>11} "
            f"{r['busbw'] / 1e9:>7.2f} GB/s"
        )
    return out


def _row(info: dict) -> dict:
    """A report row of a timed collective (the backend's `info`)."""
    return {
        "call": f"{info.get('call', '')} ({info['group']})",
        "op": info["world_op"],
        "group": list(info["ranks"]),
        "bytes": info["nbytes"],
        "dtype": info["dtype"],
        "algorithm": info["algorithm"],
        "start_ps": info["arrival_ps"],
        "end_ps": info["end_ps"],
        "time_ps": info["end_ps"] - info["arrival_ps"],
        "busbw": info["busbw"],
        "seq": info["seq"],
    }


class StepLog(Listener):
    """The rank's launch windows (each launch of its logical core: kernels and copies, the
    device's work) and the end of each `optimizer.step()` (an event the current stream records
    when the step's launches are done; no host call), from `start_ps` on (`timing.OpTimer`
    starts it at the job's first timed collective)."""

    def __init__(self, chip, start_ps: int):
        self.chip, self.start_ps = chip, start_ps
        self.windows: list[tuple[int, int, str, int]] = []  # (start, end, kernel, logical core)
        self.ends: list = []  # runtime events: each optimizer step's end
        chip.listeners.add(self)
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._hook = register_optimizer_step_post_hook(self._stepped)

    def launched(self, stream, kernel, start_ps: int, end_ps: int) -> None:
        self.windows.append((start_ps, end_ps, getattr(kernel, "name", ""), stream.core))

    def _stepped(self, opt, args, kwargs) -> None:
        if state._chip is not self.chip or not _on_neuron(opt):
            return
        from trnsim.runtime.stream import RECORD

        stream = timer().stream()
        ev = stream.device.event(name="")
        stream.push(RECORD, stream.ctx.host.now, (ev, ev._new_record()))
        self.ends.append(ev)

    def per_step(self, rows: list[dict]) -> list[dict]:
        """Per step (the work from the previous step's end, or the log's start, to this one's):
        its time, the rank's compute (the union of its launch windows), communication (the
        union of its collectives' windows, each from its arrival to its end), the part of it
        overlapped by compute and the rest exposed, idle (neither), and the collectives that
        arrived in it. Times in ps; the device has run every step's work (`report`)."""
        out = []
        start = self.start_ps
        compute = _union((a, b) for a, b, _, _ in self.windows)
        comm = _union((r["start_ps"], r["end_ps"]) for r in rows)
        for ev in self.ends:
            end = ev.time_ps
            if end is None or end <= start:
                continue
            c = _clip(compute, start, end)
            m = _clip(comm, start, end)
            both = _overlap(c, m)
            busy = sum(b - a for a, b in c) + sum(b - a for a, b in m) - both
            out.append({
                "step": len(out) + 1, "start_ps": start, "end_ps": end, "time_ps": end - start,
                "compute_ps": sum(b - a for a, b in c),
                "communication_ps": sum(b - a for a, b in m),
                "overlapped_ps": both, "exposed_ps": sum(b - a for a, b in m) - both,
                "idle_ps": end - start - busy,
                "collectives": [r for r in rows if start <= r["start_ps"] < end],
            })  # fmt: skip
            start = end
        return out


def _clip(intervals: list, lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi]


def _on_neuron(opt) -> bool:
    for g in opt.param_groups:
        for p in g["params"]:
            return p.device.type == "neuron"
    return False


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
    rep.collectives = [_row(i) for i in t.collectives]
    if t.steps is not None:
        rep.steps = t.steps.per_step(rep.collectives)
    if perfetto is not None and t.collectives:
        _system_trace(chip, t, perfetto)
    elif perfetto is not None:
        write_chrome_trace(dev.recorder, perfetto, chip.cfg.name)
    warning = rep.estimate_warning()
    if warning:
        warnings.warn(f"torch.neuron.report: {warning}", stacklevel=2)
    return rep


def _system_trace(chip, t, path) -> None:
    """A rank's Perfetto trace in the form of `trnsim run --system`'s (`perfetto_system`): a
    process for the rank's chip, rows of the rank's physical cores (as the system places the
    rank): its launches ("kernels", from the step log), its CC streams' collectives, the
    optimizer steps ("steps"); and the host's calls."""
    import json

    from trnsim.report.files import replacing
    from trnsim.report.lanes import assign
    from trnsim.report.perfetto_system import _tid, system_trace
    from trnsim.report.recorder import Recorder

    dev = chip.devices[0]
    system = chip.system or state.system_config(_default_system(chip))
    rank = _rank()
    index, logical = system.rank_place(rank) if rank is not None else (0, chip.index)
    phys = {c: [p.index for p in dev.chip.physical(c)] for c in range(len(chip.devices))}
    first = min(phys[chip.index])

    def place(core: int) -> int:  # a physical core of this process -> the rank's on its chip
        return logical * chip.lnc + core - first

    rec = Recorder()
    rec.host_calls = list(dev.recorder.host_calls)
    rec.collectives = [c._replace(core=place(c.core), stream=c.stream.removeprefix("cc "))
                       for c in dev.recorder.collectives]  # fmt: skip
    trace = system_trace({index: rec}, chip.cfg.name)
    events = trace["traceEvents"]
    log = t.steps
    rows: dict[tuple[int, int], list] = {}
    if log is not None:
        for a, b, name, core in log.windows:
            rows.setdefault((place(phys[core][0]), KERNELS_ROW), []).append((a, b, name, {}))
        prev = log.start_ps
        for i, ev in enumerate(log.ends):
            if ev.time_ps is not None and ev.time_ps > prev:
                core = place(phys[chip.index][0])
                rows.setdefault((core, STEPS_ROW), []).append(
                    (prev, ev.time_ps, f"step {i + 1}", {})
                )
                prev = ev.time_ps
    for (core, row), spans in sorted(rows.items()):
        lanes = assign([(a, b) for a, b, _, _ in spans])
        name = "kernels" if row == KERNELS_ROW else "steps"
        for lane in range(max(lanes) + 1):
            tid = _tid(core, row, lane)
            events.append({"ph": "M", "name": "thread_name", "pid": index, "tid": tid,
                           "args": {"name": f"core{core} {name}" + (f" #{lane + 1}" if lane
                                                                     else "")}})  # fmt: skip
        events += [{"ph": "X", "name": n, "cat": name, "pid": index, "tid": _tid(core, row, ln),
                    "ts": a / 1e6, "dur": (b - a) / 1e6, "args": args}
                   for (a, b, n, args), ln in zip(spans, lanes)]  # fmt: skip
    trace["otherData"] = {"system": system.name, "chip": chip.cfg.name, "rank": rank}
    with replacing(path) as fh:
        fh.write(json.dumps(trace, separators=(",", ":")))


KERNELS_ROW, STEPS_ROW = 1_900, 1_901  # after a core's DMA engines, before its CC streams


def _rank():
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else None


def _default_system(chip) -> str:
    from trnsim.torch.distributed import DEFAULT_SYSTEMS

    return DEFAULT_SYSTEMS[(chip.cfg.name, chip.lnc)]
