"""The device runtime, with CUDA's names and semantics (docs/runtime.md), one concept a module:
`device` (a logical NeuronCore, memory calls, copies, launches), `memory` (buffers by bytes,
strided views, statistics), `stream`, `event`, `graph`, `host` (the simulated host threads and
their call costs), `context` (the chip the devices share), `errors` (of CUDA's kinds); and
`session`, which runs a whole trace `Program` on this API, as `trnsim run` does. On a system of
chips: `multichip` (the chips on one clock, the collectives their streams run), `communicator`
(ranks running collectives: `Communicator`, `Work`) and `system_run` (a trace on a system)."""

from trnsim.runtime.communicator import Communicator, Work
from trnsim.runtime.device import Device, devices
from trnsim.runtime.errors import InvalidValueError, UseAfterFreeError
from trnsim.runtime.event import Event
from trnsim.runtime.graph import Graph
from trnsim.runtime.host import HostThread
from trnsim.runtime.memory import DeviceBuffer, TensorView
from trnsim.runtime.stream import Stream

__all__ = [
    "Communicator",
    "Device",
    "DeviceBuffer",
    "Event",
    "Graph",
    "HostThread",
    "InvalidValueError",
    "Stream",
    "TensorView",
    "UseAfterFreeError",
    "Work",
    "devices",
]
