"""A `Recording` (`trnsim.torch.record`) written out: the trace document (YAML, or JSON for a
path ending in .json), its tensors renamed as the user asked, and the values beside it."""

from __future__ import annotations

import json

import numpy as np
import yaml

from trnsim.report.files import replacing
from trnsim.trace.ops import OPS

TENSOR_ARGS = ("tensor", "tensors", "operand", "operands")
HOST_STREAM = "default"  # the default stream of logical core 0 is the host thread's


def write(rec) -> None:
    """Write `rec`'s trace to `rec.path` and its values to `<stem>_values/`."""
    names = _names(rec)
    doc = {
        "trnsim": 1,
        "name": rec.path.stem,
        "chip": rec.chip.cfg.name,
        "lnc": rec.chip.lnc,
        "mode": "functional" if rec.values else "timing",
    }
    if rec.rank is not None:  # one rank's program of a torch.distributed job
        system = _system(rec.chip)
        if system is not None:
            doc["system"] = system
        doc["rank"] = rec.rank
        doc["world_size"] = rec.world_size
    doc |= {
        "tensors": {names.get(n, n): _entry(e, names) for n, e in rec.tensors.items()},
        "kernels": {k: _kernel(e, names) for k, e in rec.kernels.items()},
        "streams": _streams(rec, names),
    }
    if len(rec.timed) > 1:
        doc["timing"] = [{"from": rec.timed[0], "to": e} for e in rec.timed[1:]]
    if rec.outputs:
        doc["outputs"] = [names.get(n, n) for n in rec.outputs]
    rec.path.parent.mkdir(parents=True, exist_ok=True)
    if rec.files:
        folder = rec.path.parent / f"{rec.path.stem}_values"
        folder.mkdir(exist_ok=True)
        for fname, values in rec.files.items():
            with replacing(folder / fname, "wb") as fh:
                np.save(fh, values)
    with replacing(rec.path, "w") as fh:
        fh.write(json.dumps(doc) if rec.path.suffix == ".json" else _yaml(doc))


def _yaml(doc: dict) -> str:
    """The document in block style, each tensor, kernel op and step on a line of its own."""

    def flow(v) -> str:
        if not isinstance(v, (dict, list)):
            return json.dumps(v)
        return yaml.safe_dump(v, default_flow_style=True, width=1 << 30, sort_keys=False).strip()

    head = {k: v for k, v in doc.items() if not isinstance(v, (dict, list))}
    out = [yaml.safe_dump(head, sort_keys=False).rstrip()]
    out += ["tensors:"] + [f"  {n}: {flow(e)}" for n, e in doc["tensors"].items()]
    out.append("kernels:")
    for name, e in doc["kernels"].items():
        out.append(f"  {name}:")
        for key, v in e.items():
            if key == "ops":
                out += ["    ops:"] + [f"      - {flow(op)}" for op in v]
            else:
                out.append(f"    {key}: {flow(v)}")
    out.append("streams:")
    for s in doc["streams"]:
        out += [f"  - name: {flow(s['name'])}", f"    core: {s['core']}", "    do:"]
        out += [f"      - {flow(step)}" for step in s["do"]] or []
        if not s["do"]:
            out[-1] = "    do: []"
    for key in ("timing", "outputs"):
        if key in doc:
            out.append(f"{key}: {flow(doc[key])}")
    return "\n".join(out) + "\n"


def _names(rec) -> dict[str, str]:
    """Internal tensor name -> the name the user gave it (unique; internal names otherwise);
    a rank's recording with values prefixes every name with `r<R>_` (the files of a job share
    names, and their values differ)."""
    out, used = {}, set(rec.tensors)
    for internal, wanted in rec.rename.items():
        name, i = wanted, 1
        while name in used and name != internal:
            name, i = f"{wanted}_{i}", i + 1
        used.add(name)
        out[internal] = name
    for name, target in rec.alias.items():
        out[name] = out.get(target, target)
    if rec.rank is not None and rec.values:
        prefix = f"r{rec.rank}_"
        out = {n: prefix + out.get(n, n) for n in {*rec.tensors, *out}}
    return out


def _entry(entry: dict, names: dict) -> dict:
    if "view" in entry:
        return {**entry, "view": names.get(entry["view"], entry["view"])}
    return entry


def _system(chip) -> str | None:
    """The name of the system timing the job's collectives (as the shim was configured, or the
    chip's default system)."""
    from trnsim.torch import state
    from trnsim.torch.distributed import DEFAULT_SYSTEMS

    if chip.system is not None:
        sets = state._settings.get("system_set")
        if sets:  # the trace names the system; its overrides are the replay's to give
            import warnings

            given = " ".join(f"--set {s}" for s in sets)
            name = state._settings["system"]
            warnings.warn(f"trnsim.torch.record: the system was configured with overrides; "
                          f"replay with --system {name} {given}", stacklevel=4)  # fmt: skip
        return state._settings.get("system") or chip.system.name
    return DEFAULT_SYSTEMS.get((chip.cfg.name, chip.lnc))


def _kernel(entry: dict, names: dict) -> dict:
    if "estimate" in entry:
        e = dict(entry["estimate"])
        if "writes" in e:
            e["writes"] = {names.get(t, t): f for t, f in e["writes"].items()}
        return {"estimate": e}
    out = dict(entry)
    if "writes" in out:
        out["writes"] = {names.get(t, t): f for t, f in out["writes"].items()}
    out["ops"] = [
        {op: _args(op, args, names)} for item in entry["ops"] for op, args in item.items()
    ]
    return out


def _args(op: str, args: dict, names: dict) -> dict:
    return OPS[op].renamed(args, names)


def _streams(rec, names: dict) -> list[dict]:
    """One host thread (the default stream of core 0) issuing every step in order; the other
    streams declared, each step on them naming it (`stream:`)."""
    do = []
    for stream, step in rec.steps:
        step = dict(step)
        if "copy" in step:
            step["copy"] = {k: names.get(v, v) for k, v in step["copy"].items()}
        if "tensor" in step.get("collective", {}):
            c = step["collective"] = dict(step["collective"])
            c["tensor"] = names.get(c["tensor"], c["tensor"])
        if stream != HOST_STREAM:
            step["stream"] = stream
        do.append("synchronize" if step == {"synchronize": None} else step)
    out = [{"name": HOST_STREAM, "core": 0, "do": do}]
    for name, core in rec.cores.items():
        if name != HOST_STREAM:
            out.append({"name": name, "core": core, "do": []})
    return out
