"""The optimizer's elementwise ops: `addcdiv`, `addcmul`, `lerp` and the `_foreach_*` ops an
optimizer step issues over its lists of parameters and states (torch.optim's foreach path).

Each is one pass over its tensors (`pointwise`): a list op runs its elements one after another
in the same kernel, each element its own pass (the elements have different shapes; each pass
is at the DMA roofline on its own). Products and quotients of two tensors are VectorE
`tensor_tensor`, scalings by a number ScalarE `tensor_scalar` (a multiply-add, which ScalarE
takes on every core), so the two engines share the work:

- addcdiv: x + value * (t1 / t2); addcmul: x + value * t1 * t2;
- lerp: x + w (end - x) for w < 0.5, else end - (1 - w)(end - x) (PyTorch's two forms;
  `lerp`);
- _foreach_add/mul/div: other a list of tensors, a list of numbers (one per element) or a
  number; _foreach_add's alpha scales a tensor other; _foreach_sqrt on ScalarE.
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.isa import Engine
from trnsim.kernels.backward import act, ts, tt
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.lerp import lower_lerp
from trnsim.kernels.pointwise import F32, Block, pointwise
from trnsim.kernels.spread import Spread

__all__ = ["OPTIM", "lower_optim"]

OPTIM = (
    "addcdiv", "addcmul", "lerp", "_foreach_add", "_foreach_mul", "_foreach_div",
    "_foreach_addcdiv", "_foreach_addcmul", "_foreach_lerp", "_foreach_sqrt",
)  # fmt: skip
_ALU = {"add": "add", "mul": "multiply", "div": "divide"}


def lower_optim(b: KernelBuilder, cfg: ChipConfig, op: str, args: dict) -> None:
    """Emit `op` (module doc)."""
    if not op.startswith("_foreach_"):
        _one(b, cfg, op, args)
        return
    xs, outs = args["x"], args["out"]
    n = len(xs)
    keys = ("other", "tensor1", "tensor2", "tensors1", "value")
    lists = {k: args[k] for k in keys if k in args}
    for k, v in [("out", outs), *lists.items()]:
        if isinstance(v, list) and len(v) != n:
            raise TraceError(f"{op}: {k} has {len(v)} items and x {n}; expected one per item of x")
    for i in range(n):
        item = {k: (v[i] if isinstance(v, list) else v) for k, v in lists.items()}
        item.update(x=xs[i], out=outs[i], alpha=args.get("alpha", 1.0))
        item["weight"] = args.get("weight")
        base = op[len("_foreach_") :]
        if base in ("add", "mul", "div"):
            _binary(b, cfg, op, base, item)
        elif base == "sqrt":
            pointwise(b, cfg, op, [xs[i]], [outs[i]], lambda k: act(b, "sqrt", k.ins[0], k.outs[0]))
        else:
            if base == "lerp":
                item["end"] = item.pop("tensors1")
            _one(b, cfg, base, item)


def _one(b: KernelBuilder, cfg: ChipConfig, op: str, a: dict) -> None:
    """addcdiv, addcmul or lerp on one tensor."""
    x, out = a["x"], a["out"]
    if op == "lerp":
        lower_lerp(b, cfg, op, x, a["end"], out, float(a["weight"]))
        return
    sp = Spread(b, cfg)
    value = float(a.get("value", 1.0))
    alu = "divide" if op == "addcdiv" else "multiply"

    def addc(k: Block) -> None:
        xa, t1, t2 = k.ins
        q = k.tmp("q", F32)
        sp.tt(alu, t1, t2, q)
        if value != 1.0:
            sp.ts(q, q, "multiply", value)
        sp.tt("add", xa, q, k.outs[0])

    pointwise(b, cfg, op, [x, a["tensor1"], a["tensor2"]], [out], addc)


def _binary(b: KernelBuilder, cfg: ChipConfig, op: str, base: str, a: dict) -> None:
    """x <op> other for one item: other a tensor (scaled by alpha for add) or a number."""
    x, other, out = a["x"], a["other"], a["out"]
    alu, alpha = _ALU[base], float(a.get("alpha", 1.0))
    if not isinstance(other, str):
        v = float(other)

        def by_number(k: Block) -> None:
            if base == "div":
                ts(b, k.ins[0], k.outs[0], "divide", v, engine=Engine.VECTOR)
            else:
                ts(b, k.ins[0], k.outs[0], alu, v)

        pointwise(b, cfg, op, [x], [out], by_number)
        return

    def by_tensor(k: Block) -> None:
        xa, oa = k.ins
        if base == "add" and alpha != 1.0:
            s = k.tmp("s", F32)
            ts(b, oa, s, "multiply", alpha)
            oa = s
        tt(b, alu, xa, oa, k.outs[0])

    pointwise(b, cfg, op, [x, other], [out], by_tensor)
