"""The device runtime: `device` (memory, streams, events, launches over a simulated chip) and
`session` (running a whole trace `Program` on a device, as `trnsim run` does)."""

from trnsim.runtime.device import Device, Event, Stream

__all__ = ["Device", "Event", "Stream"]
