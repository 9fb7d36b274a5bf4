"""`softmax` and `log_softmax` over rows too long for one partition whose length is not a
multiple of 128 (GPT-2's vocabulary, 50257): the pieces with a remainder column (`ragged`),
its partitions without an element set to the most negative fp32 (a max ignores them, their
exp is 0); then `softmax_pieces`' steps unchanged (each partition's max and sum of exp over
its columns, combined over the row's k partitions on TensorE as online softmax does, one
per-partition pass for the output), and only the rows' elements stored."""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.isa import Activation
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.ragged import RaggedLayout, Small, units
from trnsim.kernels.row_pieces import PieceLayout
from trnsim.kernels.softmax_pieces import LOWEST, _Pieces, staged

__all__ = ["lower_softmax_ragged"]


def lower_softmax_ragged(b: KernelBuilder, cfg: ChipConfig, x: str, out: str,
                         rag: RaggedLayout, log: bool, room: int,
                         rows: tuple[int, int]) -> None:  # fmt: skip
    """out = softmax(x) (or log_softmax) over this core's flattened rows [lo, hi), each laid
    out as `rag`, within `room` bytes of a partition (module doc)."""
    k = _Ragged(b, cfg, x, out, rag, log, room)
    staged(k, units(b.tensors[x].shape, rag, rows))


class _Ragged(_Pieces):
    """`_Pieces` over rows in the remainder-column layout: its own tiles' widths, loads and
    stores."""

    def __init__(self, b, cfg, x, out, rag: RaggedLayout, log: bool, room: int):
        self.rag = rag
        lay = PieceLayout(rag.d, rag.f, rag.k, rag.g, rag.t)
        super().__init__(b, cfg, x, out, lay, log, room)
        self.small = Small(cfg)

    def on(self, b):
        """`_Pieces.on`, its remainders' queues from the first again."""
        k = super().on(b)
        k.small = Small(self.cfg)
        return k

    def xtile(self, n: int, s: int, p: int):
        shape = (self.P, self.rag.width(s))
        return ap(self.tile("x", n, s, shape, self.xdt), slice(0, p))

    def out_tile(self, n: int, s: int, xa, p: int):
        if self.odt == self.xdt:
            return xa
        shape = (self.P, self.rag.width(s))
        return ap(self.tile("o", n, s, shape, self.odt), slice(0, p))

    def load(self, n: int, s: int, unit: tuple, p: int):
        xa = self.xtile(n, s, p)
        self.rag.load(
            self.b, self.x, unit, p // self.rag.k, s, xa.name, self._next_load, self.small.load
        )
        if s == self.rag.t - 1 and self.rag.r:
            self.rag.mask(self.b, xa.name, LOWEST, p)
        return xa

    def _next_load(self):
        q = self.loads[self.nl]
        self.nl += 1
        return q

    def _next_store(self):
        q = self.stores[self.ns]
        self.ns += 1
        return q

    def store(self, o, unit: tuple, s: int) -> None:
        n = o.index[0][1] // self.rag.k  # (o: the first p partitions of a tile)
        self.rag.store(self.b, self.out, unit, n, s, o.name, self._next_store, self.small.store)

    def exps(self, n: int, s: int, xa, p: int) -> None:
        """`_Pieces.exps` with a scratch of the segment's width."""
        z = ap(self.col("z", n, p, self.lay.t).name, slice(0, p), slice(s, s + 1))
        nm = self.col(f"nm{s}.", n, p)
        keep = self.resident and not self.log
        shape = (self.P, self.rag.width(s))
        e = self.out_tile(n, s, xa, p) if keep else ap(self.b.scratch_tile(
            f"smr.e{s}", "e", shape, self.xdt), slice(0, p))  # fmt: skip
        self.b.emit(Activation, [xa, nm], [e, z], func="exp", src=xa, dst=e, bias=nm,
                    reduce="add", reduce_dst=z)  # fmt: skip
