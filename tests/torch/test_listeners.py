"""Who watches the device (trnsim/torch/listeners.py) and the one measurement per op signature
(trnsim/torch/measure.py): a listener is told, in host order, of ops, copies, waits, events and
allocations; a signature is simulated once whoever asks; a capture launches nothing."""

import torch

import trnsim.torch  # noqa: F401
from trnsim.torch import state, timing
from trnsim.torch.listeners import Listener


class Log(Listener):
    def __init__(self):
        self.seen = []

    def op(self, run):
        m = run.measurement
        self.seen.append(("op", run.name, m and m.duration_ps, run.kernel is not None))

    def copy(self, run):
        src, dst = run.args
        self.seen.append(("copy", src.device.type, dst.device.type))

    def synchronize(self, stream):
        self.seen.append(("synchronize", stream is None))

    def record_event(self, stream, event):
        self.seen.append(("record", event.enable_timing))

    def wait_event(self, stream, event):
        self.seen.append(("wait",))

    def alloc(self, block, nbytes):
        self.seen.append(("alloc", nbytes))

    def launched(self, stream, kernel, start_ps, end_ps):
        assert end_ps >= start_ps


def test_a_listener_is_told_in_host_order_and_only_while_subscribed():
    x = torch.randn(64, 32)
    listeners = state.get().listeners
    log = Log()
    listeners.add(log)
    try:
        d = x.to("neuron")
        y = d.relu()
        ev = torch.neuron.Event(enable_timing=True)
        ev.record()
        torch.neuron.current_stream().wait_event(ev)
        y.cpu()
        torch.neuron.synchronize()
    finally:
        listeners.remove(log)
    kinds = [s[0] for s in log.seen]
    # the op's result takes its block after the op ran (its values come from the CPU kernel)
    assert kinds == ["alloc", "copy", "op", "alloc", "record", "wait", "copy", "synchronize",
                     "synchronize"]  # fmt: skip
    assert log.seen[0] == ("alloc", 64 * 32 * 4)
    assert log.seen[1] == ("copy", "cpu", "neuron")
    (_, name, dur, launched) = log.seen[2]
    t = timing.timer()
    assert name == "relu.default" and launched
    key = ("relu.default", (torch.Size([64, 32]), torch.float32))
    assert dur == t.measure.memo[key].duration_ps > 0
    assert log.seen[6] == ("copy", "neuron", "cpu") and log.seen[7] == ("synchronize", False)
    assert log.seen[8] == ("synchronize", True)
    n = len(log.seen)
    d.relu()
    assert len(log.seen) == n  # removed: told nothing more
    assert not listeners and state.get().devices[0].ctx.on_launch is None


def test_one_signature_is_simulated_once_whoever_asks(tmp_path):
    """The timer's first launch measures; a profile and a recording of the same op reuse that
    measurement (the scratch chip runs nothing new for them but the recorded kernel's figures,
    which the trace names differently), and the profile's event carries the measured time."""
    t = timing.timer()
    scratch = t.measure.scratch.ctx.recorder
    x = torch.randn(96, 80, device="neuron")
    x.sigmoid()
    ran = scratch.span_count
    x.sigmoid()
    assert scratch.span_count == ran  # measured once
    with torch.neuron.profiler.profile() as prof:
        x.sigmoid()
    (ev,) = [e for e in prof.events() if e.name == "aten::sigmoid"]
    m = t.measure.memo[ev.key]
    assert ev.measured_ps == m.duration_ps == ev.device_ps
    assert prof.details[ev.key] is m.detail is not None  # its instructions, simulated once more
    shown = scratch.span_count
    with torch.neuron.profiler.profile() as prof2:
        x.sigmoid()
    assert scratch.span_count == shown  # the instructions are kept with the measurement
    assert prof2.details[ev.key] is m.detail


def test_a_capture_takes_the_ops_and_launches_nothing():
    x = torch.randn(32, 32, device="neuron")
    t = timing.timer()
    taken = Log()
    stream = t.stream()
    before = dict(t.stats)
    with t.listeners.capture(taken):
        y = x.exp()
    assert [s[:2] for s in taken.seen] == [("op", "exp.default")]
    assert {k: v.count for k, v in t.stats.items()} == {k: v.count for k, v in before.items()}
    assert torch.equal(y.cpu(), x.cpu().exp())  # the values are computed all the same
    assert t.stream() is stream
