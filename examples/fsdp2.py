"""FSDP2 training of the small GPT of examples/torch_gpt.py on a simulated system of Trainium
chips: an ordinary torchrun script (it never imports trnsim), run on `neuron` by
TRNSIM_TORCH_AUTOLOAD=1, its collectives timed on the system TRNSIM_SYSTEM names.

    TRNSIM_TORCH_AUTOLOAD=1 TRNSIM_SYSTEM=trn2-48xl \\
        torchrun --standalone --nproc-per-node 2 examples/fsdp2.py [--steps 3 --batch 8 ...]

`fully_shard` on each transformer layer and on the model, parameters in bf16 and gradients
reduced in fp32 (MixedPrecisionPolicy): each layer's all-gather before its forward and
backward, its reduce-scatter after its backward. Prints what examples/ddp.py prints (its
--help: the same flags).
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp import args_of, model_of, train  # noqa: E402


def main() -> None:
    args = args_of(__doc__.splitlines()[0])
    if not hasattr(torch, "neuron"):
        sys.exit("examples/fsdp2.py: no `neuron` device: run with TRNSIM_TORCH_AUTOLOAD=1 "
                 "(trnsim installed)")  # fmt: skip
    dist.init_process_group()
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = model_of(args)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.blocks.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    train(args, model, model, "FSDP2")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
