"""2-D pooling over [N, C, H, W]: `max_pool2d_with_indices` (the max of each window and its
position h W + w in the plane, the first in row-major order on ties, as PyTorch) and
`avg_pool2d` (count_include_pad, divisor_override), for any kernel, stride and padding
(padding at most half the kernel, as PyTorch asks) with dilation 1 and ceil_mode false;
anything else is refused by name, so the op falls back to the estimate.

Layout: planes on partitions, a plane's rows on the free dim: a block of up to 128 planes is
one DMA (whole images when C <= 128: x[n0:n1] is their planes in flat order; else 128
channels of one image), a tall plane is cut into chunks of output rows (each loading the input
rows its windows read). At LNC 2 the blocks alternate between the physical cores.

The window is separable: along the columns, then along the rows, each a merge of the kernel's
taps as strided views of the tile. For the max a merge of tap t into the running (max,
position) is a compare (strict when t comes after the taps merged so far, so the first wins
ties), the max and a `select` of the position (positions: a GpSimd `iota` of h W + w, int32,
exact); the row stage selects the column stage's positions. Taps that every output reads merge
first, the border taps (windows over the padding) then on their outputs only. The compares
and maxima go to VectorE or GpSimd, the selects to VectorE (`spread`). The average adds the
taps (in fp32) and scales: 1 / (kh kw), the divisor override, or, without count_include_pad,
1 / the valid taps per row range and per column range.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.config import ChipConfig
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.isa import Ap, DmaCopy, Iota, TensorCopy
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues
from trnsim.kernels.spread import G, S, Spread, V

__all__ = ["Window", "window", "Blocks", "taps", "lower_pool", "F32", "I32"]

F32, I32 = dtype("float32"), dtype("int32")
ROWS_BYTES = 8 * 1024  # a partition's share of a chunk's input rows (or planes) at most
BUFS = 2


@dataclass(frozen=True)
class Window:
    """Kernel (kh, kw), stride (sh, sw), padding (ph, pw) of a 2-D pooling."""

    k: tuple[int, int]
    s: tuple[int, int]
    p: tuple[int, int]

    def out(self, h: int, w: int) -> tuple[int, int]:
        return tuple((n + 2 * p - k) // s + 1 for n, k, s, p in zip((h, w), self.k, self.s,
                                                                    self.p))  # fmt: skip


def _pair(op: str, key: str, v, default) -> tuple[int, int]:
    v = default if v is None or v == [] else v
    v = [v] if isinstance(v, int) else list(v)
    if len(v) == 1:
        v = v * 2
    if len(v) != 2 or any(not isinstance(x, int) or isinstance(x, bool) for x in v):
        raise TraceError(f"{op}: {key} {v!r}; expected an int or a pair of ints")
    return tuple(v)


def window(op: str, args: dict, x_shape: tuple) -> Window:
    """The window of a pooling op's arguments (PyTorch's: stride defaults to the kernel)."""
    k = _pair(op, "kernel_size", args.get("kernel_size"), None)
    s = _pair(op, "stride", args.get("stride"), k)
    p = _pair(op, "padding", args.get("padding"), 0)
    d = _pair(op, "dilation", args.get("dilation"), 1)
    if d != (1, 1) or args.get("ceil_mode"):
        raise TraceError(f"{op}: dilation {list(d)} or ceil_mode is not lowered yet; expected "
                         "dilation 1 and ceil_mode false")  # fmt: skip
    if min(k) < 1 or min(s) < 1 or min(p) < 0 or any(2 * pp > kk for pp, kk in zip(p, k)):
        raise TraceError(f"{op}: kernel {list(k)}, stride {list(s)}, padding {list(p)}; "
                         "expected padding at most half the kernel")  # fmt: skip
    if len(x_shape) != 4:
        raise TraceError(f"{op}: input {list(x_shape)}; expected [N, C, H, W]")
    w = Window(k, s, p)
    if min(w.out(*x_shape[2:])) < 1:
        raise TraceError(f"{op}: input {list(x_shape)} is smaller than the kernel {list(k)}")
    return w


def taps(n_in: int, n_out: int, k: int, s: int, p: int, lo: int = 0, hi: int | None = None):
    """Per tap t of a 1-D window: (t, a, b), the outputs [a, b) (of [lo, hi)) whose tap t
    reads an input in [0, n_in) (input s j - p + t)."""
    hi = n_out if hi is None else hi
    out = []
    for t in range(k):
        a = max(lo, -((t - p) // s))  # ceil((p - t) / s)
        b = min(hi, (n_in - 1 + p - t) // s + 1)
        out.append((t, a, max(a, b)))
    return out


def strided(start: int, n: int, step: int) -> slice:
    return slice(start, start + step * (n - 1) + 1, step)


class Blocks:
    """The blocks of planes of x [N, C, H, W] this core computes (module doc): per block the
    index of its planes (for `ap`), the partitions it fills and the planes on each (`m`, the
    same on every partition: the DMA moves the block's planes in flat order, partition after
    partition, so a partition's m planes are consecutive). Up to `most` planes a partition
    (fewer when the images of a block do not divide evenly)."""

    def __init__(self, shape: tuple, P: int, part: tuple[int, int], most: int = 1):
        N, C = shape[:2]
        blocks = []
        if C <= P:
            n = 0
            while n < N:
                k = min(N - n, max(1, most * P // C))  # images
                m = next(m for m in range(min(most, k * C), 0, -1)
                         if (k * C) % m == 0 and k * C // m <= P)  # fmt: skip
                blocks.append(((slice(n, n + k),), k * C // m, m))
                n += k
        else:
            blocks = [((n, slice(c, min(C, c + P))), min(C, c + P) - c, 1)
                      for n in range(N) for c in range(0, C, P)]  # fmt: skip
        core, cores = part
        self.blocks = blocks[core::cores]
        self.most = max((m for *_, m in self.blocks), default=1)


def chunks(n_out: int, rows_in: int, k: int, s: int) -> list[tuple[int, int]]:
    """Output rows [i0, i1) per chunk: as many as read at most `rows_in` input rows."""
    per = max(1, (rows_in - k) // s + 1)
    return [(i, min(n_out, i + per)) for i in range(0, n_out, per)]


def lower_pool(b: KernelBuilder, cfg: ChipConfig, op: str, args: dict) -> None:
    """max_pool2d_with_indices (out: [out, indices]) or avg_pool2d (out) (module doc)."""
    x = args["x"]
    xs = tuple(b.tensors[x].shape)
    win = window(op, args, xs)
    outs = args["out"] if isinstance(args["out"], list) else [args["out"]]
    H, W = xs[2:]
    Ho, Wo = win.out(H, W)
    for o in outs:
        if tuple(b.tensors[o].shape) != (*xs[:2], Ho, Wo):
            raise TraceError(f"{op}: {o} {list(b.tensors[o].shape)}; expected "
                             f"{[*xs[:2], Ho, Wo]}")  # fmt: skip
    is_max = op == "max_pool2d_with_indices"
    if is_max and len(outs) != 2:
        raise TraceError(f"{op}: out {outs}; expected [out, indices]")
    sp = Spread(b, cfg)
    qs = Queues(cfg)
    loads, stores = qs.loads(), qs.stores()
    P = cfg.core.sbuf.partitions
    xdt = b.tensors[x].dtype
    per_plane = H * W * max(4, xdt.itemsize)
    most = max(1, ROWS_BYTES // per_plane)  # whole planes a partition, when one fits
    rows = H if most > 1 or per_plane <= ROWS_BYTES else max(win.k[0], ROWS_BYTES // (W * 4))
    blocks = Blocks(xs, P, b.part, most)
    m_max = blocks.most
    pos = None
    n = 0
    for index, parts, m in blocks.blocks:
        lead = (slice(0, parts), slice(0, m))
        for i0, i1 in chunks(Ho, rows, win.k[0], win.s[0]):
            r0 = max(0, i0 * win.s[0] - win.p[0])
            r1 = min(H, (i1 - 1) * win.s[0] - win.p[0] + win.k[0])
            xt = b.scratch_tile(f"pool.x{n % BUFS}:{rows}", "pool_x", (P, m_max, rows, W), xdt)
            t = ap(xt, *lead, slice(0, r1 - r0))
            src = ap(x, *index, slice(None), slice(r0, r1))
            b.emit(DmaCopy, [src], [t], src=src, dst=t, queue=loads.next())
            if is_max and pos is None:  # h W + w of the chunk's elements, in every plane
                pos = b.tile("pool_pos", "sbuf", (P, m_max, rows, W), I32)
                for k in range(m_max):
                    d = ap(pos, slice(None), k)
                    b.emit(Iota, [], [d], dst=d, start=0, step=1, engine=G)
            st = _Stage(b, sp, n, lead, (rows, W, Wo, i1 - i0, m_max), xdt)
            shape = (r1 - r0, W)
            if is_max:
                res = list(_max(st, win, t, pos, shape, (i0, i1), (H, W), r0))
            else:
                res = [_avg(st, win, t, shape, (i0, i1), (H, W), r0, args,
                            b.tensors[outs[0]].dtype)]  # fmt: skip
            for o, v in zip(outs, res):
                dst = ap(o, *index, slice(None), slice(i0, i1))
                b.emit(DmaCopy, [v], [dst], src=v, dst=dst, queue=stores.next())
            n += 1


class _Stage:
    """Scratch tiles of one chunk (rotating over BUFS chunks); `lead`: the index of its
    planes in a tile (partitions, planes on each)."""

    def __init__(self, b, sp: Spread, n: int, lead: tuple, dims, xdt):
        self.b, self.sp, self.n, self.lead, self.xdt = b, sp, n, lead, xdt
        self.rows, self.W, self.Wo, self.ro, self.m = dims

    def tile(self, kind: str, shape: tuple, dt) -> str:
        key = f"pool.{kind}{self.n % BUFS}:{self.m}:{shape}"
        return self.b.scratch_tile(key, f"pool_{kind}", (128, self.m, *shape), dt)

    def views(self, t: str, rows: int):
        """(a, b) -> the view of tile t's first `rows` rows, columns [a, b)."""
        return lambda a, b: ap(t, *self.lead, slice(0, rows), slice(a, b))

    def row_views(self, t: str, cols: int):
        """(a, b) -> the view of tile t's rows [a, b), first `cols` columns."""
        return lambda a, b: ap(t, *self.lead, slice(a, b), slice(0, cols))


def _merge_order(tp: list, n_out: int):
    """The taps that read an input for every output, ascending, then the others: below them
    descending, above them ascending (each a strict or non-strict compare: `_max`)."""
    core = [t for t, a, b in tp if (a, b) == (0, n_out)]
    if not core:
        raise TraceError("no tap of the kernel reads an input for every window (padding at "
                         "both ends of so short an axis); not lowered yet")  # fmt: skip
    below = [t for t, a, b in tp if t < core[0] and t not in core][::-1]
    above = [t for t, a, b in tp if t > core[-1] and t not in core]
    return core, below + above


def _max_axis(st: _Stage, tp, n_out, val, posv, m_view, p_view, gt_view) -> None:
    """One axis of the max: val(t, a, b) / posv(t, a, b) the tap's values and positions for
    outputs [a, b); m_view(a, b), p_view(a, b) the running max and position; gt_view(a, b)
    a scratch for the compares."""
    sp = st.sp
    rng = {t: (a, b) for t, a, b in tp}
    core, rest = _merge_order(tp, n_out)
    c0 = core[0]
    if len(core) == 1:
        for src, dst in ((val(c0, 0, n_out), m_view(0, n_out)),
                         (posv(c0, 0, n_out), p_view(0, n_out))):  # fmt: skip
            sp.emit(TensorCopy, [src], [dst], (V, G, S), src=src, dst=dst)
    merged = [c0]
    for t in core[1:] + rest:
        a, b = rng[t]
        if a >= b:
            continue
        first = len(merged) == 1 and len(core) > 1
        prev = val(c0, a, b) if first else m_view(a, b)
        gt = gt_view(a, b)
        sp.tt("greater" if t > max(merged) else "greater_equal", val(t, a, b), prev, gt)
        sp.tt("max", prev, val(t, a, b), m_view(a, b))
        sp.select(gt, posv(t, a, b), posv(c0, a, b) if first else p_view(a, b), p_view(a, b))
        merged.append(t)


def _max(st: _Stage, win: Window, x: Ap, pos: str, shape, out_rows, hw, r0):
    """(max, indices) of a chunk: SBUF views [parts, m, ro, Wo]."""
    R, W = shape
    H, _ = hw
    i0, i1 = out_rows
    Wo, ro = st.Wo, i1 - i0
    (kh, kw), (sh, sw), (ph, pw) = win.k, win.s, win.p
    pdt = st.xdt if st.xdt.is_16bit_float else F32
    # columns: [planes, R, W] -> [planes, R, Wo]
    mc, pc = st.tile("mc", (st.rows, Wo), st.xdt), st.tile("pc", (st.rows, Wo), I32)

    def col_taps(t: str):
        return lambda tap, a, b: ap(t, *st.lead, slice(0, R),
                                    strided(sw * a - pw + tap, b - a, sw))  # fmt: skip

    gtc = st.views(st.tile("gtc", (st.rows, Wo), pdt), R)
    _max_axis(st, taps(W, Wo, kw, sw, pw), Wo, col_taps(x.name), col_taps(pos),
              st.views(mc, R), st.views(pc, R), gtc)  # fmt: skip
    # rows: [planes, R, Wo] -> [planes, ro, Wo]; output row i0 + j reads input row
    # sh (i0 + j) - ph + t, row sh (i0 + j) - ph + t - r0 of the chunk
    m, idx = st.tile("m", (ro, Wo), st.xdt), st.tile("idx", (ro, Wo), I32)

    def row_taps(t: str):
        return lambda tap, a, b: ap(t, *st.lead,
                                    strided(sh * (a + i0) - ph + tap - r0, b - a, sh),
                                    slice(0, Wo))  # fmt: skip

    gtr = st.row_views(st.tile("gtr", (ro, Wo), pdt), Wo)
    _max_axis(st, taps(H, ro, kh, sh, ph - sh * i0), ro, row_taps(mc), row_taps(pc),
              st.row_views(m, Wo), st.row_views(idx, Wo), gtr)  # fmt: skip
    out, ind = st.row_views(m, Wo)(0, ro), st.row_views(idx, Wo)(0, ro)
    if r0:  # the iota counts from the chunk's first row
        st.sp.ts(ind, ind, "add", float(r0 * W), engines=(G,))
    return out, ind


def _avg(st: _Stage, win: Window, x: Ap, shape, out_rows, hw, r0, args, odt):
    """The average of a chunk: an SBUF view [parts, m, ro, Wo] of out's dtype."""
    R, W = shape
    H, _ = hw
    i0, i1 = out_rows
    Wo, ro = st.Wo, i1 - i0
    (kh, kw), (sh, sw), (ph, pw) = win.k, win.s, win.p
    sp = st.sp
    acc_c = st.tile("ac", (st.rows, Wo), F32)
    cols = taps(W, Wo, kw, sw, pw)

    def val_c(t, a, b):
        return ap(x.name, *st.lead, slice(0, R), strided(sw * a - pw + t, b - a, sw))

    _sum_axis(sp, cols, Wo, val_c, st.views(acc_c, R))
    acc = st.tile("a", (ro, Wo), F32)
    rows = taps(H, ro, kh, sh, ph - sh * i0)

    def val_r(t, a, b):
        sl = strided(sh * (a + i0) - ph + t - r0, b - a, sh)
        return ap(acc_c, *st.lead, sl, slice(0, Wo))

    _sum_axis(sp, rows, ro, val_r, st.row_views(acc, Wo))
    out = st.tile("o", (ro, Wo), odt)
    o = st.row_views(out, Wo)(0, ro)
    div = args.get("divisor_override")
    if div is not None or args.get("count_include_pad", True):
        scale = 1.0 / (float(div) if div is not None else kh * kw)
        sp.ts(st.row_views(acc, Wo)(0, ro), o, "multiply", scale)
        return o
    for (ra, rb), (ca, cb), c in _counts(rows, ro, cols, Wo):  # the valid taps per output
        src = ap(acc, *st.lead, slice(ra, rb), slice(ca, cb))
        sp.ts(src, ap(out, *st.lead, slice(ra, rb), slice(ca, cb)), "multiply", 1 / c)
    return o


def _sum_axis(sp: Spread, tp, n_out, val, acc_v) -> None:
    rng = {t: (a, b) for t, a, b in tp}
    core, rest = _merge_order(tp, n_out)
    if len(core) == 1:
        sp.ts(val(core[0], 0, n_out), acc_v(0, n_out), "multiply", 1.0)
    else:
        sp.tt("add", val(core[0], 0, n_out), val(core[1], 0, n_out), acc_v(0, n_out))
    for t in core[2:] + rest:
        a, b = rng[t]
        if a < b:
            sp.tt("add", acc_v(a, b), val(t, a, b), acc_v(a, b))


def _counts(rows, n_rows, cols, n_cols):
    """((row range), (column range), valid taps) covering the outputs, ranges of equal
    counts."""

    def runs(tp, n):
        cnt = [sum(a <= j < b for _, a, b in tp) for j in range(n)]
        out, j = [], 0
        while j < n:
            e = j
            while e < n and cnt[e] == cnt[j]:
                e += 1
            out.append(((j, e), cnt[j]))
            j = e
        return out

    return [(r, c, cr * cc) for r, cr in runs(rows, n_rows) for c, cc in runs(cols, n_cols)]
