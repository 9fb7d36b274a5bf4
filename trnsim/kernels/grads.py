"""Backward ops whose outputs sum over the rows: `native_layer_norm_backward` (grad_weight,
grad_bias) and `embedding_dense_backward`. Both sum on TensorE, which contracts over the
partitions: a sum over rows is a matmul with the rows on the partitions.

**native_layer_norm_backward** (over the last dim D), per block of up to 128 rows: g and x are
loaded, with the forward's mean and rstd as [rows, 1] columns; x^ = (x - mean) rstd on ScalarE
(one `activation identity`, scale rstd, bias -mean rstd); gw = g * weight (VectorE, the weight
spread over the partitions once, in the work dtype); the row sums a = sum(gw) and c = sum(gw
x^) (the product on GpSimd, the sums on VectorE); grad_input = rstd gw + x^ (-c rstd / D) +
(-a rstd / D), as a VectorE scaling by the column, a ScalarE activation and a VectorE add, in
place where it can (four row tiles a block, so two blocks rotate even at D = 8192).
grad_weight = sum over rows of g x^ (GpSimd) and grad_bias = sum of g: per 128 columns, one
matmul of the block's [rows, 128] slice (stationary) by a ones column (moving), accumulated
over all row blocks in one PSUM bank ([128, D / 128] fp32), then stored column by column.

**embedding_dense_backward**: out[V, D] = one_hot(indices)^T @ grad_output, the usual
Trainium way (the DMA has no accumulating scatter here): per strip of D columns (as many as
let the strip of every token's gradient stay in SBUF), per block of 128 vocabulary rows, the
one-hot [tokens, 128] of every 128-token block is one `tensor_scalar` ((iota + v0) ==
index, VectorE and GpSimd in turn), and each 512-column chunk accumulates over the token blocks
in one PSUM bank (TensorE), is copied out (VectorE and ScalarE in turn) and stored. Tokens at
padding_idx get index -1 (no row). TensorE does V/128 x N/128 x D/512 matmuls.

native_layer_norm_backward runs whole on one physical core (`training.ONE_CORE`);
embedding_dense_backward's vocabulary rows are shared between the cores of an LNC 2 core
(each reads every token's gradient and index).
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import (
    DmaCopy,
    Engine,
    Iota,
    Matmul,
    Memset,
    TensorCopy,
    TensorReduce,
)
from trnsim.kernels.backward import act, ts, tt
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.layout import row_blocks
from trnsim.kernels.pointwise import work_dtype
from trnsim.kernels.queues import Queues
from trnsim.kernels.softmax_backward import row_buffers, row_tile

__all__ = ["lower_layer_norm_backward", "lower_embedding_backward"]

F32 = dtype("float32")
# a partition's SBUF for embedding's gradient strip and its two sets of one-hots: (bytes, and
# at most this share of the partition, for a config with a smaller SBUF)
STRIP_BYTES = (96 * 1024, 1 / 2)
HOTS = (64 * 1024, 1 / 3)


def lower_layer_norm_backward(b: KernelBuilder, cfg: ChipConfig, op: str, args: dict) -> None:
    """[grad_input, grad_weight, grad_bias] as output_mask asks, `out` naming them (module
    doc)."""
    g, x, mean, rstd = (args[k] for k in ("grad_out", "input", "mean", "rstd"))
    weight, tg, tx = args.get("weight"), b.tensors[g], b.tensors[x]
    shape, d = tuple(tx.shape), tx.shape[-1]
    mask = list(args.get("output_mask") or [True, weight is not None, args.get("bias") is not None])
    outs = dict(zip([i for i, m in enumerate(mask) if m], args["out"]))
    _check_layer_norm(b, op, args, mask, shape)
    P = cfg.core.sbuf.partitions
    odt = b.tensors[outs.get(0, args["out"][0])].dtype
    wdt = work_dtype(tg.dtype, tx.dtype, odt)
    # g, x (x^ in place when of the work dtype), g * weight (then rstd times it and grad_input
    # in place), a product (then the linear term)
    per = tg.dtype.itemsize + tx.dtype.itemsize + 2 * wdt.itemsize
    per += (wdt.itemsize if tx.dtype != wdt else 0) + (odt.itemsize if odt != wdt else 0)
    # the weight spread over the partitions (in the work dtype), and its chunk on the way
    fixed = d * wdt.itemsize + _chunk(cfg) * 4 if weight else 0
    fixed += (d * wdt.itemsize) if weight is None else 0  # rstd gw in a tile of its own
    bufs = row_buffers(cfg, op, d, per, fixed)
    wrow = _weight_row(b, cfg, weight, d, wdt) if weight is not None else None
    sums = {i: _ColumnSums(b, cfg, d, wdt) for i in (1, 2) if i in outs}
    blocks, qs = list(row_blocks(shape, P)), Queues(cfg)
    loads, stores = qs.loads(), qs.stores()
    for n, (index, rows) in enumerate(blocks):
        slot, r = n % bufs, slice(0, rows)
        t = {k: ap(row_tile(b, f"ln{k}{slot}", (P, d), dt), r)
             for k, dt in (("g", tg.dtype), ("x", tx.dtype))}  # fmt: skip
        t["xh"] = t["x"] if tx.dtype == wdt else ap(row_tile(b, f"lnxh{slot}", (P, d), wdt), r)
        cols = {k: ap(row_tile(b, f"lnc{k}{slot}", (P, 1), F32), r) for k in ("m", "s", "nb")}
        for q, (name, dst) in enumerate(((g, t["g"]), (x, t["x"]), (mean, cols["m"]),
                                         (rstd, cols["s"]))):  # fmt: skip
            src = ap(name, *index)
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=loads[4 * n + q])
        tt(b, "multiply", cols["m"], cols["s"], cols["nb"])
        ts(b, cols["nb"], cols["nb"], "multiply", -1.0, engine=Engine.VECTOR)
        act(b, "identity", t["x"], t["xh"], scale=cols["s"], bias=cols["nb"])  # x^
        if 0 in outs:
            _grad_input(b, t, cols, wrow, r, slot, d, wdt, outs[0], index, stores[n])
        if 1 in sums:
            gx = ap(row_tile(b, f"lnp{slot}", (P, d), wdt), r)  # grad_input's product, read
            tt(b, "multiply", t["g"], t["xh"], gx, engine=Engine.GPSIMD)
            sums[1].add(gx, rows, first=n == 0)
        if 2 in sums:
            sums[2].add(t["g"], rows, first=n == 0)
    for i, s in sums.items():
        s.store(outs[i])


def _check_layer_norm(b, op, args, mask, shape) -> None:
    d = shape[-1]
    rows = shape[:-1]
    if len(args["out"]) != sum(bool(m) for m in mask):
        raise TraceError(
            f"{op}: out names {len(args['out'])} tensors and output_mask asks for "
            f"{sum(bool(m) for m in mask)}; expected one per true entry of output_mask"
        )
    ns = args.get("normalized_shape")
    if ns is not None and list(ns) != [d]:
        raise TraceError(f"{op}: normalized_shape {ns}; only the last dim ([{d}]) is lowered")
    for k in ("mean", "rstd"):
        s = tuple(b.tensors[args[k]].shape)
        if s not in (rows, rows + (1,)):
            raise TraceError(f"{op}: {k} has shape {list(s)}; expected {list(rows + (1,))}")
    if tuple(b.tensors[args["grad_out"]].shape) != shape:
        raise TraceError(f"{op}: grad_out and input differ in shape")


def _grad_input(b, t, cols, wrow, r, slot, d, wdt, out, index, queue: int) -> None:
    """grad_input = rstd gw + x^ (-c rstd / D) + (-a rstd / D) for one block, stored on
    `queue`."""
    P = b.tiles[t["g"].name].shape[0]
    gw = t["g"]
    if wrow is not None:
        gw = ap(row_tile(b, f"lngw{slot}", (P, d), wdt), r)
        tt(b, "multiply", t["g"], ap(wrow, r), gw)
    # the row sums in the work dtype (bf16: VectorE's fast reduction)
    a, c = (ap(row_tile(b, f"lnc{k}{slot}", (P, 1), wdt), r) for k in ("a", "c"))
    b.emit(TensorReduce, [gw], [a], alu="add", src=gw, dst=a)
    prod = ap(row_tile(b, f"lnp{slot}", (P, d), wdt), r)
    tt(b, "multiply", gw, t["xh"], prod, engine=Engine.GPSIMD)
    b.emit(TensorReduce, [prod], [c], alu="add", src=prod, dst=c)
    s = cols["s"]
    # c <- -c rstd / D, a <- -a rstd / D
    a, c = (_scaled(b, col, s, d, slot, k) for k, col in (("a", a), ("c", c)))
    lin = prod  # the product's tile, read by its sum
    act(b, "identity", t["xh"], lin, scale=c, bias=a)
    # rstd gw: in place over g * weight, which nothing reads later (g itself is read later)
    u = gw if wrow is not None else ap(row_tile(b, f"lnu{slot}", (P, d), wdt), r)
    ts(b, gw, u, "multiply", s, engine=Engine.VECTOR)
    o = (
        u
        if b.tensors[out].dtype == wdt
        else ap(row_tile(b, f"lno{slot}", (P, d), b.tensors[out].dtype), r)
    )
    tt(b, "add", u, lin, o)
    dst = ap(out, *index)
    b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=queue)


def _scaled(b, col, s, d: int, slot: int, k: str):
    """-col * rstd / D as an fp32 [rows, 1] column."""
    out = ap(
        row_tile(b, f"lnc{k}f{slot}", (b.tiles[col.name].shape[0], 1), F32), slice(*col.index[0])
    )
    tt(b, "multiply", col, s, out)
    ts(b, out, out, "multiply", -1.0 / d, engine=Engine.VECTOR)
    return out


def _weight_row(b: KernelBuilder, cfg: ChipConfig, weight: str, d: int, wdt) -> str:
    """The weight on every partition, in the work dtype (VectorE's product with a 16-bit
    gradient then runs at its 16-bit rate): a PSUM bank's worth (`_chunk`) at a time into one
    partition, spread by TensorE (a ones column times the chunk, K = 1), cast on the way out of
    PSUM."""
    P, dt = cfg.core.sbuf.partitions, b.tensors[weight].dtype
    kind = dt if dt.name != "float32" else F32
    spread = _chunk(cfg)
    ones, row = b.tile("ones", "sbuf", (1, P), kind), b.tile("wchunk", "sbuf", (1, spread), dt)
    out = b.tile("weight_rows", "sbuf", (P, d), wdt)
    b.emit(Memset, [], [ap(ones)], dst=ap(ones), value=1.0)
    ps, loads = b.psum("spread", (P, spread), F32), Queues(cfg).loads()
    for k, c0 in enumerate(range(0, d, spread)):
        w = min(spread, d - c0)
        src, dst = ap(weight, slice(c0, c0 + w)), ap(row, slice(None), slice(0, w))
        b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=loads[k])
        acc = ap(ps, slice(None), slice(0, w))
        b.emit(Matmul, [ap(ones), dst], [acc], stationary=ap(ones), moving=dst, dst=acc)
        o = ap(out, slice(None), slice(c0, c0 + w))
        b.emit(TensorCopy, [acc], [o], src=acc, dst=o)
    b.release(ps)
    return out


class _ColumnSums:
    """Sums over rows of [rows, D] blocks, D/128 matmuls a block (stationary: the block's 128
    columns, moving: a ones column) accumulating in one PSUM tile [128, ceil(D / 128)]."""

    def __init__(self, b: KernelBuilder, cfg: ChipConfig, d: int, dt):
        self.b, self.d, self.P = b, d, cfg.core.tensor.rows
        self.chunks = math.ceil(d / self.P)
        if self.chunks * 4 > cfg.core.psum.bank_bytes:
            raise TraceError(f"column sums over {d} columns are not lowered yet")
        self.ones: dict[str, str] = {}
        self.acc = b.psum("colsum", (self.P, self.chunks), F32)
        self.stores = Queues(cfg).stores()

    def _ones(self, dt) -> str:
        if dt.name not in self.ones:
            t = self.b.tile("ones", "sbuf", (self.P, 1), dt)
            self.b.emit(Memset, [], [ap(t)], dst=ap(t), value=1.0)
            self.ones[dt.name] = t
        return self.ones[dt.name]

    def add(self, block, rows: int, first: bool) -> None:
        b, P = self.b, self.P
        ones = ap(self._ones(b.tiles[block.name].dtype), slice(0, rows))
        for j in range(self.chunks):
            w = min(P, self.d - j * P)
            st = ap(block.name, slice(0, rows), slice(j * P, j * P + w))
            dst = ap(self.acc, slice(0, w), slice(j, j + 1))
            b.emit(Matmul, [st, ones], [dst], stationary=st, moving=ones, dst=dst,
                   accumulate=not first)  # fmt: skip

    def store(self, out: str) -> None:
        b, P = self.b, self.P
        if tuple(b.tensors[out].shape) != (self.d,):
            raise TraceError(f"{out}: shape {list(b.tensors[out].shape)}; expected [{self.d}]")
        sb = b.tile("colsum", "sbuf", (P, self.chunks), b.tensors[out].dtype)
        acc = ap(self.acc, slice(0, P), slice(0, self.chunks))  # perhaps a larger tile
        b.emit(TensorCopy, [acc], [ap(sb)], src=acc, dst=ap(sb))
        for j in range(self.chunks):
            w = min(P, self.d - j * P)
            src, dst = ap(sb, slice(0, w), slice(j, j + 1)), ap(out, slice(j * P, j * P + w))
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=self.stores[j])
        b.release(self.acc)


def lower_embedding_backward(b: KernelBuilder, cfg: ChipConfig, op: str, args: dict) -> None:
    """out[V, D] = one_hot(indices)^T @ grad_output (module doc)."""
    g, idx, out = args["grad_output"], args["indices"], args["out"]
    tg, ti, to = (b.tensors[n] for n in (g, idx, out))
    v, d = to.shape[0], tg.shape[-1]
    nw = args.get("num_weights", v)
    if len(to.shape) != 2 or to.shape[1] != d or nw != v or tuple(ti.shape) != tuple(tg.shape[:-1]):
        raise TraceError(
            f"{op}: grad_output {list(tg.shape)}, indices {list(ti.shape)}, out "
            f"{list(to.shape)}, num_weights {nw}: expected grad_output [..., D], indices [...] "
            "and out [num_weights, D]"
        )
    if args.get("scale_grad_by_freq"):
        raise TraceError(f"{op}: scale_grad_by_freq is not lowered yet")
    P, PS = cfg.core.sbuf.partitions, _chunk(cfg)
    lo, hi = b.share(to.shape) or (0, v)  # this core's vocabulary rows (LNC 2: half each)
    if lo >= hi:
        return
    blocks = list(row_blocks(tuple(tg.shape), P))
    mdt = tg.dtype if tg.dtype.name != "float32" else F32  # the one-hot: the gradient's kind
    most, hots = _budget(cfg, STRIP_BYTES), _budget(cfg, HOTS)
    strip = min(d, most // (len(blocks) * tg.dtype.itemsize) // PS * PS or d)
    nb = len(blocks)
    if nb * strip * tg.dtype.itemsize > 2 * most or 2 * nb * P * mdt.itemsize > hots:
        raise TraceError(f"{op}: {nb} blocks of {P} tokens do not fit SBUF yet")
    iota = b.tile("vocab", "sbuf", (P, P), F32)
    b.emit(Iota, [], [ap(iota)], dst=ap(iota), start=0, step=1)
    loads = Queues(cfg).loads()
    cols = _index_columns(b, args, blocks, P, loads)
    banks = [b.psum("emb", (P, PS), F32) for _ in range(2)]
    for s0 in range(0, d, strip):
        sw = min(strip, d - s0)
        grads = []  # one tile for all blocks (a tile takes two of a core's 256 semaphores)
        gtile = row_tile(b, "eg", (P, nb * strip), tg.dtype)
        for n, (index, rows) in enumerate(blocks):
            t = ap(gtile, slice(0, rows), slice(n * strip, n * strip + sw))
            full = index + (slice(None),) * (len(tg.shape) - 1 - len(index))
            src = ap(g, *full, slice(s0, s0 + sw))
            b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=loads[n])
            grads.append(t)
        for vb, v0 in enumerate(range(lo, hi, P)):
            vw = min(P, hi - v0)
            hots, htile = [], row_tile(b, f"oh{vb % 2}", (P, nb * P), mdt)
            for n, (_, rows) in enumerate(blocks):
                oh = ap(htile, slice(0, rows), slice(n * P, n * P + vw))
                src = ap(iota, slice(0, rows), slice(0, vw))
                ts(b, src, oh, "add", float(v0), "equal", cols[n],
                   engine=Engine.GPSIMD if n % 2 else Engine.VECTOR)  # fmt: skip
                hots.append(oh)
            _vocab_rows(b, cfg, out, grads, hots, (v0, vw), (s0, sw), vb, banks)
    b.release(*banks)


def _index_columns(b, args, blocks, P, loads) -> list:
    """Each token block's indices as an fp32 [rows, 1] column, padding_idx turned to -1
    (loaded on the `loads` queues)."""
    idx, pad = args["indices"], args.get("padding_idx", -1)
    pad = None if pad is None or pad < 0 else float(pad)
    cols, ctile = [], row_tile(b, "ei", (P, len(blocks)), F32)
    for n, (index, rows) in enumerate(blocks):
        r = slice(0, rows)
        raw = ap(row_tile(b, f"eiraw{n % 2}", (P, 1), b.tensors[idx].dtype), r)
        src = ap(idx, *index)
        b.emit(DmaCopy, [src], [raw], src=src, dst=raw, queue=loads[n])
        col = ap(ctile, r, slice(n, n + 1))
        if pad is None:
            b.emit(TensorCopy, [raw], [col], src=raw, dst=col)
        else:  # (index + 1) * (index != pad) - 1
            keep = ap(row_tile(b, f"eik{n % 2}", (P, 1), F32), r)
            ts(b, raw, keep, "not_equal", pad, engine=Engine.VECTOR)
            ts(b, raw, col, "add", 1.0, engine=Engine.VECTOR)
            tt(b, "multiply", col, keep, col)
            ts(b, col, col, "add", -1.0, engine=Engine.VECTOR)
        cols.append(col)
    return cols


def _budget(cfg: ChipConfig, budget: tuple[int, float]) -> int:
    """Bytes of a partition's SBUF: `budget`'s bytes, or its share of the partition if less."""
    return min(budget[0], int(cfg.core.sbuf.partition_bytes * budget[1]))


def _chunk(cfg) -> int:
    """Columns of one accumulation: one PSUM bank of fp32 (two are in use at a time; NC-v4's
    moving limit of 8 banks would need 16 of PSUM's 8)."""
    return min(cfg.core.tensor.moving_free_max, cfg.core.psum.bank_bytes // 4)


def _vocab_rows(b, cfg, out, grads, hots, vrange, srange, vb, banks) -> None:
    """out[v0:v0+vw, s0:s0+sw]: per chunk of 512 columns, the one-hots times the gradient
    blocks accumulated in a PSUM bank, copied out and stored."""
    (v0, vw), (s0, sw) = vrange, srange
    P, PS, stores = cfg.core.sbuf.partitions, _chunk(cfg), Queues(cfg).stores()
    for k, c0 in enumerate(range(0, sw, PS)):
        cw = min(PS, sw - c0)
        acc = ap(banks[(vb + k) % 2], slice(0, vw), slice(0, cw))
        for n, (oh, gt) in enumerate(zip(hots, grads)):
            rows, off = gt.index[0][1], gt.index[1][0]
            mv = ap(gt.name, slice(0, rows), slice(off + c0, off + c0 + cw))
            b.emit(Matmul, [oh, mv], [acc], stationary=oh, moving=mv, dst=acc,
                   accumulate=n > 0)  # fmt: skip
        o = ap(row_tile(b, f"eo{(vb + k) % 3}", (P, PS), b.tensors[out].dtype), slice(0, vw),
               slice(0, cw))  # fmt: skip
        if (vb + k) % 2:
            b.emit(TensorCopy, [acc], [o], src=acc, dst=o)
        else:
            b.emit(TensorCopy, [acc], [o], src=acc, dst=o, engine=Engine.SCALAR)
        dst = ap(out, slice(v0, v0 + vw), slice(s0 + c0, s0 + c0 + cw))
        b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=stores[vb + k])
