"""lerp(x, end, w) in PyTorch's two forms, rounded once from fp32: x + w (end - x) for
w < 0.5, end - (1 - w)(end - x) for w >= 0.5 (`reference`'s, and torch's opmath for 16-bit
tensors).

The difference d = end - x takes a pass over two tensors and so does the final sum; with d in
fp32 from 16-bit inputs neither is all-16-bit, so on VectorE each costs 2 cycles an element (on
GpSimd 2 of its own): together they bind VectorE and GpSimd above the DMA's time (a 16 MiB bf16
lerp at LNC 2 reached 64-70% of the DMA bound). For 16-bit x and end the passes are spread
over the other engines instead (`_on_tensor_engine`):

- TensorE: d into PSUM as I . end + (-I) . x (an identity and its negative as the stationary
  operands: the products of a 16-bit value by +-1 are exact and PSUM accumulates in fp32, so
  it holds the fp32 difference rounded once, as VectorE's subtract writes it);
- ScalarE: t = w d (or -(1 - w) d), PSUM to PSUM, one activation pass;
- VectorE: out = x + t (or end + t), a `tensor_tensor` with one operand in PSUM, one cycle an
  element.

A 16 MiB bf16 lerp at LNC 2 on trn2: 92.9 -> 73.8 us (70% -> 88% of the DMA bound); the
busiest engine, VectorE, 56% of that time. fp32 tensors keep the engine passes
(`_on_vector_engines`: TensorE's fp32 is a quarter rate, and VectorE's fp32 passes are within
the DMA's time there, twice as many bytes an element).
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dtypes import DType
from trnsim.isa import Activation, AffineSelect, Engine, Matmul, Memset, TensorTensor
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.pointwise import F32, Block, pointwise
from trnsim.kernels.spread import Spread

__all__ = ["lower_lerp"]

PSUM_SLOTS = 4  # PSUM chunks in turn: TensorE fills one while ScalarE and VectorE read others


def lower_lerp(b: KernelBuilder, cfg: ChipConfig, op: str, x: str, end: str, out: str,
               w: float) -> None:  # fmt: skip
    """out = lerp(x, end, w) (module doc)."""
    xdt, edt = b.tensors[x].dtype, b.tensors[end].dtype
    if xdt.is_16bit_float and xdt == edt:
        _on_tensor_engine(b, cfg, op, x, end, out, w)
    else:
        _on_vector_engines(b, cfg, op, x, end, out, w)


def _on_vector_engines(b, cfg, op, x, end, out, w) -> None:
    """end - x, the scaling and the sum as engine passes spread by their costs (`Spread`)."""
    sp = Spread(b, cfg)

    def lerp(k: Block) -> None:
        xa, ea = k.ins
        d = k.tmp("d", F32)
        sp.tt("subtract", ea, xa, d)  # end - x
        if w < 0.5:
            sp.ts(d, d, "multiply", w)
            sp.tt("add", xa, d, k.outs[0])
        else:
            sp.ts(d, d, "multiply", 1.0 - w)
            sp.tt("subtract", ea, d, k.outs[0])

    pointwise(b, cfg, op, [x, end], [out], lerp)


def _on_tensor_engine(b, cfg, op, x, end, out, w) -> None:
    """d on TensorE into PSUM chunks of one bank, the scaling on ScalarE, the sum on VectorE
    (module doc). The chunks of a block overlap over the three engines as they are; the body
    is no generator (`pointwise`'s two blocks in turn), which would hold a block's chunks
    behind the next block's loads and its buffers from the loads after (71% -> 88% of the DMA
    bound, 16 MiB at LNC 2)."""
    P = cfg.core.sbuf.partitions
    ident, neg = _identities(b, P, b.tensors[x].dtype)
    width = min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)
    slots = [b.psum("lerp_d", (P, width), F32) for _ in range(PSUM_SLOTS)]
    used = [0]  # chunks so far: the next one's slot
    scale = w if w < 0.5 else -(1.0 - w)

    def lerp(k: Block) -> None:
        xa, ea = k.ins
        p, f = xa.index[0][1], xa.index[1][1]
        base = xa if w < 0.5 else ea  # x + w d, or end - (1 - w) d
        for c in range(0, f, width):
            n = min(width, f - c)
            cols = (slice(0, p), slice(c, c + n))
            d = ap(slots[used[0] % PSUM_SLOTS], slice(0, p), slice(0, n))
            used[0] += 1
            for stat, src, acc in ((ident, ea, False), (neg, xa, True)):
                s, m = ap(stat, slice(0, p), slice(0, p)), ap(src.name, *cols)
                b.emit(Matmul, [s, m], [d], stationary=s, moving=m, dst=d, accumulate=acc)
            b.emit(Activation, [d], [d], func="identity", src=d, dst=d, scale=scale)
            o, a = ap(k.outs[0].name, *cols), ap(base.name, *cols)
            b.emit(TensorTensor, [a, d], [o], alu="add", src0=a, src1=d, dst=o)

    pointwise(b, cfg, op, [x, end], [out], lerp, temps=0)
    b.release(*slots)


def _identities(b: KernelBuilder, P: int, dt: DType) -> tuple[str, str]:
    """The [P, P] identity and its negative in `dt`, made once per op on GpSimd (a memset and
    an affine select on the diagonal p - i == 0)."""
    names = []
    for kind, one in (("ident", 1.0), ("negident", -1.0)):
        key = f"lerp.{kind}:{dt.name}"
        if key not in b.scratch:
            t = b.scratch[key] = b.tile(kind, "sbuf", (P, P), dt)
            a = ap(t)
            b.emit(Memset, [], [a], dst=a, value=0.0, engine=Engine.GPSIMD)
            b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=one, cmp="not_equal",
                   start=0, partition_step=1, step=-1)  # fmt: skip
        names.append(b.scratch[key])
    return names[0], names[1]
