"""`torch.compile` for `neuron`: a Dynamo backend that runs the captured graph's aten ops on the
device one by one (the same kernels and timing as eager), so `torch.compile(model,
backend="neuron")` works, and `torch.compiler.set_default_backend("neuron")` with it.

PyTorch finds the backend by the `torch_dynamo_backends` entry point of the installed package;
`register()` adds it by hand (it imports Dynamo, which takes seconds: not done on import).
Inductor cannot compile for a device defined in Python, so nothing is fused: the graph is the
unit of capture, not of fusion.
"""

from __future__ import annotations

import torch


def backend(gm: torch.fx.GraphModule, example_inputs):
    """The compiled callable: the graph, run eagerly, outside Dynamo (so the shim's own Python
    is never traced)."""
    return torch._dynamo.disable(gm.forward)


def register() -> None:
    """Register the backend under the name "neuron" (once per process)."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if "neuron" not in _COMPILER_FNS:
        register_backend(backend, name="neuron")
