"""The backward ops of 2-D pooling (`pooling`): `max_pool2d_with_indices_backward` (each
window's gradient to the input position its index names) and `avg_pool2d_backward` (each
window's gradient over its window, divided as the forward divided), laid out as the forward:
planes on partitions (several a partition when they fit), blocks of planes alternating between
the cores at LNC 2. Their `input_size` is the forward input's shape (aten passes the input
itself, whose values they do not read: its bytes are not the op's).

grad_input is built per chunk of input rows (the windows that read them loaded; the rows
between chunks are read by both), tap by tap of the kernel: a tap's input positions of every
window are a strided view, and each gets the window's share. For the max: the gradient where
the window's index, less the position of a tap every window has (o: one `tensor_tensor`
against a GpSimd iota of h W + w, counted from the chunk), equals the tap's offset (a
`tensor_scalar` equal, then the product); for the average, the gradient times 1 / the
divisor (once per chunk). One engine writes a chunk's tile of grad_input (its writes are
ordered by the tile, not by their strided regions, which do not meet): a tap's positions that
no earlier tap reached are written, the others added to (kernel 3, stride 2: 5 taps of 9);
positions no window reads are zeroed first.
"""

from __future__ import annotations

import numpy as np

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.isa import Ap, DmaCopy, Iota, Memset, TensorScalar, TensorTensor
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.pooling import F32, I32, Blocks, Window, strided, taps, window
from trnsim.kernels.queues import Queues
from trnsim.kernels.spread import G, S, Spread, V

__all__ = ["lower_pool_backward"]

ROWS_BYTES = 8 * 1024  # a partition's share of a chunk's rows of grad_input (or planes)
BUFS = 2
SLOTS = 4  # rotating masks and shares of a chunk


def lower_pool_backward(b: KernelBuilder, cfg: ChipConfig, op: str, args: dict) -> None:
    """grad_input of max_pool2d_with_indices or avg_pool2d (module doc)."""
    g, out = args["grad_output"], args["out"]
    xs = tuple(b.tensors[out].shape)
    if list(args["input_size"]) != list(xs):
        raise TraceError(f"{op}: input_size {args['input_size']} but out is {list(xs)}")
    win = window(op, args, xs)
    H, W = xs[2:]
    Ho, Wo = win.out(H, W)
    is_max = op == "max_pool2d_with_indices_backward"
    ins = [g] + ([args["indices"]] if is_max else [])
    for name in ins:
        if tuple(b.tensors[name].shape) != (*xs[:2], Ho, Wo):
            raise TraceError(f"{op}: {name} {list(b.tensors[name].shape)}; expected "
                             f"{[*xs[:2], Ho, Wo]} for out {list(xs)}")  # fmt: skip
    ref = _reference_tap(win, H, W)
    if is_max and ref is None:
        raise TraceError(f"{op}: no tap of the kernel reads an input for every window; not "
                         "lowered yet")  # fmt: skip
    sp = Spread(b, cfg)
    qs = Queues(cfg)
    loads, stores = qs.loads(), qs.stores()
    P = cfg.core.sbuf.partitions
    odt = b.tensors[out].dtype
    per_plane = H * W * 4
    most = max(1, ROWS_BYTES // per_plane)
    rows = H if most > 1 or per_plane <= ROWS_BYTES else max(win.k[0], ROWS_BYTES // (W * 4))
    wrows = min(Ho, (rows + win.k[0]) // win.s[0] + 1)  # windows a chunk reads at most
    blocks = Blocks(xs, P, b.part, most)
    pos, n = None, 0
    for index, parts, m in blocks.blocks:
        lead = (slice(0, parts), slice(0, m))
        for r0 in range(0, H, rows):
            r1 = min(H, r0 + rows)
            lo = max(0, -((win.k[0] - 1 - r0 - win.p[0]) // win.s[0]))  # windows reading
            hi = min(Ho, (r1 - 1 + win.p[0]) // win.s[0] + 1)  # rows [r0, r1)
            ck = _Chunk(b, sp, n, lead, P, (rows, wrows, W, Wo, blocks.most))
            tiles = {}
            for name in ins:
                t = ck.tile(name, (wrows, Wo), b.tensors[name].dtype)
                dst = ap(t, *lead, slice(0, hi - lo))
                src = ap(name, *index, slice(None), slice(lo, hi))
                b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=loads.next())
                tiles[name] = t
            if is_max:
                if pos is None:  # h W + w in every plane slot, from kh rows above a chunk
                    halo = win.k[0]
                    pos = b.tile("poolb_pos", "sbuf", (P, blocks.most, rows + 2 * halo, W), I32)
                    for k in range(blocks.most):
                        d = ap(pos, slice(None), k)
                        b.emit(Iota, [], [d], dst=d, start=-halo * W, step=1, engine=G)
                share = _MaxShare(ck, win, ref, tiles[g], tiles[args["indices"]], pos,
                                  (lo, hi), r0, b.tensors[g].dtype)  # fmt: skip
            else:
                share = _AvgShare(ck, win, args, tiles[g], (lo, hi), (H, W))
            tile = _taps(ck, win, (r0, r1), (lo, hi), (H, W), odt, share)
            src = ap(tile, *lead, slice(0, r1 - r0))
            dst = ap(out, *index, slice(None), slice(r0, r1))
            b.emit(DmaCopy, [src], [dst], src=src, dst=dst, queue=stores.next())
            n += 1


def _reference_tap(win: Window, H: int, W: int):
    """A tap (tr, tc) of the kernel that every window reads inside the input, or None."""
    Ho, Wo = win.out(H, W)
    rows = [t for t, a, b in taps(H, Ho, win.k[0], win.s[0], win.p[0]) if (a, b) == (0, Ho)]
    cols = [t for t, a, b in taps(W, Wo, win.k[1], win.s[1], win.p[1]) if (a, b) == (0, Wo)]
    return (rows[0], cols[0]) if rows and cols else None


class _Chunk:
    """One chunk's scratch (rotating over BUFS chunks); `lead`: the index of its planes."""

    def __init__(self, b, sp: Spread, n: int, lead: tuple, P: int, dims):
        self.b, self.sp, self.n, self.lead, self.P = b, sp, n, lead, P
        self.rows, self.wrows, self.W, self.Wo, self.m = dims

    def tile(self, kind: str, shape: tuple, dt) -> str:
        key = f"poolb.{kind}{self.n % BUFS}:{self.m}:{shape}"
        return self.b.scratch_tile(key, "poolb", (self.P, self.m, *shape), dt)

    def view(self, t: str, rows, cols) -> Ap:
        return ap(t, *self.lead, rows, cols)


class _MaxShare:
    """A window's gradient where its index is the tap's position: o = index - the position of
    the reference tap (every window has it), then per tap (o == its offset) times g."""

    def __init__(self, ck: _Chunk, win: Window, ref, g: str, idx: str, pos: str, wins, r0, gdt):
        self.ck, self.g = ck, g
        self.dt = gdt if gdt.is_16bit_float else F32
        (sh, sw), (ph, pw) = win.s, win.p
        lo, hi = wins
        self.ref, self.W, self.r0 = ref, ck.W, r0
        self.o = ck.tile("o", (ck.wrows, ck.Wo), F32)  # index - the reference tap's (local)
        rr = strided(sh * lo - ph + ref[0] - r0 + win.k[0], hi - lo, sh)
        cc = strided(-pw + ref[1], ck.Wo, sw)
        full = (slice(0, hi - lo), slice(0, ck.Wo))
        ck.sp.tt("subtract", ck.view(idx, *full), ck.view(pos, rr, cc), ck.view(self.o, *full))

    def emit(self, tap, wi, wc, dst: Ap, engines) -> None:
        ck = self.ck
        w = (slice(*wi), slice(*wc))
        shape = (slice(0, wi[1] - wi[0]), slice(0, wc[1] - wc[0]))
        self.k = getattr(self, "k", 0) + 1  # masks rotate: a tap's need not wait for the last
        eq = ck.view(ck.tile(f"eq{self.k % SLOTS}", (ck.wrows, ck.Wo), self.dt), *shape)
        off = (tap[0] - self.ref[0] + self.r0) * self.W + tap[1] - self.ref[1]
        ck.sp.ts(ck.view(self.o, *w), eq, "equal", float(off))
        return ck.sp.tt("multiply", ck.view(self.g, *w), eq, dst, engines=engines)


class _AvgShare:
    """A window's gradient over its divisor: g times one scale, straight into grad_input,
    when the divisor is one and the windows do not overlap; else precomputed for the chunk's
    windows (gs)."""

    def __init__(self, ck: _Chunk, win: Window, args: dict, g: str, wins: tuple, hw: tuple):
        self.ck = ck
        lo, hi = wins
        H, W = hw
        Ho, Wo = win.out(H, W)
        self.dt = F32
        div = args.get("divisor_override")
        full = (slice(0, hi - lo), slice(0, Wo))
        uniform = div is not None or args.get("count_include_pad", True)
        if uniform:
            self.scale = 1.0 / (float(div) if div is not None else win.k[0] * win.k[1])
        if uniform and all(k <= s for k, s in zip(win.k, win.s)):
            self.src = g
            return
        self.src, scale = ck.tile("gs", (ck.wrows, ck.Wo), F32), getattr(self, "scale", 1.0)
        self.scale = 1.0
        if uniform:
            ck.sp.ts(ck.view(g, *full), ck.view(self.src, *full), "multiply", scale)
            return
        counts = [_valid(H, win.k[0], win.s[0], win.p[0], i) for i in range(lo, hi)]
        ccounts = [_valid(W, win.k[1], win.s[1], win.p[1], j) for j in range(Wo)]
        for (a, bb), cr in _runs(counts):
            for (c, d), cc in _runs(ccounts):
                v = (slice(a, bb), slice(c, d))
                ck.sp.ts(ck.view(g, *v), ck.view(self.src, *v), "multiply", 1.0 / (cr * cc))

    def emit(self, tap, wi, wc, dst: Ap, engines):
        src = self.ck.view(self.src, slice(*wi), slice(*wc))
        return self.ck.sp.ts(src, dst, "multiply", self.scale, engines=engines)

    def add(self, wi, wc, dst: Ap, engines):
        src = self.ck.view(self.src, slice(*wi), slice(*wc))
        return self.ck.sp.tt("add", dst, src, dst, engines=engines)


def _valid(n: int, k: int, s: int, p: int, i: int) -> int:
    """Window i's taps inside [0, n)."""
    return sum(0 <= s * i - p + t < n for t in range(k))


def _runs(values: list) -> list:
    out, j = [], 0
    while j < len(values):
        e = j
        while e < len(values) and values[e] == values[j]:
            e += 1
        out.append(((j, e), values[j]))
        j = e
    return out


def _writer(ck: _Chunk, free: tuple, tile: str, plan: list, tt: bool):
    """The engine that would finish a class's writes (len(plan) passes like its first, a
    tensor_tensor or a tensor_scalar) first, by the engines' work so far (`spread`)."""
    if not plan:
        return V
    _, _, _, rr, cc, *_ = plan[0]
    dst = ck.view(tile, rr, cc)
    if tt:
        cls, fields = TensorTensor, {"alu": "add", "src0": dst, "src1": dst, "dst": dst}
    else:
        cls, fields = TensorScalar, {"src": dst, "dst": dst, "op0": "multiply", "operand0": 1.0}
    est = {e: ck.sp.load[e] + len(plan) * ck.sp.cost(cls, e, fields) for e in free}
    return min(est, key=est.get)


def _taps(ck: _Chunk, win: Window, rows: tuple, wins: tuple, hw: tuple, odt, share) -> str:
    """grad_input rows [r0, r1) from the windows [lo, hi) that read them, tap by tap: the
    chunk's tile of grad_input."""
    (kh, kw), (sh, sw), (ph, pw) = win.k, win.s, win.p
    r0, r1 = rows
    lo, hi = wins
    H, W = hw
    Wo = ck.Wo
    tile = ck.tile("gi", (ck.rows, W), odt)
    covered = np.zeros((r1 - r0, W), bool)
    plan = []
    for tr in range(kh):
        ia = max(lo, -((tr - ph - r0) // sh))  # windows whose tap tr is in rows [r0, r1)
        ib = min(hi, (r1 - 1 + ph - tr) // sh + 1)
        for tc in range(kw):
            ja = max(0, -((tc - pw) // sw))
            jb = min(Wo, (W - 1 + pw - tc) // sw + 1)
            if ia >= ib or ja >= jb:
                continue
            rr = strided(sh * ia - ph + tr - r0, ib - ia, sh)
            cc = strided(sw * ja - pw + tc, jb - ja, sw)
            seen = covered[rr, cc]
            plan.append(((tr, tc), (ia - lo, ib - lo), (ja, jb), rr, cc, seen.any(), seen.all()))
            covered[rr, cc] = True
    zero = not covered.all() or any(a and not b for *_, a, b in plan)
    adds = zero or any(seen for *_, seen, _ in plan)
    # one engine writes the tile (its writes are ordered by the tile, not by the strided
    # regions, which do not meet): the one that would finish them first (ScalarE too for an
    # average's scaled copies alone)
    free = (V, G, S) if isinstance(share, _AvgShare) and not adds else (V, G)
    pin = _writer(ck, free, tile, plan, adds or not isinstance(share, _AvgShare))
    if zero:
        z = ck.view(tile, slice(0, r1 - r0), slice(0, W))
        ck.b.emit(Memset, [], [z], dst=z, value=0.0, engine=pin if pin != S else V)
        pin = pin if pin != S else V
    for n, (tap, wi, wc, rr, cc, seen, _) in enumerate(plan):
        dst = ck.view(tile, rr, cc)
        if not (seen or zero):
            share.emit(tap, wi, wc, dst, (pin,))
        elif isinstance(share, _AvgShare):
            share.add(wi, wc, dst, (pin,))
        else:
            tmp = ck.view(ck.tile(f"c{n % SLOTS}", (ck.wrows, Wo), share.dt),
                          slice(0, wi[1] - wi[0]), slice(0, wc[1] - wc[0]))  # fmt: skip
            share.emit(tap, wi, wc, tmp, (V, G))
            ck.sp.tt("add", dst, tmp, dst, engines=(pin,))
    return tile
