"""Graphs: capture launches and copies on a stream, replay them as one host launch.

As with CUDA graphs (torch.cuda.CUDAGraph): inside `with graph.capture(stream):` the stream's
launches and copies are recorded instead of run, and cost the host nothing. `replay()` costs the
host one launch (`host_link.launch_overhead`) and enqueues the whole sequence at once; the
device then starts the graph's kernels at most one per `host_link.graph_launch_overhead`: the
i-th (from 1) not before replay + i x graph_launch_overhead, nor before the one ahead of it ends,
so the cost of starting a kernel overlaps the kernel before it, as eager launches overlap on the
host. So N kernels take about N x launch_overhead eagerly when that exceeds their time, and
launch_overhead + max(N x graph_launch_overhead, sum of the kernels) replayed: a graph never
costs the device more than its kernels plus the first start. The captured tensors are bound
at capture time: a replay reads and writes the same device memory, as a CUDA graph does; a
replay after any of it was freed raises UseAfterFreeError (CUDA would run on freed memory).
"""

from __future__ import annotations

import contextlib

from trnsim.errors import TrnsimError
from trnsim.runtime.memory import DeviceBuffer, TensorView
from trnsim.runtime.stream import LAUNCH


class Graph:
    """A captured sequence of launches and copies (`Device.graph()`)."""

    def __init__(self, device):
        self.device = device
        self._nodes: list[tuple[str, tuple]] = []
        self._uses: list[tuple[int, str, DeviceBuffer]] = []  # (node, label, buffer it uses)
        self._stream = None
        self._capturing = False

    @property
    def nodes(self) -> int:
        """How many launches and copies the graph holds."""
        return len(self._nodes)

    @contextlib.contextmanager
    def capture(self, stream=None):
        """Record the launches and copies made on `stream` (default: the device's default
        stream) inside the block. A graph is captured once."""
        stream = stream or self.device.default_stream
        if self._stream is not None:
            raise TrnsimError("graph capture: this graph was already captured")
        if stream._capture is not None:
            raise TrnsimError(f"graph capture: stream {stream.name} is already being captured")
        if stream.device.ctx is not self.device.ctx:
            raise TrnsimError("graph capture: the stream belongs to another chip")
        self._stream, stream._capture = stream, self
        try:
            yield self
        finally:
            stream._capture = None

    def add(self, stream, kind: str, args: tuple, uses: dict | None = None) -> None:
        """Called by the capturing stream for each launch or copy; `uses` labels the device
        buffers and views it uses ("tensor x", "src"), for `replay`'s check."""
        for label, x in (uses or {}).items():
            buf = x.buffer if isinstance(x, TensorView) else x
            if isinstance(buf, DeviceBuffer):
                self._uses.append((len(self._nodes), label, buf))
        self._nodes.append((kind, args))

    def replay(self) -> None:
        """Enqueue the captured work on its stream, for one host launch."""
        stream = self._stream
        if stream is None:
            raise TrnsimError("graph replay: nothing was captured")
        if stream._capture is not None:
            raise TrnsimError("graph replay: the graph is still being captured")
        self._check_memory()
        ctx = stream.ctx
        t = ctx.host.call("graph.replay", ctx.costs.launch, f"{len(self._nodes)} nodes")
        per_kernel, n = ctx.costs.graph_launch, 0
        for kind, args in self._nodes:
            if kind is LAUNCH:
                n += 1
                stream.push(kind, t + n * per_kernel, args)  # args' device-side cost is 0
            else:
                stream.push(kind, t, args)

    def _check_memory(self) -> None:
        """Raise UseAfterFreeError, naming the node and its tensor or side, if memory the graph
        captured was freed since."""
        for i, label, buf in self._uses:
            if buf.freed:
                kind, args = self._nodes[i]
                what = f"launch {args[0].name}" if kind is LAUNCH else "memcpy_async"
                buf.check(
                    f"graph replay: node {i + 1} of {len(self._nodes)} ({what}), {label}",
                    "a graph replays on the memory it captured: keep it allocated while the "
                    "graph may be replayed",
                )
