"""How `reduce.Reduce` folds the blocks of an [R, K] column block (the last group kept) into
one output row: sums on TensorE (`ByMatmul`: ones^T @ block, accumulated in one PSUM row), max
and min on the engines (`ByEngines`: two accumulators folded on VectorE and GpSimd in turn,
merged, then reduced across the partitions). Each offers `target` (the tile a block is loaded
into), `add` (fold a loaded block) and `done` (store the row)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trnsim.isa import Engine, Matmul, Memset, TensorTensor
from trnsim.kernels.builder import ap

if TYPE_CHECKING:
    from trnsim.kernels.reduce import Reduce

__all__ = ["ByMatmul", "ByEngines", "BUFS"]

BUFS = 3  # rotating buffers of a reduction's tiles


class ByMatmul:
    """Sums of a column block's partitions on TensorE: ones^T @ block into one PSUM row."""

    def __init__(self, r: Reduce, cn: int):
        self.r, self.cn, self.first = r, cn, True
        dt = r.b.tensors[r.x].dtype
        self.dt = dt
        key = f"reduce.ones:{dt.name}"
        if key not in r.b.scratch:
            ones = r.b.scratch[key] = r.b.tile("ones", "sbuf", (r.P, 1), dt)
            r.b.emit(Memset, [], [ap(ones)], dst=ap(ones), value=1.0)
        self.ones = r.b.scratch[key]
        if not r.rows:  # two PSUM rows in turn: one fills while the other is emptied
            r.rows = [r.b.psum("rowsum", (1, r.cols), r.f32) for _ in "ab"]
        r.m += 1
        self.ps = ap(r.rows[r.m % 2], slice(0, 1), slice(0, cn))

    def target(self, rb: int) -> str:
        return self.r.next_x(min(self.r.cols, self.cn), self.dt)

    def add(self, t: str, rb: int) -> None:
        mv, st = ap(t, slice(0, rb), slice(0, self.cn)), ap(self.ones, slice(0, rb))
        self.r.b.emit(Matmul, [st, mv], [self.ps], stationary=st, moving=mv, dst=self.ps,
                      accumulate=not self.first)  # fmt: skip
        self.first = False

    def done(self, lo: int) -> None:
        self.r.store_row(self.ps, self.cn, lo)


class ByEngines:
    """Max or min of a column block's partitions: two accumulators folded on VectorE and
    GpSimd in turn, merged, then reduced across the partitions (`Reduce.across`)."""

    def __init__(self, r: Reduce, cn: int):
        self.r, self.cn, self.k = r, cn, 0
        self.dt = r.low()
        slot = r.n % BUFS
        self.acc = [r.tile(f"acc{slot}{h}", (r.P, min(r.cols, cn)), self.dt) for h in "ab"]
        self.filled = [0, 0]
        self.pending = None

    def target(self, rb: int) -> str:
        if self.k < 2:  # the first block of each accumulator lands in it
            return self.acc[self.k]
        return self.r.next_x(min(self.r.cols, self.cn), self.r.b.tensors[self.r.x].dtype)

    def add(self, t: str, rb: int) -> None:
        h = self.k % 2
        if self.k < 2:
            self.filled[h] = rb
        else:
            a = ap(self.acc[h], slice(0, rb), slice(0, self.cn))
            src = ap(t, slice(0, rb), slice(0, self.cn))
            eng = Engine.GPSIMD if h else Engine.VECTOR
            self.r.b.emit(TensorTensor, [a, src], [a], alu=self.r.alu, src0=a, src1=src, dst=a,
                          engine=eng)  # fmt: skip
        self.k += 1

    def done(self, lo: int) -> None:
        r = self.r
        if self.filled[1]:
            a = ap(self.acc[0], slice(0, self.filled[1]), slice(0, self.cn))
            o = ap(self.acc[1], slice(0, self.filled[1]), slice(0, self.cn))
            r.b.emit(TensorTensor, [a, o], [a], alu=r.alu, src0=a, src1=o, dst=a)
        r.across(self.acc[0], self.filled[0], self.cn, lo)
