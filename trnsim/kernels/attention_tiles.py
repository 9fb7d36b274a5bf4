"""The flash attention kernel's buffers (`Tiles`: taken and given back by kind, reused in
turn), its DMA queues per kind, and the two loads every unit shares: the causal mask's constant
tiles and q^T / k^T loaded transposed (`scaled_dot_product_attention`, `attention.py`)."""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import AffineSelect, DmaCopy, Engine, Memset, TensorCopy, Transpose
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues

SCORE_BANKS = 2  # PSUM banks of fp32 scores per key block: KB = 1,024 keys with 2 KiB banks
QUEUES = {  # kind -> its share of the load or store queues (`queues`; of 16: 0-1, 2-4, 5-7, 8-11)
    "q": ("loads", 0, 1 / 4),
    "k": ("loads", 1 / 4, 5 / 8),
    "v": ("loads", 5 / 8, 1),
    "out": ("stores", 0, 1 / 2),
}
DEPTH = {  # tiles of a kind before any is reused: enough for the units in flight
    "qT": 4,
    "kT": 6,
    "v": 6,
    "s": 2,  # PSUM (16 KiB): 2 x 4 KiB of scores, 2 x 2 KiB of P^T, 3 x 516 B of acc
    "s_sb": 3,
    "p": 3,
    "pT": 2,
    "pT_sb": 2,
    "acc": 3,
    "o": 2,
    "col": 32,
}
MASK = -(2.0**126)  # the causal mask's bias: exact in bf16, and exp(scale * (s + MASK)) = 0


class Tiles:
    """The kernel's buffers, by kind: a stage takes one and gives it back after the last
    instruction that uses it; a kind has DEPTH tiles (more only if more are live at once),
    reused in turn; the builder orders a taken tile's next writes after its earlier reads."""

    def __init__(self, b: KernelBuilder, cfg: ChipConfig, D: int, in_dt, out_dt):
        self.b = b
        self.P, self.D, self.in_dt, self.out_dt = cfg.core.tensor.rows, D, in_dt, out_dt
        self.KB = SCORE_BANKS * cfg.core.psum.bank_bytes // 4  # fp32 scores
        self.N = min(self.KB, cfg.core.tensor.moving_free_max)  # columns per scores matmul
        self.dma_transpose = in_dt.itemsize in (2, 4) and cfg.core.dma.transpose_hbm_rate > 0
        f32, bf16, P, KB = dtype("float32"), dtype("bfloat16"), self.P, self.KB
        self.kinds = {  # kind -> (memory, shape, dtype)
            "qT": ("sbuf", (P, P), in_dt),
            "kT": ("sbuf", (P, KB), in_dt),
            "v": ("sbuf", (P, KB // P, D + 1), in_dt),  # chunks of v, each with a ones column
            "s": ("psum", (P, KB), f32),
            "s_sb": ("sbuf", (P, KB), f32),  # S copied for GpSimd's exp
            "p": ("sbuf", (P, KB), bf16),
            "pT": ("psum", (P, KB), bf16),  # P^T's chunks side by side
            "pT_sb": ("sbuf", (P, KB), bf16),
            "acc": ("psum", (P, D + 1), f32),  # sum of c-rescaled P v; last column: l
            "o": ("sbuf", (P, D), out_dt),
            "col": ("sbuf", (P, 1), f32),  # the [rows, 1] statistics
            "raw": ("sbuf", (P, P), in_dt),  # NC-v2: loads turned on TensorE
            "tp": ("psum", (P, P), in_dt),
        }
        self.free: dict[str, list[str]] = {k: [] for k in self.kinds}
        self.made: dict[str, int] = {}
        self.psum: list[str] = []  # every PSUM tile taken, released when the op ends
        self.scalar_max = cfg.core.scalar.reduce_max  # NC-v2's ScalarE reduces by add only
        qs = Queues(cfg)
        self.queues = {k: getattr(qs, half)(lo, hi) for k, (half, lo, hi) in QUEUES.items()}

    def take(self, kind: str) -> str:
        """A tile of `kind`: a new one until the kind has DEPTH of them, then the one given
        back longest ago (so the next use of a tile is as far from its last as can be)."""
        made = self.made.setdefault(kind, 0)
        if self.free[kind] and made >= DEPTH.get(kind, 1):
            return self.free[kind].pop(0)
        self.made[kind] = made + 1
        memory, shape, dt = self.kinds[kind]
        if memory == "psum":  # perhaps a larger one an earlier op released: used by slices
            name = self.b.psum(kind, shape, dt)
            self.psum.append(name)
            return name
        name = self.b.tile(kind, memory, shape, dt)
        if kind == "v":  # the ones column, once: loads write the others
            ones = ap(name, slice(0, self.P), slice(None), slice(self.D, self.D + 1))
            self.b.emit(Memset, [], [ones], dst=ones, value=1.0, engine=Engine.GPSIMD)
        return name

    def reserve(self) -> None:
        """Place the PSUM tiles first, the bank-sized before the small, so that none
        straddles a bank and wastes the rest of one."""
        for kind in ("s", "pT", "acc"):
            self.give(kind, *[self.take(kind) for _ in range(DEPTH[kind])])

    def give(self, kind: str, *names: str) -> None:
        self.free[kind].extend(names)

    def q(self, kind: str) -> int:
        """The next DMA queue for a transfer of `kind`: each kind has queues of its own (given
        8 or more queues an engine; with fewer, kinds share), so a transfer waiting for its
        buffer (a q^T load waits for the scores of the block that used it before) never holds
        up another kind's behind it (queues are FIFO)."""
        return self.queues[kind].next()


def causal_mask(b: KernelBuilder, t: Tiles) -> tuple[str, str]:
    """The causal mask's two constant bf16 tiles, made once on GpSimd: the identity I and
    the bias B (0 where key i <= query p, MASK above the diagonal). A matmul of I by B
    accumulated into the scores adds B to them on TensorE, in PSUM."""
    bf16, P = dtype("bfloat16"), t.P
    tiles = []
    for name, on_false, cmp in (("ident", 1.0, "not_equal"), ("mask", MASK, "greater_equal")):
        x = b.tile(name, "sbuf", (P, P), bf16)
        a = ap(x, slice(0, P), slice(0, P))
        b.emit(Memset, [], [a], dst=a, value=0.0, engine=Engine.GPSIMD)
        b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=on_false, cmp=cmp, start=0,
               partition_step=1, step=-1)  # fmt: skip
        tiles.append(x)
    return tiles[0], tiles[1]


def load_transposed(
    b: KernelBuilder, t: Tiles, kind: str, tensor: str, index, r0: int, rows: int, dst: str
):
    """dst[0:D, 0:rows] = tensor[*index, r0:r0 + rows, :] transposed: a DMA transpose, or
    128-row loads each turned on TensorE where the chip's DMA has none."""
    D = t.D
    if t.dma_transpose:
        src = ap(tensor, *index, slice(r0, r0 + rows), slice(None))
        d = ap(dst, slice(0, D), slice(0, rows))
        b.emit(DmaCopy, [src], [d], src=src, dst=d, queue=t.q(kind), transpose=True)
        return
    raw, tp = t.take("raw"), t.take("tp")
    for c in range(0, rows, t.P):
        w = min(t.P, rows - c)
        src = ap(tensor, *index, slice(r0 + c, r0 + c + w), slice(None))
        r = ap(raw, slice(0, w), slice(0, D))
        b.emit(DmaCopy, [src], [r], src=src, dst=r, queue=t.q(kind))
        p = ap(tp, slice(0, D), slice(0, w))
        b.emit(Transpose, [r], [p], src=r, dst=p)
        d = ap(dst, slice(0, D), slice(c, c + w))
        b.emit(TensorCopy, [p], [d], src=p, dst=d)
    t.give("raw", raw)
    t.give("tp", tp)
