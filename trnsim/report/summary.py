"""The run summary: a JSON-ready dict (the keys TRACE_FORMAT.md promises) and its text table."""

from __future__ import annotations

from collections import defaultdict

from trnsim.config import ChipConfig, peak_flops_per_core
from trnsim.report.recorder import Recorder
from trnsim.units import fmt_bytes, fmt_flops, fmt_rate, fmt_time_ns

ENGINE_TRACKS = ("tensor", "vector", "scalar", "gpsimd")


def summarize(rec: Recorder, cfg: ChipConfig, dma_stats: dict, total_ps: int, *, trace: str,
              mode: str, timing=(), top: int = 10) -> dict:
    """Summarise a run. `dma_stats` maps (core, queue) -> {busy_ps, bytes, transfers}.

    `total_time_ns` is the whole simulated time, host launch overheads included;
    `device_time_ns` runs from the start of the first span (instruction, DMA transfer or host
    copy) to the end of the last. Engine
    utilization, achieved FLOP/s and `peak_fraction` are measured over the device time, so a
    kernel's efficiency does not depend on the host's launch cost.
    """
    total_ns = total_ps / 1000
    first = min((s[3] for s in rec.spans_raw), default=0)
    device_ps = max((s[4] for s in rec.spans_raw), default=0) - first
    busy: dict[tuple[int, str], list] = defaultdict(lambda: [0, 0])
    flops_by_dtype: dict[str, int] = defaultdict(int)
    by_instr: dict[tuple, list] = defaultdict(lambda: [0, 0])
    cores = set()
    for core, track, op, start, end, _nb, flops, _idx, kernel, dt in rec.spans_raw:
        if track in ENGINE_TRACKS:
            b = busy[(core, track)]
            b[0] += end - start
            b[1] += 1
            cores.add(core)
            if flops:
                flops_by_dtype[dt] += flops
        t = by_instr[(kernel, op, core, track)]
        t[0] += end - start
        t[1] += 1
    engines = {}
    for core in sorted(cores):
        for track in ENGINE_TRACKS:
            b_ps, n = busy.get((core, track), (0, 0))
            engines[f"core{core}.{track}"] = {
                "busy_ns": b_ps / 1000, "utilization": b_ps / device_ps if device_ps else 0.0,
                "instructions": n}
    dma = {}
    for (core, queue), st in sorted(dma_stats.items()):
        dma[f"core{core}.q{queue}"] = {
            "busy_ns": st["busy_ps"] / 1000, "bytes": st["bytes"], "transfers": st["transfers"],
            "bandwidth_bytes_per_s": st["bytes"] / (st["busy_ps"] * 1e-12) if st["busy_ps"]
            else 0.0}
    moved = rec.hbm_bytes_read + rec.hbm_bytes_written
    flops = sum(flops_by_dtype.values())
    seconds = device_ps * 1e-12
    # time the used dtypes would need at peak, over the time the busy cores actually had
    at_peak_s = sum(f / peak_flops_per_core(cfg, dt) for dt, f in flops_by_dtype.items()
                    if _has_peak(cfg, dt))
    compute_cores = len({c for (c, track), b in busy.items() if track == "tensor" and b[1]})
    peak_fraction = at_peak_s / (seconds * compute_cores) if seconds and compute_cores else 0.0
    timings = {}
    for a, b in timing:
        if a in rec.events and b in rec.events:
            timings[f"{a}->{b}"] = {"ns": (rec.events[b] - rec.events[a]) / 1000}
    top_rows = sorted(by_instr.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]
    return {
        "trace": trace, "chip": cfg.name, "mode": mode,
        "total_time_ns": total_ns,
        "device_time_ns": device_ps / 1000,
        "engines": engines,
        "dma": dma,
        "hbm": {"bytes_read": rec.hbm_bytes_read, "bytes_written": rec.hbm_bytes_written,
                "bandwidth_bytes_per_s": moved / seconds if seconds else 0.0},
        "flops": flops, "flops_per_s": flops / seconds if seconds else 0.0,
        "peak_fraction": peak_fraction,
        "flops_by_dtype": dict(sorted(flops_by_dtype.items())),
        "memory": {"sbuf_peak_bytes": rec.sbuf_peak, "psum_peak_bytes": rec.psum_peak,
                   "hbm_peak_bytes": rec.hbm_peak},
        "timings": timings,
        "top_instructions": [
            {"kernel": k, "op": op, "track": f"core{c}.{tr}", "count": v[1],
             "total_ns": v[0] / 1000} for (k, op, c, tr), v in top_rows],
    }


def _has_peak(cfg: ChipConfig, dt: str) -> bool:
    try:
        return peak_flops_per_core(cfg, dt) > 0
    except ValueError:
        return False


def format_summary(s: dict) -> str:
    """The summary as a readable table (what `trnsim run` prints)."""
    out = [f"trace {s['trace']!r} on {s['chip']} ({s['mode']})",
           f"total time      {fmt_time_ns(s['total_time_ns'])} (host launch costs included)",
           f"device time     {fmt_time_ns(s['device_time_ns'])} (first activity to last; "
           f"utilization and FLOP/s are over this)", ""]
    if s["engines"]:
        out.append(f"{'engine':<16}{'busy':>12}{'util':>8}{'instrs':>9}")
        for name, e in s["engines"].items():
            busy = fmt_time_ns(e["busy_ns"]) if e["instructions"] else "-"
            out.append(f"{name:<16}{busy:>12}{e['utilization']:>8.1%}{e['instructions']:>9}")
        out.append("")
    if s["dma"]:
        out.append(f"{'dma queue':<16}{'busy':>12}{'bytes':>12}{'xfers':>7}{'rate':>13}")
        for name, d in s["dma"].items():
            out.append(f"{name:<16}{fmt_time_ns(d['busy_ns']):>12}{fmt_bytes(d['bytes']):>12}"
                       f"{d['transfers']:>7}{fmt_rate(d['bandwidth_bytes_per_s']):>13}")
        out.append("")
    h = s["hbm"]
    out.append(f"HBM             read {fmt_bytes(h['bytes_read'])}, written "
               f"{fmt_bytes(h['bytes_written'])}, {fmt_rate(h['bandwidth_bytes_per_s'])}")
    out.append(f"compute         {s['flops']:.4g} FLOP, {fmt_flops(s['flops_per_s'])}, "
               f"{s['peak_fraction']:.1%} of peak")
    m = s["memory"]
    out.append(f"memory peaks    SBUF {fmt_bytes(m['sbuf_peak_bytes'])}, PSUM "
               f"{fmt_bytes(m['psum_peak_bytes'])}, HBM {fmt_bytes(m['hbm_peak_bytes'])}")
    for name, t in s["timings"].items():
        out.append(f"timing          {name}: {fmt_time_ns(t['ns'])}")
    for name, c in s.get("check", {}).items():
        out.append(f"check           {name}: max abs err {c['max_abs_err']:.3g}, "
                   f"max rel err {c['max_rel_err']:.3g} {'ok' if c['ok'] else 'FAIL'}")
    if s["top_instructions"]:
        out += ["", f"{'top instructions':<34}{'track':<16}{'count':>7}{'total':>12}"]
        for r in s["top_instructions"]:
            out.append(f"{(r['kernel'] + ':' + r['op'])[:33]:<34}{r['track']:<16}"
                       f"{r['count']:>7}{fmt_time_ns(r['total_ns']):>12}")
    return "\n".join(out)


COMPARED = (("total time", lambda s: s["total_time_ns"], fmt_time_ns),
            ("device time", lambda s: s["device_time_ns"], fmt_time_ns),
            ("FLOP/s", lambda s: s["flops_per_s"], fmt_flops),
            ("peak fraction", lambda s: s["peak_fraction"], lambda v: f"{v:.1%}"),
            ("HBM bandwidth", lambda s: s["hbm"]["bandwidth_bytes_per_s"], fmt_rate),
            ("busiest engine", lambda s: max((e["utilization"] for e in s["engines"].values()),
                                            default=0.0), lambda v: f"{v:.1%}"))


def format_comparison(summaries: list[dict]) -> str:
    """Several runs of one trace side by side, with each value's ratio to the first chip's."""
    head = f"{'':<16}" + "".join(f"{s['chip']:>22}" for s in summaries)
    out = [f"trace {summaries[0]['trace']!r}", head]
    for label, get, fmt in COMPARED:
        base = get(summaries[0])
        cells = []
        for s in summaries:
            v = get(s)
            ratio = f" ({v / base:.2f}x)" if base and s is not summaries[0] else ""
            cells.append(f"{fmt(v) + ratio:>22}")
        out.append(f"{label:<16}" + "".join(cells))
    return "\n".join(out)
