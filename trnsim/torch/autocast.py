"""`torch.autocast("neuron", dtype=torch.bfloat16)`: the AutocastPrivateUse1 key falls through
for every op, except the ops CUDA's autocast casts: matmuls, linear, convolutions and attention
run in the autocast dtype (and are timed so), and the ops that need range (softmax, norms,
losses, exp and log, sums) run in float32, as torch.cuda.amp's lists say."""

from __future__ import annotations

import torch

from trnsim.torch.private import ExcludeDispatchKeyGuard

LOW = [
    "mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "linear", "conv1d", "conv2d",
    "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "_convolution",
    "prelu", "chain_matmul", "linalg_vecdot", "scaled_dot_product_attention",
]  # fmt: skip
FP32 = [
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
    "pow.Scalar", "softplus", "layer_norm", "group_norm", "norm.Scalar", "cosine_similarity",
    "nll_loss", "nll_loss2d", "cross_entropy_loss", "mse_loss", "l1_loss", "smooth_l1_loss",
    "huber_loss", "binary_cross_entropy_with_logits", "kl_div", "softmax.int",
    "log_softmax.int", "cumsum", "cumprod", "prod", "sum", "rms_norm", "dist", "pdist", "cdist",
]  # fmt: skip
_KEY = torch.DispatchKeySet(torch.DispatchKey.AutocastPrivateUse1)
_lib: torch.library.Library | None = None
_fallthrough: torch.library.Library | None = None


def _cast(a, dtype):
    if isinstance(a, torch.Tensor):
        if a.is_floating_point() and a.dtype != dtype and not a.is_cpu:
            return a.to(dtype)
        return a
    if type(a) in (list, tuple):
        return type(a)(_cast(x, dtype) for x in a)
    return a


def _kernel(op, low: bool):
    def kernel(*args, **kwargs):
        dtype = torch.get_autocast_dtype("neuron") if low else torch.float32
        args = [_cast(a, dtype) for a in args]
        kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
        with ExcludeDispatchKeyGuard(_KEY):
            return op(*args, **kwargs)

    return kernel


def register() -> None:
    """Autocast for neuron (once per process)."""
    global _lib, _fallthrough
    if _lib is not None:
        return
    _fallthrough = torch.library.Library("_", "IMPL")
    _fallthrough.fallback(torch.library.fallthrough_kernel, dispatch_key="AutocastPrivateUse1")
    _lib = torch.library.Library("aten", "IMPL")
    for names, low in ((LOW, True), (FP32, False)):
        for name in names:
            base, _, ov = name.partition(".")
            packet = getattr(torch.ops.aten, base, None)
            op = getattr(packet, ov or "default", None) if packet is not None else None
            if op is None:
                continue
            _lib.impl(name, _kernel(op, low), "AutocastPrivateUse1")
