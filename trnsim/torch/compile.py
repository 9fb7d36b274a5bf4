"""`torch.compile` for `neuron`: the Dynamo backend "neuron", so `torch.compile(model,
backend="neuron")` works, and `torch.compiler.set_default_backend("neuron")` with it.

The backend is aot_autograd's: the forward graph (and, when training, the backward graph) are
aten graphs, each compiled to a `graph.CompiledGraph`: its nodes run on the device for their
values, its kernels (fused runs of elementwise ops, the library's lowerings, estimates for the
rest) are captured once per input signature and replayed as one runtime Graph.

torch.compile's `mode` and `options` are accepted (docs/torch.md, "torch.compile"): a compiled
graph on Neuron is one program launched once (a NEFF), so "default", "reduce-overhead" and
"max-autotune" all capture and replay (the kernel library's lowerings are fixed: nothing to
autotune); "max-autotune-no-cudagraphs", or `options={"triton.cudagraphs": False}`, launches
the same kernels one by one, as inductor does without CUDA graphs. Other options are
inductor's: accepted, with a warning that they change nothing here.

PyTorch finds the backend by the `torch_dynamo_backends` entry point of the installed package;
`register()` adds it by hand (it imports Dynamo, which takes seconds: not done on import of
`trnsim.torch`). Importing this module puts trnsim's own files on Dynamo's skip list: a model
that calls into the shim (`torch.neuron.synchronize()`) breaks the graph there, rather than
Dynamo tracing the simulator.
"""

from __future__ import annotations

import functools
import warnings

import torch

from trnsim.torch.graph import CompiledGraph


def _hide() -> None:
    """trnsim's files on Dynamo's skip list (once per process)."""
    from torch._dynamo import trace_rules

    trace_rules.add("trnsim")


_hide()


def _compiler(gm: torch.fx.GraphModule, example_inputs, graphs: bool = True):
    """An aten graph's callable (boxed, as aot_autograd calls it), outside Dynamo: the shim's
    own Python is never traced."""
    compiled = CompiledGraph(gm)
    compiled.graphs = graphs
    return torch._dynamo.disable(compiled)


MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
GRAPHS = "triton.cudagraphs"  # the one option that means something here
_aot: dict = {}  # graphs -> aot_autograd's backend


def graphs_for(mode: str | None, options: dict | None) -> bool:
    """Whether the compiled graphs are captured and replayed (module doc); raises for a mode
    torch.compile does not know, as inductor does."""
    mode = mode or "default"
    if mode not in MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(MODES)}")
    graphs = mode != "max-autotune-no-cudagraphs"
    options = dict(options or {})
    if GRAPHS in options:
        graphs = bool(options.pop(GRAPHS))
    if options:
        warnings.warn(
            f"torch.compile(backend='neuron'): options {', '.join(map(repr, sorted(options)))} "
            f"are inductor's and change nothing here (the backend takes {GRAPHS!r})",
            stacklevel=2,
        )
    return graphs


def backend(gm: torch.fx.GraphModule, example_inputs, mode=None, options=None):
    """The Dynamo backend: aot_autograd with `CompiledGraph` for the forward, backward and
    inference graphs; `mode` and `options` are torch.compile's (module doc)."""
    graphs = graphs_for(mode, options)
    aot = _aot.get(graphs)
    if aot is None:
        from torch._dynamo.backends.common import aot_autograd

        fn = functools.partial(_compiler, graphs=graphs)
        aot = _aot[graphs] = aot_autograd(fw_compiler=fn, bw_compiler=fn, inference_compiler=fn)
    return aot(gm, example_inputs)


def register() -> None:
    """Register the backend under the name "neuron" (once per process)."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if "neuron" not in _COMPILER_FNS:
        register_backend(backend, name="neuron")
