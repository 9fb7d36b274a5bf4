"""How a norm (`norms`) spreads its passes: c, the columns whose statistics ScalarE takes; the
lanes, column ranges each normalised, weighted and biased on engines of their own; and the
shares of the blocks whose shift each engine takes (fp32 outputs). `plan` picks the choice
that evens out the engines' time per block, each instruction costed by its engine's own model
(`balance.cost_ns`) on tiles of a builder of its own, so the split follows each chip's clocks
and fast modes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trnsim.dtypes import dtype
from trnsim.isa import (
    Activation,
    Ap,
    BnAggr,
    BnStats,
    Engine,
    ScalarTensorTensor,
    TensorScalar,
    TensorTensor,
)
from trnsim.kernels.balance import cost_ns
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.norm_affine import pe_group
from trnsim.kernels.row_plan import G, S, Spread, V, runs, slots_ns

__all__ = ["Lane", "plan", "LANE_RUN", "LANES"]

LANE_RUN = 512  # bytes a lane's columns of a row must take at least (its own DMAs' runs)
LANES = 16  # two lanes split the row at multiples of 1/LANES
MIX = 8  # two choices of engines mixed over the blocks in multiples of 1/MIX
MIX_GAIN = 0.95  # ... when that gives a block's busiest engine this much of its time at most
T = Engine.TENSOR


@dataclass(frozen=True)
class Lane:
    """Columns [lo, hi) of the rows, normalised on `norm`, multiplied by the weight on
    `weight` and the bias added on `bias` (VectorE or GpSimd; ScalarE: by TensorE into PSUM,
    copied out by ScalarE)."""

    lo: int
    hi: int
    norm: Engine
    weight: Engine = V
    bias: Engine = V


def plan(k) -> None:
    """Set k.c, k.lanes (the first block's), k.block_lanes (each block's: one or two choices
    of engines, mixed over the blocks), k.shifts (a `Spread`), k.pe_bias and k.planned (ns per
    block) for norm k (a `norm_stages.NormStages`)."""
    d = k.d
    cs = _Costs(k)
    cands = sorted({min(d, round(d * i / 32)) for i in range(33)
                    if 32 * k.c_min <= i <= 32 * k.c_share})  # fmt: skip
    stats = np.array([cs.stats(c) for c in cands])
    lanes = _lane_options(k, cs)
    lane_ns = np.array([t for _, t in lanes])
    if k.shift:
        shifts = [{V: a / 4, S: s / 4, G: (4 - a - s) / 4} for a in range(5)
                  for s in range(5 - a)]  # fmt: skip
    else:
        shifts = [{V: 1.0}]
    # the shift of the columns from c on (ScalarE's statistics shift the first c,
    # `NormStages.folded`; not a row's segments, whose rows of 2^20 ran slower so: 62 -> 61%)
    shift_ns = np.array(
        [
            [
                sum(
                    (
                        cs.on(e, f * cs.shift(e, d - c * (not k.segments)))
                        for e, f in sh.items()
                        if k.shift
                    ),
                    cs.on(V, 0.0),
                )
                for sh in shifts
            ]
            for c in cands
        ]
    )
    # a mix of two single-lane choices, a share w of the blocks on the second (MIX steps):
    # each pass on one engine for a block, the blocks' engines spread so the shares even out
    single = [n for n, (ls, _) in enumerate(lanes) if len(ls) == 1]
    mixes = [(j, j, 0.0) for j in range(len(lanes))]
    # (the whole x's blocks, as one core lowers it: c, which changes the values' rounding, is
    # then the same however the cores share the rows; a core of one block mixed none before)
    if (k.plan_blocks or k.blocks) > 1:  # (not with a pass of fp32 layer_norm's shift, spread
        # over the blocks too: the mixes the costs favour ran slower, rows of 64 by 12%, of 64K
        # by 5%; below)
        mixes += [(a, c, w / MIX) for n, a in enumerate(single) for c in single[n + 1 :]
                  for w in range(1, MIX)]  # fmt: skip
    mixed = np.array([(1 - w) * lane_ns[a] + w * lane_ns[c] for a, c, w in mixes])
    total = stats[:, None, None, :] + mixed[None, :, None, :] + shift_ns[:, None, :, :]
    worst = total.max(axis=-1)
    if k.shift:  # mixes only where ScalarE's statistics shift every column (`NormStages.folded`)
        worst[np.array(cands) < d if not k.segments else slice(None), len(lanes) :, :] = np.inf
    pure = len(lanes)  # a mix only where it gains MIX_GAIN over the best single choice
    worst[:, pure:, :] = np.where(worst[:, pure:, :] < MIX_GAIN * worst[:, :pure, :].min(),
                                  worst[:, pure:, :], np.inf)  # fmt: skip
    i, j, h = np.unravel_index(int(np.argmin(worst)), worst.shape)
    a, c, w = mixes[j]
    k.c, k.lanes = cands[i], list(lanes[a][0])
    sets = [list(lanes[a][0]), list(lanes[c][0])]
    k.block_lanes = [sets[o] for o in Spread({0: 1 - w, 1: w}, k.blocks).order]
    k.shifts = Spread(shifts[h], k.blocks)
    k.pe_bias = k.bias is not None and any(lane.bias == S for ls in sets for lane in ls)
    k.planned = float(worst[i, j, h])


def _lane_options(k, cs: _Costs) -> list[tuple[tuple[Lane, ...], np.ndarray]]:
    """(lanes, (V, S, G, TensorE) ns per block): one lane of each choice of engines, or two
    lanes split at 1/LANES of the row, each lane's columns of a row at least LANE_RUN bytes
    (they are their own DMAs). TensorE takes the bias only where `k.pe_ok`."""
    d, out = k.d, []
    biases = (V, G) + ((S,) if k.pe_ok else ())
    engines = [(e, w, a) for e in (V, S, G) for w in ((V, G) if k.weight else (V,))
               for a in (biases if k.bias else (V,))]  # fmt: skip
    if k.stt:  # (`NormStages.stt`: the normalisation and weight one pass on the weight's
        # engine, the bias TensorE's)
        engines = [(w, w, S) for w in (V, G)]
    for e in engines:
        out.append(((Lane(0, d, *e),), cs.lane(d, *e)))
    run = max(1, LANE_RUN // min(k.xdt.itemsize, k.odt.itemsize))
    if k.pieces or k.d < k.long_row:  # one lane: a tile is one DMA of whole rows; and a lane's
        return out  # tiles are its own, other norms of the kernel share only one lane's
    for h in sorted({round(d * i / LANES) for i in range(1, LANES)}):
        if min(h, d - h) < run:
            continue
        for ia, ea in enumerate(engines):
            for eb in engines[ia + 1 :]:
                out.append(((Lane(0, h, *ea), Lane(h, d, *eb)),
                            cs.lane(h, *ea) + cs.lane(d - h, *eb)))  # fmt: skip
    return out


class _Costs:
    """A norm's instructions costed on tiles of a builder of their own (`balance.cost_ns`),
    per block (a row slot's instruction times `per`), as (V, S, G, TensorE) ns."""

    def __init__(self, k):
        self.k, self.b, self.cfg = k, KernelBuilder({}), k.cfg
        P, d = k.P, k.d
        self.x = self.tile((P, d), k.xdt)
        self.o = self.tile((P, d), k.odt)
        self.col = ap(self.tile((P, 1)))
        self.psum = self.b.tile("t", "psum", (P, min(d, k.most)), dtype("float32"))  # (VectorE's
        # weight and bias out of PSUM, `norm_stages.NormStages.psum_affine`)
        self.tab = ap(self.tile((P, k.per)))
        self.cache: dict = {}

    def tile(self, shape, dt=None) -> str:
        return self.b.tile("t", "sbuf", shape, dt or dtype("float32"))

    def slots(self, cls, engine, **fields) -> float:
        return slots_ns(self.b, self.cfg, self.k.per, cls, engine, **fields)

    def cols(self, t: str, lo: int, hi: int) -> Ap:
        return ap(t, slice(None), slice(lo, hi))

    def small(self, n: int) -> float:
        """n dependent [p, per] steps on VectorE (each waiting on a semaphore, or not:
        `k.small_waits`)."""
        a = float(self.k.small_after)  # (the share of them that do)
        return n * sum(f * cost_ns(self.b, self.cfg, TensorScalar, V, waits=self.k.small_waits,
                                   after=after, src=self.tab, dst=self.tab, op0="add",
                                   operand0=1.0)
                       for f, after in ((a, True), (1 - a, False)) if f)  # fmt: skip

    @staticmethod
    def on(e: Engine, ns: float) -> np.ndarray:
        return np.array([ns if e == x else 0.0 for x in (V, S, G, T)])

    def stats(self, c: int) -> np.ndarray:
        """The statistics with ScalarE on the first c columns, and the [p, per] steps."""
        k, b, cfg = self.k, self.b, self.cfg
        chunks = runs(k.d - c, k.bn) * k.per
        v = sum(
            cost_ns(
                b,
                cfg,
                BnStats,
                V,
                waits=not i,
                src=self.cols(self.x, lo, hi),
                dst=ap(self.tile((k.P, 6))),
            )
            for i, (lo, hi) in enumerate(chunks)
        )
        nch = len(runs(k.d - c, k.bn))
        steps = (4 if c else 3) if k.layer else 4  # rstd, -mean * rstd, ScalarE's triple
        steps += 1 if k.shift and c and not k.segments else 0  # (`NormStages.folded`: scaled apart)
        if k.pieces and k.layer:  # (`NormStages.combine`: two read from PSUM, `psum_combine`)
            steps += 2 if k.psum_combine else 4
        one = k.pieces and k.shift and not k.segments and c == k.d and not c & (c - 1)
        if one:  # (`NormStages.one_triple`: two steps, no triple copied, no bn_aggr)
            steps -= 1
        elif k.layer or c < k.d:
            if nch == 1 and not c and k.per >= 4 and k.d > 1:
                steps += 7
            else:
                width = 6 * nch + (3 if c and k.layer else 0)
                v += self.slots(BnAggr, V, src=ap(self.tile((k.P, width))),
                                dst=ap(self.tile((k.P, 2))))  # fmt: skip
        g = 0.0
        if k.stt:  # (`NormStages.stt_scales`: the mean copied, dh; no -mean * rstd; ScalarE's
            # triple copied and one combine step on GpSimd, `small_g`, and dl)
            moved = (1 if c else 0) + 1
            steps += 1 - moved
            gs, grp = moved + 2, k.stat_group
            if grp > 1 and c:  # (`NormStages._second_group`: dh and dl a block; the triple,
                # d, d * d, + var, rstd and the mean's copy once a group)
                steps, gs = 1 + 3 / grp, 2 + 3 / grp
            g = gs * cost_ns(b, cfg, TensorScalar, G, waits=True, src=self.tab, dst=self.tab,
                             op0="add", operand0=1.0)  # fmt: skip
        s = 0.0
        if c:
            js = ap(self.tile((k.P, c), k.xdt))
            one = self.slots(Activation, S, func="square", src=self.cols(self.x, 0, c), dst=js,
                             reduce="add", reduce_dst=self.col)  # fmt: skip
            s = 2 * one if k.layer else one
        return self.on(V, v + self.small(steps)) + self.on(S, s) + self.on(G, g)

    def lane(self, w: int, norm: Engine, weight: Engine, bias: Engine) -> np.ndarray:
        """A lane of w columns normalised on `norm`, weighted on `weight`, biased on `bias`
        (S: by TensorE, copied out by ScalarE)."""
        key = (w, norm, weight, bias)
        if key in self.cache:
            return self.cache[key]
        k, x, o = self.k, self.cols(self.x, 0, w), self.cols(self.o, 0, w)
        if self.fused(bias):
            self.cache[key] = ns = self._fused(w, norm, weight)
            return ns
        if k.stt:  # (x - mean) * weight, one pass; TensorE's rstd and bias (`pe`)
            t = self.slots(ScalarTensorTensor, weight, data=x, op0="subtract",
                           operand0=self.col, op1="multiply", operand1=x, dst=o)  # fmt: skip
            self.cache[key] = self.on(weight, t) + self.pe(w)
            return self.cache[key]
        if norm == S:
            t = self.slots(Activation, S, func="copy", src=x, dst=o, scale=self.col,
                           bias=self.col)  # fmt: skip
        else:
            t = self.slots(TensorScalar, norm, src=x, dst=o, op0="subtract", operand0=self.col,
                           op1="multiply", operand1=self.col)  # fmt: skip
        ns = self.on(norm, t)
        for v, e in ((k.weight, weight), (k.bias, bias)):
            if v is None:
                continue
            if v is k.bias and e == S:
                ns = ns + self.pe(w)
                continue
            wt = self.cols(self.o, 0, min(w, k.most))
            src1 = self.cols(self.psum, 0, min(w, k.most)) if e == V and k.psum_affine else wt
            ns = ns + self.on(e, len(runs(w, k.most)) * self.slots(
                TensorTensor, e, alu="add", src0=wt, src1=src1, dst=wt))  # fmt: skip
        self.cache[key] = ns
        return ns

    def fused(self, bias: Engine) -> bool:
        """Whether a lane biased on `bias` has its normalisation folded into the weight and
        TensorE's bias (`NormStages.fused`)."""
        k = self.k
        return (getattr(k, "pe_rstd", False) and bool(k.out_pieces) and k.layer
                and not k.pieces and k.weight is not None and bias == S)  # fmt: skip

    def _fused(self, w: int, norm: Engine, weight: Engine) -> np.ndarray:
        """A fused lane (`fused`): each row slot's diag(rstd) on `norm` (VectorE where the plan
        says ScalarE: `NormStages.diagonals` picks VectorE or GpSimd), (x - mean) * weight by a
        `scalar_tensor_tensor` on `weight`, TensorE's bias copied out by ScalarE."""
        k, e = self.k, norm if norm != S else V
        ident = ap(self.tile((k.P, k.P), k.odt))
        diag = self.slots(TensorScalar, e, src=ident, dst=ident, op0="multiply",
                          operand0=self.col)  # fmt: skip
        x, wt = self.cols(self.x, 0, min(w, k.most)), self.cols(self.o, 0, min(w, k.most))
        stt = len(runs(w, k.most)) * self.slots(
            ScalarTensorTensor, weight, data=x, op0="subtract", operand0=self.col,
            op1="multiply", operand1=wt, dst=wt)  # fmt: skip
        return self.on(e, diag) + self.on(weight, stt) + self.pe(w)

    def pe(self, w: int) -> np.ndarray:
        """The bias of a lane of w columns added by TensorE, copied out by ScalarE."""
        k, t = self.k, self.cfg.core.tensor
        step = min(t.moving_free_max, self.cfg.core.psum.bank_bytes // 4)
        ps = self.tile((k.P, step))
        # cycles an element: the ones row times the bias, the identity times the values (each at
        # its stationary's rate)
        per_el = sum(1 / t.fp32_rate if dt.itemsize == 4 else 1.0
                     for dt in (k.b.tensors[k.bias].dtype, k.odt))  # fmt: skip
        # (diag(rstd)'s second part, bf16; not with `stt_std`: C times the bias' pieces)
        per_el += 1.0 if k.stt and k.stt_lo and not (k.stt_std and k.stat_group > 1) else 0.0
        g = 1 if k.pieces or w != k.d else pe_group(self.cfg, w, k.per)
        if g > 1:  # `g` row slots a pair of matmuls and a copy (`PeBias.add_slots`)
            n, last = divmod(k.per, g)
            sizes = [g] * n + ([last] if last else [])
            copy = sum(cost_ns(self.b, self.cfg, Activation, S, waits=not i, func="copy",
                               src=ap(ps, slice(None), slice(0, r * w)),
                               dst=ap(self.tile((k.P, r * w), k.odt)))
                       for i, r in enumerate(sizes))  # fmt: skip
            cycles = sum(2 * t.load_stationary_cycles + r * w * per_el for r in sizes)
            return self.on(S, copy) + self.on(T, cycles * 1e9 / t.clock_hz)
        span = getattr(k, "pe_span", 1)  # banks a copy (a pipelined norm's: each waits)
        if span > 1:
            wide = self.tile((k.P, span * step))
            copy = k.per * sum(cost_ns(self.b, self.cfg, Activation, S, func="copy",
                                       src=ap(wide, slice(None), slice(0, hi - lo)),
                                       dst=self.cols(self.o, 0, hi - lo))
                               for lo, hi in runs(w, span * step))  # fmt: skip
            cycles = k.per * sum(2 * t.load_stationary_cycles + (hi - lo) * per_el
                                 for lo, hi in runs(w, step))  # fmt: skip
            return self.on(S, copy) + self.on(T, cycles * 1e9 / t.clock_hz)
        copy = sum(
            self.slots(
                Activation,
                S,
                func="copy",
                src=ap(ps, slice(None), slice(0, hi - lo)),
                dst=self.cols(self.o, 0, hi - lo),
            )
            for lo, hi in runs(w, step)
        )
        cycles = k.per * sum(2 * t.load_stationary_cycles + (hi - lo) * per_el
                             for lo, hi in runs(w, step))  # fmt: skip
        return self.on(S, copy) + self.on(T, cycles * 1e9 / t.clock_hz)

    def shift(self, e: Engine, w: int) -> float:
        """The shift of a block's w columns of each row on engine e."""
        if w <= 0:
            return 0.0
        x = self.cols(self.x, 0, w)
        if e == S:
            return self.slots(Activation, S, func="copy", src=x, dst=x, bias=self.col)
        return self.slots(TensorScalar, e, src=x, dst=x, op0="add", operand0=self.col)
