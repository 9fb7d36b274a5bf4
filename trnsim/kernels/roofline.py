"""Each op's roofline: the least time the op could take on a logical core, from its FLOPs and
the bytes it must move, for the per-op rows of the run summary.

`op_rows(ops, tensors, cfg, cores)` lists one row per op as `lower` emits them (a fused run of
elementwise ops, `fusion.chains`, is one row named "add+gelu"), in the order whose index
`KernelBuilder` tags each instruction with (`CoreProgram.op_of`). A row's bounds, over the
`cores` physical cores of the logical core that runs it:

- compute: the op's FLOPs (its record's: 2 M N K for a matmul, linear and addmm; for attention
  2 x 2 x D per unmasked (query, key) pair of every head; none for elementwise ops, norms,
  softmax, reductions) over the cores' TensorE peak for its input dtype;
- DMA: the bytes of each tensor it reads (once; its record's `reads`, lists such as cat's
  inputs and a foreach op's included; of a table a gather reads by rows, `embedding`'s weight,
  only the rows its indices name, at most the table) at the cores' load bandwidth (engines x
  engine_bandwidth each) plus those it writes (once; split's outputs too) at their store
  bandwidth;
- HBM: all of those bytes through one HBM stack (the tensors' home stack), bandwidth / stacks.

The roofline is the largest; `bound` names it ("compute", "dma" or "hbm"). Tensors a fused run
writes before reading are not read from HBM (they stay on chip), and a tensor is counted once
however many ops of the row touch it.
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig, peak_flops_per_core
from trnsim.kernels.fusion import chains, live
from trnsim.trace.ops import OPS
from trnsim.trace.program import OpSpec, TensorSpec

__all__ = ["op_rows", "op_flops"]


def op_rows(
    ops: list[OpSpec], tensors: dict[str, TensorSpec], cfg: ChipConfig, cores: int
) -> list[dict]:
    """One row per run of `ops` (module doc): op, lines, shapes, dtypes, flops, bytes_read,
    bytes_written and the bounds in ns."""
    return [_row(run, tensors, cfg, cores) for run in chains(ops, tensors)]


def _row(run: list[OpSpec], tensors: dict[str, TensorSpec], cfg: ChipConfig, cores: int) -> dict:
    read, written = {}, {}  # tensor -> bytes, in first-touch order
    computed = live(run) if len(run) > 1 else run  # a fused run leaves out dead results
    for op in computed:
        rec = OPS[op.op]
        for v in rec.reads(op.args, tensors):
            if v not in written:  # a tensor the run wrote first stays on chip
                read[v] = max(read.get(v, 0), _read_bytes(op, v, tensors))
        for v in rec.writes(op.args, tensors):
            written[v] = _bytes(tensors[v])
    names = list(dict.fromkeys([*read, *written]))
    flops = sum(op_flops(op, tensors) for op in run)
    dtype = _input_dtype(run[0], tensors)
    peak = _peak(cfg, dtype) * cores
    d = cfg.core.dma
    r, w = sum(read.values()), sum(written.values())
    bounds = {
        "compute": flops / peak * 1e9 if flops and peak else 0.0,
        "dma": (r / d.engine_bandwidth + w / d.store_bandwidth) / (d.engines * cores) * 1e9,
        "hbm": (r + w) / (cfg.hbm.bandwidth / cfg.hbm.stacks) * 1e9,
    }
    bound = max(bounds, key=bounds.get)
    return {
        "op": "+".join(op.op for op in run),
        "lines": [op.line for op in run],
        "shapes": {n: list(tensors[n].shape) for n in names},
        "dtypes": {n: tensors[n].dtype.name for n in names},
        "flops": flops,
        "bytes_read": r,
        "bytes_written": w,
        "compute_bound_ns": bounds["compute"],
        "dma_bound_ns": bounds["dma"],
        "hbm_bound_ns": bounds["hbm"],
        "roofline_ns": bounds[bound],
        "bound": bound,
    }


def op_flops(op: OpSpec, tensors: dict[str, TensorSpec]) -> int:
    """TensorE FLOPs the op needs by its definition (its record's `flops`: 2 per multiply-add
    of a matmul, `linear`'s x [..., K] times weight^T [K, N], `addmm`'s mat1 @ mat2;
    attention's scores and P v, 2 x 2 x D per unmasked (query, key) pair); 0 for every other
    op."""
    return OPS[op.op].op_flops(op.args, {k: t.shape for k, t in tensors.items()})


def _input_dtype(op: OpSpec, tensors: dict[str, TensorSpec]) -> str:
    """The dtype of the op's first input tensor ("" if it reads none)."""
    reads = OPS[op.op].reads(op.args, tensors)
    return tensors[reads[0]].dtype.name if reads else ""


def _peak(cfg: ChipConfig, dtype: str) -> float:
    """One core's TensorE peak for `dtype`, 0 for a dtype TensorE does not take."""
    try:
        return peak_flops_per_core(cfg, dtype)
    except ValueError:
        return 0.0


def _bytes(t: TensorSpec) -> int:
    return math.prod(t.shape) * t.dtype.itemsize


GATHERS = {"embedding": ("weight", "indices")}  # op -> (table read by rows, its row indices)


def _read_bytes(op: OpSpec, name: str, tensors: dict[str, TensorSpec]) -> int:
    """The bytes op reads of tensor `name`: all of it, but the rows a gather names of its table
    (an embedding of 8 tokens reads 8 rows of a [50257, 768] table, not 77 MB: its roofline
    was 210 us against 1.7 us simulated)."""
    t, gather = tensors[name], GATHERS.get(op.op)
    if gather is None or op.args.get(gather[0]) != name:
        return _bytes(t)
    rows = math.prod(tensors[op.args[gather[1]]].shape)
    return min(_bytes(t), rows * math.prod(t.shape[1:]) * t.dtype.itemsize)
