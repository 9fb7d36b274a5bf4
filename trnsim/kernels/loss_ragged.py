"""`cross_entropy`'s log-sum-exp over rows too long for one partition whose length is not a
multiple of 128 (GPT-2's vocabulary, 50257): the pieces with a remainder column (`ragged`), its
empty partitions set to the most negative fp32 (a max ignores them, their exp is 0); then
`loss_rows`' pieces steps unchanged (each partition's max and sum of exp, a row's meeting on
TensorE, the picked logits gathered from HBM). These rows took a row a partition in column
chunks before: [8, 50257] fp32 72.5 us, where [8, 50304] takes 11.2."""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.loss_rows import PIECE_BYTES, _Rows
from trnsim.kernels.ragged import RaggedLayout, Small, ragged_layout
from trnsim.kernels.reduce import Reduce
from trnsim.kernels.row_pieces import PieceLayout
from trnsim.kernels.schedule import Scheduled

__all__ = ["lower_cross_entropy_ragged"]

LOWEST = -3.4028234663852886e38


def lower_cross_entropy_ragged(b: KernelBuilder, cfg: ChipConfig, r: Reduce, inp: str,
                               target: str, rows: tuple[int, int], reduction: str):  # fmt: skip
    """This core's rows [lo, hi): their losses stored (`none`), or their sum as a [1, 1]
    column (returned, fp32), as `loss_rows.lower_cross_entropy_rows`."""
    ti = b.tensors[inp]
    rag = ragged_layout(ti.shape[-1], max(1, PIECE_BYTES // ti.dtype.itemsize),
                        cfg.core.sbuf.partitions)  # fmt: skip
    k = _Ragged(b, cfg, r, inp, target, reduction, rag)
    with Scheduled(b, cfg):
        k.pieces(rows)
    k.groups.done()
    return k.total()


class _Ragged(_Rows):
    """`_Rows`' pieces over the remainder-column layout: its units, tiles' widths and loads."""

    def __init__(self, b, cfg, r, inp, target, reduction, rag: RaggedLayout):
        self.rag = rag
        lay = PieceLayout(rag.d, rag.f, rag.k, rag.g, rag.t)
        super().__init__(b, cfg, r, inp, target, reduction, lay)
        self.small = Small(cfg)

    def source(self, index: tuple, r0: int, s: int):
        return index, r0  # (a `ragged` unit)

    def width(self, s: int) -> int:
        return self.rag.width(s)

    def load(self, n: int, s: int, src, x, p: int) -> None:
        rag = self.rag
        rag.load(self.b, self.inp, src, p // rag.k, s, x.name, lambda: self.loads[n],
                 self.small.load)  # fmt: skip
        if s == rag.t - 1 and rag.r:
            rag.mask(self.b, x.name, LOWEST, p)
