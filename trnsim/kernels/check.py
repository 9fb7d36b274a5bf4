"""`--check`: each high-level op's output against its numpy reference.

The reference replays the program on the host, in numpy: from the tensors' initial values, the
streams' steps in order (the kernels' ops, each result rounded to its output's dtype as the
device stores it; tensor copies), then compares, for every tensor an op wrote last, the
simulated final values with the reference's. An op whose output a later step overwrote is
judged through the op that overwrote it (its error would show there). The replay needs one
order of the steps: with one stream it is the stream's; with several, or a low-level kernel
(whose values only the simulator knows) before an op, the check says what it could not do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trnsim.isa import Ap
from trnsim.kernels.reference import errors, mismatched, reference, tolerance
from trnsim.memory.init import initial_values
from trnsim.trace.ops import OPS, OUTPUTS
from trnsim.trace.program import Program

__all__ = ["expected_outputs", "compare"]


def expected_outputs(
    program: Program, initial: dict[str, np.ndarray], dtypes: dict[str, Any]
) -> tuple[dict[str, tuple[str, np.ndarray]], str | None]:
    """({check key: (tensor, expected values, op)}, None) or ({}, why nothing can be checked).
    The key names the op: `<kernel>.ops[<i>] <op>`, and the output tensor after it for an op
    of several outputs."""
    if len(program.streams) != 1:
        return {}, "the check replays one stream in order; this trace has several"
    arrays = {n: a.astype(np.float64) for n, a in initial.items() if a is not None}
    memory = _Memory(program, initial)
    last: dict[str, str] = {}  # tensor -> key of the op that wrote it last
    for step in program.streams[0].steps:
        if step.kind == "copy":
            src, dst = (_whole(a) for a in step.arg)
            memory.read(arrays, [src])
            if src in arrays and dst in arrays:
                arrays[dst] = arrays[src].reshape(arrays[dst].shape).copy()
                memory.write(dst, arrays[dst])
                last.pop(dst, None)
            elif dst is not None or _whole(step.arg[1]) is None:
                break  # a sliced copy: not replayed, so compare what came before it
            continue
        if step.kind != "launch":
            continue
        kernel = program.kernels[step.arg]
        if kernel.estimate is not None:  # a recorded estimate: the values it left, if kept
            for t, init in kernel.estimate.writes.items():
                values = initial_values(init, arrays[t].shape, dtypes[t], None)
                arrays[t] = values.astype(np.float64)
                memory.write(t, arrays[t])
                last.pop(t, None)
            continue
        if kernel.low_level:
            if last:
                break  # its values are the simulator's own: compare what came before it
            continue
        for i, op in enumerate(kernel.ops):
            rec = OPS[op.op]
            args = {k: v for k, v in op.args.items() if k not in OUTPUTS}
            out = op.args["outs"] if "outs" in op.args else op.args["out"]
            memory.read(arrays, rec.reads(op.args))
            value = reference(op.op, args, arrays)
            # several outputs (split's outs, a backward op's out list): a value each
            outs, values = (out, value) if isinstance(out, list) else ([out], [value])
            for o, v in zip(outs, values):
                arrays[o] = _stored(np.broadcast_to(v, arrays[o].shape), dtypes[o])
                memory.write(o, arrays[o])
                key = f"{kernel.name}.ops[{i}] {op.op}"
                last[o] = (f"{key} {o}" if len(outs) > 1 else key, op.op)  # one key each
        for t, init in kernel.writes.items():  # recorded values beyond what the ops compute
            arrays[t] = initial_values(init, arrays[t].shape, dtypes[t], None).astype(np.float64)
            memory.write(t, arrays[t])
            last.pop(t, None)
    memory.read(arrays, list(last))  # what a later write through another view left there
    return {key: (t, arrays[t], op) for t, (key, op) in last.items()}, None


class _Memory:
    """The bytes behind strided views (docs/trace_extensions.md): a write through one view is
    read back through every other view of the same memory, as on the device."""

    def __init__(self, program: Program, initial: dict[str, np.ndarray]):
        self.views = {n: t for n, t in program.tensors.items() if t.strides is not None}
        self.images = {
            t.view: np.ascontiguousarray(initial[t.view]).reshape(-1).view(np.uint8).copy()
            for t in self.views.values()
            if initial.get(t.view) is not None
        }

    def _array(self, name: str) -> np.ndarray:
        t = self.views[name]
        isz = t.dtype.itemsize
        return np.ndarray(t.shape, t.dtype.np, self.images[t.view], t.offset * isz,
                          tuple(s * isz for s in t.strides))  # fmt: skip

    def read(self, arrays: dict, names) -> None:
        for n in names:
            if isinstance(n, str) and n in self.views and self.views[n].view in self.images:
                arrays[n] = self._array(n).astype(np.float64)

    def write(self, name: str, values: np.ndarray) -> None:
        if name in self.views and self.views[name].view in self.images:
            self._array(name)[...] = values.astype(self.views[name].dtype.np)


def compare(expected: np.ndarray, got: np.ndarray, dtype_name: str, op: str = "") -> dict:
    """{ok, max_abs_err, max_rel_err} of simulated `got` against `expected`, within the
    tolerance of `dtype_name`, or of bf16 for an op that rounds to it inside (attention's
    probabilities)."""
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    rtol, atol = tolerance(dtype_name)
    if op in OPS and OPS[op].rounds_bf16:  # the kernel rounds to bf16 on the way
        rtol, atol = (max(a, b) for a, b in zip((rtol, atol), tolerance("bfloat16")))
    max_abs, max_rel = errors(expected, got)
    return {
        "ok": not bool(mismatched(expected, got, rtol, atol).any()),
        "max_abs_err": max_abs,
        "max_rel_err": max_rel,
    }


def _whole(a: Any) -> str | None:
    """The tensor a copy operand names when it is the whole tensor, else None."""
    if isinstance(a, Ap):
        return None if a.index else a.name
    return a if isinstance(a, str) and "[" not in a else None


def _stored(value: np.ndarray, dt) -> np.ndarray:
    """`value` as the device stores it in dtype `dt` (rounded), back in float64."""
    return np.asarray(value).astype(dt.np).astype(np.float64)
