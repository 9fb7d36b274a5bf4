"""A trace `Program` on a system of chips: each stream on its rank, collectives on the World.

    from trnsim.config import load_system
    from trnsim.runtime.system_run import run_on_system
    r = run_on_system(load("traces/ddp_allreduce.yaml"), load_system("trn2-48xl"))
    r.summary["collectives"], r.tensor("g", rank=3)

The program is placed on the system (`trace.ranks.place`: each stream's rank, each group's
ranks), every rank that runs a stream gets its own copy of every tensor (in its chip's HBM, on
its logical core's home stack; random inits seeded by the trace's seed and the rank), and each
stream runs as a host thread issuing its steps on its rank's device, as `session.run_program`
does on one chip (`session._host_thread`); a `collective:` step is the rank's part of it
(`Stream.collective`). Timeline reuse is off (docs/runtime.md, "Timeline reuse").
"""

from __future__ import annotations

import numpy as np
import simpy

from trnsim.config import SystemConfig
from trnsim.gcpause import no_gc
from trnsim.report.provenance import provenance
from trnsim.report.summary import summarize
from trnsim.report.system_summary import summarize_system
from trnsim.runtime.event import Event
from trnsim.runtime.multichip import SystemContext
from trnsim.runtime.session import (
    RunResult,
    _host_thread,
    _op_rows,
    allocate_tensors,
    bind_program,
    lowered,
)
from trnsim.trace.program import Program
from trnsim.trace.ranks import place, system_config

__all__ = [
    "system_of",
    "run_on_system",
    "check_fits_system",
    "check_program_system",
    "placed_and_lowered",
]


def system_of(program: Program, name: str | None = None, overrides=()) -> SystemConfig | None:
    """The system a run of `program` uses: `name` (`--system`) or the trace's `system:` (a path
    relative to the trace's folder), with `overrides` (`--set`); None for one chip
    (`trace.ranks.system_config`)."""
    return system_config(program, name, overrides)


def placed_and_lowered(program: Program, system: SystemConfig) -> Program:
    """`program` placed on `system` (`trace.ranks.place`) with its ops lowered for the
    system's chip: what the race and deadlock check reads (and the run lowers again: cached)."""
    return lowered(_placed(program, system), system.chip, system.lnc)


def _placed(program: Program, system: SystemConfig) -> Program:
    """`place(program, system)`, the last one kept: the check and the run of `trnsim run` place
    (and so lower) once."""
    last = _PLACED.get("last")
    if last is not None and last[0] is program and last[1] is system:
        return last[2]
    out = place(program, system)
    _PLACED["last"] = (program, system, out)
    return out


_PLACED: dict[str, tuple] = {}


def _setup(program: Program, system: SystemConfig, mode: str, check: bool = False):
    """(placed program, SystemContext, rank -> its tensors) for the ranks that run streams."""
    placed = _placed(program, system)
    sctx = SystemContext(system, mode, program.seed, program.source, check)
    tensors = {}
    for r in sorted({s.rank for s in placed.streams}):
        dev = sctx.device(r)
        rng = np.random.default_rng((program.seed, r))
        tensors[r] = allocate_tensors(placed, lambda _name, d=dev: d, rng)
    return placed, sctx, tensors


def check_fits_system(program: Program, system: SystemConfig) -> None:
    """Raise the error a run on `system` would give before simulating: the placement (ranks,
    groups), and every rank's tensors against its chip's HBM (shapes only)."""
    _setup(program, system, "timing")


def check_program_system(program: Program, system: SystemConfig) -> int:
    """`session.check_program` on a system: every launch planned on its rank's logical core
    with that rank's tensors; the number of instructions checked."""
    placed, sctx, tensors = _setup(program, system, "timing")
    low = lowered(placed, system.chip, system.lnc)
    count = 0
    for st in low.streams:
        dev = sctx.device(st.rank)
        cores = dev.chip.physical(dev.index)
        for step in st.steps:
            kernel = low.kernels.get(step.arg) if step.kind == "launch" else None
            if kernel is None or kernel.estimate is not None:
                continue
            dev.bind_tensors(kernel, tensors[st.rank], False)
            for core, prog in zip(cores, kernel.per_core):
                core.prepare(kernel.name, prog, tensors[st.rank], dev.ctx.rng, low.source)
                count += len(prog.instructions)
    return count


def run_on_system(
    program: Program,
    system: SystemConfig,
    mode: str | None = None,
    progress=None,
    check: bool = False,
) -> RunResult:
    """Simulate `program` on `system` (see the module docstring) and summarise the run: each
    chip's summary, every collective, each rank's exposed and overlapped communication
    (`report.system_summary`). `check`: compare every collective's outputs with numpy
    (functional mode; the summary's `check`)."""
    mode = mode or program.mode
    with no_gc():
        placed, sctx, tensors = _setup(program, system, mode, check)
        root, env = sctx.root, sctx.env
        root.progress = progress
        cfg = system.chip
        low = lowered(placed, cfg, system.lnc)
        devs = {s.name: sctx.device(s.rank) for s in low.streams}
        events: dict[str, Event] = {}
        recorded: dict[str, simpy.Event] = {}
        for s in low.streams:
            for step in s.steps:
                if step.kind in ("record", "wait") and step.arg not in events:
                    events[step.arg] = devs[s.name].event(enable_timing=True, name=step.arg)
                    recorded[step.arg] = env.event()
        streams = {s.name: devs[s.name].stream(s.name) for s in low.streams}
        per_rank = {r: bind_program(low, sctx.device(r).ctx, t, r) for r, t in tensors.items()}
        bound = {s.name: per_rank[s.rank] for s in low.streams}
        threads = []
        for s in low.streams:
            thread = devs[s.name].ctx.thread(f"stream {s.name}")
            run = _host_thread(root, thread, streams, s, low, bound, events, recorded)
            threads.append(env.process(run))
        root.run_until(env.all_of(threads))
        root.run_all()
        root.host = root.threads[0]
        root.host.now = env.now
        summary = _summary(low, program, sctx, mode, env.now, tensors)
        if check:
            summary["check"], note = _check(summary)
            if note:
                summary["check_note"] = note
    first = low.streams[0].rank if low.streams else min(tensors, default=0)
    dev = sctx.device(first)
    return RunResult(dev, summary, low, tensors.get(first, {}), tensors, sctx)


def _summary(low: Program, written: Program, sctx: SystemContext, mode, now, tensors) -> dict:
    system = sctx.cfg
    cfg = system.chip
    used = sorted({system.rank_place(r)[0] for r in tensors})
    ops = _op_rows(written, low, cfg, system.lnc)
    chips = {}
    recorders = {}
    for c in used:
        rec = sctx.context(c).recorder
        recorders[c] = rec
        chips[c] = summarize(rec, cfg, now, trace=low.name, mode=mode, lnc=system.lnc, ops=ops)
    ranks = {}
    for r in tensors:
        c, logical = system.rank_place(r)
        ranks[r] = (c, tuple(range(logical * system.lnc, (logical + 1) * system.lnc)))
    topo = sctx.system.topology
    records = [
        {
            "label": rec.label,
            "op": rec.result.op,
            "seq": rec.seq,
            "group": rec.result.ranks,
            "nbytes": rec.result.nbytes,
            "dtype": rec.result.dtype,
            "algorithm": rec.result.algorithm,
            "start_ps": rec.result.start_ps,
            "end_ps": rec.result.end_ps,
            "algbw": rec.result.algbw,
            "busbw": rec.result.busbw,
            "link_bytes": rec.link_bytes,
            "check": rec.check,
        }
        for rec in sctx.records
    ]
    out = summarize_system(
        chips,
        recorders,
        ranks,
        records,
        {link.name: link.bandwidth for link in topo.links},
        now,
        trace=low.name,
        system=system.name,
        chip=cfg.name,
        mode=mode,
        provenance=provenance(system),
        timing=low.timing,
    )
    return out


def _check(summary: dict) -> tuple[dict, str | None]:
    """--check on a system: each collective that moved a tensor against numpy
    (`collective_check`), keyed by its label and sequence number; or why nothing was."""
    if summary["mode"] != "functional":
        return {}, "a timing-mode run computes no values (use --mode functional)"
    out = {f"{r['label']} #{r['seq']}": r["check"] for r in summary["collectives"] if "check" in r}
    if not out:
        return {}, "no collective of the trace moves a tensor (tensor:) to compare"
    return out, None
