"""fp32 layer_norm over rows that fit a partition, a row a partition (`norms.STT_FIT`, offered
to `norms._variant` for rows of MIN_ROW or more and taken where its estimate ends sooner):
three passes over most columns instead of `NormStages`' four or five, in column parts that
start and end early.

A block is [p, D] (up to 128 rows); its columns go in parts of about PART_COLS (the last
`kept_cols`, whose weight and bias stay in PSUM, in parts of about PSUM_COLS), each a tile of
its own, loaded and stored on its own (a part's passes and store wait for it alone, so stores
start while the block's last parts are still being computed):

1. load the parts; ScalarE takes the statistics, two passes a part: s = x0 - x in place (an
   `activation`, scale -1 and the row's first element x0, copied aside, as its bias: exact
   where x is near x0, so a row of mean 10^4 and spread 1 keeps 7 digits) with its sum, then
   the sum of s^2;
2. VectorE adds the parts' sums (one `tensor_reduce`); a = sum(s) / D = x0 - mean and
   q = sum(s^2) / D, var = q - a^2 (a shifted variance: exact enough while x0 lies within a
   few standard deviations of the mean -- an assumption of this plan, where `NormStages`'
   bn_stats has none), rstd = (var + eps)^-0.5: [p, 1] steps on VectorE or GpSimd;
3. each part: (a - s) * w = (x - mean) * w, then (. * rstd) + b: two `scalar_tensor_tensor`s
   (2N cycles an element on VectorE or GpSimd); or, where the weight and bias are in PSUM,
   (a - s) * rstd on ScalarE or GpSimd, then VectorE's `tensor_tensor`s with the weight and
   the bias out of PSUM (N cycles an element each, not 2N); store.

Each of those instructions goes on the engine a list schedule finds free sooner, with a
descent of SEARCH schedules over the choices (`schedule.Scheduled`). The weight and bias are
spread over the partitions once (`spread`: TensorE's ones row times them, through the banks
their PSUM columns then take). Blocks rotate through as many buffers as SHARE of SBUF holds
(a core's rows at LNC 2 for the widths this plan is for), in x's order (with the smallest, the
last, first instead: rows of 6144 57.0 -> 57.9 us, 4544 54.9 -> 55.5, 3072 55.4 -> 54.0, 5120
60.6 -> 60.0)."""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import (
    Activation,
    DmaCopy,
    Matmul,
    ScalarTensorTensor,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_tiles
from trnsim.kernels.norm_affine import ones
from trnsim.kernels.queues import Queues
from trnsim.kernels.row_plan import G, S, V, bank_runs, runs
from trnsim.kernels.schedule import Scheduled

__all__ = ["lower_stt", "stt_fits"]

PART_COLS = 1024  # a part's columns, about (rows of 5120: three parts and one in PSUM; parts
# of 512 and 768 ran slower, trn2 LNC 2, 16 MiB: 63.6, 60.9 us against 60.0)
PSUM_COLS = 1536  # ... and of the parts whose weight and bias are in PSUM (rows of 5120 and
# 6144: 512, 63.3 and 60.4 us; 768, 60.9 and 59.6; 1536, 60.0 and 57.9)
SHARE = 0.6  # what the blocks' buffers, the spread weight and bias and the scratch may take
SPREAD_BANKS = 2  # PSUM banks the weight and bias are spread through where none are kept
SEARCH = 300  # the descent's schedules (none: rows of 5120 65.0 us, 6144 67.9)
NORM_ON = (S, G)  # the engines of a PSUM part's normalisation (the first as emitted)
FLEX_ON = (V, G)  # ... of the scalar_tensor_tensors and the [p, 1] steps
COPY_ON = (V,)  # ... of the spread's copies out of PSUM (ScalarE too: 63.3 -> 64.7 us)
COPY_BANKS = 2  # ... each of this many PSUM banks (rows of 5120: one 60.6 us, two 59.0, four
# 59.6)
SMALL_TILES = 5  # a block's statistics' tiles (`_Stt.small`: st, x0, m, r, sb)
SEMS_KEPT = 32  # semaphores left to the rest (the spread's tiles, the junk tile, other ops):
# rows of 1024 at LNC 1, 16 MiB, took 29 buffers and 309 semaphores of a core's 256
MIN_ROW = 1024  # rows this long or longer (a row a partition: `norms.LAYER_ROW_BYTES` fp32)


def stt_fits(cfg: ChipConfig, tx, to, weight, bias) -> bool:
    """Whether this plan applies: fp32 x, out, weight and bias, rows of MIN_ROW or more whose
    buffer, the spread weight and bias and a part's scratch fit SHARE of a partition."""
    d = tx.shape[-1] if tx.shape else 1
    fp32 = all(t.dtype.name == "float32" for t in (tx, to, weight, bias) if t is not None)
    room = int(cfg.core.sbuf.partition_bytes * SHARE) - 2 * d * 4 - PART_COLS * 8
    return fp32 and weight is not None and bias is not None and d >= MIN_ROW and room >= 2 * d * 4


def _cuts(d: int, most: int | None = None) -> list[int]:
    """The parts' column bounds over [0, d): parts of about `most` columns, as even as whole
    (even) columns allow."""
    n = max(1, round(d / (most or PART_COLS)))
    return [2 * round(d / 2 * i / n) for i in range(n)] + [d]


def kept_cols(cfg: ChipConfig, d: int) -> int:
    """The last columns of the weight and bias kept in PSUM for VectorE: whole banks, half of
    PSUM each, leaving PART_COLS or more in SBUF (their scalar_tensor_tensors on GpSimd share
    the work)."""
    p = cfg.core.psum
    step = p.bank_bytes // 4
    cols = p.banks // 2 * step
    return min(cols, (d - PART_COLS) // step * step, cfg.core.vector.psum_max_free_elements)


def lower_stt(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, weight: str, bias: str,
              eps: float, share: tuple[int, int]) -> float:  # fmt: skip
    """out = layer_norm(x, [D], weight, bias, eps) over rows [lo, hi) of `share` (module doc);
    the list schedule's estimated ns."""
    k = _Stt(b, cfg, x, out, weight, bias, eps)
    _, tiles = row_tiles(b.tensors[x].shape, k.P, share, 1, 1)
    blocks = [(index, rows) for index, rows, _ in tiles]
    if not blocks:
        return 0.0
    room = int(cfg.core.sbuf.partition_bytes * SHARE) - 2 * k.d * 4 - PART_COLS * 8
    # (each buffer's tiles count on two semaphores each: a part's and SMALL_TILES' of them)
    sems = (cfg.core.semaphores - SEMS_KEPT) // (2 * (len(k.cuts) - 1 + SMALL_TILES))
    k.bufs = max(1, min(len(blocks), room // (k.d * 4), sems))
    with Scheduled(b, cfg, shared_dma=True, fluid=True, dma_parts=True, search=SEARCH) as s:
        for n, block in enumerate(blocks[: k.bufs]):  # (a buffer each, ahead of the rest)
            k.load(n, *block)
            if n == 0:
                k.spread()
        for n, block in enumerate(blocks):
            k.stats(n, *block)
            k.rstd(n, *block)
            k.output(n, *block)
            if n + k.bufs < len(blocks):  # (into this block's buffer, once it is stored)
                k.load(n + k.bufs, *blocks[n + k.bufs])
    k.done()
    return s.makespan


class _Stt:
    """One layer_norm's tiles and its stages per block (module doc)."""

    def __init__(self, b, cfg, x, out, weight, bias, eps):
        self.b, self.cfg, self.x, self.out, self.eps = b, cfg, x, out, eps
        self.weight, self.bias = weight, bias
        self.P, self.f32 = cfg.core.sbuf.partitions, dtype("float32")
        self.d, self.nd = b.tensors[x].shape[-1], len(b.tensors[x].shape)
        self.kept = kept_cols(cfg, self.d)
        lo = self.d - self.kept
        self.cuts = _cuts(lo) + ([lo + c for c in _cuts(self.kept, PSUM_COLS)[1:]]
                                 if self.kept else [])  # fmt: skip
        widest = max(hi - lo for lo, hi in zip(self.cuts, self.cuts[1:]))
        q, qs = dma_queues(cfg, widest * 4), Queues(cfg)
        self.loads, self.stores = qs.loads().take(q), qs.stores().take(q)
        self.bufs, self.w, self.b_, self.ps = 1, None, None, []
        self.junk = b.scratch_tile("lnstt.junk", "junk", (self.P, widest), self.f32)

    def spread(self) -> None:
        """The weight and bias on every partition: each loaded into one partition, times a
        ones row on TensorE (K = 1) into PSUM a bank at a time, the first columns first (the
        first block's first passes need them); the SBUF columns ([P, D] tiles `w`, `b_`)
        copied out (by VectorE: idle until the first block's statistics are taken, ScalarE
        takes them), the kept columns left in their PSUM tiles (`ps`)."""
        b, P, f32 = self.b, self.P, self.f32
        step = min(self.cfg.core.tensor.moving_free_max, self.cfg.core.psum.bank_bytes // 4)
        queues = Queues(self.cfg).loads(1 / 2, 1)
        rows = [b.tile("row", "sbuf", (1, self.d), f32) for _ in range(2)]
        for i, (v, row) in enumerate(zip((self.weight, self.bias), rows)):
            src, dst = ap(v), ap(row)
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=queues[i])
        self.w, self.b_ = tiles = [
            b.scratch_tile(f"lnstt.rows.{v}", f"{v}_rows", (P, self.d), f32)
            for v in (self.weight, self.bias)
        ]
        one = ap(ones(b, f32, P))
        lo = self.d - self.kept
        self.ps = [b.psum(f"{v}_kept", (P, self.kept), f32) for v in (self.weight, self.bias)
                   ] if self.kept else []  # fmt: skip
        span = COPY_BANKS if self.kept >= COPY_BANKS * step else 1
        if self.kept:  # (through the kept tiles' banks in turn, `span` at a time, the kept
            # columns last)
            ps = [ap(t, slice(None), slice(a, a + span * step))
                  for a in range(0, self.kept - span * step + 1, span * step)
                  for t in self.ps]  # fmt: skip
            new = []
        else:
            new = [b.psum("spread", (P, step), f32) for _ in range(SPREAD_BANKS)]
            ps = [ap(t, slice(None), slice(0, step)) for t in new]
        turn = 0
        for a, z in runs(lo, span * step):
            for row, t in zip(rows, tiles):
                bank = ps[turn % len(ps)]
                turn += 1
                first = bank.index[1][0]
                for c0 in range(a, z, step):  # (a matmul a bank)
                    c1 = min(z, c0 + step)
                    acc = ap(bank.name, slice(None), slice(first + c0 - a, first + c1 - a))
                    mv = ap(row, slice(None), slice(c0, c1))
                    b.emit(Matmul, [one, mv], [acc], stationary=one, moving=mv, dst=acc)
                acc = ap(bank.name, slice(None), slice(first, first + z - a))
                o = ap(t, slice(None), slice(a, z))
                act = (Activation, [acc], [o], dict(func="copy", src=acc, dst=o))
                ops = [act if e == S else (TensorCopy, [acc], [o], dict(src=acc, dst=o, engine=e))
                       for e in COPY_ON]  # fmt: skip
                b.emit(*ops[0][:3], choices=ops[1:], **ops[0][3])
        for a, z in bank_runs(self.kept, step):
            for row, t in zip(rows, self.ps):
                acc = ap(t, slice(None), slice(a, z))
                mv = ap(row, slice(None), slice(lo + a, lo + z))
                b.emit(Matmul, [one, mv], [acc], stationary=one, moving=mv, dst=acc)
        b.release(*new)

    def done(self) -> None:
        """The kept PSUM tiles released."""
        self.b.release(*self.ps)

    def part(self, n: int, j: int, p: int) -> object:
        """Block n's part j ([p, its columns])."""
        lo, hi = self.cuts[j], self.cuts[j + 1]
        t = self.b.scratch_tile(f"lnstt.x{n % self.bufs}.{j}", "x", (self.P, hi - lo), self.f32)
        return ap(t, slice(0, p))

    def small(self, key: str, n: int, shape: tuple) -> str:
        """Block n's [P, *shape] fp32 tile `key` (the statistics' and their steps')."""
        return self.b.scratch_tile(f"lnstt.{key}{n % self.bufs}", key, (self.P, *shape),
                                   self.f32)  # fmt: skip

    def cols(self, index: tuple, lo: int, hi: int) -> tuple:
        """A block's `index` (x's leading dims, `layout.row_tiles`) and columns [lo, hi)."""
        return (*index, *[slice(None)] * (self.nd - 1 - len(index)), slice(lo, hi))

    def load(self, n: int, index: tuple, rows: int) -> None:
        """Block n's parts, a load each."""
        for j, (lo, hi) in enumerate(zip(self.cuts, self.cuts[1:])):
            src, dst = ap(self.x, *self.cols(index, lo, hi)), self.part(n, j, rows)
            self.b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.loads.next())

    def stats(self, n: int, index: tuple, rows: int) -> None:
        """Stage 1: x0 copied aside; ScalarE's s = x0 - x in place with its sum, and the sum
        of s^2, a part at a time."""
        b, p, c = self.b, rows, len(self.cuts) - 1
        st = self.small("st", n, (2, c))
        x0 = ap(self.small("x0", n, (1,)), slice(0, p))
        first = ap(self.part(n, 0, p).name, slice(0, p), slice(0, 1))
        self.flex(TensorCopy, [first], [x0], src=first, dst=x0)
        for j in range(c):
            xj = self.part(n, j, p)
            w = self.cuts[j + 1] - self.cuts[j]
            s1, s2 = (ap(st, slice(0, p), i, slice(j, j + 1)) for i in (0, 1))
            b.emit(Activation, [xj, x0], [xj, s1], func="identity", src=xj, dst=xj, scale=-1.0,
                   bias=x0, reduce="add", reduce_dst=s1)  # fmt: skip
            junk = ap(self.junk, slice(0, p), slice(0, w))
            b.emit(Activation, [xj], [junk, s2], func="square", src=xj, dst=junk, reduce="add",
                   reduce_dst=s2)  # fmt: skip

    def rstd(self, n: int, index: tuple, rows: int) -> None:
        """Stage 2: a = x0 - mean and rstd from the parts' sums (and for ScalarE's
        normalisation of the PSUM parts -rstd and a * rstd, its scale and bias)."""
        b, p = self.b, rows
        st, m = self.small("st", n, (2, len(self.cuts) - 1)), self.small("m", n, (2,))
        r = self.small("r", n, (1,))
        sa, ma, ra = ap(st, slice(0, p)), ap(m, slice(0, p)), ap(r, slice(0, p))
        b.emit(TensorReduce, [sa], [ma], alu="add", src=sa, dst=ma, engine=V)
        self.flex(TensorScalar, [ma], [ma], src=ma, dst=ma, op0="multiply", operand0=1 / self.d)
        a, q = ap(m, slice(0, p), slice(0, 1)), ap(m, slice(0, p), slice(1, 2))
        self.flex(ScalarTensorTensor, [a, q], [ra], data=a, op0="multiply", operand0=a,
                  op1="subtract", operand1=q, reverse1=True, dst=ra)  # fmt: skip
        self.flex(TensorScalar, [ra], [ra], src=ra, dst=ra, op0="add", operand0=self.eps,
                  op1="pow", operand1=-0.5)  # fmt: skip
        if self.kept:  # ((a - s) * rstd = s * -rstd + a * rstd)
            sb = self.small("sb", n, (2,))
            nr, ar = ap(sb, slice(0, p), slice(0, 1)), ap(sb, slice(0, p), slice(1, 2))
            self.flex(TensorScalar, [ra], [nr], src=ra, dst=nr, op0="multiply", operand0=-1.0)
            self.flex(TensorScalar, [a, ra], [ar], src=a, dst=ar, op0="multiply", operand0=ra)

    def output(self, n: int, index: tuple, rows: int) -> None:
        """Stage 3: each part's (a - s) * w, then (. * rstd) + b; or (a - s) * rstd, then the
        weight and the bias out of PSUM; its store."""
        b, p = self.b, rows
        a = ap(self.small("m", n, (2,)), slice(0, p), slice(0, 1))
        r = ap(self.small("r", n, (1,)), slice(0, p))
        k = self.d - self.kept
        for j, (lo, hi) in enumerate(zip(self.cuts, self.cuts[1:])):
            xj = self.part(n, j, p)
            if lo >= k:  # (the weight and bias in PSUM)
                sb = self.small("sb", n, (2,))
                nr, ar = ap(sb, slice(0, p), slice(0, 1)), ap(sb, slice(0, p), slice(1, 2))
                ts = (TensorScalar, [xj, nr, ar], [xj], dict(src=xj, dst=xj, op0="multiply",
                                                             operand0=nr, op1="add",
                                                             operand1=ar))  # fmt: skip
                act = (Activation, [xj, nr, ar], [xj], dict(func="identity", src=xj, dst=xj,
                                                            scale=nr, bias=ar))  # fmt: skip
                ops = [act if e == S else (*ts[:3], ts[3] | {"engine": e}) for e in NORM_ON]
                b.emit(*ops[0][:3], choices=ops[1:], **ops[0][3])
                for t, alu in zip(self.ps, ("multiply", "add")):
                    v = ap(t, slice(0, p), slice(lo - k, hi - k))
                    b.emit(TensorTensor, [xj, v], [xj], alu=alu, src0=xj, src1=v, dst=xj,
                           engine=V)  # fmt: skip
            else:
                w = ap(self.w, slice(0, p), slice(lo, hi))
                bj = ap(self.b_, slice(0, p), slice(lo, hi))
                self.flex(ScalarTensorTensor, [xj, a, w], [xj], data=xj, op0="subtract",
                          operand0=a, reverse0=True, op1="multiply", operand1=w,
                          dst=xj)  # fmt: skip
                self.flex(ScalarTensorTensor, [xj, r, bj], [xj], data=xj, op0="multiply",
                          operand0=r, op1="add", operand1=bj, dst=xj)  # fmt: skip
            dst = ap(self.out, *self.cols(index, lo, hi))
            b.emit(DmaCopy, [xj], [dst], src=xj, dst=dst, queue=self.stores.next())

    def flex(self, cls, reads: list, writes: list, **fields) -> None:
        """An instruction on any of FLEX_ON, the list schedule's choice."""
        first, *others = FLEX_ON
        ops = [(cls, reads, writes, fields | {"engine": e}) for e in others]
        self.b.emit(cls, reads, writes, choices=ops, engine=first, **fields)
