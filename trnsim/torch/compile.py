"""`torch.compile` for `neuron`: the Dynamo backend "neuron", so `torch.compile(model,
backend="neuron")` works, and `torch.compiler.set_default_backend("neuron")` with it.

The backend is aot_autograd's: the forward graph (and, when training, the backward graph) are
aten graphs, each compiled to a `graph.CompiledGraph`: its nodes run on the device for their
values, its kernels (fused runs of elementwise ops, the library's lowerings, estimates for the
rest) are captured once per input signature and replayed as one runtime Graph.

PyTorch finds the backend by the `torch_dynamo_backends` entry point of the installed package;
`register()` adds it by hand (it imports Dynamo, which takes seconds: not done on import of
`trnsim.torch`). Importing this module puts trnsim's own files on Dynamo's skip list: a model
that calls into the shim (`torch.neuron.synchronize()`) breaks the graph there, rather than
Dynamo tracing the simulator.
"""

from __future__ import annotations

import torch

from trnsim.torch.graph import CompiledGraph


def _hide() -> None:
    """trnsim's files on Dynamo's skip list (once per process)."""
    from torch._dynamo import trace_rules

    trace_rules.add("trnsim")


_hide()


def _compiler(gm: torch.fx.GraphModule, example_inputs):
    """An aten graph's callable (boxed, as aot_autograd calls it), outside Dynamo: the shim's
    own Python is never traced."""
    return torch._dynamo.disable(CompiledGraph(gm))


_aot = None


def backend(gm: torch.fx.GraphModule, example_inputs):
    """The Dynamo backend: aot_autograd with `CompiledGraph` for the forward, backward and
    inference graphs."""
    global _aot
    if _aot is None:
        from torch._dynamo.backends.common import aot_autograd

        _aot = aot_autograd(
            fw_compiler=_compiler, bw_compiler=_compiler, inference_compiler=_compiler
        )
    return _aot(gm, example_inputs)


def register() -> None:
    """Register the backend under the name "neuron" (once per process)."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if "neuron" not in _COMPILER_FNS:
        register_backend(backend, name="neuron")
