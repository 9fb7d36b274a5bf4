"""The engine-throughput bound of the row ops (softmax, log_softmax, layer_norm, rms_norm, sum,
mean, amax, amin, argmax, cross_entropy), as docs/kernels.md derives it: each pass over a row
costs an engine its cycles per element (ScalarE's `activation` one, VectorE's `tensor_scalar` a
quarter for 16-bit data, its `tensor_tensor` one for 16-bit data or an operand in PSUM
(layer_norm's fp32 weight and bias) else two, GpSimd's `tensor_tensor` two, ...), a pass that
goes row by row (a per-row scalar operand) at least the engine's MIN_II cycles per row, plus
ScalarE's accumulator read where it reduces; the passes are shared between the engines that can
take them in the proportions that make the busiest engine's time smallest (a small linear
program, solved here by a grid). The bound is that time for a core's rows at the engines'
clocks: what no lowering built from these passes can beat. With the DMA bound (each tensor's
bytes once, at the DMA's rates; twice for x where a row exceeds SBUF and the op needs a second
pass: softmax and the norms), it gives the roofline a row op is held to."""

from __future__ import annotations

import itertools

from trnsim.config import ChipConfig
from trnsim.kernels.argmax import CHUNK_ROWS as ARGMAX_CHUNK_ROWS

__all__ = ["engine_bound_ns", "passes"]

V, S, G, T = "vector", "scalar", "gpsimd", "tensor"


def passes(cfg: ChipConfig, op: str, d: int, itemsize: int, per_row: bool) -> list:
    """The passes over one row of d elements of `itemsize` bytes, each {engine: cycles} of
    that engine's clock (the options it can go to), or a list of such options each of which may
    take cycles of several engines; `per_row`: passes with a per-row operand
    go one instruction a row (short rows packed several to a partition), else one for many
    rows (rows in pieces over the partitions: per-partition operands)."""
    c = cfg.core
    vmin, smin, gmin = c.vector.min_ii_cycles, c.scalar.min_ii_cycles, c.gpsimd.min_ii_cycles
    half = itemsize == 2
    fast_ts = c.vector.copy_fast_factor if half and c.vector.perf_mode else 1
    tt_v = d if half else 2 * d  # VectorE tensor_tensor: one element a cycle for 16-bit data

    def row(n: float, floor: int) -> float:  # a per-row instruction
        return max(floor, n) if per_row else n

    scale = {V: row(d / fast_ts, vmin), S: row(d, smin), G: row(d, gmin)}
    red = c.scalar.reduce_cycles
    if op in ("softmax", "log_softmax"):
        return [
            {V: d / 2 if half else d, S: row(d, smin)},  # the row max
            {S: row(d, smin)},  # exp(x - max)
            {S: red if per_row else 0.0, V: d},  # its sum: ScalarE's reduction, or VectorE
            scale,  # e / sum, or x - log(sum) - max
        ]
    if op in ("layer_norm", "rms_norm"):
        bn = c.vector.bn_stats_max_free
        chunks = -(-d // bn)
        # bn_aggr of a row's triples (two a chunk: the even and odd columns); a row of one chunk
        # needs none of its own: its two halves combine for a whole block of rows at once
        # (Chan's formula on [p, per] columns, as `norm_short` and `norm_fused` do), next to
        # nothing a row
        aggr = 0.0 if chunks == 1 else max(vmin, 13 * 2 * chunks) if per_row else 13 * 2 * chunks
        stats = (
            {V: d + aggr, S: 2 * (row(d, smin) + red)}
            if op == "layer_norm"
            else {V: d + aggr, S: row(d, smin) + red}
        )
        if op == "layer_norm" and half and not per_row:  # rows in pieces: TensorE sums x and
            # ScalarE (x - x0)^2 in one pass (`norm_sums`)
            stats[S] = d + red
        if op == "rms_norm":  # statistics, normalisation, weight
            return [stats, scale, {V: tt_v, G: 2 * d}]
        # layer_norm's weight and bias on VectorE one cycle an element also in fp32 (one input
        # in PSUM: `norms.psum_affine`); the bias also by TensorE, ScalarE copying out
        weight, bias = {V: d, G: 2 * d}, {V: d, G: 2 * d, S: d if half else 1e18}
        if not half:
            return [stats, scale, weight, bias]
        # 16-bit rows: the normalisation may fold into the weight and TensorE's bias
        # (`norm_stages.NormStages.fused`, rows that fit; `NormStages.stt`, rows in pieces):
        # (x - mean) * weight one scalar_tensor_tensor (the weight's cost), TensorE's stationary
        # diag(rstd) (the identity times rstd, [P, P]: VectorE or GpSimd, a row; a tile of rows
        # in pieces, next to nothing an element) and the bias into PSUM, ScalarE copying out.
        # So the normalisation and the bias are one pass whose options are pairs of their
        # engines, or that
        P = c.sbuf.partitions
        pairs = [{e: scale[e]} | {a: bias[a] + (scale[e] if a == e else 0.0)} for e in scale
                 for a in bias]  # fmt: skip
        fused = [{V: max(vmin, P / fast_ts), S: d}, {G: max(gmin, P), S: d}] if per_row else [
            {S: d}]  # fmt: skip
        return [stats, weight, pairs + fused]
    if op == "cross_entropy":  # softmax's passes but the scale: max, exp, its sum
        return [
            {V: d / 2 if half else d, S: row(d, smin) + (red if per_row else 0.0)},
            {S: row(d, smin)},
            {S: red if per_row else 0.0, V: d},
        ]
    if op == "argmax":
        if d >= ARGMAX_CHUNK_ROWS:  # the chunk maxima (`argmax_chunks`): one pass, VectorE's
            return [{V: d / 2 if half else d}]
        keys16 = d <= 256 or d == 512  # the keys in bf16 (`argmax_rows`: 512 as two halves)
        return [
            {V: d / 2 if half else d, S: row(d, smin) + (red if per_row else 0.0)},  # max
            {S: row(d, smin), G: row(d, gmin), V: row(d / fast_ts, vmin)},  # x != max
            {V: d if keys16 else 2 * d, G: 2 * d},  # + R
            {V: d / 2 if keys16 else d, S: row(d, smin) + (red if per_row else 0.0)},  # max
        ]
    if op in ("sum", "mean", "amax", "amin"):
        fast = half  # 16-bit in and out (the bench's cases): two elements a cycle
        return [{V: d / 2 if fast else d, S: row(d, smin) + (red if per_row else 0.0)}]
    raise ValueError(f"no passes for {op}")


def engine_bound_ns(cfg: ChipConfig, op: str, d: int, itemsize: int, rows: int,
                    per_row: bool, steps: int = 4) -> float:  # fmt: skip
    """The engine-throughput bound of `rows` rows of d elements on one core (module doc): the
    passes shared over their engines in multiples of 1 / steps, the busiest engine's time."""
    c = cfg.core
    clock = {V: c.vector.clock_hz, S: c.scalar.clock_hz, G: c.gpsimd.clock_hz}
    rows_per_partition = rows / c.sbuf.partitions
    options = []
    for p in passes(cfg, op, d, itemsize, per_row):
        opts = p if isinstance(p, list) else [{e: cycles} for e, cycles in p.items()]
        options.append([_shared(opts, s, steps) for s in _compositions(steps, len(opts))])
    best = float("inf")
    for choice in itertools.product(*options):
        busy = {e: 0.0 for e in clock}
        for part in choice:
            for e, cycles in part.items():
                busy[e] += cycles / clock[e]
        best = min(best, max(busy.values()))
    return best * rows_per_partition * 1e9


def _shared(opts: list[dict], shares: tuple, steps: int) -> dict:
    """{engine: cycles} of a pass whose option i takes shares[i] / steps of the rows."""
    out: dict = {}
    for o, k in zip(opts, shares):
        for e, cycles in o.items():
            out[e] = out.get(e, 0.0) + cycles * k / steps
    return out


def _compositions(total: int, n: int):
    """Every n-tuple of non-negative integers summing to `total`, in lexicographic order."""
    if n == 1:
        yield (total,)
        return
    for k in range(total + 1):
        for rest in _compositions(total - k, n - 1):
            yield (k, *rest)
