"""`layer_norm` over short rows (fp32 rows of `SHORT_ROW` elements or fewer, several to a
partition; `norms._tried`), whose row-by-row passes cost an engine its MIN_II (64 cycles) or its
fixed overhead however few their elements: as `rms_short`, a block is [p, per, D] and the passes
that need no per-row operand go one instruction a block. Three stages, each a block behind the
one before (`LAGS`):

1. load; (an fp32 x and output) the **shift**, each row minus its first element, in place
   (ScalarE, a row slot an instruction with -x0 its per-partition bias; exact, so the
   statistics are those of small numbers: rows of mean 1e4 keep their digits, as
   `norm_stages`' shift); VectorE's `bn_stats` a row slot each (the even and odd halves'
   count, mean and M2: no E[x^2] - E[x]^2, no cancellation);
2. the block's mean and variance from the halves for all its rows at once (`_halves`, eight
   [p, per] steps instead of a `bn_aggr` a row slot), rstd = (var + eps) ^ -0.5 and -mean *
   rstd; the normalisation x * rstd - mean * rstd a row slot each (ScalarE's `activation` with
   rstd its scale, or a `tensor_scalar` on GpSimd or VectorE);
3. the weight and the bias, one `tensor_tensor` each for the block with the weight (bias)
   broadcast along the rows (`w[:, *per, :]`), on VectorE (fp32: reading their copies in PSUM,
   one cycle an element, not two) or GpSimd; store.

Every pass but the shift and bn_stats is recorded with its other engines as choices
(`schedule.Scheduled`, with its descent over them): the list schedule puts each on the engine
that frees first (the same values on any), so the engines' shares even out over the program (a
plan of shares by the engines' cost models, recorded first, changed nothing: fp32 rows of 96
and 100, 56.5 and 55.1 us either way). The first and last blocks are cut smaller
(`rms_short._taper`). A row's values do not depend on the block it falls in: the same at LNC 1
and 2. trn2 LNC 2, 16 MiB, fp32 rows of 96 61.5 -> 54.4 us (75.3% -> 85.1%), of 100 60.4 ->
55.1 us (76.6% -> 84.0%).
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import (
    Activation,
    BnStats,
    DmaCopy,
    ScalarTensorTensor,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_tiles
from trnsim.kernels.norm_affine import psum_cols, spread, spread_psum
from trnsim.kernels.queues import Queues
from trnsim.kernels.rms_short import _taper, block_rows
from trnsim.kernels.row_plan import G, V
from trnsim.kernels.schedule import Scheduled

__all__ = ["SHORT_ROW", "lower_norm_short"]

SHORT_ROW = 128  # layer_norm rows this short go here (`norms._tried`; fp32 rows of 200 ran
# slower so: trn2 LNC 2, 16 MiB, 54.3 -> 56.0 us)
MIN_ROW = 2  # ... and at least this long (bn_stats' odd half not empty)
BLOCK_BYTES = 8192  # x's bytes a partition of a block (trn2 LNC 2, 16 MiB, fp32 rows of 96:
# 4096 60.3 us, 8192 56.9, 12288 60.4)
TAPER = (4, 2)  # the first and last blocks cut so (`rms_short._taper`)
UNIT = 4  # rows a partition a multiple of this, so the taper's quarters apply (trn2 LNC 2, 16
# MiB, fp32 rows of 96, 21 rows a partition -> 20: 56.5 -> 54.4 us; of 80, 25 -> 24: 58.7 ->
# 54.9 us)
LAGS = (0, 1, 2)  # the stages' lags behind stage 1, in blocks
BUFS = 12  # blocks rotating through buffers (fp32 rows of 96, 100: 8 56.6, 55.6 us; 12 56.5,
# 55.1; 6 57.7, 55.6)
SHARE = 0.45  # the buffers' share of a partition
SEARCH = 150  # the list schedule's descent over the choices, schedules at most (fp32 rows of
# 96: none 58.1 us, 150 56.5, 300 56.5)
NORM = (G, V)  # the engines beside ScalarE of the normalisation (a row slot each; the shift is
# ScalarE's alone: fp32 rows of 100 with GpSimd's too, 57.7 us against 55.6)


def lower_norm_short(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, weight, bias,
                     eps: float, share: tuple[int, int], plan=None) -> float:  # fmt: skip
    """out = layer_norm(x, [D], weight, bias, eps) over rows [lo, hi) of `share` (module
    doc; `plan`: a subclass of `_Ln`, `norm_fused`'s); the list schedule's estimated span."""
    k = (plan or _Ln)(b, cfg, x, out, weight, bias, eps)
    tx, d = b.tensors[x], k.d
    per_row = d * (tx.dtype.itemsize + (k.odt.itemsize if k.odt != k.xdt else 0))
    most = max(1, k.block_bytes() // tx.dtype.itemsize // d)  # rows a partition
    room = int(cfg.core.sbuf.partition_bytes * SHARE) - 2 * d * 4 - k.ring_bytes(most)
    k.per, blocks = row_tiles(tx.shape, k.P, share, most, max(1, room // (BUFS * per_row)),
                              pow2=False, unit=k.UNIT)  # fmt: skip
    k.bufs = max(1, min(BUFS, room // (k.per * per_row)))
    q, qs = dma_queues(cfg, k.per * d * tx.dtype.itemsize), Queues(cfg)
    k.loads, k.stores = qs.loads().take(q), qs.stores().take(q)
    if not blocks:
        return 0.0
    blocks = _taper(blocks, k.per, k.TAPER)
    with Scheduled(b, cfg, shared_dma=True, search=k.SEARCH) as s:
        _emit(k, blocks)
    b.release(*k.psum.values())
    return s.makespan


def _emit(k: _Ln, blocks: list) -> None:
    """The weight and bias spread over the partitions, then the blocks' three stages, each a
    block (`LAGS`) behind the one before."""
    names = [v for v in (k.weight, k.bias) if v is not None]
    kept = psum_cols(k.cfg, len(names), k.d, 0) if k.odt == k.xdt == k.f32 else 0
    if names and kept >= k.d:  # (fp32: VectorE's weight and bias read PSUM, N cycles not 2N)
        tiles, ps = spread_psum(k.b, k.cfg, names, k.d, kept, 0, k.loads)
        k.rows, k.psum = dict(zip(names, tiles)), dict(zip(names, ps))
    elif names:
        k.rows = dict(zip(names, spread(k.b, k.cfg, names, k.d, k.loads)))
    k.prepare()
    lag = tuple(min(v, k.bufs - 1) for v in LAGS)
    for n in range(len(blocks) + max(lag)):
        for stage, late in zip((k.first, k.second, k.third), lag):
            if 0 <= n - late < len(blocks) and (late or n < len(blocks)):
                stage(n - late, *blocks[n - late])


class _Ln:
    """One layer_norm's tiles and its three stages per block (module doc)."""

    UNIT, TAPER, SEARCH = UNIT, TAPER, SEARCH  # (a subclass' own: `norm_fused`)

    def __init__(self, b, cfg, x, out, weight, bias, eps):
        self.b, self.cfg, self.x, self.out, self.eps = b, cfg, x, out, eps
        self.weight, self.bias = weight, bias
        self.P, self.f32 = cfg.core.sbuf.partitions, dtype("float32")
        self.xdt, self.odt = b.tensors[x].dtype, b.tensors[out].dtype
        self.d = b.tensors[x].shape[-1]
        # in place, so x's own dtype must hold the shifted values exactly (`norm_stages`)
        self.shift = self.odt.itemsize >= 4 and self.xdt.itemsize >= 4
        self.per, self.bufs = 1, 1
        self.rows: dict[str, str] = {}  # the weight and bias spread over the partitions
        self.psum: dict[str, str] = {}  # ... and in PSUM (fp32: `_emit`)
        self.loads = self.stores = None

    def block_bytes(self) -> int:
        """x's bytes a partition of a block (`BLOCK_BYTES`; a subclass' own by row length)."""
        return BLOCK_BYTES

    def ring_bytes(self, most: int) -> int:
        """SBUF a partition the plan takes beside its blocks' buffers (of `most` rows a
        partition at most)."""
        return 0

    def prepare(self) -> None:
        """What the plan makes once, after the weight and bias are spread."""

    def tile(self, key: str, n: int, shape, dt) -> str:
        return self.b.scratch_tile(f"lns.{key}{n % self.bufs}", key, shape, dt)

    rows_of = block_rows

    def col(self, key: str, n: int, p: int, per: int, j=None):
        """Block n's fp32 [p, per] column tile `key`, or its row slot j ([p, 1])."""
        t = self.tile(key, n, (self.P, self.per), self.f32)
        return ap(t, slice(0, p), slice(0, per) if j is None else slice(j, j + 1))

    def stat(self, n: int, p: int, per: int, i=None, j=None):
        """Block n's bn_stats tile [p, per, 6]: field i of every row slot, or slot j's six."""
        t = self.tile("st", n, (self.P, self.per, 6), self.f32)
        if j is not None:
            return ap(t, slice(0, p), j)
        return ap(t, slice(0, p), slice(0, per), i)

    def put(self, options: list) -> None:
        """Emit options[0] ((cls, reads, writes, fields)), the others (the same pass on other
        engines) the list schedule's choices (module doc)."""
        cls, reads, writes, fields = options[0]
        self.b.emit(cls, reads, writes, choices=options[1:], **fields)

    def first(self, n: int, index: tuple, rows: int, per: int) -> None:
        """Stage 1: load; the shift (fp32); bn_stats a row slot each."""
        b, p = self.b, rows // per
        xa, src = self.rows_of("x", n, p, per), ap(self.x, *index)
        b.emit(DmaCopy, [src], [xa], src=src, dst=xa, queue=self.loads[n])
        if self.shift:
            first = ap(xa.name, slice(0, p), slice(0, per), 0)
            nx = self.col("nx", n, p, per)
            self.put([(TensorScalar, [first], [nx],
                       dict(src=first, dst=nx, op0="multiply", operand0=-1.0, engine=e))
                      for e in (V, G)])  # fmt: skip
            for j in range(per):
                xj, c = self.rows_of("x", n, p, per, j), self.col("nx", n, p, per, j)
                b.emit(Activation, [xj, c], [xj], func="copy", src=xj, dst=xj, bias=c)
        for j in range(per):
            xj, st = self.rows_of("x", n, p, per, j), self.stat(n, p, per, j=j)
            b.emit(BnStats, [xj], [st], src=xj, dst=st)

    def second(self, n: int, index: tuple, rows: int, per: int) -> None:
        """Stage 2: mean, rstd and -mean * rstd for the block (`_halves`); the normalisation a
        row slot each, into the output tile."""
        p = rows // per
        self._halves(n, p, per)
        for j in range(per):
            xj, oj = self.rows_of("x", n, p, per, j), self.rows_of("o", n, p, per, j)
            rj, nj = self.col("rs", n, p, per, j), self.col("nb", n, p, per, j)
            self.put([(Activation, [xj, rj, nj], [oj],
                       dict(func="copy", src=xj, dst=oj, scale=rj, bias=nj))]
                     + [(TensorScalar, [xj, rj, nj], [oj],
                         dict(src=xj, dst=oj, op0="multiply", operand0=rj, op1="add",
                              operand1=nj, engine=e)) for e in NORM])  # fmt: skip

    def _halves(self, n: int, p: int, per: int) -> None:
        """mean = mo + (me - mo) ne / D, var D = M2e + M2o + (me - mo)^2 ne no / D (counts ne,
        no of the even and odd halves), rstd = (var + eps) ^ -0.5, nb = -mean * rstd: [p, per]
        steps on VectorE or GpSimd, each where the list schedule finds it free sooner (q
        before the mean, which would spare an engine's commit stall, ran slower: trn2 LNC 2, 16
        MiB, fp32 rows of 96 56.5 -> 58.4 us)."""
        d, ne = self.d, (self.d + 1) // 2
        no = d - ne
        f = [self.stat(n, p, per, i) for i in range(6)]
        dm, v, q = (self.col(c, n, p, per) for c in ("dm", "v", "q"))
        mean, rs, nb = (self.col(c, n, p, per) for c in ("mean", "rs", "nb"))
        steps = [
            (TensorTensor, [f[1], f[4]], [dm], dict(alu="subtract", src0=f[1], src1=f[4], dst=dm)),
            (TensorTensor, [f[2], f[5]], [v], dict(alu="add", src0=f[2], src1=f[5], dst=v)),
            (ScalarTensorTensor, [dm, f[4]], [mean],
             dict(data=dm, op0="multiply", operand0=ne / d, op1="add", operand1=f[4], dst=mean)),
            (TensorTensor, [dm], [q], dict(alu="multiply", src0=dm, src1=dm, dst=q)),
            (ScalarTensorTensor, [q, v], [v],
             dict(data=q, op0="multiply", operand0=ne * no / d, op1="add", operand1=v, dst=v)),
            (TensorScalar, [v], [rs],
             dict(src=v, dst=rs, op0="multiply", operand0=1.0 / d, op1="add",
                  operand1=self.eps)),
            (TensorScalar, [rs], [rs],
             dict(src=rs, dst=rs, op0="pow", operand0=-0.5)),
            (ScalarTensorTensor, [mean, rs], [nb],
             dict(data=mean, op0="multiply", operand0=-1.0, op1="multiply", operand1=rs,
                  dst=nb)),
        ]  # fmt: skip
        for cls, reads, writes, fields in steps:
            self.put([(cls, reads, writes, fields | {"engine": e}) for e in (V, G)])

    def third(self, n: int, index: tuple, rows: int, per: int) -> None:
        """Stage 3: the weight and the bias, broadcast along the block's rows; store."""
        b, p = self.b, rows // per
        o = self.rows_of("o", n, p, per)
        for v, alu in ((self.weight, "multiply"), (self.bias, "add")):
            if v is None:
                continue
            ops = []
            for e in (V, G):  # (GpSimd does not read PSUM)
                t = self.psum.get(v, self.rows[v]) if e == V else self.rows[v]
                w = ap(t, slice(0, p), slice(None))._replace(bcast=((1, per),))
                ops.append((TensorTensor, [o, w], [o], dict(alu=alu, src0=o, src1=w, dst=o,
                                                            engine=e)))  # fmt: skip
            self.put(ops)
        dst = ap(self.out, *index)
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=self.stores[n])
