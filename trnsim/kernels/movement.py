"""Data movement: `contiguous`, `permute`, `cat` and `split`, as DMA copies from HBM to HBM.

Nothing is computed, so nothing passes through SBUF: each op is a few large HBM -> HBM copies
(a DMA copies a view's elements in flat order into another view of as many elements; an
HBM -> HBM copy uses all the core's DMA engines, each byte crossing an engine once, where a load
and a store through SBUF would cross twice). A copy is cut along its first dim into pieces of
at least CHUNK bytes, spread over the load queues (`queues`), so each piece's setup (~0.9 us)
hides behind the data of the pieces before it (docs/model.md). The descriptors are the views'
contiguous runs: a permute that leaves the last dim in place copies runs of that dim's length
(honestly slow when it is short, docs/calibration.md); one that swaps the last two dims is a
`transpose` (through SBUF, by DMA transpose); other permutes that move the last dim are not
lowered yet.

With LNC 2 the pieces alternate between the two physical cores; such an op must then be
alone with its tensors in its kernel (`kernels.ISOLATED`: no other op of the kernel may touch
them, as the cores do not synchronise inside a launch).
"""

from __future__ import annotations

import itertools
import math

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.isa import DmaCopy
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.queues import Queues
from trnsim.kernels.transpose import lower_moved_last, lower_transpose

__all__ = ["lower_contiguous", "lower_permute", "lower_cat", "lower_split", "Mover", "CHUNK"]

CHUNK = 1 << 20  # bytes per copy at least (when there are that many): setup hides behind data


class Mover:
    """Emits an op's HBM -> HBM copies, numbering them: copy i goes to the i-th of the load
    queues in turn and, with LNC 2, to physical core i % cores (`b.part`)."""

    def __init__(self, b: KernelBuilder, cfg: ChipConfig):
        self.b, self.n, self.queues = b, 0, Queues(cfg).loads()

    def copy(self, src: str, src_idx: list, dst: str, dst_idx: list) -> None:
        """Copy view `src[src_idx]` to `dst[dst_idx]`: per dim an int (the dim dropped) or a
        (start, stop) pair; the sliced dims pair up in order, with equal extents. Cut along
        the first pair into pieces of at least CHUNK bytes."""
        b = self.b
        ss = [i for i, v in enumerate(src_idx) if isinstance(v, tuple)]
        ds = [i for i, v in enumerate(dst_idx) if isinstance(v, tuple)]
        ext = [src_idx[i][1] - src_idx[i][0] for i in ss]
        assert ext == [dst_idx[i][1] - dst_idx[i][0] for i in ds], (src_idx, dst_idx)
        if not ext:
            self._emit(src, src_idx, dst, dst_idx)
            return
        if math.prod(ext) == 0:
            return
        item = math.prod(ext[1:]) * max(
            b.tensors[src].dtype.itemsize, b.tensors[dst].dtype.itemsize
        )
        per = max(1, -(-CHUNK // item))
        for a in range(0, ext[0], per):
            z = min(a + per, ext[0])
            s, d = list(src_idx), list(dst_idx)
            s[ss[0]] = (src_idx[ss[0]][0] + a, src_idx[ss[0]][0] + z)
            d[ds[0]] = (dst_idx[ds[0]][0] + a, dst_idx[ds[0]][0] + z)
            self._emit(src, s, dst, d)

    def _emit(self, src: str, s: list, dst: str, d: list) -> None:
        n, (core, cores) = self.n, self.b.part
        self.n += 1
        if n % cores != core:
            return
        sa, da = ap(src, *_index(s)), ap(dst, *_index(d))
        self.b.emit(DmaCopy, [sa], [da], src=sa, dst=da, queue=self.queues[n])


def _index(idx: list) -> list:
    return [slice(*v) if isinstance(v, tuple) else v for v in idx]


def _full(shape) -> list:
    return [(0, n) for n in shape]


def lower_contiguous(b: KernelBuilder, cfg: ChipConfig, x: str, out: str) -> None:
    """out = x (a copy; a cast when the dtypes differ), HBM -> HBM."""
    tx, to = b.tensors[x], b.tensors[out]
    if tuple(tx.shape) != tuple(to.shape):
        raise TraceError(
            f"contiguous: x {list(tx.shape)} and out {list(to.shape)} differ; expected one shape"
        )
    Mover(b, cfg).copy(x, _full(tx.shape), out, _full(to.shape))


def lower_permute(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, dims: list) -> None:
    """out = x.permute(dims): out's dim j is x's dim dims[j]."""
    tx, to = b.tensors[x], b.tensors[out]
    nd = len(tx.shape)
    perm = [d % nd for d in dims] if nd else []
    if sorted(perm) != list(range(nd)) or len(dims) != nd or any(not -nd <= d < nd for d in dims):
        raise TraceError(
            f"permute: dims {list(dims)} for x {list(tx.shape)}; expected a permutation of "
            f"0..{nd - 1}"
        )
    want = [tx.shape[d] for d in perm]
    if list(to.shape) != want or to.dtype != tx.dtype:
        raise TraceError(
            f"permute: x {list(tx.shape)} {tx.dtype.name} -> out {list(to.shape)} "
            f"{to.dtype.name}; expected out {want} of x's dtype"
        )
    if nd < 2 or perm[-1] == nd - 1:
        _permute_rows(b, cfg, x, out, perm)
    elif perm == [*range(nd - 2), nd - 1, nd - 2]:
        part = b.part
        if part[1] > 1 and to.shape[-2] % cfg.core.sbuf.partitions:
            if part[0]:  # transpose splits by blocks of 128 rows: here the first core does all
                return
            b.part = (0, 1)
        try:
            lower_transpose(b, cfg, x, out, -2, -1)
        finally:
            b.part = part
    else:
        lower_moved_last(b, cfg, x, out, perm)


def _permute_rows(b: KernelBuilder, cfg: ChipConfig, x: str, out: str, perm: list[int]) -> None:
    """A permute that keeps the last dim: the out dims copied whole (`_whole`), one copy per
    index of the others."""
    to = b.tensors[out]
    keep = _whole(perm, list(to.shape))
    fixed = [j for j in range(len(perm)) if j not in keep]
    m = Mover(b, cfg)
    for combo in itertools.product(*(range(to.shape[j]) for j in fixed)):
        at = dict(zip(fixed, combo))
        d = [at[j] if j in at else (0, to.shape[j]) for j in range(len(perm))]
        s: list = [None] * len(perm)
        for j in range(len(perm)):
            s[perm[j]] = d[j]
        m.copy(x, s, out, d)


def _whole(perm: list[int], sizes: list[int]) -> set[int]:
    """Out dims, the last among them, whose x dims rise in out's order (so one copy moves
    them all: both views list them in the same order), with the largest product of sizes
    (the fewest copies)."""
    n = len(perm)
    best = [math.log(max(sizes[j], 1)) for j in range(n)]
    prev = [-1] * n
    for j in range(n):
        for i in range(j):
            gain = best[i] + math.log(max(sizes[j], 1))
            if perm[i] < perm[j] and gain > best[j]:
                best[j], prev[j] = gain, i
    out, j = set(), n - 1
    while j >= 0:
        out.add(j)
        j = prev[j]
    return out


def _dim(op: str, dim, nd: int) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or not -nd <= dim < max(nd, 1):
        raise TraceError(f"{op}: dim {dim!r}; expected an integer in {-nd}..{nd - 1}")
    return dim % nd


def lower_cat(b: KernelBuilder, cfg: ChipConfig, tensors: list, out: str, dim=0) -> None:
    """out = cat(tensors, dim): each input copied into its slice of out."""
    to = b.tensors[out]
    nd = len(to.shape)
    d = _dim("cat", dim, nd)
    total = 0
    for name in tensors:
        shape = list(b.tensors[name].shape)
        if len(shape) != nd or any(shape[i] != to.shape[i] for i in range(nd) if i != d):
            raise TraceError(
                f"cat: {name} {shape} does not fit out {list(to.shape)} along dim {dim}; "
                "expected every dim but that one equal"
            )
        total += shape[d]
    if total != to.shape[d]:
        raise TraceError(
            f"cat: the inputs' dim {dim} add up to {total}, out's is {to.shape[d]}; expected equal"
        )
    m, off = Mover(b, cfg), 0
    for name in tensors:
        shape = b.tensors[name].shape
        dst = _full(to.shape)
        dst[d] = (off, off + shape[d])
        m.copy(name, _full(shape), out, dst)
        off += shape[d]


def split_sizes(op: str, size, n: int) -> list[int]:
    """The pieces `split(size)` cuts a dim of `n` into: an int (pieces of that size, the last
    smaller) or a list of sizes adding up to n."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return [min(size, n - a) for a in range(0, n, size)] or [0]
    if (
        isinstance(size, list)
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in size)
        and sum(size) == n
    ):
        return list(size)
    raise TraceError(
        f"{op}: split_size {size!r}; expected a positive integer or a list of sizes adding up "
        f"to {n}"
    )


def lower_split(b: KernelBuilder, cfg: ChipConfig, x: str, size, outs: list, dim=0) -> None:
    """outs = split(x, split_size, dim): each piece copied out of its slice of x."""
    tx = b.tensors[x]
    nd = len(tx.shape)
    d = _dim("split", dim, nd)
    sizes = split_sizes("split", size, tx.shape[d])
    if len(sizes) != len(outs):
        raise TraceError(
            f"split: x {list(tx.shape)} split by {size!r} along dim {dim} gives {len(sizes)} "
            f"pieces; outs names {len(outs)}"
        )
    m, off = Mover(b, cfg), 0
    for name, n in zip(outs, sizes):
        want = list(tx.shape)
        want[d] = n
        if list(b.tensors[name].shape) != want:
            raise TraceError(f"split: {name} is {list(b.tensors[name].shape)}; expected {want}")
        src = _full(tx.shape)
        src[d] = (off, off + n)
        m.copy(x, src, name, _full(want))
        off += n
