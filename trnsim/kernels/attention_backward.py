"""`scaled_dot_product_attention_backward`: dq, dk, dv of out = softmax(q k^T scale + mask) v,
flash-style (FlashAttention-2's backward): the probabilities are recomputed block by block and
never leave the chip.

q, grad_out [..., H, S, D], k, v [..., Hkv, Skv, D] (grouped-query heads: head h reads kv
head h // (H / Hkv)), D <= 128, one dtype; `output` (the forward's out) is optional. Per kv
head, dk and dv accumulate in SBUF (fp32, [128, Skv / 128 x D]); per query head of its group,
per block i of 128 queries (q_i, q_i^T, dO_i, dO_i^T loaded once; dq_i accumulates in one PSUM
bank):

- pass A, over key blocks j of 512 (up to the diagonal when causal): S = q_i k_j^T (TensorE),
  masked on the diagonal (GpSimd), the online row max and sum (ScalarE, VectorE), giving
  -lse_i = -(m + log l);
- Delta_i = rowsum(dO_i * O_i) from `output`, or, without it, a sweep over j summing
  rowsum(P * dP);
- pass B, over j: P = exp(S scale - lse) (ScalarE), dP = dO_i v_j^T (TensorE), dS = P (dP -
  Delta) scale (VectorE, GpSimd), dS^T in 128-key chunks (TensorE transposes); dq_i += dS k_j,
  and per 128-key chunk dk += dS^T q_i and dv += P^T dO_i (TensorE into PSUM, added to the SBUF
  accumulators by VectorE, as GpSimd cannot read PSUM).

TensorE does S twice (three times without `output`), dP, the transposes and three products:
about 2.5 times the forward's FLOPs. Two query blocks are in flight (`_interleave`): their
steps alternate, each block with its own tiles and its own PSUM for S, dP and dq. Runs
whole on one physical core (`training.ONE_CORE`) and needs the DMA transpose (NC-v3 on).
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import (
    Activation,
    AffineSelect,
    DmaCopy,
    Engine,
    Matmul,
    Memset,
    TensorCopy,
    TensorReduce,
    Transpose,
)
from trnsim.kernels.backward import act, ts, tt
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues
from trnsim.kernels.softmax_backward import row_tile

__all__ = ["lower_attention_backward"]

NEG = -3.4028234663852886e38
F32 = dtype("float32")
# a partition's SBUF for the dk and dv accumulators: bytes, and at most this share of the
# partition (for a config with a smaller SBUF)
ACC_BYTES = (96 * 1024, 1 / 2)
LANES = 2  # query blocks in flight: their steps alternate, so one's chain hides the other's
_DONE = object()


class _Ctx:
    """The op's tensors, sizes and a rotating tile per kind."""

    def __init__(self, b: KernelBuilder, cfg: ChipConfig, args: dict):
        self.b, self.cfg = b, cfg
        self.q, self.k, self.v, self.go = (args[n] for n in ("q", "k", "v", "grad_out"))
        self.o = args.get("output")
        self.dq, self.dk, self.dv = args["out"]
        tq = b.tensors[self.q]
        self.H, self.S, self.D = tq.shape[-3:]
        self.Hkv, self.Skv = b.tensors[self.k].shape[-3:-1]
        self.P, self.dt = cfg.core.tensor.rows, tq.dtype
        # keys per block: one PSUM bank of fp32 scores (and a matmul's moving free size)
        self.KB = min(cfg.core.psum.bank_bytes // 4, cfg.core.tensor.moving_free_max)
        self.causal = bool(args.get("is_causal"))
        sc = args.get("scale")
        self.scale = 1.0 / math.sqrt(self.D) if sc is None else float(sc)
        qs = Queues(cfg)
        self.loads, self.stores = qs.loads(), qs.stores()
        self.turn = 0  # loads so far: their queues in turn
        self.counts: dict = {}
        self.lane = 0  # the query block lane being emitted (`_interleave`)

    def tile(self, kind: str, shape, dt=None, slots: int = 1) -> str:
        """The next of `slots` tiles of `kind` of the current lane (the query block being
        emitted), in turn: the lanes' tiles are disjoint, so two blocks in flight share none.
        One a kind and lane by default: the two lanes overlap, and a core has 256 semaphores,
        two a tile (two a kind would gain ~10% and take 70 more semaphores)."""
        lane = self.lane
        n = self.counts[kind, lane] = self.counts.get((kind, lane), -1) + 1
        dt = dt or self.dt
        return row_tile(self.b, f"sdpab{kind}_{dt.name}_{lane}_{n % slots}", shape, dt)

    def ps(self, kind: str) -> str:
        """The PSUM tile of `kind`: the current lane's, or the one all lanes share."""
        return self.psum.get((kind, self.lane)) or self.psum[kind, 0]


def lower_attention_backward(b: KernelBuilder, cfg: ChipConfig, op: str, args: dict) -> None:
    """[dq, dk, dv] (module doc)."""
    _check(b, cfg, op, args)
    c = _Ctx(b, cfg, args)
    lead = tuple(b.tensors[c.q].shape[:-3])
    group = c.H // c.Hkv
    # per lane: the scores, dP and dq (live across yields); shared: what one step writes
    # and reads back before it yields
    c.psum = {(k, lane): b.psum(k, shape, F32) for lane in range(LANES) for k, shape in (
        ("s", (c.P, c.KB)), ("dp", (c.P, c.KB)), ("dq", (c.P, c.D)))}  # fmt: skip
    for k in ("kv0", "kv1"):
        c.psum[k, 0] = b.psum(k, (c.P, c.D), F32)
    c.psum["dsT", 0] = b.psum("dsT", (c.P, c.KB // c.P * c.P), c.dt if c.dt.itemsize == 2 else F32)
    nkc = math.ceil(c.Skv / c.P)
    for batch in _indices(lead):
        for kh in range(c.Hkv):
            accs = {}
            for name in ("dk", "dv"):
                accs[name] = b.tile(f"acc_{name}", "sbuf", (c.P, nkc * c.D), F32)
                b.emit(Memset, [], [ap(accs[name])], dst=ap(accs[name]), value=0.0,
                       engine=Engine.GPSIMD)  # fmt: skip
            blocks = [
                ((*batch, h), (*batch, kh), q0, min(c.P, c.S - q0), accs)
                for h in range(kh * group, (kh + 1) * group)
                for q0 in range(0, c.S, c.P)
            ]
            _interleave(c, blocks)
            _store_kv(c, (*batch, kh), accs, nkc)
    b.release(*c.psum.values())


def _interleave(c: _Ctx, blocks: list) -> None:
    """Emit the query blocks' steps round-robin, LANES blocks at a time, each block on a free
    lane (its own tiles and PSUM)."""
    free, active, todo = list(range(LANES)), [], iter(blocks)
    while True:
        while len(active) < LANES and (nxt := next(todo, None)) is not None:
            lane = free.pop(0)
            active.append((lane, _query_block(c, *nxt)))
        if not active:
            return
        still = []
        for lane, g in active:
            c.lane = lane
            if next(g, _DONE) is _DONE:
                free.append(lane)
            else:
                still.append((lane, g))
        active = still


def _check(b, cfg, op, args) -> None:
    names = [args[n] for n in ("q", "k", "v", "grad_out")]
    out = args["out"]
    tq, tk, tv, tg = (b.tensors[n] for n in names)
    ok = len(out) == 3 and len(tq.shape) >= 3 and tk.shape == tv.shape
    ok = ok and tuple(tg.shape) == tuple(tq.shape) and tq.shape[:-3] == tk.shape[:-3]
    ok = ok and tq.shape[-1] == tk.shape[-1] <= cfg.core.tensor.rows
    ok = ok and tq.shape[-3] % tk.shape[-3] == 0
    if ok:
        want = (tq.shape, tk.shape, tv.shape)
        ok = all(tuple(b.tensors[o].shape) == tuple(w) for o, w in zip(out, want))
    if args.get("output") is not None:
        ok = ok and tuple(b.tensors[args["output"]].shape) == tuple(tq.shape)
    if not ok:
        raise TraceError(
            f"{op}: q {list(tq.shape)}, k {list(tk.shape)}, v {list(tv.shape)}, grad_out "
            f"{list(tg.shape)}, out {out}: expected q, grad_out (and output) [..., H, S, D], k "
            f"and v [..., Hkv, Skv, D], H a multiple of Hkv, D <= {cfg.core.tensor.rows}, out "
            "[dq, dk, dv] of q's, "
            "k's and v's shapes"
        )
    if len({t.dtype.name for t in (tq, tk, tv, tg)}) > 1 or tq.dtype.itemsize not in (2, 4):
        raise TraceError(f"{op}: q, k, v and grad_out must have one dtype of 16 or 32 bits")
    if cfg.core.dma.transpose_hbm_rate <= 0:
        raise TraceError(f"{op}: needs the DMA transpose (NC-v3 and later); not lowered here")
    nkc = math.ceil(tk.shape[-2] / cfg.core.tensor.rows)
    most = min(ACC_BYTES[0], int(cfg.core.sbuf.partition_bytes * ACC_BYTES[1]))
    if 2 * nkc * tk.shape[-1] * 4 > most:
        raise TraceError(f"{op}: {tk.shape[-2]} keys: dk and dv do not fit SBUF yet")


def _indices(lead):
    out = [()]
    for n in lead:
        out = [(*x, i) for x in out for i in range(n)]
    return out


def _load(c: _Ctx, tensor: str, index, r0: int, rows: int, transpose: bool, kind: str):
    """tensor[*index, r0:r0 + rows, :] into a tile: [rows, D], or [D, rows] by DMA transpose."""
    D = c.D
    shape = (c.P, c.KB) if transpose else (c.P, D)
    t = c.tile(kind, shape, c.b.tensors[tensor].dtype)
    src = ap(tensor, *index, slice(r0, r0 + rows), slice(None))
    dst = ap(t, slice(0, D), slice(0, rows)) if transpose else ap(t, slice(0, rows), slice(0, D))
    c.turn += 1
    c.b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=c.loads[c.turn], transpose=transpose)
    return dst


def _scores(c: _Ctx, qT, kT, q0, qw, t0, kw):
    """S = q k^T for one key block, masked on the diagonal: the [qw, kw] scores (PSUM, or an
    SBUF copy where masked)."""
    b = c.b
    s = ap(c.ps("s"), slice(0, qw), slice(0, kw))
    b.emit(Matmul, [qT, kT], [s], stationary=qT, moving=kT, dst=s)
    if not (c.causal and t0 + kw - 1 > q0):
        return s
    m = ap(c.tile("smask", (c.P, c.KB), F32), slice(0, qw), slice(0, kw))
    b.emit(TensorCopy, [s], [m], src=s, dst=m, engine=Engine.SCALAR)
    b.emit(AffineSelect, [m], [m], on_true=m, dst=m, on_false=NEG, cmp="greater_equal",
           start=q0 - t0, partition_step=1, step=-1)  # fmt: skip
    return m


def _key_blocks(c: _Ctx, q0: int, qw: int):
    end = min(c.Skv, q0 + qw) if c.causal else c.Skv
    return [(t0, min(c.KB, end - t0)) for t0 in range(0, end, c.KB)]


def _query_block(c: _Ctx, qi, ki, q0: int, qw: int, accs: dict):
    """One block of queries: pass A (-lse), Delta, pass B (module doc); a generator of its
    steps (`_interleave`), none of which leaves a shared PSUM tile unread."""
    b, r = c.b, slice(0, qw)
    qT = _load(c, c.q, qi, q0, qw, True, "qT")
    qn = _load(c, c.q, qi, q0, qw, False, "qn")
    doT = _load(c, c.go, qi, q0, qw, True, "doT")
    don = _load(c, c.go, qi, q0, qw, False, "don")
    yield
    nlse = yield from _neg_lse(c, qi, ki, qT, q0, qw)
    delta = ap(c.tile("delta", (c.P, 1), F32), r)
    if c.o is not None:
        on = _load(c, c.o, qi, q0, qw, False, "on")
        prod = ap(c.tile("prod", (c.P, c.D), F32), r, slice(0, c.D))
        tt(b, "multiply", don, on, prod)
        b.emit(TensorReduce, [prod], [delta], alu="add", src=prod, dst=delta)
    else:
        b.emit(Memset, [], [delta], dst=delta, value=0.0)
        for t0, kw in _key_blocks(c, q0, qw):
            p, dp, _ = _p_dp(c, ki, qT, doT, nlse, q0, qw, t0, kw)
            prod = ap(c.tile("prodk", (c.P, c.KB), F32), r, slice(0, kw))
            tt(b, "multiply", p, dp, prod)
            part = ap(c.tile("part", (c.P, 1), F32), r)
            b.emit(TensorReduce, [prod], [part], alu="add", src=prod, dst=part)
            tt(b, "add", delta, part, delta)
            yield
    dq = ap(c.ps("dq"), r, slice(0, c.D))
    first = True
    for t0, kw in _key_blocks(c, q0, qw):
        p, dp, kn = _p_dp(c, ki, qT, doT, nlse, q0, qw, t0, kw, natural=True)
        ds = ap(c.tile("ds", (c.P, c.KB)), r, slice(0, kw))
        tmp = ap(c.tile("dstmp", (c.P, c.KB)), r, slice(0, kw))
        ts(b, dp, tmp, "subtract", delta, "multiply", c.scale, engine=Engine.VECTOR)
        tt(b, "multiply", tmp, p, ds, engine=Engine.GPSIMD)
        yield
        first = _products(c, (p, ds, kn, qn, don), dq, accs, qw, t0, kw, first)
        yield
    o = ap(c.tile("dqo", (c.P, c.D), c.b.tensors[c.dq].dtype), r, slice(0, c.D))
    b.emit(TensorCopy, [dq], [o], src=dq, dst=o)
    dst = ap(c.dq, *qi, slice(q0, q0 + qw), slice(None))
    b.emit(DmaCopy, [o], [dst], src=o, dst=dst, queue=c.stores[q0 // c.P])


def _neg_lse(c: _Ctx, qi, ki, qT, q0: int, qw: int):
    """Pass A: -(m + log l) of the scaled, masked scores, online over the key blocks."""
    b, r = c.b, slice(0, qw)
    cols = {k: ap(c.tile(f"c{k}", (c.P, 1), F32), r) for k in ("n0", "n1", "l", "lb",
                                                                         "mx", "cr")}  # fmt: skip
    nm = [cols["n0"], cols["n1"]]
    b.emit(Memset, [], [nm[0]], dst=nm[0], value=-NEG)
    b.emit(Memset, [], [cols["l"]], dst=cols["l"], value=0.0)
    for n, (t0, kw) in enumerate(_key_blocks(c, q0, qw)):
        kT = _load(c, c.k, ki, t0, kw, True, "kT")
        s = _scores(c, qT, kT, q0, qw, t0, kw)
        old, new = nm[n % 2], nm[(n + 1) % 2]
        junk = ap(c.tile("junk", (c.P, c.KB)), r, slice(0, kw))
        if c.cfg.core.scalar.reduce_max:  # ScalarE's copy with a max reduction: VectorE is busier
            b.emit(Activation, [s], [junk, cols["mx"]], func="copy", src=s, dst=junk,
                   reduce="max", reduce_dst=cols["mx"])  # fmt: skip
        else:
            b.emit(TensorReduce, [s], [cols["mx"]], alu="max", src=s, dst=cols["mx"])
        ts(b, cols["mx"], new, "multiply", -c.scale, "min", old, engine=Engine.VECTOR)
        b.emit(Activation, [s, new], [junk, cols["lb"]], func="exp", src=s, dst=junk,
               scale=c.scale, bias=new, reduce="add", reduce_dst=cols["lb"])  # fmt: skip
        act(b, "exp", old, cols["cr"], scale=-1.0, bias=new)
        ts(b, cols["l"], cols["l"], "multiply", cols["cr"], "add", cols["lb"],
           engine=Engine.VECTOR)  # fmt: skip
        yield
    last = nm[len(_key_blocks(c, q0, qw)) % 2]
    out = ap(c.tile("nlse", (c.P, 1), F32), r)
    act(b, "log", cols["l"], cols["lb"])
    tt(b, "subtract", last, cols["lb"], out)
    return out


def _p_dp(c: _Ctx, ki, qT, doT, nlse, q0, qw, t0, kw, natural=False):
    """P = exp(S scale - lse) (SBUF, the matmul dtype) and dP = dO v^T (PSUM) of one key
    block; with `natural`, also k's rows as [128, chunks x D] (for dq)."""
    b, r = c.b, slice(0, qw)
    kT = _load(c, c.k, ki, t0, kw, True, "kT")
    vT = _load(c, c.v, ki, t0, kw, True, "vT")
    s = _scores(c, qT, kT, q0, qw, t0, kw)
    p = ap(c.tile("p", (c.P, c.KB)), r, slice(0, kw))
    act(b, "exp", s, p, scale=c.scale, bias=nlse)
    dp = ap(c.ps("dp"), r, slice(0, kw))
    b.emit(Matmul, [doT, vT], [dp], stationary=doT, moving=vT, dst=dp)
    kn = None
    if natural:
        kt = c.tile("kn", (c.P, c.KB // c.P * c.D))
        kn = []
        for j, k0 in enumerate(range(0, kw, c.P)):
            cw = min(c.P, kw - k0)
            dst = ap(kt, slice(0, cw), slice(j * c.D, (j + 1) * c.D))
            src = ap(c.k, *ki, slice(t0 + k0, t0 + k0 + cw), slice(None))
            c.turn += 1
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=c.loads[c.turn])
            kn.append(dst)
    return p, dp, kn


def _products(c: _Ctx, tiles, dq, accs, qw: int, t0: int, kw: int, first: bool) -> bool:
    """Per 128-key chunk: dS^T (TensorE), dq += dS^T-chunk^T k-chunk, dk += dS-chunk^T q and
    dv += P-chunk^T dO (PSUM, then added to the accumulators). Returns False (dq started)."""
    b, r, D = c.b, slice(0, qw), c.D
    p, ds, kn, qn, don = tiles
    dsT = c.tile("dsT", (c.P, c.KB // c.P * c.P))
    for j, k0 in enumerate(range(0, kw, c.P)):
        cw = min(c.P, kw - k0)
        chunk = slice(k0, k0 + cw)
        src = ap(ds.name, r, chunk)
        tp = ap(c.ps("dsT"), slice(0, cw), slice(j * c.P, j * c.P + qw))
        b.emit(Transpose, [src], [tp], src=src, dst=tp)
        st = ap(dsT, slice(0, cw), slice(j * c.P, j * c.P + qw))
        b.emit(TensorCopy, [tp], [st], src=tp, dst=st, engine=Engine.SCALAR)
        b.emit(Matmul, [st, kn[j]], [dq], stationary=st, moving=kn[j], dst=dq,
               accumulate=not first)  # fmt: skip
        first = False
        g = (t0 + k0) // c.P
        for name, stat, mv in (("dk", ds, qn), ("dv", p, don)):
            s_ = ap(stat.name, r, chunk)
            acc_ps = ap(c.ps("kv0" if name == "dk" else "kv1"), slice(0, cw), slice(0, D))
            b.emit(Matmul, [s_, mv], [acc_ps], stationary=s_, moving=mv, dst=acc_ps)
            acc = ap(accs[name], slice(0, cw), slice(g * D, (g + 1) * D))
            tt(b, "add", acc, acc_ps, acc)  # VectorE: GpSimd cannot read PSUM
    return first


def _store_kv(c: _Ctx, ki, accs: dict, nkc: int) -> None:
    """dk and dv of one kv head: cast from the accumulators, stored per 128 keys."""
    b, D = c.b, c.D
    for name, out in (("dk", c.dk), ("dv", c.dv)):
        o = b.tile(f"{name}_out", "sbuf", (c.P, nkc * D), b.tensors[out].dtype)
        b.emit(TensorCopy, [ap(accs[name])], [ap(o)], src=ap(accs[name]), dst=ap(o),
               engine=Engine.SCALAR)  # fmt: skip
        for g in range(nkc):
            cw = min(c.P, c.Skv - g * c.P)
            src = ap(o, slice(0, cw), slice(g * D, (g + 1) * D))
            dst = ap(out, *ki, slice(g * c.P, g * c.P + cw), slice(None))
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=c.stores[g])
