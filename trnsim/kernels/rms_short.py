"""`rms_norm` over short rows (SHORT_ROW elements or fewer), whose row-by-row instructions
cost an engine its MIN_II (64 cycles) however few their elements.

A block is [p, per, D] (`per` rows to each of up to 128 partitions); three stages, each a
block behind the one before (`lower_rms_short`):

1. load; ScalarE's squares of (x / sqrt(D)): the first `fs` row slots one instruction each with
   the add reduction (their sums: the accumulator read, ~64 cycles a row), the others by one
   instruction for the block into an fp32 scratch block;
2. VectorE's sums of those by one `tensor_reduce` over the block's last axis; GpSimd's rstd =
   (mean(x^2) + eps) ^ -0.5 for the block ([p, per]; in two halves where GpSimd then takes
   x * rstd: its first row reads the first half, not what the instruction just before it
   wrote, so it does not wait the engine's commit latency); x * rstd row by row (a per-row
   operand: 64 cycles a row of 64 on GpSimd or ScalarE, VectorE's four elements a cycle do
   not help under its MIN_II);
3. (three blocks behind stage 1) the weight, one `tensor_tensor` for the block with the
   weight broadcast along the rows (`w[:, *per, :]`: one instruction, not one a row), on
   VectorE (one cycle an element for 16-bit data) or GpSimd (two); store.

`fs`, and the shares of the blocks whose x * rstd ScalarE takes (`activation copy` with rstd
as its scale) and whose weight GpSimd takes, start as those that make the busiest engine's
time per block least, as the engines' cost models give it (`_plan`); `_choose` then moves
them a step at a time while the list schedule's model of the whole program ends sooner. The
first and last blocks are cut smaller (`_taper`), and the last one's pieces give ScalarE all
their sums and x * rstd (VectorE and GpSimd still have the blocks before to finish; bf16 rows
of 64: 78.4% -> 82.9% with the rstd halves and `_choose`). The sums are fp32 either way (the
values the row kernel's ScalarE statistics gave), x * rstd and the weight round as `norms`'
do: the same values as before.
"""

from __future__ import annotations

import copy
import itertools
import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import Activation, DmaCopy, TensorReduce, TensorScalar, TensorTensor
from trnsim.kernels.balance import cost_ns, dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_tiles
from trnsim.kernels.norm_affine import spread
from trnsim.kernels.queues import Queues
from trnsim.kernels.row_plan import G, S, Spread, V
from trnsim.kernels.schedule import Scheduled

__all__ = ["SHORT_ROW", "lower_rms_short"]

SHORT_ROW = 320  # rows this short go here (`norms.lower_norm`; at 128 before: trn2 LNC 2, 16
# MiB, us, bf16 rows of 129 58.7 -> 50.6, 200 52.7 -> 52.0, 256 52.0 -> 51.0, 320 53.3 -> 51.9;
# fp32 200 51.9 -> 49.7, 256 51.9 -> 49.5, 320 51.6 -> 49.2; bf16 rows of 384 and fp32 of 512
# ran slower here, 50.6 -> 51.2, 48.7 -> 49.1)
BLOCK_BYTES = 4096  # x's bytes a partition of a block (512 KiB blocks: 16 a core at 16 MiB)
TAPER = (4, 2)  # the first and last blocks cut in blocks of a quarter, a half (and a quarter):
# the first loads sooner, the last one's chain is short (bf16 rows of 64: 76.7 -> 78.4%)
LAGS = (0, 1, 3)  # the stages' lags behind stage 1, in blocks (the weight three behind: 71.1
# -> 76.7% against two)
BUFS = 12  # blocks rotating through buffers (loads run that far ahead)
SHARE = 0.45  # the buffers' share of a partition (with the squares' scratch)
STEPS = 16  # the shares' step (`_choose`)
DESCENT = 16  # the most steps `_choose` takes
CHOOSE_BLOCKS = 16  # the whole blocks of the program `_choose` models, at most
SQ_SLOTS = 2  # scratch blocks of the squares (written in stage 1, read in stage 2)
_CHOSEN: dict = {}  # the plan `_choose` chose, by the blocks' shapes


def lower_rms_short(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, weight, eps: float,
                    share: tuple[int, int]) -> None:  # fmt: skip
    """out = rms_norm(x, [D], weight, eps) over rows [lo, hi) of `share` (module doc)."""
    k = _Rms(b, cfg, x, out, weight, eps)
    tx, d, P = b.tensors[x], k.d, k.P
    per_row = d * (tx.dtype.itemsize + (k.odt.itemsize if k.odt != k.xdt else 0))
    most = max(1, BLOCK_BYTES // tx.dtype.itemsize // d)  # rows a partition
    room = int(cfg.core.sbuf.partition_bytes * SHARE) - SQ_SLOTS * most * d * 4 - d * 4
    k.per, blocks = row_tiles(tx.shape, P, share, most, max(1, room // (BUFS * per_row)))
    k.bufs = max(1, min(BUFS, room // (k.per * per_row)))
    q, qs = dma_queues(cfg, k.per * d * tx.dtype.itemsize), Queues(cfg)
    k.loads, k.stores = qs.loads().take(q), qs.stores().take(q)
    if not blocks:
        return
    blocks = _taper(blocks, k.per, TAPER)
    k.steps = _choose(k, blocks)
    _emit(k, blocks)


def _emit(k: _Rms, blocks: list) -> None:
    """The weight spread over the partitions, then the blocks' three stages, each a block
    (`LAGS`) behind the one before."""
    if k.weight is not None:
        k.w = spread(k.b, k.cfg, [k.weight], k.d, k.loads)[0]
    lag = tuple(min(v, k.bufs - 1) for v in LAGS)
    for n in range(len(blocks) + max(lag)):
        for stage, late in zip((k.squares, k.normalised, k.weighted), lag):
            if 0 <= n - late < len(blocks) and (late or n < len(blocks)):
                stage(n - late, *blocks[n - late])


def _choose(k: _Rms, blocks: list) -> list[tuple]:
    """Each block's (fs, x * rstd's engine, the weight's engine): from `_plan`'s, a descent
    over fs (a row slot) and the shares of x * rstd on ScalarE and of the weight on GpSimd (a
    block in 16) to the plan whose program the list schedule's model (`schedule.Scheduled`,
    in the order emitted) ends soonest: the plan evens out the engines' time per block, but
    ScalarE starts each block's chain and VectorE ends it, so the fill and the drain want
    other shares. The last block's taper pieces give ScalarE all their sums and their
    x * rstd (`_steps`). Past CHOOSE_BLOCKS whole blocks, the shares are chosen on a program
    of that many (and the cut pieces): the model's time grows faster than the blocks."""
    fs, norms, weights = _plan(k)
    key = (k.per, k.bufs, k.d, k.xdt.name, k.odt.name, k.weight is None,
           tuple((rows, per) for _, rows, per in blocks))  # fmt: skip
    hit = _CHOSEN.get(key)
    if hit is not None and hit[0] is k.cfg:
        return hit[1]
    head = next(i for i, (_, _, per) in enumerate(blocks) if per == k.per or i == len(blocks) - 1)
    tail = len(blocks) - 1 - next(i for i in range(len(blocks) - 1, head - 1, -1)
                                  if blocks[i][2] == k.per or i == head)  # fmt: skip
    model = blocks[: head + CHOOSE_BLOCKS] + blocks[len(blocks) - tail :]
    if len(model) >= len(blocks):
        model = blocks
    q = STEPS
    spans: dict[tuple, float] = {}

    def shares(at: tuple) -> tuple:
        f, ns, wg = at
        return f, {G: 1 - ns / q, S: ns / q}, {V: 1 - wg / q, G: wg / q}

    def span(at: tuple) -> float:
        if at not in spans:
            spans[at] = _span(k, model, _steps(k, model, *shares(at)))
        return spans[at]

    plan = (fs, round(norms[S] * q), round(weights[G] * q) if k.weight is not None else 0)
    ends = []
    for at in (plan, plan[:1] + (0,) + plan[2:]):  # (and x * rstd all on GpSimd)
        for _ in range(DESCENT):
            near = [at]
            for i, most in enumerate((k.per, q, q if k.weight is not None else 0)):
                near += [at[:i] + (at[i] + m,) + at[i + 1:] for m in (-1, 1)
                         if 0 <= at[i] + m <= most]  # fmt: skip
            best = min(near, key=span)
            if best == at:
                break
            at = best
        ends.append(at)
    at = min(ends, key=span)
    if len(_CHOSEN) >= 64:
        _CHOSEN.clear()
    _CHOSEN[key] = (k.cfg, _steps(k, blocks, *shares(at)))
    return _CHOSEN[key][1]


def _steps(k: _Rms, blocks: list, fs: int, norms: dict, weights: dict) -> list[tuple]:
    """Each block's (fs, x * rstd's engine, the weight's engine) for the plan (`_choose`)."""
    ns, ws = Spread(norms, len(blocks)), Spread(weights, len(blocks))
    steps = [(min(per, round(fs * per / k.per)), ns(), ws()) for _, _, per in blocks]
    tail = 0  # the last block's taper pieces
    while tail < len(blocks) - 1 and blocks[-1 - tail][2] < k.per:
        tail += 1
    for i in range(len(blocks) - tail, len(blocks)):
        steps[i] = (blocks[i][2], S, steps[i][2])
    return steps


def _span(k: _Rms, blocks: list, steps: list) -> float:
    """The estimated ns of the lowering with `steps` (`_choose`), built apart."""
    tb = KernelBuilder(k.b.tensors)
    tb.part = k.b.part
    t = copy.copy(k)
    t.b, t.steps = tb, steps
    with Scheduled(tb, k.cfg, reorder=False) as s:
        _emit(t, blocks)
    return s.makespan


def _taper(blocks, per: int, parts: list[int]):
    """(index, rows, per) of each block: the first and last of `blocks` ((index, rows, k):
    [p, k, D] each) cut, where k is per, into blocks of per / part rows a partition for each
    part of `parts` (rows of a 2-D run of x only), so the first block loads sooner and the last
    one's chain is short."""
    out = list(blocks)
    if not parts or len(blocks) < 3:
        return out

    def cut(block, order):
        index, rows, q = block
        last = index[-1] if index else None
        whole = isinstance(last, slice) and last.stop - last.start == rows
        if not whole or q != per or any(per % part for part in order):
            return [block]
        pieces, lo = [], last.start
        for part in order:
            n = rows // part
            pieces.append((index[:-1] + (slice(lo, lo + n),), n, per // part))
            lo += n
        if lo < last.stop:
            pieces.append(
                (
                    index[:-1] + (slice(lo, last.stop),),
                    last.stop - lo,
                    per * (last.stop - lo) // rows,
                )
            )
        return pieces

    return cut(out[0], parts) + out[1:-1] + cut(out[-1], parts[::-1])


def block_rows(k, key: str, n: int, p: int, per: int, j=None):
    """Block n's x (or out, `o`: x's own tile when the dtypes agree) [p, per, D], or row slot
    j's [p, D], of a short-row plan `k` (its `tile`, P, per, d, xdt, odt; `norm_short` too)."""
    if key == "o" and k.odt == k.xdt:
        key = "x"
    t = k.tile(key, n, (k.P, k.per, k.d), k.xdt if key == "x" else k.odt)
    return ap(t, slice(0, p), slice(0, per)) if j is None else ap(t, slice(0, p), j)


class _Rms:
    """One rms_norm's tiles and its three stages per block (module doc)."""

    def __init__(self, b, cfg, x, out, weight, eps):
        self.b, self.cfg, self.x, self.out, self.weight, self.eps = b, cfg, x, out, weight, eps
        self.P, self.f32 = cfg.core.sbuf.partitions, dtype("float32")
        self.xdt, self.odt = b.tensors[x].dtype, b.tensors[out].dtype
        self.d = b.tensors[x].shape[-1]
        self.per, self.bufs, self.w = 1, 1, None
        self.sdt = self.f32  # the sums' and the squares' dtype
        self.loads = self.stores = None
        self.steps: list[tuple] = []  # each block's (fs, x * rstd's engine, the weight's)

    def tile(self, key: str, n: int, shape, dt, slots: int | None = None) -> str:
        slot = n % (slots or self.bufs)
        return self.b.scratch_tile(f"rms.{key}{slot}", key, shape, dt)

    rows = block_rows

    def col(self, key: str, n: int, p: int, lo: int, hi: int):
        """Block n's [p, per] column tile `key` (fp32; the sums `sdt`), its row slots
        [lo, hi)."""
        t = self.tile(key, n, (self.P, self.per), self.sdt if key == "ms" else self.f32)
        return ap(t, slice(0, p), slice(lo, hi))

    def squares(self, n: int, index: tuple, rows: int, per: int) -> None:
        """Stage 1: load; ScalarE's squares of x / sqrt(D): the block's rows from `fs` on into
        the scratch block, the first `fs` each with its sum (module doc)."""
        b, p, fs = self.b, rows // per, self.steps[n][0]
        xa, src = self.rows("x", n, p, per), ap(self.x, *index)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=self.loads[n])
        scale = 1 / math.sqrt(self.d)
        if fs < per:
            sq = self.sq(n, p, fs, per)
            xs = ap(xa.name, slice(0, p), slice(fs, per))
            b.emit(Activation, [xs], [sq], func="square", src=xs, dst=sq, scale=scale)
        junk = ap(self.b.scratch_tile("rms.junk", "junk", (self.P, self.d), self.xdt),
                  slice(0, p))  # fmt: skip
        for j in range(fs):
            xj, sj = self.rows("x", n, p, per, j), self.col("ms", n, p, j, j + 1)
            b.emit(Activation, [xj], [junk, sj], func="square", src=xj, dst=junk, scale=scale,
                   reduce="add", reduce_dst=sj)  # fmt: skip

    def sq(self, n: int, p: int, lo: int, hi: int):
        """Block n's squares (scratch, `sdt`) of its row slots [lo, hi)."""
        t = self.tile("sq", n, (self.P, self.per, self.d), self.sdt, SQ_SLOTS)
        return ap(t, slice(0, p), slice(lo, hi))

    def normalised(self, n: int, index: tuple, rows: int, per: int) -> None:
        """Stage 2: VectorE's sums of the scratch block's rows; rstd (GpSimd); x * rstd."""
        b, p, fs = self.b, rows // per, self.steps[n][0]
        if fs < per:
            sq, ms = self.sq(n, p, fs, per), self.col("ms", n, p, fs, per)
            b.emit(TensorReduce, [sq], [ms], alu="add", src=sq, dst=ms)
        e = self.steps[n][1]  # x * rstd row by row, on the engine `norms` gives this block
        cuts = (0, per // 2, per) if e == G and per > 1 else (0, per)
        for lo, hi in zip(cuts, cuts[1:]):
            ms, rs = self.col("ms", n, p, lo, hi), self.col("rs", n, p, lo, hi)
            b.emit(TensorScalar, [ms], [rs], src=ms, dst=rs, op0="add", operand0=self.eps,
                   op1="pow", operand1=-0.5, engine=G)  # fmt: skip
        for j in range(per):
            xj, oj = self.rows("x", n, p, per, j), self.rows("o", n, p, per, j)
            rj = self.col("rs", n, p, j, j + 1)
            if e == S:
                b.emit(Activation, [xj, rj], [oj], func="copy", src=xj, dst=oj, scale=rj)
            else:
                b.emit(TensorScalar, [xj, rj], [oj], src=xj, dst=oj, op0="multiply",
                       operand0=rj, engine=e)  # fmt: skip

    def weighted(self, n: int, index: tuple, rows: int, per: int) -> None:
        """Stage 3: the weight, broadcast along the block's rows, on the engine `weights`
        gives this block; store."""
        b, p = self.b, rows // per
        o = self.rows("o", n, p, per)
        if self.w is not None:
            w = ap(self.w, slice(0, p), slice(None))._replace(bcast=((1, per),))
            b.emit(TensorTensor, [o, w], [o], alu="multiply", src0=o, src1=w, dst=o,
                   engine=self.steps[n][2])  # fmt: skip
        dst = ap(self.out, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=self.stores[n])


def _plan(k: _Rms) -> tuple[int, dict, dict]:
    """(fs, x * rstd's shares of the blocks on GpSimd and ScalarE, the weight's on VectorE and
    GpSimd) that make the busiest
    engine's time per block least, from the engines' cost models (`balance.cost_ns`): ScalarE
    the squares (a block's, and fs rows' with their sums), VectorE the other rows' sums and
    its share of the weight, GpSimd rstd and its shares of x * rstd (row by row; ScalarE the
    others) and of the weight."""
    c, P, per, d, cfg = KernelBuilder({}), k.P, k.per, k.d, k.cfg
    x = c.tile("x", "sbuf", (P, per, d), k.xdt)
    o = ap(c.tile("o", "sbuf", (P, per, d), k.odt))
    sq, ms = c.tile("sq", "sbuf", (P, per, d), k.sdt), c.tile("ms", "sbuf", (P, per), k.sdt)
    w = ap(c.tile("w", "sbuf", (P, d), k.odt))._replace(bcast=((1, per),))
    row, col = ap(x, slice(None), 0), ap(ms, slice(None), slice(0, 1))
    with_sum = cost_ns(c, cfg, Activation, waits=False, func="square", src=row, dst=row,
                       reduce="add", reduce_dst=col)  # fmt: skip

    def scalar(fs: int) -> float:
        rest = ap(x, slice(None), slice(fs, per))
        block = cost_ns(c, cfg, Activation, func="square", src=rest, dst=rest) if fs < per else 0
        return block + fs * with_sum

    def sums(fs: int) -> float:
        if fs == per:
            return 0.0
        src, dst = ap(sq, slice(None), slice(fs, per)), ap(ms, slice(None), slice(fs, per))
        return cost_ns(c, cfg, TensorReduce, alu="add", src=src, dst=dst)

    weight = {e: cost_ns(c, cfg, TensorTensor, e, alu="multiply", src0=o, src1=w, dst=o)
              if k.weight is not None else 0.0 for e in (V, G)}  # fmt: skip

    def rstd_ns(lo: int, hi: int, waits: bool) -> float:
        v = ap(ms, slice(None), slice(lo, hi))
        return cost_ns(c, cfg, TensorScalar, G, waits=waits, op0="add", operand0=1.0,
                       op1="pow", operand1=-0.5, src=v, dst=v)  # fmt: skip

    rstd, split = rstd_ns(0, per, True), per > 1  # rstd in halves before GpSimd's x * rstd
    halves = rstd_ns(0, per // 2, True) + rstd_ns(per // 2, per, False) - rstd if split else 0
    norm = {G: halves + cost_ns(c, cfg, TensorScalar, G, after=not split, src=row, dst=row,
                                op0="multiply", operand0=col)
            + (per - 1) * cost_ns(c, cfg, TensorScalar, G, waits=False, src=row, dst=row,
                                  op0="multiply", operand0=col),
            S: cost_ns(c, cfg, Activation, func="copy", src=row, dst=row, scale=col) + (per - 1)
            * cost_ns(c, cfg, Activation, waits=False, func="copy", src=row, dst=row,
                      scale=col)}  # fmt: skip
    steps = 16
    best = None
    for fs in range(per + 1):
        s, v0 = scalar(fs), sums(fs)
        for i, m in itertools.product(range(steps + 1), repeat=2):
            a, z = i / steps, m / steps  # the weight's share on VectorE, x * rstd's on ScalarE
            t = max(s + z * norm[S], v0 + a * weight[V],
                    rstd + (1 - z) * norm[G] + (1 - a) * weight[G])  # fmt: skip
            if best is None or t < best[0] - 1e-9:
                best = (t, fs, a, z)
    _, fs, a, z = best
    return fs, {G: 1 - z, S: z}, {V: a, G: 1 - a}
