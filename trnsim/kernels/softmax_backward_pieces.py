"""`_softmax_backward_data` over rows too long for one partition (past one VectorE instruction
or a buffer: refused before, whatever their length): grad_input = y * (g - sum(g * y)) in
pieces over the partitions (`ragged`: k partitions a row, a remainder column where the length
is not a multiple of k; a multiple of 128 has none).

Per unit (g rows a tile, or a row of t segments): g and y loaded; g * y on GpSimd (the work
dtype, `pointwise.work_dtype`), its remainder column's empty partitions set to 0, each
partition's sum of it (VectorE, fp32); the row's sum over its k partitions (`Groups.sums`,
TensorE: each partition gets its row's), then one pass (g - sum) * y (`scalar_tensor_tensor`,
VectorE or GpSimd as the list schedule finds either free sooner) into out's tile, and the
store. The units' instructions go in a list schedule's order (`schedule.Scheduled`)."""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.isa import Engine, ScalarTensorTensor, TensorCopy, TensorReduce, TensorTensor
from trnsim.kernels.balance import dma_queues
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.pointwise import work_dtype
from trnsim.kernels.queues import Queues
from trnsim.kernels.ragged import Small, ragged_layout, units
from trnsim.kernels.row_pieces import Groups
from trnsim.kernels.schedule import Scheduled

__all__ = ["lower_softmax_backward_pieces"]

V, G = Engine.VECTOR, Engine.GPSIMD
PIECE_BYTES = 4096  # a tile's main columns' bytes a partition at most (of the widest dtype)
BUFS = 3  # units resident


def lower_softmax_backward_pieces(b: KernelBuilder, cfg: ChipConfig, g: str, y: str, out: str,
                                  rows: tuple[int, int]) -> None:  # fmt: skip
    """out = y * (g - sum(g * y, -1)) over flattened rows [lo, hi) (module doc)."""
    tg, ty, to = (b.tensors[n] for n in (g, y, out))
    P, f32 = cfg.core.sbuf.partitions, dtype("float32")
    isz = max(t.dtype.itemsize for t in (tg, ty, to))
    rag = ragged_layout(tg.shape[-1], max(1, PIECE_BYTES // isz), P)
    wdt = work_dtype(tg.dtype, ty.dtype, to.dtype)
    groups, small = Groups(b, cfg, rag.k), Small(cfg)
    qs, q = Queues(cfg), dma_queues(cfg, rag.f * isz)
    loads, stores = qs.loads().take(max(2, q)), qs.stores().take(max(2, q))
    nl = ns = 0

    def tile(key: str, n: int, s: int, dt) -> str:
        return b.scratch_tile(f"smb.{key}{n % BUFS}.{s}", key, (P, rag.width(s)), dt)

    def col(key: str, n: int, w: int = 1) -> str:
        return b.scratch_tile(f"smb.{key}{n % BUFS}", key, (P, w), f32)

    with Scheduled(b, cfg, shared_dma=True):
        for n, (unit, nr) in enumerate(units(tg.shape, rag, rows)):
            p = nr * rag.k
            sums = col("s", n, rag.t)
            tiles = []
            for s in range(rag.t):
                ga, ya = tile("g", n, s, tg.dtype), tile("y", n, s, ty.dtype)
                for name, t in ((g, ga), (y, ya)):
                    rag.load(b, name, unit, nr, s, t, lambda q=loads[nl]: q, small.load)
                    nl += 1
                prod = tile("p", n, s, wdt)
                pa, gp, yp = (ap(t, slice(0, p)) for t in (prod, ga, ya))
                b.emit(TensorTensor, [gp, yp], [pa], alu="multiply", src0=gp, src1=yp, dst=pa,
                       engine=G)  # fmt: skip
                if s == rag.t - 1 and rag.r:  # (g and y hold no element there)
                    rag.mask(b, prod, 0.0, p)
                sc = ap(sums, slice(0, p), slice(s, s + 1))
                b.emit(TensorReduce, [pa], [sc], alu="add", src=pa, dst=sc)
                tiles.append((ga, ya))
            total = ap(sums, slice(0, p), slice(0, 1))
            if rag.t > 1:
                total = ap(col("st", n), slice(0, p))
                sa = ap(sums, slice(0, p))
                b.emit(TensorReduce, [sa], [total], alu="add", src=sa, dst=total)
            row = ap(col("row", n), slice(0, p))  # each partition's row's sum (of g * y)
            ps = groups.sums(total, p)
            b.emit(TensorCopy, [ps], [row], src=ps, dst=row)
            for s, (ga, ya) in enumerate(tiles):
                gp, yp = ap(ga, slice(0, p)), ap(ya, slice(0, p))
                o = tile("o", n, s, to.dtype)
                oa = ap(o, slice(0, p))
                f = dict(data=gp, op0="subtract", operand0=row, op1="multiply", operand1=yp,
                         dst=oa)  # fmt: skip
                other = (ScalarTensorTensor, [gp, row, yp], [oa], {**f, "engine": G})
                b.emit(ScalarTensorTensor, [gp, row, yp], [oa], engine=V, choices=[other], **f)
                rag.store(b, out, unit, nr, s, o, lambda q=stores[ns]: q, small.store)
                ns += 1
    groups.done()
