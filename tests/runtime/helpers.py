"""Small kernels with hand-derivable costs, shared by the runtime's contract tests."""

from typing import NamedTuple

import numpy as np

from trnsim.api import Trace
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.trace import parse_instruction
from trnsim.trace.program import CoreProgram, KernelSpec, TileSpec
from trnsim.units import cycles_to_ps, seconds_to_ps

TRN2 = load_chip("trn2")
HL = TRN2.host_link
LAUNCH = seconds_to_ps(HL.launch_overhead)  # host time of one launch
COPY = seconds_to_ps(HL.copy_overhead)  # host time of one memcpy_async
GRAPH_LAUNCH = seconds_to_ps(HL.graph_launch_overhead)  # device time per kernel of a replay
LATENCY = seconds_to_ps(HL.latency)
PS_PER_BYTE = 1e12 / HL.bandwidth  # host link


VECTOR_MAX = TRN2.core.vector.dve_max_free_elements  # the most one VectorE instruction takes


def memset_kernel(name="k", n=512, wait=None):
    """VectorE memsets of a [128, n] fp32 tile, VECTOR_MAX columns at a time, one after
    another on the engine (`memset_ps`)."""
    tiles = {"a": TileSpec("a", "sbuf", (128, n), dtype("float32"))}
    ins = []
    for i, c in enumerate(range(0, n, VECTOR_MAX)):
        d = {"op": "memset", "dst": f"a[:, {c}:{min(n, c + VECTOR_MAX)}]", "value": 1.0}
        if wait and i == 0:
            d["wait"] = wait
        ins.append(parse_instruction(d, i, "i"))
    return KernelSpec(name, per_core=[CoreProgram(tiles, ins)])


def memset_ps(n=512):
    """The memsets of `memset_kernel`: max(64, columns) cycles each."""
    return sum(
        cycles_to_ps(max(64, min(VECTOR_MAX, n - c)), TRN2.core.vector.clock_hz)
        for c in range(0, n, VECTOR_MAX)
    )


def copy_kernel(shape=(128, 256), dt="float32"):
    """y = x through SBUF: a DMA load into a tile, then a DMA store (tensors x and y)."""
    t = Trace("copy")
    t.tensor("x", shape, dt)
    t.tensor("y", shape, dt)
    k = t.kernel("copy_xy")
    k.tile("xt", "sbuf", shape, dt)
    k.dma_copy(src="x", dst="xt", queue=0, signal={"ld": 1})
    k.dma_copy(src="xt", dst="y", queue=1, wait={"ld": 1})
    return k.spec()


class KernelRun(NamedTuple):
    kernel: str
    core: int
    start_ps: int
    end_ps: int


def kernel_runs(recorder) -> list[KernelRun]:
    """Each kernel's run (its spans from the first start to the last end), by start time: a
    `memset_kernel` longer than VECTOR_MAX columns is several instructions."""
    runs: dict[str, KernelRun] = {}
    for s in recorder.spans:
        r = runs.get(s.kernel)
        runs[s.kernel] = (
            KernelRun(s.kernel, s.core, s.start_ps, s.end_ps)
            if r is None
            else r._replace(start_ps=min(r.start_ps, s.start_ps), end_ps=max(r.end_ps, s.end_ps))
        )
    return sorted(runs.values(), key=lambda r: r.start_ps)


def views(dev, *shapes, dt="float32"):
    """A fresh allocation per shape on `dev`, each viewed as `dt`."""
    isz = np.dtype(dt).itemsize
    return [dev.malloc(int(np.prod(s)) * isz).view(dt, s) for s in shapes]


def copy_times(dev, shape=(128, 256)) -> tuple[int, int]:
    """Launch y = x (`copy_kernel`: a DMA load and store) on `dev` and synchronize; check y's
    values; the launch's start (from the end of the launch call) and duration, in ps."""
    x, y = views(dev, shape, shape)
    host = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    x.array[...] = host
    dev.launch(copy_kernel(shape), {"x": x, "y": y})
    called = dev.host_time_ps
    dev.synchronize()
    np.testing.assert_array_equal(y.numpy(), host)
    la = dev.recorder.launches[-1]
    assert la.kernel == "copy_xy"
    return la.start_ps - called, la.end_ps - la.start_ps
