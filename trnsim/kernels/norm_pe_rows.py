"""A 16-bit weight's pieces on every row of a tile of rows in pieces, spread by TensorE.

Rows in pieces (`norms._lower_pieces`) need the weight and bias in the pieces' pattern
(partition r k + i holds piece i, for each of the tile's g rows r). Loaded by DMA, that is g
copies of each from HBM (bf16 rows of 10240, 32 a tile: 1.23 MiB a core of 17.23, 3.4 us of
the shared HBM at the DMA bound). Here one is loaded once, as [k, w] on k partitions, and
spread by TensorE: a K = k 0/1 selector (`tail_segs.selector`'s pattern over all the rows) times
it into PSUM, a bank at a time (exact: each element times 1 plus zeros), copied out into the
16-bit tile by ScalarE or VectorE, whichever the list schedule finds free sooner
(`schedule.Scheduled`; a 16-bit value is exact in fp32 PSUM, so the tile holds the loaded
values). The copies cost f elements of ScalarE a tensor (`norms.PE_ROWS_MIN`: where the HBM
saved pays for them)."""

from __future__ import annotations

from trnsim.dtypes import dtype
from trnsim.isa import Activation, AffineSelect, DmaCopy, Matmul, Memset, TensorCopy
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.row_plan import G, S, V, bank_runs

__all__ = ["pe_rows"]

PSUM_BANKS = 2  # banks of the PSUM tile spread into, in turn, where the norm gives none


def pe_rows(b: KernelBuilder, cfg, src, t: str, k: int, n: int, queue: int, copy_on=(S, V),
            psum=None):  # fmt: skip
    """Tile t's partitions [0, n k): n copies of `src` (k partitions' worth, [k, w] with w
    t's columns), loaded once on `queue` and spread by TensorE (module doc); each bank's copy
    out of PSUM on the first of `copy_on`, or the others where the list schedule finds them
    sooner. `psum`: a PSUM tile of the op's to spread into (`PeBias`' first), its banks in
    turn; else one of PSUM_BANKS taken and released."""
    P, w, dt = cfg.core.sbuf.partitions, b.tiles[t].shape[-1], b.tiles[t].dtype
    seed = b.scratch_tile(f"norm.pe_seed.{t}", "pe_seed", (k, w), dt)
    a = ap(seed)
    b.emit(DmaCopy, [src], [a], src=src, dst=a, queue=queue)
    st = ap(_selector(b, P, k, dt), slice(None), slice(0, n * k))
    step = min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)
    ps = psum or b.psum("pe_rows", (P, PSUM_BANKS * step), dtype("float32"))
    banks = max(1, b.tiles[ps].shape[-1] // step)
    for lo, hi in bank_runs(w, step):
        at = lo // step % banks * step
        mv = ap(seed, slice(None), slice(lo, hi))
        p = ap(ps, slice(0, n * k), slice(at, at + hi - lo))
        b.emit(Matmul, [st, mv], [p], stationary=st, moving=mv, dst=p)
        d = ap(t, slice(0, n * k), slice(lo, hi))
        ops = [_copy(p, d, e) for e in copy_on]
        b.emit(*ops[0][:3], **ops[0][3], **({"choices": ops[1:]} if len(ops) > 1 else {}))
    if psum is None:
        b.release(ps)


def _copy(src, dst, e) -> tuple:
    """PSUM src copied to dst on engine e (ScalarE's activation, or a tensor_copy)."""
    if e == S:
        return Activation, [src], [dst], dict(func="copy", src=src, dst=dst, engine=S)
    return TensorCopy, [src], [dst], dict(src=src, dst=dst, engine=e)


def _selector(b: KernelBuilder, P: int, k: int, dt) -> str:
    """[k, P] of dtype dt: 1 where column m = i (mod k) on partition i (made once per op, on
    GpSimd: the [k, k] identity, then copied onto the columns after it, doubling: log2(P / k)
    copies, not an affine_select per row of the tile)."""
    key = f"norm.pe_sel{k}"
    new = f"{key}:{dt.name}:{(k, P)}" not in b.scratch
    sel = b.scratch_tile(key, "pe_sel", (k, P), dt)
    if new:
        a = ap(sel, slice(None), slice(0, k))
        b.emit(Memset, [], [a], dst=a, value=0.0, engine=G)
        b.emit(AffineSelect, [a], [a], on_true=a, dst=a, on_false=1.0, cmp="not_equal",
               start=0, partition_step=1, step=-1, engine=G)  # fmt: skip
        w = k
        while w < P:
            c = min(w, P - w)
            s, d = ap(sel, slice(None), slice(0, c)), ap(sel, slice(None), slice(w, w + c))
            b.emit(TensorCopy, [s], [d], src=s, dst=d, engine=G)
            w += c
    return sel
