"""Each op's lowering with the table's one signature, `f(b, cfg, op, args)` (`trace.ops.Op.
lowering` names them): the argument unpacking between an op's record and the module that
lowers it (`matmul`, `elementwise`, `rows`, `norms`, `attention`, `movement`, ...)."""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.errors import TraceError
from trnsim.kernels.argmax import lower_argmax
from trnsim.kernels.attention import lower_attention
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.elementwise import lower_binary, lower_unary, lower_where
from trnsim.kernels.gather import lower_embedding
from trnsim.kernels.loss import lower_loss
from trnsim.kernels.matmul import addmm_bias, columns_split, fused_bias, lower_matmul
from trnsim.kernels.movement import lower_cat, lower_contiguous, lower_permute, lower_split
from trnsim.kernels.norms import lower_norm
from trnsim.kernels.rows import lower_reduction
from trnsim.kernels.softmax import lower_softmax
from trnsim.kernels.transpose import lower_transpose

B = KernelBuilder
C = ChipConfig


def matmul(b: B, cfg: C, op: str, a: dict) -> None:
    lower_matmul(b, cfg, a["a"], a["b"], a["out"], by_columns=True)


def linear(b: B, cfg: C, op: str, a: dict) -> None:
    """out = x @ weight^T (+ bias, broadcast over the rows; by columns, `matmul.columns_split`,
    added on the way out of PSUM when it fits, `matmul.fused_bias`)."""
    bias, out = a.get("bias"), a["out"]
    shape = b.tensors[out].shape
    fuse = bias is not None and columns_split(shape, b.part[1], cfg) and fused_bias(
        shape, b.tensors[bias].dtype, b.part[1])  # fmt: skip
    lower_matmul(b, cfg, a["x"], a["weight"], out, b_transposed=True,
                 by_columns=bias is None or fuse, bias=bias if fuse else None)  # fmt: skip
    if bias is not None and not fuse:
        b.barrier()  # the add reads what the matmul wrote: a generation of its own
        lower_binary(b, cfg, "add", a["out"], a["bias"], a["out"])


def unary(b: B, cfg: C, op: str, a: dict) -> None:
    lower_unary(b, cfg, op, a["x"], a["out"])


def binary(b: B, cfg: C, op: str, a: dict) -> None:
    lower_binary(b, cfg, op, a["a"], a["b"], a["out"])


def where(b: B, cfg: C, op: str, a: dict) -> None:
    lower_where(b, cfg, a["condition"], a["a"], a["other"], a["out"])


def masked_fill(b: B, cfg: C, op: str, a: dict) -> None:
    lower_where(b, cfg, a["mask"], float(a["value"]), a["x"], a["out"])


def transpose(b: B, cfg: C, op: str, a: dict) -> None:
    lower_transpose(b, cfg, a["x"], a["out"], a.get("dim0", -2), a.get("dim1", -1))


def reduction(b: B, cfg: C, op: str, a: dict) -> None:
    lower_reduction(b, cfg, op, a["x"], a["out"], a.get("dim", -1), a.get("keepdim", False))


def norm(b: B, cfg: C, op: str, a: dict) -> None:
    lower_norm(b, cfg, op, a["x"], a["out"], a.get("weight"), a.get("bias"), a.get("eps", 1e-5))


def softmax(b: B, cfg: C, op: str, a: dict) -> None:
    lower_softmax(b, cfg, a["x"], a["out"], a.get("dim", -1), log=op == "log_softmax")


def attention(b: B, cfg: C, op: str, a: dict) -> None:
    lower_attention(b, cfg, a["q"], a["k"], a["v"], a["out"], bool(a.get("is_causal")),
                    a.get("scale"))  # fmt: skip


def argmax(b: B, cfg: C, op: str, a: dict) -> None:
    lower_argmax(b, cfg, a["x"], a["out"], a.get("dim", -1), a.get("keepdim", False))


def contiguous(b: B, cfg: C, op: str, a: dict) -> None:
    lower_contiguous(b, cfg, a["x"], a["out"])


def permute(b: B, cfg: C, op: str, a: dict) -> None:
    lower_permute(b, cfg, a["x"], a["out"], a["dims"])


def cat(b: B, cfg: C, op: str, a: dict) -> None:
    lower_cat(b, cfg, a["tensors"], a["out"], a.get("dim", 0))


def split(b: B, cfg: C, op: str, a: dict) -> None:
    lower_split(b, cfg, a["x"], a["split_size"], a["outs"], a.get("dim", 0))


def embedding(b: B, cfg: C, op: str, a: dict) -> None:
    lower_embedding(b, cfg, a["weight"], a["indices"], a["out"])


def loss(b: B, cfg: C, op: str, a: dict) -> None:
    lower_loss(b, cfg, op, a["input"], a["target"], a["out"], a.get("reduction", "mean"))


def addmm(b: B, cfg: C, op: str, a: dict) -> None:
    lower_addmm(b, cfg, a["input"], a["mat1"], a["mat2"], a["out"], a.get("beta", 1),
                a.get("alpha", 1))  # fmt: skip


def lower_addmm(b: B, cfg: C, inp, m1, m2, out, beta=1, alpha=1) -> None:
    """The matmul into out, then out = beta * (out * alpha / beta + input): the scalings as
    in-place `mul`s where alpha or beta is not 1, the input added by `add` (of out's shape, a
    row [N] or a column [M, 1] broadcast); beta 0 leaves input out."""
    for k, v in (("beta", beta), ("alpha", alpha)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TraceError(f"addmm: {k} {v!r}; expected a number")
    shape = b.tensors[out].shape
    bias = addmm_bias({"input": inp, "out": out, "beta": beta, "alpha": alpha}, b.tensors)
    if (bias is not None and columns_split(shape, b.part[1], cfg)
            and fused_bias(shape, b.tensors[bias].dtype, b.part[1])):  # fmt: skip
        lower_matmul(b, cfg, m1, m2, out, by_columns=True, bias=bias)  # as a linear layer's
        return
    lower_matmul(b, cfg, m1, m2, out)
    scale = alpha / beta if beta else alpha
    steps = [("mul", scale)] if scale != 1 else []
    if beta:
        steps.append(("add", inp))
        if beta != 1:
            steps.append(("mul", beta))
    for name, v in steps:
        b.barrier()  # each reads what the one before wrote: a generation of its own
        lower_binary(b, cfg, name, out, float(v) if name == "mul" else v, out)
