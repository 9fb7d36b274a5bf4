"""Choosing the algorithm by message size, as the Neuron runtime does (R-CC).

Published for 64 ranks on a trn2.48xlarge: Mesh below 1 MB, RDH from 1 MB to 56 MB, KangaRing
above, Ring where the others do not apply; the thresholds are the system config's
`collectives.mesh_max` and `rdh_max`. A group over several islands (nodes, or an UltraServer's
instances) runs hierarchically: the intra-island algorithm chosen so on the full message, the
inter-island one on what each rank exchanges between islands (S / ranks per island for an
all-reduce). `algorithm` (the config's, or a call's) other than "auto" forces one.

Beyond the published thresholds (256 ranks on a Trn2 UltraServer), the same rule applies per
level: the 4 instances are islands (their Z links are half the X/Y links' assumed rate and a
flat ring over 128 primaries would pay 254 hop latencies), so a 1 GiB all-reduce is
hierarchical, KangaRing inside each instance (64 ranks) and RDH over the 4 instances.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.collectives.build import REDUCING, applies
from trnsim.collectives.context import Context


@dataclass(frozen=True)
class Settings:
    """The system config's `collectives:` section (times in s, sizes in bytes)."""

    start_cost: float = 0.0
    rings: int = 1
    mesh_max: int = 1_000_000
    rdh_max: int = 56_000_000
    algorithm: str = "auto"
    slices: int = 1


def select(
    op: str, ranks: tuple[int, ...], nbytes: int, ctx: Context, s: Settings, forced=None
) -> str:
    """The algorithm the runtime would run `op` of `nbytes` on `ranks` with."""
    if op not in REDUCING:
        return "direct"
    alg = forced or s.algorithm
    islands = ctx.islands(ranks)
    split = islands is not None and len({len(i) for i in islands}) == 1
    if alg == "hierarchical" or (alg == "auto" and split):
        if not split:
            return "hierarchical"  # build() says why it cannot run
        y = len(islands[0])
        inter_bytes = nbytes // y if op == "all_reduce" else nbytes
        intra = _by_size(op, tuple(islands[0]), nbytes, ctx, s)
        inter = _by_size(op, tuple(i[0] for i in islands), inter_bytes, ctx, s)
        return f"hierarchical:{intra}+{inter}"
    if alg != "auto":
        return alg
    return _by_size(op, ranks, nbytes, ctx, s)


def _by_size(op: str, ranks: tuple[int, ...], nbytes: int, ctx: Context, s: Settings) -> str:
    if nbytes < s.mesh_max:
        return "mesh"
    if nbytes < s.rdh_max and not applies("rdh", op, ranks, ctx):
        return "rdh"
    if not applies("kangaring", op, ranks, ctx):
        return "kangaring"
    return "ring"
