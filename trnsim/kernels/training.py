"""The backward ops of a training step and the optimizer's elementwise ops: which module
lowers each (`backward`, `softmax_backward`, `grads`, `optim`, `attention_backward`), and
which of them run whole on the first physical core of an LNC 2 logical core (their outputs
sum over rows, which the two cores could only meet through a barrier)."""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.kernels.attention_backward import lower_attention_backward
from trnsim.kernels.backward import ELEMENTWISE_BACKWARD, lower_elementwise_backward
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.grads import lower_embedding_backward, lower_layer_norm_backward
from trnsim.kernels.loss_backward import lower_nll_loss_backward
from trnsim.kernels.optim import OPTIM, lower_optim
from trnsim.kernels.softmax_backward import lower_softmax_backward
from trnsim.trace.program import OpSpec

__all__ = ["TRAINING_OPS", "ONE_CORE", "FULL_READS", "lower_training"]

ONE_CORE = frozenset(
    {"native_layer_norm_backward", "embedding_dense_backward",
     "scaled_dot_product_attention_backward"}
)  # fmt: skip

FULL_READS = {  # op -> arguments every core reads whole (kernels.FULL_READS)
    "nll_loss_backward": ("grad_output", "weight", "total_weight"),
}


def _lowerings() -> dict:
    table = {op: lower_elementwise_backward for op in ELEMENTWISE_BACKWARD}
    table.update({op: lower_optim for op in OPTIM})
    table["_softmax_backward_data"] = lower_softmax_backward
    table["nll_loss_backward"] = lower_nll_loss_backward
    table["native_layer_norm_backward"] = lower_layer_norm_backward
    table["embedding_dense_backward"] = lower_embedding_backward
    table["scaled_dot_product_attention_backward"] = lower_attention_backward
    return table


LOWERINGS = _lowerings()
TRAINING_OPS = frozenset(LOWERINGS)


def lower_training(b: KernelBuilder, cfg: ChipConfig, op: OpSpec) -> None:
    """Emit one backward or optimizer op into `b`; an op of ONE_CORE only on core 0."""
    if op.op in ONE_CORE and b.part[0] != 0:
        return
    LOWERINGS[op.op](b, cfg, op.op, op.args)
