"""The summary of a run on a system of chips: each chip's summary, every collective, and how much
of each rank's communication its compute hid.

Per collective (`collectives`, in the order they completed): its op, group, size, dtype, the
algorithm that ran, its time (from the first rank posting it to the last rank's completion),
algorithm and bus bandwidth (nccom-test's columns: bytes / time, and that times the op's bus
factor), and its links: how many carried its data, the bytes they carried, and its link
utilisation, the busiest link's bytes over what the link could move in the collective's time
(and the mean over the links it used).

Per rank (`communication`): `collective_ns`, the time during which the rank had a collective in
progress (the union of its collectives' windows, each from when the rank posted it until the
collective completed); `overlapped_ns`, the part of it during which the rank's logical core ran
a kernel (the union of its launches' windows: compute on its physical cores); `exposed_ns`, the
rest: communication time no compute on the rank's core hid. The system's figures add up the
ranks'; `exposed_fraction` is exposed over collective time.
"""

from __future__ import annotations

from trnsim.report.recorder import Recorder
from trnsim.report.summary import _totals

__all__ = ["summarize_system", "exposure", "collective_rows"]


def collective_rows(records: list[dict], link_bandwidth: dict[str, float]) -> list[dict]:
    """The `collectives` rows from the runtime's records (each a dict: op, label, seq, group,
    nbytes, dtype, algorithm, start_ps, end_ps, algbw, busbw, link_bytes by link name) and
    each link's bandwidth (B/s)."""
    rows = []
    for r in records:
        t_ps = r["end_ps"] - r["start_ps"]
        links = r["link_bytes"]
        utils = {
            n: b / (link_bandwidth[n] * t_ps * 1e-12) if t_ps else 0.0 for n, b in links.items()
        }
        busiest = max(utils, key=lambda n: (utils[n], n), default=None)
        rows.append(
            {
                "label": r["label"],
                "op": r["op"],
                "seq": r["seq"],
                "ranks": len(r["group"]),
                "group": list(r["group"]),
                "bytes": r["nbytes"],
                "dtype": r["dtype"],
                "algorithm": r["algorithm"],
                "start_ns": r["start_ps"] / 1000,
                "time_ns": t_ps / 1000,
                "algbw_bytes_per_s": r["algbw"],
                "busbw_bytes_per_s": r["busbw"],
                "links": len(links),
                "link_bytes": sum(links.values()),
                "link_utilization": utils[busiest] if busiest else 0.0,
                "busiest_link": busiest,
                "mean_link_utilization": sum(utils.values()) / len(utils) if utils else 0.0,
                **({"check": r["check"]} if r.get("check") is not None else {}),
            }
        )
    return rows


def _union(intervals) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        elif b > a:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _overlap(xs: list[tuple[int, int]], ys: list[tuple[int, int]]) -> int:
    """Total length of the intersection of two sorted lists of disjoint intervals."""
    i = j = total = 0
    while i < len(xs) and j < len(ys):
        lo, hi = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        total += max(0, hi - lo)
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return total


def exposure(rec: Recorder, rank: int, cores: tuple[int, ...]) -> dict:
    """{collective_ns, overlapped_ns, exposed_ns} of `rank` (whose logical core is physical
    cores `cores` of `rec`'s chip), as the module docstring defines them."""
    comm = _union((c.start_ps, c.end_ps) for c in rec.collectives if c.rank == rank)
    mine = set(cores)
    compute = [(w.start_ps, w.end_ps) for w in rec.launches if mine.intersection(w.cores)]
    compute += [(e.start_ps, e.end_ps) for e in rec.estimates if e.core in mine]
    total = sum(b - a for a, b in comm)
    hidden = _overlap(comm, _union(compute))
    return {
        "collective_ns": total / 1000,
        "overlapped_ns": hidden / 1000,
        "exposed_ns": (total - hidden) / 1000,
    }


def summarize_system(
    chips: dict[int, dict],
    recorders: dict[int, Recorder],
    ranks: dict[int, tuple[int, tuple[int, ...]]],
    collectives: list[dict],
    link_bandwidth: dict[str, float],
    total_ps: int,
    *,
    trace: str,
    system: str,
    chip: str,
    mode: str,
    provenance: dict,
    timing=(),
) -> dict:
    """The system summary. `chips`: chip index -> its summary (`summarize` of its recorder,
    `recorders`); `ranks`: rank -> (chip, its physical cores) for the ranks that ran streams;
    `collectives`: the runtime's records (`collective_rows`)."""
    first, last = None, None
    for rec in recorders.values():
        a, b, *_ = _totals(rec)
        spans = [(c.start_ps, c.end_ps) for c in rec.collectives]
        if b > a or rec.recorded:
            spans.append((a, b))
        for x, y in spans:
            first = x if first is None else min(first, x)
            last = y if last is None else max(last, y)
    per_rank = {
        str(r): exposure(recorders[chip_index], r, cores)
        for r, (chip_index, cores) in sorted(ranks.items())
    }
    coll = sum(v["collective_ns"] for v in per_rank.values())
    hidden = sum(v["overlapped_ns"] for v in per_rank.values())
    events: dict[str, int] = {}
    for rec in recorders.values():
        for name, ps in rec.events.items():
            events[name] = max(ps, events.get(name, ps))
    rows = collective_rows(collectives, link_bandwidth)
    links: dict[str, float] = {}
    for r in collectives:
        for n, b in r["link_bytes"].items():
            links[n] = links.get(n, 0.0) + b
    return {
        "trace": trace,
        "system": system,
        "chip": chip,
        "mode": mode,
        **provenance,
        "ranks": sorted(ranks),
        "total_time_ns": total_ps / 1000,
        "device_time_ns": ((last or 0) - (first or 0)) / 1000,
        "chips": {str(c): s for c, s in sorted(chips.items())},
        "collectives": rows,
        "communication": {
            "collective_ns": coll,
            "overlapped_ns": hidden,
            "exposed_ns": coll - hidden,
            "exposed_fraction": (coll - hidden) / coll if coll else 0.0,
            "ranks": per_rank,
        },
        "links": dict(sorted(links.items())),
        "timings": {
            f"{a}->{b}": {"ns": (events[b] - events[a]) / 1000}
            for a, b in timing
            if a in events and b in events
        },
    }
