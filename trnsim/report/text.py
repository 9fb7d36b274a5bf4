"""The run summary as text: the table `trnsim run` prints, and `trnsim compare`'s side-by-side
columns. The numbers come from `report.summary`; this module only lays them out."""

from __future__ import annotations

from trnsim.units import fmt_bytes, fmt_flops, fmt_rate, fmt_time_ns


def format_summary(s: dict) -> str:
    """The summary as a readable table (what `trnsim run` prints)."""
    out = [
        f"trace {s['trace']!r} on {s['chip']} ({s['mode']})",
        f"total time      {fmt_time_ns(s['total_time_ns'])} (host launch costs included)",
        f"device time     {fmt_time_ns(s['device_time_ns'])} (first activity to last; "
        f"utilization and FLOP/s are over this)",
        "",
    ]
    if s.get("lnc", 1) > 1 and s["logical_cores"]:
        cores = [f"core: {lc} runs on {', '.join(ps)}" for lc, ps in s["logical_cores"].items()]
        out.append(f"cores           lnc {s['lnc']}: a stream's " + "; ".join(cores))
        out.append("")
    if s["engines"]:
        out.append(f"{'engine':<16}{'busy':>12}{'util':>8}{'instrs':>9}")
        for name, e in s["engines"].items():
            busy = fmt_time_ns(e["busy_ns"]) if e["instructions"] else "-"
            out.append(f"{name:<16}{busy:>12}{e['utilization']:>8.1%}{e['instructions']:>9}")
        out.append("")
    if s["dma"]:
        out.append(
            f"{'dma queue':<16}{'busy':>12}{'bytes':>12}{'xfers':>7}{'rate':>13}"
            f"{'setup over bytes':>20}"
        )
        for name, d in s["dma"].items():
            over = d["setup_overhead_ns"]
            share = f" ({over / d['busy_ns']:.0%})" if d["busy_ns"] else ""
            out.append(
                f"{name:<16}{fmt_time_ns(d['busy_ns']):>12}{fmt_bytes(d['bytes']):>12}"
                f"{d['transfers']:>7}{fmt_rate(d['bandwidth_bytes_per_s']):>13}"
                f"{fmt_time_ns(over) + share:>20}"
            )
        out.append("")
    h = s["hbm"]
    out.append(
        f"HBM             read {fmt_bytes(h['bytes_read'])}, written "
        f"{fmt_bytes(h['bytes_written'])}, {fmt_rate(h['bandwidth_bytes_per_s'])}"
    )
    peak = "" if s["peak_fraction"] is None else f", {s['peak_fraction']:.1%} of peak"
    out.append(f"compute         {s['flops']:.4g} FLOP, {fmt_flops(s['flops_per_s'])}{peak}")
    e = s.get("estimated")
    if e:
        out.append(
            f"estimated       {e['launches']} op launches, {fmt_time_ns(e['time_ns'])}, "
            f"{e['flops']:.4g} FLOP, {fmt_bytes(e['bytes'])}: roofline estimates, not simulated "
            f"(not in the figures above)"
        )
    m = s["memory"]
    out.append(
        f"memory peaks    SBUF {fmt_bytes(m['sbuf_peak_bytes'])}, PSUM "
        f"{fmt_bytes(m['psum_peak_bytes'])}, HBM {fmt_bytes(m['hbm_peak_bytes'])}"
    )
    out += _timings_and_checks(s)
    if s.get("ops"):
        out += ["", *_format_ops(s["ops"])]
    if s["top_instructions"]:
        out += [
            "",
            f"{'top instructions':<34}{'track':<16}{'count':>7}{'busy':>12}{'mean':>12}",
        ]
        for r in s["top_instructions"]:
            out.append(
                f"{(r['kernel'] + ':' + r['op'])[:33]:<34}{r['track']:<16}"
                f"{r['count']:>7}{fmt_time_ns(r['busy_ns']):>12}{fmt_time_ns(r['mean_ns']):>12}"
            )
        out.append("(busy: time with at least one running, overlapping transfers counted once)")
    out.append(f"model           trnsim {s['trnsim_version']}, config {s['config_hash']}")
    return "\n".join(out)


def _timings_and_checks(s: dict) -> list[str]:
    """The timing and --check lines of a summary, one chip's or a system's."""
    out = [f"timing          {name}: {fmt_time_ns(t['ns'])}" for name, t in s["timings"].items()]
    if s.get("check_note"):
        out.append(f"check           nothing to compare: {s['check_note']}")
    for name, c in s.get("check", {}).items():
        out.append(
            f"check           {name}: max abs err {c['max_abs_err']:.3g}, "
            f"max rel err {c['max_rel_err']:.3g} {'ok' if c['ok'] else 'FAIL'}"
        )
    return out


def _format_ops(rows: list[dict]) -> list[str]:
    """The per-op table: time per launch, roofline, what binds, the fraction reached."""
    out = [f"{'op':<34}{'time':>12}{'roofline':>12}  {'bound':<9}{'reached':>8}  tensors"]
    for r in rows:
        name = f"{r['kernel']}[{r['index']}] {r['op']}"
        tensors = ", ".join(
            f"{n} {'x'.join(map(str, shape))} {r['dtypes'][n]}" for n, shape in r["shapes"].items()
        )
        out.append(
            f"{name[:33]:<34}{fmt_time_ns(r['time_ns']):>12}{fmt_time_ns(r['roofline_ns']):>12}"
            f"  {r['bound']:<9}{r['fraction']:>8.1%}  {tensors}"
            + (f"  plan {r['plan']}" if r.get("plan") else "")
        )
    plans = any(r.get("plan") for r in rows)
    plan = "; plan: the lowering chosen, of an op's several" if plans else ""
    out.append("(time: per launch, first instruction start to last end; roofline: the largest "
               f"of FLOPs / TensorE peak, bytes / DMA, bytes / HBM{plan})")  # fmt: skip
    return out


def format_system_summary(s: dict) -> str:
    """The summary of a run on a system of chips (`report.system_summary`) as a table: the
    times, a line per chip, a row per collective, the communication each rank's compute hid."""
    ranks = s["ranks"]
    out = [
        f"trace {s['trace']!r} on {s['system']} ({s['chip']} chips, {s['mode']}), ranks "
        + _ranks(ranks),
        f"total time      {fmt_time_ns(s['total_time_ns'])} (host launch costs included)",
        f"device time     {fmt_time_ns(s['device_time_ns'])} (first activity to last, any chip)",
        "",
    ]
    for c, chip in s["chips"].items():
        busiest = max(chip["engines"].items(), key=lambda kv: kv[1]["utilization"], default=None)
        engine = f"busiest {busiest[0]} {busiest[1]['utilization']:.1%}" if busiest else "no engine"
        h = chip["hbm"]
        out.append(
            f"{'chip ' + c:<16}device time {fmt_time_ns(chip['device_time_ns'])}, {engine}, HBM "
            f"read {fmt_bytes(h['bytes_read'])}, written {fmt_bytes(h['bytes_written'])}, "
            f"{chip['flops']:.4g} FLOP"
        )
    rows = s["collectives"]
    if rows:
        out += ["", f"{'collective':<34}{'ranks':>6}{'bytes':>11}  {'algorithm':<24}{'time':>11}"
                f"{'algbw':>12}{'busbw':>12}{'links':>6}{'link util':>10}"]  # fmt: skip
        for r in rows:
            util = f"{r['link_utilization']:.1%}" if r["links"] else "-"
            _, colon, rest = r["label"].partition(":")  # the file is the trace run
            name = f"line {rest} #{r['seq']}" if colon else f"{r['label']} #{r['seq']}"
            out.append(
                f"{name[:33]:<34}{r['ranks']:>6}"
                f"{fmt_bytes(r['bytes']):>11}  {r['algorithm'][:23]:<24}"
                f"{fmt_time_ns(r['time_ns']):>11}{fmt_rate(r['algbw_bytes_per_s']):>12}"
                f"{fmt_rate(r['busbw_bytes_per_s']):>12}{r['links']:>6}{util:>10}"
            )
        out.append("(time: first rank posting it to the last completing; link util: its busiest "
                   "link's bytes over the link's rate x time)")  # fmt: skip
    c = s["communication"]
    if c["collective_ns"]:
        out += [
            "",
            f"communication   {fmt_time_ns(c['collective_ns'])} of collectives over the ranks: "
            f"{fmt_time_ns(c['overlapped_ns'])} overlapped by compute on their cores, "
            f"{fmt_time_ns(c['exposed_ns'])} exposed ({c['exposed_fraction']:.1%})",
        ]
        per = list(c["ranks"].items())
        for r, v in per[:16]:
            out.append(
                f"{'rank ' + r:<16}collectives {fmt_time_ns(v['collective_ns'])}, overlapped "
                f"{fmt_time_ns(v['overlapped_ns'])}, exposed {fmt_time_ns(v['exposed_ns'])}"
            )
        if len(per) > 16:
            out.append(f"{'':<16}... {len(per) - 16} more ranks (--json has them all)")
    out.append("")
    out += _timings_and_checks(s)
    out.append(f"model           trnsim {s['trnsim_version']}, config {s['config_hash']}")
    return "\n".join(out)


def _ranks(ranks: list[int]) -> str:
    """`0-3, 8` for [0, 1, 2, 3, 8]."""
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ", ".join(parts)


COMPARED = (
    ("total time", lambda s: s["total_time_ns"], fmt_time_ns),
    ("device time", lambda s: s["device_time_ns"], fmt_time_ns),
    ("FLOP/s", lambda s: s["flops_per_s"], fmt_flops),
    ("peak fraction", lambda s: s["peak_fraction"], lambda v: "-" if v is None else f"{v:.1%}"),
    ("HBM bandwidth", lambda s: s["hbm"]["bandwidth_bytes_per_s"], fmt_rate),
    (
        "busiest engine",
        lambda s: max((e["utilization"] for e in s["engines"].values()), default=0.0),
        lambda v: f"{v:.1%}",
    ),
)


def format_comparison(columns: dict[str, dict]) -> str:
    """Several runs of one trace side by side (label -> summary, or {"error": why} for a
    column that could not run), with each value's ratio to the first column that ran."""
    ran = [s for s in columns.values() if "error" not in s]
    first = ran[0]
    width = max(22, *(len(label) + 2 for label in columns))
    head = f"{'':<16}" + "".join(f"{label:>{width}}" for label in columns)
    out = [f"trace {first['trace']!r}", head]
    for label, get, fmt in COMPARED:
        base = get(first)
        cells = []
        for s in columns.values():
            if "error" in s:
                cells.append(f"{'-':>{width}}")
                continue
            v = get(s)
            ratio = f" ({v / base:.2f}x)" if base and v is not None and s is not first else ""
            cells.append(f"{fmt(v) + ratio:>{width}}")
        out.append(f"{label:<16}" + "".join(cells))
    for label, s in columns.items():
        if "error" in s:
            out.append(f"{label} did not run: {s['error']}")
    return "\n".join(out)
