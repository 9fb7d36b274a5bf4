"""Mesh, single-step Mesh and RDH (R-CC).

Mesh: every rank sends each other rank its unit directly, in one step, routed through the
chips in between (the links over-subscribed where routes meet). Reduce-scatter: rank a sends
rank b a's copy of b's unit, which b adds to its own; all-gather: a sends its unit to every b;
all-reduce = reduce-scatter + all-gather (2 steps).

Single-step Mesh all-reduce: every rank sends its whole buffer to every other, and each adds
all of them (and its own) into an accumulator (buffer 1, the output): one step of (n - 1) S
bytes out of each rank.

RDH, recursive halving and doubling, on 2^p ranks seen as a hypercube (on a torus, the bits of
a chip's index are its coordinates': the 4x4 torus is a 4-D hypercube, partners at distance 1
and 2 along x and y). Reduce-scatter by halving: at each step (highest bit first) a rank sends
its partner the half of the units it is still responsible for that are on the partner's side
and adds the other half received: p steps, S/2, S/4, ... bytes. All-gather by doubling, the
reverse. With several ranks a chip, RDH runs between chips among ranks of the same local index
and a Mesh stage inside the chips (`hierarchical.by_chip`).
"""

from __future__ import annotations

from trnsim.collectives.context import Context
from trnsim.collectives.schedule import Regions, Steps, merge
from trnsim.errors import TrnsimError


def mesh(kind: str, st: Steps, members: list[int], units: list[Regions], ctx: Context) -> int:
    """Mesh reduce-scatter ("rs") or all-gather ("ag") in one step."""
    for a in members:
        for ch, b in enumerate(members):
            if a == b:
                continue
            if kind == "rs":
                for lo, hi in units[members.index(b)]:
                    st.reduce(a, b, lo, hi, channel=ch)
            else:
                for lo, hi in units[members.index(a)]:
                    st.copy(a, b, lo, hi, channel=ch)
    st.next()
    return 0


def mesh1_all_reduce(st: Steps, members: list[int], count: int) -> None:
    """Single-step Mesh all-reduce into buffer 1 (see the module docstring)."""
    for a in members:
        for ch, b in enumerate(members):
            st.add_reduce_into_output(a, b, count, ch)
    st.next()


def rdh_applies(members) -> str:
    n = len(members)
    return "" if n >= 1 and n & (n - 1) == 0 else f"{n} ranks is not a power of 2"


def rdh(kind: str, st: Steps, members: list[int], units: list[Regions], ctx: Context) -> int:
    """RDH reduce-scatter (halving) or all-gather (doubling) of `members` (2^p of them)."""
    why = rdh_applies(members)
    if why:
        raise TrnsimError(f"rdh cannot run here: {why}")
    n = len(members)
    p = n.bit_length() - 1
    bits = list(range(p - 1, -1, -1)) if kind == "rs" else list(range(p))
    mine = [set(range(n)) if kind == "rs" else {i} for i in range(n)]
    for b in bits:
        mask = 1 << b
        new = []
        for i in range(n):
            partner = i ^ mask
            if kind == "rs":
                send = sorted(u for u in mine[i] if (u & mask) != (i & mask))
                for lo, hi in merge([r for u in send for r in units[u]]):
                    st.reduce(members[i], members[partner], lo, hi, channel=b)
                new.append(mine[i] - set(send))
            else:
                for lo, hi in merge([r for u in sorted(mine[i]) for r in units[u]]):
                    st.copy(members[i], members[partner], lo, hi, channel=b)
                new.append(mine[i] | mine[partner])
        mine = new
        st.next()
    return 0
