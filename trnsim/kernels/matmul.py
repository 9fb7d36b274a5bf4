"""`matmul` (`mm`, `bmm`): out[..., M, N] = a[..., M, K] @ b[..., K, N] on one core.

The kernel, as an NKI engineer writes it for TensorE (`matmul` computes dst[M', N'] =
stationary[K', M']^T @ moving[K', N'], K' and M' <= 128 partitions, N' <= the moving limit):

- a strip of A^T, K x MB (MB = a few 128-row blocks of A), is loaded once and stays in SBUF:
  DMA transpose where the chip has one for the dtype (NC-v3 on), else A's blocks are loaded as
  they are and turned on TensorE (`transpose` into PSUM, copied to SBUF);
- for each N block, B's K x NB block streams through rotating SBUF buffers (loads on several DMA
  queues, so the next block loads while TensorE multiplies this one), and every 128-row block of
  the strip accumulates into its own PSUM bank over K (`accumulate` after the first);
- the PSUM banks are rotated (two sets, when the banks allow; released to the kernel's next ops
  at the end) and emptied to SBUF by VectorE and
  ScalarE in turn (casting to out's dtype), then stored to HBM.

When K is large, the strip narrows (one 128-row block of A^T for K = 28672 bf16) and B is
streamed again for every strip. The kernel then streams K instead (`_one_streamed`): for each
strip of up to a PSUM bank per 128-row block and each N block, every K block loads A^T[k, strip]
(one DMA transpose) and B[k, n] and runs the strip's matmuls, so A is read once per N block and
B once per strip. `_Plan.stream_k` picks whichever kernel moves fewer HBM bytes (the streamed
one on a tie: its loads are larger), on chips with DMA transpose; the streamed one always when
two strips of one 128-row block do not fit in SBUF (K past ~41K bf16, ~20K fp32: GPT-2's
vocabulary as the K of its tied embedding's gradient matmul).

In fp32 with few rows (M <= SWAP_ROWS) B's 128-column blocks are the stationary and A^T's rows
move (`_swapped`): TensorE's cost is per moving column, 4 cycles each in fp32, so streaming B's
columns kept TensorE, not the DMA, the bound; out^T is turned back by TensorE per 128 columns.

Ragged sizes (M, N, K not multiples of the tile) use partial tiles. Leading (batch) dims of a
and b loop around the whole: a and b both [B, M, K] / [B, K, N], or b 2-D and shared. The
buffers and queues rotate on across batch elements (each restarted at its first buffer and
queue before, so a head's loads waited for the previous head's matmuls: attention's [24, 128,
128] @ [24, 128, 64] fp32 took 43.6 us on one trn2 core for 8.7 us of bytes).
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.dtypes import DType, dtype
from trnsim.errors import TraceError
from trnsim.isa import Activation, DmaCopy, Engine, Matmul, TensorCopy, TensorTensor, Transpose
from trnsim.kernels.broadcast import spread
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues
from trnsim.trace.program import TensorSpec

__all__ = ["lower_matmul", "columns_split", "fused_bias", "addmm_bias"]

SBUF_SHARE = 0.75  # of a partition's SBUF the A strip and B buffers may take (rest: headroom)
B_BUFS = 3  # rotating B blocks: one loading, one in use, one spare for queue jitter
B_BUFS_ONE_STRIP = 6  # ... where this core's rows are one strip and B is the larger operand:
# the matmuls are short, so B's stream (most of the traffic, 1 KiB a partition a bf16 block)
# needs more loads in flight to keep the DMA busy (with 3, [1, 4096] @ [4096, 4096] bf16 took
# 1.85x its DMA bound); where A is the larger, more B loads only delay its strip's
A_BUFS = 4  # rotating A^T blocks of the K-streamed kernel (each load is a few us of DMA)
SWAP_ROWS = 64  # fp32 with this many rows of A or fewer: B's blocks stationary (`_swapped`)
SWAP_GAIN = 2 / 3  # ... when TensorE's cycles fall to this fraction or less (`_Plan.swaps`)


def lower_matmul(
    b: KernelBuilder,
    cfg: ChipConfig,
    a_name: str,
    b_name: str,
    out_name: str,
    b_transposed: bool = False,
    by_columns: bool = False,
    bias: str | None = None,
) -> None:
    """Emit out = a @ b (module doc) into builder `b`; with `b_transposed`, b is given as
    [..., N, K] (a linear layer's weight) and its blocks are loaded by DMA transpose. With
    `by_columns` (an op alone in its work, `kernels.isolated`) and out's rows too few to
    share (`columns_split`), each physical core computes its share of out's columns, and adds
    `bias` (a row [N], if given) to them on the way out of PSUM (`fused_bias`)."""
    ta, tb, to = (b.tensors[n] for n in (a_name, b_name, out_name))
    (bat, M, K), (bat_b, K2, N), (bat_o, M2, N2) = _dims(ta), _dims(tb), _dims(to)
    if b_transposed:
        K2, N = N, K2
    if K != K2 or (M, N) != (M2, N2) or bat_o != bat or bat_b not in (bat, ()):
        want = "[..., N, K] or [N, K]" if b_transposed else "[..., K, N] or [K, N]"
        raise TraceError(
            f"matmul: a {list(ta.shape)} @ b {list(tb.shape)} -> out {list(to.shape)}: "
            f"shapes do not agree; expected a [..., M, K], b {want}, out [..., M, N]"
        )
    if ta.dtype != tb.dtype:  # B's tiles take A's dtype: the other operand would be rounded
        raise TraceError(
            f"matmul: {a_name} is {ta.dtype.name} and {b_name} {tb.dtype.name}; expected the "
            "two operands of one dtype (as torch.matmul): cast one first (copy)"
        )
    plan = _Plan(cfg, ta.dtype, to.dtype, M, N, K)
    plan.b_transposed = b_transposed
    if b_transposed and not plan.dma_transpose:
        raise TraceError(
            f"linear: {cfg.name} has no DMA transpose for {ta.dtype.name}: a weight of [N, K] "
            "is not lowered on it yet"
        )
    lo, hi = b.share(to.shape) or (0, math.prod(bat) * M)  # this core's rows of out
    cols = (0, N)
    if by_columns and columns_split(to.shape, b.part[1], cfg):  # few rows: the columns cut
        c, cores = b.part[0], b.part[1]
        units = math.ceil(N / plan.NB)
        cols = (plan.NB * (units * c // cores), min(N, plan.NB * (units * (c + 1) // cores)))
        lo, hi = 0, math.prod(bat) * M
        if bias is not None and cols[0] < cols[1]:  # the core's bias columns on every partition
            src = ap(bias, slice(cols[0], cols[1]))
            plan.bias = (spread(b, cfg, [(src, cols[1] - cols[0])], b.tensors[bias].dtype,
                                f"{bias}_cols"), cols[0])  # fmt: skip
    swap = plan.swaps(cfg)
    streamed = not swap and plan.stream_k(min(M, hi - lo), cfg)
    if not streamed and not plan.resident_fits and hi > lo:
        raise TraceError(
            f"matmul: a {list(ta.shape)} @ b {list(tb.shape)}: K = {K} leaves no room for a "
            f"128-row block of A^T in SBUF and {cfg.name} has no DMA transpose for "
            f"{ta.dtype.name} to stream K; not lowered on it yet"
        )
    rows = min(M, hi - lo)  # B's stream is the traffic: one strip, B no smaller than A
    nb = B_BUFS_ONE_STRIP if math.ceil(rows / plan.P) <= plan.mt and N >= rows else B_BUFS
    if not streamed and not plan.fits_b(nb):
        nb = B_BUFS
    plan.swap = swap
    bufs = _StreamBuffers(b, plan, nb) if streamed else _Buffers(b, plan, nb)
    one = _one_streamed if streamed else _one
    for i, batch in enumerate(_batches(bat)):
        rows = (max(lo - i * M, 0), min(hi - i * M, M))
        if rows[0] < rows[1]:
            kb = batch if bat_b else ()
            one(b, plan, bufs, (a_name, batch), (b_name, kb), (out_name, batch), rows, cols)
    b.release(*bufs.accs, *bufs.backs, *(bufs.turn[1:] if bufs.turn else ()))


FUSED_BIAS_BYTES = 16384  # a core's bias columns, spread over the partitions, at most this


def fused_bias(out_shape, bias_dt, cores: int) -> bool:
    """Whether a linear's bias over a matmul cut by columns is added on the way out of PSUM:
    its share of the columns takes at most FUSED_BIAS_BYTES of a partition (else the op
    shares its work by rows, the bias added after it)."""
    return -(-out_shape[-1] // cores) * bias_dt.itemsize <= FUSED_BIAS_BYTES


def addmm_bias(args: dict, tensors: dict) -> str | None:
    """The input of an `addmm` that is a linear layer's bias (beta and alpha 1, a row [N] of
    out's columns), which a matmul cut by columns adds on the way out of PSUM; else None."""
    inp, out = args.get("input"), args.get("out")
    if args.get("beta", 1) != 1 or args.get("alpha", 1) != 1 or inp not in tensors:
        return None
    shape = tuple(tensors[inp].shape)
    return inp if out in tensors and shape == tuple(tensors[out].shape[-1:]) else None


def columns_split(out_shape, cores: int, cfg: ChipConfig) -> bool:
    """Whether the cores of a logical core share a matmul by out's columns: its rows fit one
    core's share of 128 (`layout.core_rows` would give them all to one core: decode's [8, K] @
    [K, N] ran on one of the two) and its columns make at least a block of 512 for each."""
    *lead, n = out_shape
    moving = min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)
    return cores > 1 and math.prod(lead) <= cfg.core.tensor.rows and n >= cores * moving


def _dims(t: TensorSpec) -> tuple[tuple[int, ...], int, int]:
    if len(t.shape) < 2:
        raise TraceError(f"matmul: tensor {t.name} has shape {list(t.shape)}; expected 2-D or more")
    return tuple(t.shape[:-2]), t.shape[-2], t.shape[-1]


def _batches(bat: tuple[int, ...]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for n in bat:
        out = [(*x, i) for x in out for i in range(n)]
    return out


class _Plan:
    """Tile sizes for one matmul on one chip."""

    def __init__(self, cfg: ChipConfig, a_dt: DType, out_dt: DType, M: int, N: int, K: int):
        c = cfg.core
        self.P = c.tensor.rows  # contraction (K) and stationary (M) block: 128
        self.NB = min(c.tensor.moving_free_max, c.psum.bank_bytes // 4, N)
        # each row block's accumulator starts on a bank of its own: a block of NB < a bank
        # packed at j * NB would cross a bank boundary (a matmul output must stay in one)
        self.acc_stride = c.psum.bank_bytes // 4
        self.dma_transpose = a_dt.itemsize in (2, 4) and c.dma.transpose_hbm_rate > 0
        banks = c.psum.banks - (0 if self.dma_transpose else 1)  # one for TensorE transposes
        self.a_dt, self.out_dt = a_dt, out_dt
        self.M, self.N, self.K = M, N, K
        kt = math.ceil(K / self.P)
        budget = int(c.sbuf.partition_bytes * SBUF_SHARE) - B_BUFS * self.NB * a_dt.itemsize
        per_block = kt * self.P * a_dt.itemsize  # one 128-row block of the A^T strip
        # two strips in flight; none fit when K is very large (GPT-2's vocabulary, 50257, as
        # the K of the tied embedding's gradient matmul): then only the K-streamed kernel can
        others = B_BUFS * self.NB * a_dt.itemsize + 2 * self.NB * out_dt.itemsize
        self.resident_fits = 2 * per_block <= c.sbuf.partition_bytes - others
        self._room = c.sbuf.partition_bytes - others - 2 * per_block  # past 3 B blocks
        most = max(1, min(banks // 2, budget // (2 * per_block)))
        self.mt = max(1, min(most, math.ceil(M / self.P)))  # 128-row blocks per strip
        self.psum_sets = 2 if 2 * self.mt <= banks else 1
        self.queues = Queues(cfg)  # loads over the load queues, stores over the store ones
        self.b_transposed = False
        self.evac = (Engine.VECTOR, Engine.SCALAR)
        self.bias = None  # (tile, its first column): a bias added on the way out of PSUM
        self.swap = False  # B's blocks stationary, A^T's rows moving (`_swapped`)

    def swaps(self, cfg: ChipConfig) -> bool:
        """Put B's blocks stationary (`_swapped`)? fp32 with at most SWAP_ROWS rows, a resident
        strip, and TensorE's cycles, B's [128] columns stationary and out^T turned back, at most
        SWAP_GAIN of A^T stationary's (N moving columns a K block): the turn-back lengthens the
        chain to the last store, so a small saving is a loss (fp32 [32, 256] @ [256, 4096],
        0.75: 22.3 -> 24.7 us on one trn2 core; [8, 512] @ [512, 2048], 0.63: 21.6 -> 20.2)."""
        t = cfg.core.tensor
        if self.a_dt.name != "float32" or self.M > SWAP_ROWS or not self.resident_fits:
            return False
        kt, blocks = math.ceil(self.K / self.P), math.ceil(self.N / self.P)
        plain = kt * self.N / t.fp32_rate
        mm = max(t.stationary_min_cycles, self.M) / t.fp32_rate
        swapped = blocks * (kt * max(mm, t.mm_init_latency_cycles) + self.P / t.transpose_fp32_rate)
        return swapped <= SWAP_GAIN * plain

    def fits_b(self, nb: int) -> bool:
        """Whether the resident kernel's SBUF takes `nb` B blocks, not B_BUFS."""
        return (nb - B_BUFS) * self.NB * self.a_dt.itemsize <= self._room

    def stream_k(self, rows: int, cfg: ChipConfig) -> bool:
        """Switch to the K-streamed kernel (`_one_streamed`: A^T blocks loaded for every N
        block, B blocks shared by up to a bank's worth of 128-row blocks) for `rows` rows of A
        on this core? Only with DMA transpose (streaming A through TensorE transposes would
        cost TensorE time), and when it moves no more HBM bytes than the resident strip, whose
        width shrinks as K grows (a large-K matmul streams B again for every strip)."""
        if not self.dma_transpose or rows <= 0:
            return False
        P, NB, item = self.P, self.NB, self.a_dt.itemsize
        a_bytes, b_bytes = rows * self.K * item, self.K * self.N * item
        resident = a_bytes + b_bytes * math.ceil(rows / (P * self.mt))
        mt = min(cfg.core.psum.banks, math.ceil(rows / P))
        streamed = a_bytes * math.ceil(self.N / NB) + b_bytes * math.ceil(rows / (P * mt))
        if streamed > resident and self.resident_fits:
            return False
        self.mt = mt
        self.psum_sets = 2 if 2 * mt <= cfg.core.psum.banks else 1
        return True


class _Buffers:
    """The kernel's tiles, made once for all batch elements: two A^T strips, `nb` B blocks,
    the PSUM accumulators, two output blocks, and for TensorE transposes a load buffer and a
    PSUM tile."""

    def __init__(self, b: KernelBuilder, p: _Plan, nb: int = B_BUFS):
        P, kt = p.P, math.ceil(p.K / p.P)
        self.strips = [b.tile("aT", "sbuf", (P, kt * P * p.mt), p.a_dt) for _ in range(2)]
        self.bbufs = [b.tile("b", "sbuf", (P, p.NB), p.a_dt) for _ in range(nb)]
        width = (p.mt - 1) * p.acc_stride + p.NB
        if p.swap:  # out^T: M columns for each 128 of N (more than NB when N is narrow)
            width = max(width, math.ceil(p.NB / P) * p.M)
        self.accs = [b.psum("acc", (P, width), dtype("float32")) for _ in range(p.psum_sets)]
        self.outs = [b.tile("o", "sbuf", (P, p.NB), p.out_dt) for _ in range(2)]
        self.turn, self.backs, self.outs_t = None, [], []
        if p.swap:  # out^T [128, 4 x rows] in accs, copied to SBUF, turned back into PSUM
            f32 = dtype("float32")
            self.outs_t = [b.tile("oT", "sbuf", (P, width), f32) for _ in range(2)]
            self.backs = [b.psum("acc_b", (P, p.NB), f32) for _ in range(2)]
        if not p.dma_transpose:
            self.turn = (b.tile("a_raw", "sbuf", (P, P), p.a_dt), b.psum("a_tp", (P, P), p.a_dt))
        self.n = (0, 0, 0, 0)  # accumulators, B blocks, outputs, strips used so far
        self._turns = None

    def turns(self, p: _Plan):
        """The DMA queues in turn, one rotation for all batch elements."""
        if self._turns is None:
            self._turns = p.queues.turns()
        return self._turns


class _StreamBuffers:
    """The K-streamed kernel's tiles: A_BUFS rotating A^T blocks [128, 128 * mt], `nb` B
    blocks, one PSUM tile per bank (per 128-row block: an accumulator waits only for its own
    bank's evacuation), in `psum_sets` sets, and two output blocks."""

    def __init__(self, b: KernelBuilder, p: _Plan, nb: int = B_BUFS):
        P = p.P
        self.abufs = [b.tile("aT", "sbuf", (P, P * p.mt), p.a_dt) for _ in range(A_BUFS)]
        self.bbufs = [b.tile("b", "sbuf", (P, p.NB), p.a_dt) for _ in range(nb)]
        f32 = dtype("float32")
        self.sets = [
            [b.psum("acc", (P, p.NB), f32) for _ in range(p.mt)] for _ in range(p.psum_sets)
        ]
        self.accs = [t for s in self.sets for t in s]
        self.outs = [b.tile("o", "sbuf", (P, p.NB), p.out_dt) for _ in range(2)]
        self.turn, self.backs = None, []
        self.n = (0, 0, 0, 0)  # A blocks, B blocks, PSUM sets, outputs used so far
        self._turns = None

    turns = _Buffers.turns


def _one_streamed(
    b: KernelBuilder, p: _Plan, bufs: _StreamBuffers, a: tuple, bm: tuple, out: tuple, rows,
    cols: tuple[int, int],
):  # fmt: skip
    """One batch element, K streamed: for each strip of up to mt 128-row blocks and each N
    block, every K block loads A^T[k, strip] (one DMA transpose) and B[k, n] and runs the strip's
    matmuls into their PSUM banks; then the banks are emptied and stored. A is read once per N
    block, B once per strip (`_Plan.stream_k` picks this kernel when that moves fewer bytes)."""
    a_name, ab = a
    P, MB = p.P, p.P * p.mt
    kt = math.ceil(p.K / P)
    q = bufs.turns(p)
    n_a, n_b, n_set, n_out = bufs.n  # rotations go on across batch elements (module doc)
    for m0 in range(rows[0], rows[1], MB):
        end = min(m0 + MB, rows[1])
        ms = [(m, min(P, end - m)) for m in range(m0, end, P)]
        for n0 in range(cols[0], cols[1], p.NB):
            nw = min(p.NB, cols[1] - n0)
            accs = bufs.sets[n_set % len(bufs.sets)]
            n_set += 1
            ds = [ap(accs[j], slice(0, mw), slice(0, nw)) for j, (_, mw) in enumerate(ms)]
            for k in range(kt):
                k0, kw = k * P, min(P, p.K - k * P)
                at = bufs.abufs[n_a % A_BUFS]
                n_a += 1
                src = ap(a_name, *ab, slice(m0, end), slice(k0, k0 + kw))
                dst = ap(at, slice(0, kw), slice(0, end - m0))
                b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=q.load(), transpose=True)
                bt = _load_b(b, p, bufs.bbufs[n_b % len(bufs.bbufs)], bm, k0, kw, n0, nw, q)
                n_b += 1
                for j, (_, mw) in enumerate(ms):
                    st, d = ap(at, slice(0, kw), slice(j * P, j * P + mw)), ds[j]
                    b.emit(Matmul, [st, bt], [d], stationary=st, moving=bt, dst=d, accumulate=k > 0)
            n_out = _evacuate(b, p, bufs.outs, n_out, ds, ms, out, n0, nw, q)
    bufs.n = (n_a, n_b, n_set, n_out)


def _evacuate(b: KernelBuilder, p: _Plan, outs, n_out: int, ds, ms, out, n0, nw, q) -> int:
    """Empty a block's PSUM operands `ds` (rows `ms`) into the output tiles, in turn, each by
    its evacuation engine, and store them at out[m, n0:n0 + nw]; the output tiles used so far."""
    o_name, ob = out
    for src, (m, mw) in zip(ds, ms):
        o, engine = outs[n_out % 2], p.evac[n_out % 2]
        n_out += 1
        dst = ap(o, slice(0, mw), slice(0, nw))
        if p.bias is None:
            _copy(b, engine, src, dst)
        else:  # + the bias's columns (VectorE: it reads PSUM)
            t, c0 = p.bias
            w = ap(t, slice(0, mw), slice(n0 - c0, n0 - c0 + nw))
            b.emit(TensorTensor, [src, w], [dst], alu="add", src0=src, src1=w, dst=dst)
        hbm = ap(o_name, *ob, slice(m, m + mw), slice(n0, n0 + nw))
        b.emit(DmaCopy, [dst], [hbm], src=dst, dst=hbm, queue=q.store())
    return n_out


def _load_b(b: KernelBuilder, p: _Plan, bt: str, bm: tuple, k0, kw, n0, nw, q) -> object:
    """Load B's [kw, nw] block at (k0, n0) into SBUF tile `bt` (a transposed weight's [nw, kw]
    block is turned on the way in); its operand."""
    b_name, bb = bm
    dst = ap(bt, slice(0, kw), slice(0, nw))
    if p.b_transposed:
        src = ap(b_name, *bb, slice(n0, n0 + nw), slice(k0, k0 + kw))
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=q.load(), transpose=True)
    else:
        src = ap(b_name, *bb, slice(k0, k0 + kw), slice(n0, n0 + nw))
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=q.load())
    return dst


def _one(b: KernelBuilder, p: _Plan, bufs: _Buffers, a: tuple, bm: tuple, out: tuple, rows,
         cols: tuple[int, int]):  # fmt: skip
    """One batch element: out[m0:m1, n0:n1] = a[m0:m1, K] @ b[K, n0:n1], (m0, m1) = `rows`,
    (n0, n1) = `cols`."""
    a_name, ab = a
    P, MB = p.P, p.P * p.mt
    kt = math.ceil(p.K / P)
    strips, bbufs, accs, outs, turn = bufs.strips, bufs.bbufs, bufs.accs, bufs.outs, bufs.turn
    q = bufs.turns(p)
    n_acc, n_b, n_out, n_strip = bufs.n  # rotations go on across batch elements (module doc)
    for m0 in range(rows[0], rows[1], MB):
        strip = strips[n_strip % 2]
        n_strip += 1
        end = min(m0 + MB, rows[1])
        ms = [(m, min(P, end - m)) for m in range(m0, end, P)]
        _load_strip(b, p, strip, (a_name, ab), ms, kt, q, turn)
        kws = [min(P, p.K - k * P) for k in range(kt)]
        sts = [  # the strip's operands, the same for every N block (built once: lowering time)
            [
                ap(strip, slice(0, kw), slice(k * MB + j * P, k * MB + j * P + mw))
                for j, (_, mw) in enumerate(ms)
            ]
            for k, kw in enumerate(kws)
        ]
        for n0 in range(cols[0], cols[1], p.NB):
            nw = min(p.NB, cols[1] - n0)
            acc = accs[n_acc % len(accs)]
            n_acc += 1
            if p.swap:
                (_, mw), back = ms[0], bufs.backs[n_acc % 2]
                for k, kw in enumerate(kws):
                    bt = bufs.bbufs[n_b % len(bbufs)]
                    _load_b(b, p, bt, bm, k * P, kw, n0, nw, q)
                    n_b += 1
                    _swapped(b, p, acc, bt, sts[k][0], kw, mw, nw, k > 0)
                ds = [_turned_back(b, p, acc, bufs.outs_t[n_acc % 2], back, mw, nw)]
                n_out = _evacuate(b, p, outs, n_out, ds, ms, out, n0, nw, q)
                continue
            ds = [
                ap(acc, slice(0, mw), slice(j * p.acc_stride, j * p.acc_stride + nw))
                for j, (_, mw) in enumerate(ms)
            ]
            for k, kw in enumerate(kws):
                dst = _load_b(b, p, bbufs[n_b % len(bbufs)], bm, k * P, kw, n0, nw, q)
                n_b += 1
                for st, d in zip(sts[k], ds):
                    b.emit(
                        Matmul, [st, dst], [d], stationary=st, moving=dst, dst=d, accumulate=k > 0
                    )
            n_out = _evacuate(b, p, outs, n_out, ds, ms, out, n0, nw, q)
    bufs.n = (n_acc, n_b, n_out, n_strip)


def _swapped(b: KernelBuilder, p: _Plan, acc, bt, st, kw, mw, nw, accumulate: bool) -> None:
    """out^T's K block for a few rows: each 128 columns of B's block [kw, nw] stationary, A^T's
    [kw, mw] moving, into acc[:, j * mw] (j the 128-column block). TensorE's cost is per moving
    column (`engines.tensor`): max(64, mw) cycles a 128 columns of out against 128 with A^T
    stationary, each x 4 in fp32, where TensorE, not B's DMA, bound few rows (fp32 [8, 2048] @
    [2048, 512]: 16 matmuls of 2048 cycles, 13.7 us, for 11.4 us of B's DMA)."""
    mv = st  # A^T's [kw, mw]
    for j, c0 in enumerate(range(0, nw, p.P)):
        cw = min(p.P, nw - c0)
        s = ap(bt, slice(0, kw), slice(c0, c0 + cw))
        d = ap(acc, slice(0, cw), slice(j * mw, (j + 1) * mw))
        b.emit(Matmul, [s, mv], [d], stationary=s, moving=mv, dst=d, accumulate=accumulate)


def _turned_back(b: KernelBuilder, p: _Plan, acc, t_sb, back, mw, nw):
    """out^T in `acc` (`_swapped`) copied to SBUF `t_sb` in fp32 (rounded once, at the last
    evacuation) and turned back by TensorE (`transpose`) into `back` [mw, nw]; its operand."""
    for j, c0 in enumerate(range(0, nw, p.P)):
        cw = min(p.P, nw - c0)
        src = ap(acc, slice(0, cw), slice(j * mw, (j + 1) * mw))
        mid = ap(t_sb, slice(0, cw), slice(j * mw, (j + 1) * mw))
        _copy(b, p.evac[j % 2], src, mid)
        t = ap(back, slice(0, mw), slice(c0, c0 + cw))
        b.emit(Transpose, [mid], [t], src=mid, dst=t)
    return ap(back, slice(0, mw), slice(0, nw))


def _load_strip(
    b: KernelBuilder, p: _Plan, strip: str, a: tuple, ms: list, kt: int, q, turn
) -> None:
    """A^T of rows `ms` (start, width) of a, all of K, into `strip` [128, kt * MB]: block
    (k, j) at columns k * MB + j * 128. `turn`: (SBUF, PSUM) tiles for a TensorE transpose."""
    a_name, ab = a
    P, MB = p.P, p.P * p.mt
    for k in range(kt):
        k0, kw = k * P, min(P, p.K - k * P)
        for j, (m, mw) in enumerate(ms):
            col = k * MB + j * P
            dst = ap(strip, slice(0, kw), slice(col, col + mw))
            src = ap(a_name, *ab, slice(m, m + mw), slice(k0, k0 + kw))
            if p.dma_transpose:
                b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=q.load(), transpose=True)
                continue
            raw, tp = turn
            r = ap(raw, slice(0, mw), slice(0, kw))
            b.emit(DmaCopy, [src], [r], src=src, dst=r, queue=q.load())
            t = ap(tp, slice(0, kw), slice(0, mw))
            b.emit(Transpose, [r], [t], src=r, dst=t)
            _copy(b, Engine.VECTOR, t, dst)


def _copy(b: KernelBuilder, engine: Engine, src, dst) -> None:
    """PSUM -> SBUF (with a cast) on VectorE or ScalarE."""
    if engine is Engine.SCALAR:
        b.emit(Activation, [src], [dst], func="copy", src=src, dst=dst)
    else:
        b.emit(TensorCopy, [src], [dst], src=src, dst=dst)
