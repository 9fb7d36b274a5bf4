"""The kernel library: high-level ops (PyTorch's aten names and argument names) lowered to one
core's instruction program, as a good NKI engineer would write them.

`lower(ops, tensors, cfg)` turns a list of `OpSpec`s on HBM tensors into a `CoreProgram`
(tiles and instructions, their semaphores derived by `builder.KernelBuilder`); `reference(op,
args, arrays)` is each op's numpy result, against which `--check` compares. The lowerings:
`matmul` (`mm`, `bmm`), `linear`, `transpose` (of the last two dims), elementwise unary and
binary ops (`elementwise.UNARY`, `BINARY`), `softmax` and `log_softmax`, reductions (`sum`,
`mean`, `amax`, `amin` over any dims), `argmax`, `layer_norm`, `rms_norm`, `where`,
`masked_fill`, `scaled_dot_product_attention` (flash-style), data movement (`contiguous`,
`permute`, `cat`, `split`), `embedding` (a gather DMA), `addmm`, `cross_entropy` and
`nll_loss`; the backward ops of a training step and the optimizer's elementwise ops
(`backward`, `softmax_backward`, `loss_backward`, `grads`, `attention_backward`, `optim`).
Which module lowers an op, which tensors it touches and how the cores of an LNC 2 logical core
share it are in the op's record (`trace.ops.OPS`); `lowerings` holds the adapters between the
records and the modules. An op without a lowering is a TraceError naming it. `lower_cores`
splits the ops between the physical cores of an LNC 2 logical core.
"""

from __future__ import annotations

import math

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.gcpause import no_gc
from trnsim.isa import CoreBarrier
from trnsim.kernels import flat_split
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.kernels.elementwise import BINARY, UNARY  # noqa: F401
from trnsim.kernels.fusion import chains, lower_chain
from trnsim.kernels.matmul import addmm_bias, columns_split, fused_bias
from trnsim.kernels.reduce import on_last_dim
from trnsim.kernels.reference import reference
from trnsim.kernels.rows import REDUCTIONS, even_norm, even_rows, rows_fit
from trnsim.kernels.softmax import evenly as softmax_evenly
from trnsim.trace.ops import OPS, problem
from trnsim.trace.program import CoreProgram, OpSpec, TensorSpec

__all__ = ["lower", "lower_cores", "lower_op", "reference", "OPS"]

BY_COLUMNS = ("matmul", "mm", "bmm", "linear", "addmm")  # by out's columns when rows are few


def lower(
    ops: list[OpSpec], tensors: dict[str, TensorSpec], cfg: ChipConfig, source: str = ""
) -> CoreProgram:
    """One core's program running `ops` in order (each op's accesses wait for the earlier
    ops' conflicting ones). Raises TraceError for an op it cannot lower, naming the op and, as
    `<source>:<line>: `, where it is written."""
    return _lower_into(KernelBuilder(tensors), ops, cfg, source)


def _lower_into(b: KernelBuilder, ops: list[OpSpec], cfg: ChipConfig, source: str,
                meetings: dict | None = None):  # fmt: skip
    """The ops into `b`, runs of elementwise ops fused (`fusion`), each run or op a generation
    of its tensors' accesses and an op step of its own tiles (`KernelBuilder.begin`), its
    instructions tagged with its row (`roofline.op_rows`); the tiles placed by liveness
    (`liveness`). Before the op of each index in `meetings` (LNC 2: `_meetings`), the two
    physical cores meet at a `core_barrier` over the tensors it names."""
    meetings = meetings or {}
    first = 0
    for row, run in enumerate(chains(ops, b.tensors)):
        op = run[0]
        if first in meetings:
            _meet(b, meetings[first])
        first += len(run)
        b.barrier()
        b.begin(row)
        try:
            for op in run:
                check_args(b, op)
            op = run[0]
            lower_chain(b, cfg, run) if len(run) > 1 else lower_op(b, cfg, op)
        except TraceError as e:
            where = f"{source}:{op.line}: " if source else f"line {op.line}: " if op.line else ""
            raise TraceError(f"{where}{e}") from None
    return b.program(cfg.core)


def isolated(op: OpSpec, tensors: dict[str, TensorSpec], cfg: ChipConfig) -> bool:
    """Whether `op` shares its work between physical cores otherwise than by rows (its record's
    `split`: "alone"; "reduce_rows" over other dims than the last or over rows too long for
    `rows`, which `reduce.lower_any` shares otherwise, or reductions whose rows go evenly
    between the cores, `rows.even_rows`, and norms so, `rows.even_norm`; "last_dim_rows" over
    another dim; a matmul, or a linear (its bias added on the way out of PSUM,
    `matmul.fused_bias`), whose rows are too few to share, `matmul.columns_split`: by out's
    columns)."""
    split = OPS[op.op].split
    if split == "alone":
        return True
    if op.op in BY_COLUMNS:
        out, bias = tensors.get(op.args.get("out")), op.args.get("bias")
        if out is None or not columns_split(out.shape, 2, cfg):  # few rows: columns cut
            return False
        if op.op == "addmm":  # only as a linear layer: out = mat1 @ mat2 + a row
            bias = addmm_bias(op.args, tensors)
            if bias is None:
                return False
        return bias is None or bias in tensors and fused_bias(out.shape, tensors[bias].dtype, 2)
    x = op.args.get("x")
    if split in ("reduce_rows", "last_dim_rows") and x in tensors:
        tx = tensors[x]
        last = on_last_dim(op.args.get("dim", -1), len(tx.shape))
        if last and op.op in ("softmax", "log_softmax") and softmax_evenly(cfg, tx):
            return True
        if last and op.op in REDUCTIONS and rows_fit(cfg, tx) and even_rows(cfg, tx):
            return True  # (its rows cut evenly between the cores)
        if last and even_norm(cfg, op.op, tx):
            return True  # (a norm's rows cut evenly between the cores)
        return not (last and (split == "last_dim_rows" or rows_fit(cfg, tx)))
    return False


def lower_cores(
    ops: list[OpSpec], tensors: dict[str, TensorSpec], cfg: ChipConfig, cores: int, source=""
) -> list[CoreProgram]:
    """`ops` split over the `cores` physical cores of a logical core: each computes its share
    of every op's output rows (`layout.core_rows`), the same share for every op, so a core
    mostly reads back only rows it wrote itself. Where an op needs rows the other core wrote (a
    whole read of a matmul's b, a norm's weight, attention's k and v, a broadcast operand,
    written by an earlier op of the kernel; a tensor written with another row split; an op
    that shares its work otherwise, `isolated`), the cores meet at a `core_barrier` before it
    (`_meetings`; its cost is the config's `core.barrier_latency` plus the wait for the slower
    core). Inside one op a lowering may meet too (`reduce.Reduce.everything`)."""
    meetings = _meetings(ops, tensors, cfg, source) if cores > 1 else {}
    programs = []
    with no_gc():  # a lowering makes millions of objects and no cycles (`gcpause`)
        for c in range(cores):
            b = KernelBuilder(tensors)
            b.part = flat_split.part(c, cores, ops, tensors)  # its elementwise ops' shares too
            programs.append(_lower_into(b, ops, cfg, source, meetings))
    return programs


def _meet(b: KernelBuilder, names: list[str]) -> None:
    """Both cores meet at a `core_barrier` over `names` (the tensors the ops so far touched):
    on each core the barrier waits for every earlier access to them, and every later access
    waits for the barrier (an op boundary on each side), so what one core wrote before is
    there for the other after."""
    aps = [ap(n) for n in names]
    b.barrier()
    b.emit(CoreBarrier, aps, aps, data=aps[0])
    b.barrier()


def _meetings(ops: list[OpSpec], tensors: dict[str, TensorSpec], cfg, source: str) -> dict:
    """{op index: tensors} of the ops before which the two physical cores must meet: an op that
    needs rows of a tensor the other core wrote (a whole read of a row-split tensor, another
    row split), or one whose work is shared otherwise than by rows (`isolated`) touching a
    tensor another op of the kernel wrote, or read where it writes. The cores meet over every
    tensor touched since their last meeting; after it, everything before is visible to both.
    A chip without `core.core_barrier` cannot meet: the op is then an error naming it."""
    meetings: dict[int, list[str]] = {}
    rows_of: dict = {}  # tensor -> the row count of the split its writer used (-1: one core's)
    seen: dict[str, set] = {}  # tensor -> the kinds of access ("r", "w") since the last meeting
    alone: dict[str, set] = {}  # the same, by isolated ops only
    base = _bases(tensors)  # a view's accesses are its base tensor's (one memory)
    for i, op in enumerate(ops):
        mine = isolated(op, tensors, cfg)
        why = _conflict(op, mine, tensors, seen, alone, base) or (
            None if mine else _crossing(op, tensors, rows_of, base)
        )
        if why is not None:
            if not cfg.core.core_barrier:
                where = f"{source}:{op.line}: " if source else ""
                raise TraceError(
                    f"{where}{op.op}: {why}; {cfg.name} has no core_barrier to meet at between "
                    "ops: put the op in a kernel of its own"
                )
            meetings[i] = list(seen)
            rows_of, seen, alone = {}, {}, {}
        for _, name, kind in OPS[op.op].accesses(op.args, tensors):
            seen.setdefault(base[name], set()).add(kind)
            if mine:
                alone.setdefault(base[name], set()).add(kind)
        if not mine:
            for o, r in _row_splits(op, tensors).items():  # written through a view: -2
                rows_of[base[o]] = r if base[o] == o else -2
    return meetings


def _bases(tensors: dict[str, TensorSpec]) -> dict[str, str]:
    """{tensor: the tensor whose memory it is (itself, or the base of its views)}."""
    out = {}
    for n in tensors:
        b = n
        while tensors[b].view is not None and tensors[b].view in tensors:
            b = tensors[b].view
        out[n] = b
    return out


def _row_splits(op: OpSpec, tensors) -> dict:
    """{output: the row count of the split the op writes it with (-1: whole on one core)}."""
    rec = OPS[op.op]
    out = op.args.get("out", op.args.get("outs"))
    outs = out if isinstance(out, list) else [out]  # several, or a list op: per item
    by_x = rec.split in ("reduce_rows", "last_dim_rows")  # rows of the input reduced
    if rec.split == "first_core":  # computed whole on the first core
        return dict.fromkeys(outs, -1)
    return {o: _rows(tensors[op.args["x"] if by_x else o].shape) for o in outs}


def _crossing(op: OpSpec, tensors, rows_of: dict, base: dict) -> str | None:
    """Why `op` needs rows of a tensor the other core wrote (or of its memory through another
    view of it), or None."""
    rec = OPS[op.op]
    splits = _row_splits(op, tensors)
    r_outs = list(splits.values())
    out = op.args.get("out")
    tensor_args = rec.tensor_args()
    for k, arg in op.args.items():
        if k not in tensor_args or k in ("out", "outs"):
            continue
        items = arg if isinstance(arg, list) else [arg]
        for i, v in enumerate(items):
            if not isinstance(v, str) or base.get(v, v) not in rows_of:
                continue
            if base[v] != v or rows_of[base[v]] == -2:
                return (f"{k} {v!r} shares its memory with a tensor an earlier op of this "
                        "kernel wrote on both physical cores (lnc 2), through a view whose rows "
                        "are not that op's")  # fmt: skip
            r_out = r_outs[min(i, len(r_outs) - 1)]
            whole = k in rec.whole or (
                rec.broadcast_whole and isinstance(out, str)
                and tensors[v].shape != tensors[out].shape
            )  # fmt: skip
            if (whole and rows_of[v] != -1) or rows_of[v] != r_out:
                return (f"{k} {v!r} was written by an earlier op of this kernel on both "
                        "physical cores (lnc 2), and this op needs rows of it the other core "
                        "wrote")  # fmt: skip
    return None


def _conflict(op: OpSpec, mine: bool, tensors, seen: dict, alone: dict, base) -> str | None:
    """An isolated op (`mine`) conflicting (one access a write) with an earlier op's access to
    its tensors, or any op with an earlier isolated op's: why, or None."""
    for k, name, kind in OPS[op.op].accesses(op.args, tensors):
        name = base[name]
        before = seen.get(name, set()) if mine else alone.get(name, set())
        if "w" in before or (kind == "w" and before):
            return (f"{k} {name!r} is used by another op of this kernel, and "
                    f"{'this op' if mine else 'that op'} shares its work between the physical "
                    "cores (lnc 2) otherwise than by rows")  # fmt: skip
    return None


def _rows(shape) -> int:
    return math.prod(shape[:-1])


def check_args(b: KernelBuilder, op: OpSpec) -> None:
    """Raise TraceError for an op that is not in the table, a missing, unknown or ill-typed
    argument, or a tensor argument naming no tensor (`trace.ops.problem`: one wording)."""
    found = problem(op.op, op.args, b.tensors)
    if found is not None:
        _, what, expected = found
        raise TraceError(f"{what}; expected {expected}")


def lower_op(b: KernelBuilder, cfg: ChipConfig, op: OpSpec) -> None:
    """Emit one op into `b` (its arguments checked by `check_args`) by its record's lowering;
    an op computed whole on the first physical core ("first_core") only there."""
    rec = OPS[op.op]
    if rec.split == "first_core" and b.part[0] != 0:
        return
    rec.lowering_fn(b, cfg, op.op, op.args)
