"""The static deadlock check of one core's instruction list: every semaphore waited on is
signalled, and its increments add up to at least the largest value waited for.

The trace loader runs it on each core's expanded program (repeat blocks unrolled, see
`trnsim.trace.repeat`), the Python API on the lists it is given. It only counts: a wait that could
be met but is not, because of the order of the work, is left to the simulator's deadlock report.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from trnsim.inputs.validate import Loc
from trnsim.isa import Instr

__all__ = ["check_semaphores", "check_semaphores_at"]


def check_semaphores(
    instructions: list[Instr],
    where: str | Callable[[int, str], Loc] = "instructions",
    source: str = "<api>",
) -> None:
    """Fail when a semaphore one core's `instructions` wait on is never signalled, or when its
    signal increments add up to less than the largest value waited for (a certain deadlock).

    `where` is the key path of the list (errors point at `<where>[i].wait.<sem>` on the
    instruction's line), or a function (index, semaphore) -> Loc."""

    def loc_of(ins: Instr, sem: str) -> tuple[Loc, Any]:
        if callable(where):
            return where(ins.index, sem), None
        return Loc(source, ins.line, f"{where}[{ins.index}].wait.{sem}"), None

    check_semaphores_at(instructions, loc_of)


def check_semaphores_at(
    instructions: list[Instr], loc_of: Callable[[Instr, str], tuple[Loc, Any]]
) -> None:
    """`check_semaphores`; `loc_of(ins, sem)` gives the Loc of the wait and the value written
    in the trace (which differs from `ins.wait` in repeated instructions; None if unknown)."""
    total: dict[str, int] = defaultdict(int)
    for ins in instructions:
        for sem, n in ins.signal:
            total[sem] += n
    for ins in instructions:
        for sem, value in ins.wait:
            if total.get(sem, 0) >= value:
                continue
            loc, written = loc_of(ins, sem)
            if sem not in total:
                loc.fail(
                    f"semaphore {sem!r} is waited on but never signalled",
                    f"an instruction of this core with signal: {{{sem}: 1}}",
                )
            shown = str(value)
            if written is not None and written != value:
                shown += f" ({written} as written plus the increments of earlier repeat iterations)"
            loc.fail(
                f"semaphore {sem!r} is waited on for {shown} but its signals add up to "
                f"only {total[sem]}",
                f"signal increments of {sem!r} summing to >= {value}",
            )
