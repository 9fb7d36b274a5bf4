"""The host schedule of a trace: `streams:` (what each stream does, in order), `timing:` (event
pairs to report) and `outputs:` (tensors to hand back).

Without `streams:` the trace loader makes one default stream that launches every kernel in
order; stream and event names may be any string. A stream may name the rank of a system it runs
on (`rank:`, instead of `core:`) and issue collectives (`collective:`, `trace.collective`).
Errors are `TraceError`s.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from trnsim.inputs.validate import (
    Loc,
    check_keys,
    hint,
    one_of,
    show,
    unknown,
    want_int,
    want_list,
    want_map,
    want_name,
    want_str,
)
from trnsim.isa import Ap
from trnsim.trace.collective import parse_collective
from trnsim.trace.instructions import parse_ap
from trnsim.trace.program import Step, StreamSpec

__all__ = ["parse_streams", "parse_timing", "parse_outputs"]

STEP_KINDS = ("record", "copy", "launch", "wait", "synchronize", "collective")


def parse_streams(
    value: Any, loc: Loc, kernels: Collection[str], tensors: Mapping[str, Any]
) -> list[StreamSpec]:
    """The `streams:` section at `loc`: each stream's steps launch one of `kernels`, copy
    between `tensors` (name -> TensorSpec), record or wait for events (every event waited for
    must be recorded by some stream), synchronize, or issue a collective."""
    items = want_list(value, loc, "a list of streams like - {name: s, core: 0, do: [...]}")
    streams, waits = [], []
    names = [e.get("name") for e in items if isinstance(e, dict)]
    for i, entry in enumerate(items):
        sloc = loc.item(items, i)
        entry = want_map(entry, sloc, "{name: ..., core: 0, do: [...]}")
        check_keys(entry, sloc, ("name", "core", "rank", "do"))
        for key in ("name", "do"):
            if entry.get(key) is None:
                sloc.fail(f"missing key {key!r}", "name:, do: and optionally core: or rank:")
        name = want_name(entry["name"], sloc.key(entry, "name"), "stream")
        if any(s.name == name for s in streams):
            sloc.key(entry, "name").fail(f"duplicate stream name {name!r}", "unique names")
        core = 0
        if entry.get("core") is not None:
            core = want_int(
                entry["core"], sloc.key(entry, "core"), "a logical core index >= 0", minimum=0
            )
        rank = None
        if entry.get("rank") is not None:
            rloc = sloc.key(entry, "rank")
            rank = want_int(entry["rank"], rloc, "a rank of the system (an integer >= 0)", 0)
            if entry.get("core") is not None:
                rloc.fail(
                    "both core: and rank:",
                    "rank: (the rank's chip and logical core) or core: (a logical core of "
                    "chip 0), not both",
                )
        dloc = sloc.key(entry, "do")
        steps = want_list(entry["do"], dloc, "a list of steps")
        spec = StreamSpec(name, core, line=sloc.line, rank=rank)
        spec.lines = {k: sloc.key(entry, k).line for k in ("core", "rank") if k in entry}
        for j, step in enumerate(steps):
            spec.steps.append(
                _step(step, dloc.item(steps, j), kernels, tensors, waits, names, name)
            )
        streams.append(spec)
    recorded = {s.arg for st in streams for s in st.steps if s.kind == "record"}
    for event, wloc in waits:
        if event not in recorded:
            wloc.fail(
                f"event {event!r} is never recorded{hint(event, recorded)}",
                "an event some stream records (record: name)",
            )
    return streams


def _step(
    step: Any,
    loc: Loc,
    kernels: Collection[str],
    tensors: Mapping[str, Any],
    waits: list,
    streams: Collection[str] = (),
    own: str = "",
) -> Step:
    if step == "synchronize":
        return Step("synchronize", None, loc.line)
    expected = (
        "record: ev, wait: ev, launch: kernel, copy: {src, dst}, collective: {op, ...}, or "
        "synchronize"
    )
    other, named = None, isinstance(step, dict) and len(step) == 2 and "stream" in step
    if named:
        other = _other_stream(step, loc, streams, own)
        step = {k: v for k, v in step.items() if k != "stream"}
    if not isinstance(step, dict) or len(step) != 1:
        loc.fail(f"got {show(step)}{hint(step, STEP_KINDS)}", expected)
    ((kind, arg),) = step.items()
    if kind == "synchronize" and named and arg is None:
        return Step("synchronize", None, loc.line, other)
    kloc = loc.key(step, kind)
    if kind not in STEP_KINDS or kind == "synchronize":
        what = (
            "synchronize takes no argument"
            if kind == "synchronize"
            else unknown("step", kind, STEP_KINDS)
        )
        kloc.fail(what, expected)
    if kind in ("record", "wait"):
        arg = want_name(arg, kloc, "event")
        if kind == "wait":
            waits.append((arg, kloc))
    elif kind == "launch":
        if not isinstance(arg, str) or arg not in kernels:
            kloc.fail(unknown("kernel", arg, kernels), one_of(kernels))
    elif kind == "collective":
        arg = parse_collective(arg, kloc, tensors)
    else:
        copy = want_map(arg, kloc, "{src: tensor, dst: tensor}")
        check_keys(copy, kloc, ("src", "dst"))
        arg = tuple(_tensor_ap(copy, key, kloc, tensors) for key in ("src", "dst"))
    return Step(kind, arg, kloc.line, other)


def _other_stream(step: dict, loc: Loc, streams: Collection[str], own: str) -> str | None:
    """A step's `stream:` (docs/trace_extensions.md): the stream this host thread issues it on;
    None for the thread's own."""
    sloc = loc.key(step, "stream")
    name = step["stream"]
    if not isinstance(name, str) or name not in streams:
        sloc.fail(unknown("stream", name, streams), one_of(streams))
    return None if name == own else name


def _tensor_ap(mapping: dict, key: str, loc: Loc, tensors: Collection[str]) -> Ap:
    if mapping.get(key) is None:
        loc.fail(f"missing key {key!r}", "{src: tensor, dst: tensor}")
    kloc = loc.key(mapping, key)
    ap = parse_ap(want_str(mapping[key], kloc, "a tensor name, optionally sliced"), kloc)
    if ap.name not in tensors:
        kloc.fail(unknown("tensor", ap.name, tensors), one_of(tensors))
    return ap


def parse_timing(value: Any, loc: Loc, recorded: set) -> list[tuple[str, str]]:
    """The `timing:` section at `loc`: (from, to) pairs of events, each one of `recorded`."""
    items = want_list(value, loc, "a list like - {from: ev1, to: ev2}")
    out = []
    for i, entry in enumerate(items):
        iloc = loc.item(items, i)
        entry = want_map(entry, iloc, "{from: ev1, to: ev2}")
        check_keys(entry, iloc, ("from", "to"))
        pair = []
        for key in ("from", "to"):
            if entry.get(key) is None:
                iloc.fail(f"missing key {key!r}", "{from: ev1, to: ev2}")
            kloc = iloc.key(entry, key)
            event = want_name(entry[key], kloc, "event")
            if event not in recorded:
                kloc.fail(
                    f"event {event!r} is never recorded{hint(event, recorded)}",
                    "an event some stream records (record: name)",
                )
            pair.append(event)
        out.append((pair[0], pair[1]))
    return out


def parse_outputs(value: Any, loc: Loc, tensors: Collection[str]) -> list[str]:
    """The `outputs:` section at `loc`: names of `tensors`, each listed once."""
    items = want_list(value, loc, "a list of tensor names like [y]")
    out = []
    for i, name in enumerate(items):
        iloc = loc.item(items, i)
        if not isinstance(name, str) or name not in tensors:
            iloc.fail(unknown("tensor", name, tensors), one_of(tensors))
        if name in out:
            iloc.fail(f"{name!r} is listed twice", "each output once")
        out.append(name)
    return out
