"""The PyTorch device `neuron` on the simulated chip (docs/torch.md): `import trnsim.torch`, then
`.to("neuron")`; `torch.neuron` has torch.cuda's names; values are PyTorch's own (CPU kernels on
zero-copy views of device memory), time is the simulated chip's (each op's lowering by the kernel
library, or a labelled roofline estimate). A thin shim: the runtime (`trnsim.runtime`) holds memory,
streams, events and the clock; the kernel library times ops.

Modules: `register` (making `neuron` a PyTorch device), `state` (the chip, chosen by `configure` or
TRNSIM_CHIP / TRNSIM_LNC), `allocator` (the caching allocator), `tensors` (device tensors and their
CPU views), `kernels` (the aten kernels; `fused_cells` the LSTM/GRU cells), `hooks` (pinned memory,
the host copy), `wrappers` (every torch function the shim wraps, with why), `private` (every private
`torch._C` API it uses), `measure` (one measurement per op signature: time, FLOPs, bytes,
instructions), `timing` (the op timer: launches, statistics), `listeners` (who watches the device:
the profiler, a recording, a compiled graph's capture), `module` (`torch.neuron`), `autocast`,
`report`, `compile` (the torch.compile backend) and `graph` (a compiled graph as one captured
runtime graph), `profiler` (`torch.neuron.profiler`; `profiler_export`), `record` (a run written as
a trace: `record_tensors`, `record_write`).
"""

try:
    import torch  # noqa: F401
except ImportError:
    raise ImportError(
        "trnsim.torch needs PyTorch: pip install torch==2.13.0 'trnsim[torch]' "
        "(the pinned CPU build first; an unpinned torch downloads several GB)"
    ) from None

from trnsim.torch.register import register  # noqa: E402
from trnsim.torch.state import configure  # noqa: E402

register()

from trnsim.torch.record import record  # noqa: E402  (after register: it uses the device)

__all__ = ["configure", "record"]
