"""Small kernels with hand-derivable costs, shared by the runtime's contract tests."""

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


def memset_kernel(name="k", n=512, wait=None):
    """One VectorE memset of a [128, n] fp32 tile: max(64, n) cycles (`memset_ps`)."""
    tiles = {"a": TileSpec("a", "sbuf", (128, n), dtype("float32"))}
    d = {"op": "memset", "dst": "a", "value": 1.0}
    if wait:
        d["wait"] = wait
    ins = [parse_instruction(d, 0, "i")]
    return KernelSpec(name, per_core=[CoreProgram(tiles, ins)])


def memset_ps(n=512):
    return cycles_to_ps(max(64, n), TRN2.core.vector.clock_hz)


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
