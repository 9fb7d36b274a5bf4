"""The op table: every high-level op a trace's `ops:` may name (PyTorch's aten names and argument
names), defined once.

Each op is one `Op` record: its argument schema, which tensors it reads and writes
(`Op.accesses`, lists included), where its lowering and its numpy reference live, its TensorE
FLOPs, how an LNC 2 logical core's two physical cores share it (`split`, `whole`), and how
closely `--check` compares it. Loading a trace validates an op against its record
(`check_op`); the kernel library lowers it by the record (`trnsim.kernels`), and the races
check, the roofline, `--check`, the runtime, the torch layer and the recorder ask the record
which tensors it touches. Adding an op is its record, its lowering and its tests.

The table is data at layer 1 (the trace loader needs it); the lowering and the reference are
named by `module:function` in the kernel library (layer 5), which resolves them
(`Op.lowering_fn`, `Op.reference_fn`): the table names them without importing upwards.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from trnsim.inputs.validate import Loc, hint, one_of, show, unknown

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

__all__ = ["OPS", "Op", "UNARY", "BINARY", "REDUCTIONS", "check_op", "problem", "SPLITS"]

UNARY = (
    "exp", "log", "tanh", "sigmoid", "relu", "gelu", "gelu_tanh", "silu", "sqrt", "rsqrt",
    "square", "abs", "reciprocal", "sin", "cos", "erf", "copy", "neg",
)  # fmt: skip
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "pow")
REDUCTIONS = ("sum", "mean", "amax", "amin")

TENSOR_KINDS = ("tensor", "tensors", "operand", "operands")
OUTPUTS = ("out", "outs")  # the arguments an op writes; every other tensor argument it reads

SPLITS = {
    "rows": "each physical core computes its share of the output's rows (`layout.core_rows`)",
    "reduce_rows": "by the input's rows over the last dim when they fit (`kernels.rows.rows_fit`: "
    "reductions, softmax, the norms; softmax's rows in pieces with an uneven 128-row cut not, "
    "`softmax.evenly`), else alone, the rows cut evenly (`rows.core_share`)",
    "last_dim_rows": "by the input's rows over the last dim, else alone",
    "first_core": "computed whole on the first physical core (its outputs sum over rows)",
    "alone": "shares its work otherwise than by rows: no other op of the kernel may touch its "
    "tensors",
}
"""How an op's work is shared between the physical cores of an LNC 2 logical core."""


@dataclass(frozen=True)
class Op:
    """One op of the table. `args`: argument -> kind ("tensor" names a tensor of the trace,
    "operand" a tensor or a number, "tensors" a non-empty list of tensor names, "operands" a
    list of tensor names or numbers, or one number, "value" anything the lowering checks,
    "values" a list of integers; optional arguments end in ?). `lowering` and `reference`:
    `module:function` in `trnsim.kernels` (`f(b, cfg, op, args)`, `f(op, args, arrays)`).
    `flops(args, shapes)`: TensorE FLOPs by definition (None: 0). `split`: a key of SPLITS;
    `whole`: arguments every core reads whole; `broadcast_whole`: an operand of another shape
    than `out` is read whole. `rounds_bf16`: the kernel rounds to bf16 on the way, so `--check`
    compares at bf16's tolerance."""

    args: dict[str, str]
    lowering: str
    reference: str
    flops: Callable | None = None
    split: str = "rows"
    whole: tuple[str, ...] = ()
    broadcast_whole: bool = False
    rounds_bf16: bool = False
    name: str = field(default="", compare=False)

    @property
    def kinds(self) -> dict[str, str]:
        """argument (without ?) -> kind."""
        return {k.rstrip("?"): v for k, v in self.args.items()}

    def tensor_args(self) -> tuple[str, ...]:
        """The arguments that name tensors (some may be numbers: operands)."""
        return tuple(k for k, v in self.kinds.items() if v in TENSOR_KINDS)

    def accesses(self, args: dict, tensors=None) -> list[tuple[str, str, str]]:
        """(argument, tensor name, "r" or "w") for every tensor `args` name, lists included, in
        argument order; only names in `tensors` when it is given."""
        kinds = self.kinds
        out = []
        for k, v in args.items():
            if kinds.get(k) not in TENSOR_KINDS:
                continue
            for name in v if isinstance(v, list) else [v]:
                if isinstance(name, str) and (tensors is None or name in tensors):
                    out.append((k, name, "w" if k in OUTPUTS else "r"))
        return out

    def renamed(self, args: dict, names: dict) -> dict:
        """`args` with each tensor name replaced by `names`' (a recording's trace names)."""
        tensor_args = self.tensor_args()
        out = {}
        for k, v in args.items():
            if k in tensor_args:
                v = [names.get(x, x) for x in v] if isinstance(v, list) else names.get(v, v)
            out[k] = v
        return out

    def reads(self, args: dict, tensors=None) -> list[str]:
        """The tensors the op reads (each once, in order)."""
        return list(dict.fromkeys(n for _, n, rw in self.accesses(args, tensors) if rw == "r"))

    def writes(self, args: dict, tensors=None) -> list[str]:
        """The tensors the op writes (each once, in order)."""
        return list(dict.fromkeys(n for _, n, rw in self.accesses(args, tensors) if rw == "w"))

    def op_flops(self, args: dict, shapes: dict) -> int:
        """TensorE FLOPs on tensors of `shapes` (name -> shape)."""
        return int(self.flops(args, shapes)) if self.flops is not None else 0

    @property
    def lowering_fn(self) -> Callable:
        return _resolve(self.lowering)

    @property
    def reference_fn(self) -> Callable:
        return _resolve(self.reference)


_RESOLVED: dict[str, Callable] = {}


def _resolve(path: str) -> Callable:
    fn = _RESOLVED.get(path)
    if fn is None:
        module, _, name = path.partition(":")
        fn = _RESOLVED[path] = getattr(importlib.import_module(module), name)
    return fn


def problem(op: str, args: dict, tensors=None) -> tuple[str | None, str, str] | None:
    """The first thing wrong with op `op` and its `args`, as (argument or None, what is wrong,
    what was expected), or None. With `tensors` (names declared), a tensor argument must name
    one of them. The one validator: the trace loader, the kernel library and the runtime word
    their errors from it."""
    rec = OPS.get(op)
    if rec is None:
        return None, unknown("op", op, OPS), one_of(sorted(OPS), limit=40)
    spec, kinds = rec.args, rec.kinds
    listing = f"{op}'s arguments: {', '.join(spec)} (? = optional)"
    for key in args:
        if key not in kinds:
            return None, f"{op}: unknown argument {show(key)}{hint(key, kinds)}", listing
    for key in spec:
        if not key.endswith("?") and key not in args:
            return None, f"{op}: missing argument {key!r}", listing
    for key, value in args.items():
        kind = kinds[key]
        name = isinstance(value, str) and IDENT.fullmatch(value)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind == "tensor" and not name:
            return key, f"{op}: {key}: got {show(value)}", "a tensor name"
        if kind == "operand" and not (name or number):
            return key, f"{op}: {key}: got {show(value)}", "a tensor name or a number"
        if kind in ("tensors", "operands") and not _listed(value, kind):
            expected = "a non-empty list of tensor names" + (
                ", a list of numbers, or a number" if kind == "operands" else ""
            )
            return key, f"{op}: {key}: got {show(value)}", expected
        if kind == "values" and not (
            isinstance(value, list)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            return key, f"{op}: {key}: got {show(value)}", "a list of integers"
        if tensors is not None and kind in TENSOR_KINDS:
            for n in value if isinstance(value, list) else [value]:
                if isinstance(n, str) and n not in tensors:
                    return (
                        key,
                        f"{op}: {key} names {n!r}, which is not a tensor",
                        ("a tensor of the kernel: " + (", ".join(list(tensors)[:20]) or "none")),
                    )
    return None


def _listed(value, kind: str) -> bool:
    """A "tensors" argument: a non-empty list of names; "operands": that, a list of numbers,
    or one number."""

    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if kind == "operands" and number(value):
        return True
    if not isinstance(value, list) or not value:
        return False
    names = all(isinstance(v, str) and IDENT.fullmatch(v) for v in value)
    return names or (kind == "operands" and all(number(v) for v in value))


def check_op(op: str, args: dict, loc: Loc, args_loc: Loc) -> None:
    """Fail at `loc` for an unknown op, at the argument's line for a bad argument, else at
    `args_loc` (`problem`). Whether a name is a declared tensor is left to the kernel library:
    the format's own examples name intermediates (`out: h`) and tensors declared elsewhere."""
    found = problem(op, args)
    if found is None:
        return
    key, what, expected = found
    if op not in OPS:
        loc.fail(what, expected)
    (args_loc.key(args, key) if key is not None else args_loc).fail(what, expected)


# -- FLOPs by definition ------------------------------------------------------------------------


def _matmul_flops(a_arg: str):
    """2 M N K: 2 per multiply-add, K the last dim of `a_arg`."""

    def f(args, shapes):
        return 2 * math.prod(shapes[args["out"]]) * shapes[args[a_arg]][-1]

    return f


def _attention_flops(args, shapes) -> int:
    """scores and P v: 2 x 2 x D per unmasked (query, key) pair of every head (causal: query i
    meets keys 0..i)."""
    q, k = shapes[args["q"]], shapes[args["k"]]
    sq, sk, d = q[-2], k[-2], q[-1]
    if args.get("is_causal"):
        tri = min(sq, sk)
        pairs = tri * (tri + 1) // 2 + (sq - tri) * sk
    else:
        pairs = sq * sk
    return 2 * 2 * d * pairs * math.prod(q[:-2])


# -- the table ------------------------------------------------------------------------------------

_K = "trnsim.kernels.lowerings:"
_R = "trnsim.kernels.reference:"
_B = "trnsim.kernels.reference_backward:backward_reference"
_X = {"x": "tensor", "out": "tensor"}


def _table() -> dict[str, Op]:
    t: dict[str, Op] = {}
    for op in ("matmul", "mm", "bmm"):
        t[op] = Op({"a": "tensor", "b": "tensor", "out": "tensor"}, _K + "matmul", _R + "matmul",
                   _matmul_flops("a"), whole=("b",))  # fmt: skip
    t["linear"] = Op({"x": "tensor", "weight": "tensor", "bias?": "tensor", "out": "tensor"},
                     _K + "linear", _R + "linear", _matmul_flops("x"),
                     whole=("weight", "bias"))  # fmt: skip
    for op in UNARY:
        t[op] = Op(_X, _K + "unary", _R + "unary")
    for op in BINARY:
        t[op] = Op({"a": "operand", "b": "operand", "out": "tensor"}, _K + "binary",
                   _R + "binary", broadcast_whole=True)  # fmt: skip
    for op in ("softmax", "log_softmax"):
        t[op] = Op({**_X, "dim?": "value"}, _K + "softmax", _R + "softmax", split="reduce_rows")
    for op in REDUCTIONS:
        t[op] = Op({**_X, "dim?": "value", "keepdim?": "value"}, _K + "reduction",
                   _R + "reduction", split="reduce_rows")  # fmt: skip
    t["transpose"] = Op({**_X, "dim0?": "value", "dim1?": "value"}, _K + "transpose",
                        _R + "transpose", whole=("x",))  # fmt: skip
    t["where"] = Op({"condition": "tensor", "a": "operand", "other": "operand", "out": "tensor"},
                    _K + "where", _R + "where")  # fmt: skip
    t["masked_fill"] = Op({"x": "tensor", "mask": "tensor", "value": "value", "out": "tensor"},
                          _K + "masked_fill", _R + "masked_fill")  # fmt: skip
    t["layer_norm"] = Op({**_X, "weight?": "tensor", "bias?": "tensor", "eps?": "value"},
                         _K + "norm", _R + "norm", whole=("weight", "bias"),
                         split="reduce_rows")  # fmt: skip
    t["rms_norm"] = Op({**_X, "weight?": "tensor", "eps?": "value"}, _K + "norm", _R + "norm",
                       whole=("weight",), split="reduce_rows")  # fmt: skip
    t["scaled_dot_product_attention"] = Op(
        {"q": "tensor", "k": "tensor", "v": "tensor", "out": "tensor", "is_causal?": "value",
         "scale?": "value"},
        _K + "attention", _R + "attention", _attention_flops, whole=("k", "v"), rounds_bf16=True,
    )  # fmt: skip
    # data movement, gathers, losses (kernels/movement.py, gather.py, loss.py; rows.py: argmax)
    t["argmax"] = Op({**_X, "dim?": "value", "keepdim?": "value"}, _K + "argmax",
                     _R + "argmax", split="reduce_rows")  # fmt: skip
    t["contiguous"] = Op(_X, _K + "contiguous", _R + "contiguous", split="alone")
    t["permute"] = Op({**_X, "dims": "values"}, _K + "permute", _R + "permute", split="alone")
    t["cat"] = Op({"tensors": "tensors", "out": "tensor", "dim?": "value"}, _K + "cat",
                  _R + "cat", split="alone")  # fmt: skip
    t["split"] = Op({"x": "tensor", "split_size": "value", "outs": "tensors", "dim?": "value"},
                    _K + "split", _R + "split", split="alone")  # fmt: skip
    t["embedding"] = Op({"weight": "tensor", "indices": "tensor", "out": "tensor"},
                        _K + "embedding", _R + "embedding", split="alone")  # fmt: skip
    t["addmm"] = Op({"input": "tensor", "mat1": "tensor", "mat2": "tensor", "out": "tensor",
                     "beta?": "value", "alpha?": "value"},
                    _K + "addmm", _R + "addmm", _matmul_flops("mat1"),
                    whole=("mat2", "input"))  # fmt: skip
    for op in ("cross_entropy", "nll_loss"):
        t[op] = Op({"input": "tensor", "target": "tensor", "out": "tensor",
                    "reduction?": "value"}, _K + "loss", _R + "loss", split="alone")  # fmt: skip
    # -- the backward ops of a training step and the optimizer's elementwise ops (kernels.
    # backward, kernels.optim); several outputs: `out` a list, in aten's order
    ew = "trnsim.kernels.backward:lower_elementwise_backward"
    t["silu_backward"] = Op({"grad_output": "tensor", "x": "tensor", "out": "tensor"}, ew, _B)
    t["threshold_backward"] = Op({"grad_output": "tensor", "x": "tensor", "threshold": "value",
                                  "out": "tensor"}, ew, _B)  # fmt: skip
    t["gelu_backward"] = Op({"grad_output": "tensor", "x": "tensor", "approximate?": "value",
                             "out": "tensor"}, ew, _B)  # fmt: skip
    for op in ("sigmoid_backward", "tanh_backward"):
        t[op] = Op({"grad_output": "tensor", "output": "tensor", "out": "tensor"}, ew, _B)
    t["_softmax_backward_data"] = Op(
        {"grad_output": "tensor", "output": "tensor", "dim?": "value", "input_dtype?": "value",
         "out": "tensor"},
        "trnsim.kernels.softmax_backward:lower_softmax_backward", _B, rounds_bf16=True,
    )  # fmt: skip
    t["_log_softmax_backward_data"] = Op(
        {"grad_output": "tensor", "output": "tensor", "dim?": "value", "input_dtype?": "value",
         "out": "tensor"},
        "trnsim.kernels.log_softmax_backward:lower_log_softmax_backward", _B,
    )  # fmt: skip
    t["native_layer_norm_backward"] = Op(
        {"grad_out": "tensor", "input": "tensor", "normalized_shape?": "value", "mean": "tensor",
         "rstd": "tensor", "weight?": "tensor", "bias?": "tensor", "output_mask?": "value",
         "out": "tensors"},
        "trnsim.kernels.grads:lower_layer_norm_backward", _B, split="first_core",
        rounds_bf16=True,  # x^ and the products in the 16-bit inputs' dtype
    )  # fmt: skip
    t["embedding_dense_backward"] = Op(
        {"grad_output": "tensor", "indices": "tensor", "num_weights?": "value",
         "padding_idx?": "value", "scale_grad_by_freq?": "value", "out": "tensor"},
        "trnsim.kernels.grads:lower_embedding_backward", _B,
        whole=("grad_output", "indices"),
    )  # fmt: skip
    t["nll_loss_backward"] = Op(
        {"grad_output": "tensor", "x": "tensor", "target": "tensor", "weight?": "tensor",
         "reduction?": "value", "ignore_index?": "value", "total_weight?": "tensor",
         "out": "tensor"},
        "trnsim.kernels.loss_backward:lower_nll_loss_backward", _B,
        whole=("grad_output", "weight", "total_weight"),
    )  # fmt: skip
    t["scaled_dot_product_attention_backward"] = Op(
        {"grad_out": "tensor", "q": "tensor", "k": "tensor", "v": "tensor", "output?": "tensor",
         "is_causal?": "value", "scale?": "value", "out": "tensors"},
        "trnsim.kernels.attention_backward:lower_attention_backward", _B, split="first_core",
        rounds_bf16=True,
    )  # fmt: skip
    # activations with parameters and their backward (kernels.activations, .activations_backward)
    act = "trnsim.kernels.activations:lower_activation"
    act_b = "trnsim.kernels.activations_backward:lower_activation_backward"
    gx = {"grad_output": "tensor", "x": "tensor"}
    t["leaky_relu"] = Op({**_X, "negative_slope?": "value"}, act, _R + "activation")
    t["hardswish"] = Op(_X, act, _R + "activation")
    t["hardsigmoid"] = Op(_X, act, _R + "activation")
    t["elu"] = Op({**_X, "alpha?": "value", "scale?": "value", "input_scale?": "value"}, act,
                  _R + "activation")  # fmt: skip
    t["hardtanh"] = Op({**_X, "min_val?": "value", "max_val?": "value"}, act, _R + "activation")
    t["softplus"] = Op({**_X, "beta?": "value", "threshold?": "value"}, act, _R + "activation")
    t["leaky_relu_backward"] = Op({**gx, "negative_slope": "value", "self_is_result?": "value",
                                   "out": "tensor"}, act_b, _B)  # fmt: skip
    t["hardswish_backward"] = Op({**gx, "out": "tensor"}, act_b, _B)
    t["hardsigmoid_backward"] = Op({**gx, "out": "tensor"}, act_b, _B)
    t["hardtanh_backward"] = Op({**gx, "min_val": "value", "max_val": "value", "out": "tensor"},
                                act_b, _B)  # fmt: skip
    t["softplus_backward"] = Op({**gx, "beta": "value", "threshold": "value", "out": "tensor"},
                                act_b, _B)  # fmt: skip
    t["elu_backward"] = Op(
        {"grad_output": "tensor", "alpha": "value", "scale": "value", "input_scale": "value",
         "is_result": "value", "self_or_result": "tensor", "out": "tensor"},
        act_b, _B,
    )  # fmt: skip
    # batch norm over [N, C, ...] (kernels.batch_norm): channels split between the cores
    t["native_batch_norm"] = Op(
        {"input": "tensor", "weight?": "tensor", "bias?": "tensor", "running_mean?": "tensor",
         "running_var?": "tensor", "training?": "value", "momentum?": "value", "eps?": "value",
         "out": "tensors"},
        "trnsim.kernels.batch_norm:lower_batch_norm", _R + "batch_norm", split="alone",
    )  # fmt: skip
    t["native_batch_norm_backward"] = Op(
        {"grad_out": "tensor", "input": "tensor", "weight?": "tensor", "running_mean?": "tensor",
         "running_var?": "tensor", "save_mean?": "tensor", "save_invstd?": "tensor",
         "train?": "value", "eps?": "value", "output_mask?": "value", "out": "tensors"},
        "trnsim.kernels.batch_norm_backward:lower_batch_norm_backward", _B, split="alone",
    )  # fmt: skip
    # 2-D pooling (kernels.pooling, .pooling_backward): blocks of planes between the cores
    pool = {"kernel_size": "value", "stride?": "value", "padding?": "value"}
    t["max_pool2d_with_indices"] = Op(
        {"x": "tensor", **pool, "dilation?": "value", "ceil_mode?": "value", "out": "tensors"},
        "trnsim.kernels.pooling:lower_pool", _R + "pool", split="alone",
    )  # fmt: skip
    t["avg_pool2d"] = Op(
        {**_X, **pool, "ceil_mode?": "value", "count_include_pad?": "value",
         "divisor_override?": "value"},
        "trnsim.kernels.pooling:lower_pool", _R + "pool", split="alone",
    )  # fmt: skip
    t["max_pool2d_with_indices_backward"] = Op(
        {"grad_output": "tensor", "input_size": "values", **pool, "dilation?": "value",
         "ceil_mode?": "value", "indices": "tensor", "out": "tensor"},
        "trnsim.kernels.pooling_backward:lower_pool_backward", _B, split="alone",
    )  # fmt: skip
    t["avg_pool2d_backward"] = Op(
        {"grad_output": "tensor", "input_size": "values", **pool, "ceil_mode?": "value",
         "count_include_pad?": "value", "divisor_override?": "value", "out": "tensor"},
        "trnsim.kernels.pooling_backward:lower_pool_backward", _B, split="alone",
    )  # fmt: skip
    optim = "trnsim.kernels.optim:lower_optim"
    for op in ("addcdiv", "addcmul"):
        t[op] = Op({"x": "tensor", "tensor1": "tensor", "tensor2": "tensor", "value?": "value",
                    "out": "tensor"}, optim, _B)  # fmt: skip
    t["lerp"] = Op({"x": "tensor", "end": "tensor", "weight": "value", "out": "tensor"}, optim, _B)
    for op in ("_foreach_add", "_foreach_mul", "_foreach_div"):
        t[op] = Op({"x": "tensors", "other": "operands", "alpha?": "value", "out": "tensors"},
                   optim, _B)  # fmt: skip
    for op in ("_foreach_addcdiv", "_foreach_addcmul"):
        t[op] = Op({"x": "tensors", "tensor1": "tensors", "tensor2": "tensors",
                    "value?": "value", "out": "tensors"}, optim, _B)  # fmt: skip
    t["_foreach_lerp"] = Op({"x": "tensors", "tensors1": "tensors", "weight": "value",
                             "out": "tensors"}, optim, _B)  # fmt: skip
    t["_foreach_sqrt"] = Op({"x": "tensors", "out": "tensors"}, optim, _B)
    for name, rec in t.items():
        object.__setattr__(rec, "name", name)
        assert rec.split in SPLITS, name
    return t


OPS: dict[str, Op] = _table()
