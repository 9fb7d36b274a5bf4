"""A race as reported: the two accesses (file:line, kernel, queue or stream) and the region;
and the conflicts between two access lists that nothing orders (cores of one launch, steps of
different streams)."""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.errors import SimError
from trnsim.trace.races.regions import overlap

__all__ = ["Race", "RaceError", "conflicts"]


class RaceError(SimError):
    """Two accesses to overlapping memory, at least one a write, are not ordered."""


@dataclass(frozen=True)
class Race:
    first: str
    second: str
    region: str

    @property
    def message(self) -> str:
        return (
            f"race: {self.first} and {self.second} both access {self.region}, at least one "
            f"writing, and no semaphore or event orders them"
        )


def conflicts(a: dict, b: dict, wa: str, wb: str) -> list[Race]:
    """Conflicting pairs between two unordered access maps (Access -> label): the first pair
    per buffer."""
    by_buf: dict[str, list] = {}
    for acc, label in b.items():
        by_buf.setdefault(acc.buf, []).append((acc, label))
    writes = {buf for buf, lst in by_buf.items() if any(x.write for x, _ in lst)}
    out, done = [], set()
    for acc, label in a.items():
        if acc.buf in done or (not acc.write and acc.buf not in writes):
            continue
        for oacc, olabel in by_buf.get(acc.buf, ()):
            if (acc.write or oacc.write) and overlap(acc, oacc):
                out.append(
                    Race(
                        f"{label} ({wa})",
                        f"{olabel} ({wb})",
                        f"{acc.text} / {oacc.text} ({acc.buf})",
                    )
                )
                done.add(acc.buf)
                break
    return out
