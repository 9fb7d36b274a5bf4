"""Kernel extensions a recording writes (docs/trace_extensions.md, "Recorded runs"):
`estimate:` (an op known only by its roofline estimate) and `cores:` (how many physical cores
share a kernel's ops). Errors are `TraceError`s naming the line."""

from __future__ import annotations

from typing import Any

from trnsim.inputs.validate import (
    Loc,
    check_keys,
    one_of,
    unknown,
    want_choice,
    want_int,
    want_map,
    want_str,
)
from trnsim.trace.buffers import Files, parse_init
from trnsim.trace.program import EstimateSpec, KernelSpec, TensorSpec

__all__ = ["estimate_kernel", "kernel_cores", "parse_writes", "ESTIMATE_KEYS", "PEAK_DTYPES"]

ESTIMATE_KEYS = ("op", "flops", "bytes", "dtype", "time_ps", "writes")
PEAK_DTYPES = ("float32", "bfloat16", "float8")  # whose peak FLOP/s bounds the estimate


def estimate_kernel(
    name: str,
    entry: dict,
    loc: Loc,
    at: dict,
    given: list,
    tensors: dict[str, TensorSpec],
    files: Files,
) -> KernelSpec:
    """`name: {estimate: {op, flops, bytes, dtype?, time_ps?, writes?}}`."""
    for key in (*given, "cores", "writes"):
        if key != "estimate" and entry.get(key) is not None:
            at[key].fail(f"a kernel with estimate: cannot also have {key}:", "estimate: alone")
    eloc = at["estimate"]
    e = want_map(entry["estimate"], eloc, "{op: name, flops: n, bytes: n, dtype: float32}")
    check_keys(e, eloc, ESTIMATE_KEYS)
    for key in ("op", "flops", "bytes"):
        if e.get(key) is None:
            eloc.fail(f"missing key {key!r}", "op:, flops: and bytes: (dtype:, time_ps:, writes:)")
    op = want_str(e["op"], eloc.key(e, "op"), "the op's name")
    flops, nbytes = (
        want_int(e[k], eloc.key(e, k), "an integer >= 0", minimum=0) for k in ("flops", "bytes")
    )
    dtype = "float32"
    if e.get("dtype") is not None:
        dtype = want_choice(e["dtype"], eloc.key(e, "dtype"), PEAK_DTYPES)
    time_ps = None
    if e.get("time_ps") is not None:
        time_ps = want_int(e["time_ps"], eloc.key(e, "time_ps"), "an integer >= 0", minimum=0)
    spec = EstimateSpec(op, flops, nbytes, dtype, time_ps, _writes(e, eloc, tensors, files))
    return KernelSpec(name, line=loc.line, estimate=spec)


def parse_writes(entry: dict, at: dict, tensors: dict[str, TensorSpec], files: Files) -> dict:
    """`writes:` beside `ops:`: values a recorded op left that the library's ops do not
    compute (nll_loss's total weight), written when the kernel ends (functional runs)."""
    if entry.get("writes") is None:
        return {}
    return _writes(entry, at["writes"], tensors, files, loc_is_key=True)


def _writes(
    e: dict, eloc: Loc, tensors: dict[str, TensorSpec], files: Files, loc_is_key: bool = False
) -> dict[str, Any]:
    """`writes: {tensor: {file: x.npy}}`: the values the op left in each tensor."""
    if e.get("writes") is None:
        return {}
    wloc = eloc if loc_is_key else eloc.key(e, "writes")
    writes = want_map(e["writes"], wloc, "a mapping of tensor name -> {file: values.npy}")
    out = {}
    for t in writes:
        tloc = wloc.key(writes, t)
        if t not in tensors or tensors[t].on != "hbm":
            device = [n for n, s in tensors.items() if s.on == "hbm"]
            tloc.fail(unknown("device tensor", t, device), one_of(device))
        out[t] = parse_init(writes, t, wloc, tensors[t], files)
    return out


def kernel_cores(entry: dict, at: dict) -> int | None:
    """`cores: n` beside `ops:`: the ops run on at most n physical cores of the logical core
    (a recording's op too small to split over an LNC 2 core ran on one)."""
    if entry.get("cores") is None:
        return None
    return want_int(entry["cores"], at["cores"], "an integer >= 1", minimum=1)
