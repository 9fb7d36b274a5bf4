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


def conflicts(a: dict, b: dict, wa: str, wb: str, ordered=None) -> list[Race]:
    """Conflicting pairs between two unordered access maps (Access -> label): the first pair
    per buffer. With `ordered`, the maps' keys are (Access, mark) and `ordered(mark_a,
    mark_b)` says whether the two accesses are ordered all the same (cores meeting at
    barriers: `races.barriers`)."""
    by_buf: dict[str, list] = {}
    for key, label in b.items():
        acc = key[0] if ordered else key
        by_buf.setdefault(acc.buf, []).append((acc, label, key))
    writes = {buf for buf, lst in by_buf.items() if any(x.write for x, _, _ in lst)}
    out, done = [], set()
    for key, label in a.items():
        acc = key[0] if ordered else key
        if acc.buf in done or (not acc.write and acc.buf not in writes):
            continue
        for oacc, olabel, okey in by_buf.get(acc.buf, ()):
            if ordered and ordered(key[1], okey[1]):
                continue
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
