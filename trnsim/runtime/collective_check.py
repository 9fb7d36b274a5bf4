"""`--check` of a collective: each rank's output against numpy's result over the group's inputs.

The reference is computed in float64 from the inputs as the ranks stored them (read when each
rank posted the collective): the reduction (sum, max, min, prod) over the ranks in group order
for all_reduce and reduce_scatter (the rank's unit of it), the inputs concatenated in group
order for all_gather, the j-th units of every rank for rank j of an all_to_all (of an all_to_allv:
the `counts[i][j]` elements each rank i sends it, packed in group order), the root's input
for a broadcast, the source's for the target of a send_recv or a permute. Data that is only
moved must come out exactly as it went in (up to the tolerance of its dtype); a reduction is
rounded to the dtype once per hop by the DMA (docs/collectives.md, "Values"), so its tolerance
is that of the dtype times the group's size (a fp32 sum: ~1e-5 of the largest magnitude, a bf16
sum over 4 ranks: 4 x 8 units in the last place).
"""

from __future__ import annotations

import numpy as np

from trnsim.collectives.schedule import chunk_units
from trnsim.kernels.reference import errors, mismatched, tolerance

__all__ = ["check_collective", "expected"]

_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}


def expected(call, inputs: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Rank -> the values numpy says it receives (float64), for the ranks that receive any."""
    group, op = call.group, call.op
    xs = [np.asarray(inputs[r]).astype(np.float64) for r in group]
    n = len(group)
    if op in ("all_reduce", "reduce_scatter"):
        total = _REDUCE[call.reduce_op](np.stack(xs), axis=0)
        if op == "all_reduce":
            return dict.fromkeys(group, total)
        units = chunk_units(total.size, n)
        return {r: total[lo:hi] for r, ((lo, hi),) in zip(group, units)}
    if op == "all_gather":
        return dict.fromkeys(group, np.concatenate(xs))
    if op == "all_to_all":
        units = chunk_units(xs[0].size, n)
        return {r: np.concatenate([x[lo:hi] for x in xs]) for r, ((lo, hi),) in zip(group, units)}
    if op == "all_to_allv":  # rank j: what each rank i sends it, packed in group order
        c = call.counts
        start = [[sum(row[:j]) for j in range(n)] for row in c]
        return {
            r: np.concatenate([xs[i][start[i][j] : start[i][j] + c[i][j]] for i in range(n)])
            for j, r in enumerate(group)
        }
    if op == "broadcast":
        return dict.fromkeys(group, xs[group.index(call.root)])
    if op == "send_recv":
        return {group[1]: xs[0]}
    return {d: xs[group.index(s)] for s, d in call.pairs}  # permute


def check_collective(call, inputs: dict, outputs: dict) -> dict:
    """{ok, max_abs_err, max_rel_err} over every receiving rank's output (`outputs`: rank ->
    what it holds after the collective) against `expected`."""
    want = expected(call, inputs)
    rtol, atol = tolerance(call.dtype.name)
    if call.op in ("all_reduce", "reduce_scatter"):
        rtol, atol = rtol * len(call.group), atol * len(call.group)
    ok, max_abs, max_rel = True, 0.0, 0.0
    for r, ref in want.items():
        got = np.asarray(outputs[r]).astype(np.float64).reshape(-1)
        ref = np.asarray(ref, dtype=np.float64).reshape(-1)
        ok = ok and not mismatched(ref, got, rtol, atol).any()
        a, e = errors(ref, got)
        max_abs, max_rel = max(max_abs, a), max(max_rel, e)
    return {"ok": bool(ok), "max_abs_err": max_abs, "max_rel_err": max_rel}
