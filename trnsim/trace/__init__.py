"""Traces: YAML (or JSON) -> `Program`, with line-precise errors.

The parts: `document` (the top level and kernels; `load`, `loads`), `buffers` (tensors and
tiles), `instructions` (one instruction and its operands), `repeat` (a core's instruction list
with `repeat:` blocks), `semaphores` (the static deadlock check), `schedule` (streams, timing,
outputs) and `program` (the `Program` they build, which the runtime runs).
"""

from trnsim.trace.document import load, loads
from trnsim.trace.instructions import parse_ap, parse_instruction
from trnsim.trace.repeat import MAX_INSTRUCTIONS, REPEAT_KEYS
from trnsim.trace.semaphores import check_semaphores

__all__ = [
    "load",
    "loads",
    "parse_instruction",
    "parse_ap",
    "check_semaphores",
    "MAX_INSTRUCTIONS",
    "REPEAT_KEYS",
]
