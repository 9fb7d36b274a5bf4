"""A collective timed outside this clock: one rank of a job whose other ranks are other processes.

A process that simulates one rank (a torch.distributed rank on the `neuron` device) cannot run
its collectives on a World with the other ranks: they are simulated elsewhere. It meets them in
lockstep instead (docs/distributed.md, "Timing"): the rank's CC stream reaches the collective
(`arrive`: the device runs until the stream gets there, after what the issuing stream enqueued
before it), the ranks exchange those moments, a World times the collective from them, and the
CC stream holds until the rank's end (`hold`), without holding its logical core, as a CC
stream does. The issuing stream's later work does not wait for it until someone makes it wait
(`Stream.wait_event` on the returned event: `work.wait()`, or the next op that reads its
output).

The device is run only as far as the arrival needs: until the issuing stream's work before the
collective is done. When the CC stream is still busy with this group's earlier collectives
(FSDP2's reduce-scatter, then the next all-gather it prefetches), the arrival is the end of
those, known from their holds without running the device there: running it would leave the
core idle until then, though the host goes on launching compute (issued later in Python, but
earlier on the host's clock) that a real device runs beside the CC stream's backlog.
"""

from __future__ import annotations

import weakref

from trnsim.report.recorder import CollectiveSpan
from trnsim.runtime.event import Event
from trnsim.runtime.stream import RECORD, WAIT, Stream

__all__ = ["arrive", "hold"]

# CC stream -> the end (ps) of the last collective held on it (`hold`)
_held: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def arrive(after: Stream, cc: Stream, label: str) -> int:
    """The host issues a collective on `cc` after the work enqueued so far on `after` (one
    host call, `collective`, costing an event's call); the device runs until `cc` gets there.
    Returns that moment (ps): when the issuing stream's work before it is done, or the end of
    the CC stream's collectives in flight if later (the module docstring), not before the
    host's call. Raises the device's errors, as a synchronizing call does; the host's clock does
    not move (it does not wait)."""
    ctx = cc.ctx
    t = ctx.host.call("collective", ctx.costs.event, label)
    issued = None
    if after is not cc:
        issued = after.device.event(name="")
        after.push(RECORD, t, (issued, issued._new_record()))
        if not issued._done.triggered:
            cc.push(WAIT, t, (issued._done, f"{label} inputs"))
    ready = cc.device.event(name="")
    cc.push(RECORD, t, (ready, ready._new_record()))
    if issued is not None:
        ctx.run_until(issued._done)
    held = _held.get(cc, 0)
    if not ready._done.triggered and held > max(ctx.env.now, t):
        # the CC stream's queue: holds ending by `held`, waits already met, then `ready`
        return held
    ctx.run_until(ready._done)
    return ready.time_ps


def hold(cc: Stream, end_ps: int, span: CollectiveSpan | None = None) -> Event:
    """`cc`'s next item ends at `end_ps` (not before now): the collective in flight, holding no
    core; recorded as `span` on the chip's recorder. Returns the event recorded after it."""
    env = cc.ctx.env
    _held[cc] = max(_held.get(cc, 0), end_ps)
    done = env.event()  # (a Timeout counts as triggered from the start: a stream would not wait)
    env.timeout(max(0, end_ps - env.now)).callbacks.append(lambda _: done.succeed(end_ps))
    cc.push(WAIT, 0, (done, span.op if span else "collective"))
    ev = cc.device.event(enable_timing=True, name="")
    cc.push(RECORD, 0, (ev, ev._new_record()))
    if span is not None:
        cc.ctx.recorder.collective(span)
    return ev
