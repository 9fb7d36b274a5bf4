"""An error raised inside the DMA model (a gather's index out of range, a completion callback
that fails) leaves the model as consistent as after any update: nothing in flight, no flow,
group or timer left, and the next transfer timed as on a fresh system."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from tests.dma.test_gather import FP32, I32, gather
from tests.dma.test_system import copy, make, submit, tensor, tile
from trnsim.dma.fluid import Flow, FluidModel
from trnsim.errors import SimError


def assert_empty(dma):
    """The DMA system and its fluid model hold nothing: as before any transfer."""
    fm = dma.fluid
    assert dma.in_flight == 0 and dma.idle()
    assert fm.count == 0 and not fm._new and not fm._groups and not fm._users
    assert not fm.load and fm._armed == -1 and not fm._updating and not fm._held
    assert dma.sampled[0] == (0.0,) * len(dma.sampled[0])  # every stack's rate back to 0
    assert not any(lane.busy or lane.waiting for lane in dma._lanes.values())


def bad_gather(s, dst_memory):
    """Submit a gather of rows 0, 1, 10, 2 of a 10-row table (10 is out of range) into HBM or
    SBUF; return its table."""
    w = tensor(s, "w", [10, 6], FP32, values=np.arange(60).reshape(10, 6))
    out = tensor(s, "out", [4, 6], FP32, memory=dst_memory)
    idx = tile(s, "i", [1, 4], I32)
    idx.array[:] = [0, 1, 10, 2]
    submit(s, gather(w, out, idx, queue=1))
    return w


def copy_span(s):
    """Copy a [128, 256] fp32 tensor into SBUF on queue 0 now; run; its (start - submit,
    duration) and the values it moved are checked."""
    x = tensor(s, "x", [128, 256], FP32, values=np.ones((128, 256)))
    t = tile(s, "t", [128, 256], FP32)
    at = s.env.now
    submit(s, copy(x, t, queue=0, index=7))
    s.env.run()
    np.testing.assert_array_equal(t.array, 1.0)
    span = s.rec.spans[-1]
    assert span.index == 7
    return span.start_ps - at, span.end_ps - span.start_ps


@pytest.mark.parametrize("into", ["hbm", "sbuf"])
def test_a_bad_gather_leaves_the_model_empty_and_usable(into):
    """Into HBM the completion comes out of the fluid update (no completion latency on trn2);
    into SBUF out of its own timeout: either way the error is raised once and the model is
    left as a fresh one."""
    s = make(functional=True)
    if into == "hbm":
        assert s.cfg.core.dma.store_completion_latency == 0  # the case inside the update
    bad_gather(s, into)
    with pytest.raises(SimError, match=r"gather index 10 is out of range 0\.\.9"):
        s.env.run()
    s.env.run()  # raised once: nothing else left to run
    assert s.ends == []  # the failed transfer tells nobody it is done
    assert_empty(s.dma)
    assert copy_span(s) == copy_span(make(functional=True))


def test_a_bad_gather_does_not_stop_a_transfer_ending_with_it():
    """Two gathers into HBM end at the same ps, the bad one first: the good one still completes
    and copies its values."""
    s = make(functional=True)
    w = bad_gather(s, "hbm")
    good = tensor(s, "good", [4, 6], FP32)
    idx = tile(s, "j", [1, 4], I32)
    idx.array[:] = [9, 0, 3, 3]
    submit(s, gather(w, good, idx, queue=2))
    with pytest.raises(SimError, match="gather index 10"):
        s.env.run()
    failed_at = s.env.now
    s.env.run()
    assert s.ends == [(0, 2, 0, failed_at)]  # the good one, at the same ps
    np.testing.assert_array_equal(good.array, np.arange(60).reshape(10, 6)[[9, 0, 3, 3]])
    assert_empty(s.dma)


# -- the fluid model on its own ------------------------------------------------------------------


def fails(f):
    raise ValueError(f"flow {f.key} failed")


def test_a_failing_completion_is_raised_after_the_update():
    """Flows a (fails) and b end at 200 ps, sharing one resource; c starts at 200 ps, before
    the model's timer fires, so its start() runs the update that completes a and b: the start
    returns, b's callback runs, the error comes out of env.run at 200 ps, and c then runs alone
    as on a fresh model."""
    env = simpy.Environment()
    fm = FluidModel(env)
    r = fm.add_resource(1.0)
    ends, started = {}, []

    def done(f):
        ends[f.key[0]] = env.now

    def start_c(_ev):
        fm.start(Flow(("c",), 50.0, ((r, 1.0),), math.inf, done))
        started.append(env.now)

    env.timeout(200).callbacks.append(start_c)  # scheduled before the model's timer
    fm.start(Flow(("a",), 100.0, ((r, 1.0),), math.inf, fails))
    fm.start(Flow(("b",), 100.0, ((r, 1.0),), math.inf, done))
    with pytest.raises(ValueError, match=r"flow \('a',\) failed"):
        env.run()
    assert env.now == 200 and started == [200] and ends == {"b": 200}
    env.run()
    assert ends == {"b": 200, "c": 250}  # c alone at rate 1
    assert fm.idle() and fm.count == 0 and not fm._groups and not fm._users


def test_of_two_failing_completions_the_first_is_raised_and_names_the_second():
    env = simpy.Environment()
    fm = FluidModel(env)
    r = fm.add_resource(1.0)
    fm.hold()
    for k in ("a", "b"):
        fm.start(Flow((k,), 10.0, ((r, 1.0),), math.inf, fails))
    fm.release()
    with pytest.raises(ValueError, match=r"flow \('a',\) failed") as e:
        env.run()
    if hasattr(e.value, "add_note"):  # Python 3.11+
        assert "flow ('b',) failed" in "".join(e.value.__notes__)
    env.run()
    assert fm.idle() and not fm._groups
