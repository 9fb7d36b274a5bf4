"""An error inside the DMA model (a gather into HBM with an index out of range, found as the
transfer completes inside the model's rate update) surfaces once, at the next synchronize, and
leaves the DMA as a fresh device's: the next launch's values and times are a fresh device's,
nothing is counted in flight, and timeline reuse applies again."""

import numpy as np
import pytest

from tests.runtime.helpers import TRN2, copy_kernel, copy_times, views
from trnsim.api import Trace
from trnsim.errors import SimError
from trnsim.runtime import Device
from trnsim.runtime.reuse import ReuseState

SHAPE = (128, 256)


def gather_into_hbm():
    """out = table[idx], straight from HBM to HBM: no completion latency for a store on trn2,
    so the gather completes (and its indices are read) inside the DMA model's rate update."""
    t = Trace("gather")
    t.tensor("table", (10, 6), "float32")
    t.tensor("idx", (1, 4), "int32")
    t.tensor("out", (4, 6), "float32")
    k = t.kernel("gather_hbm")
    k.tile("i", "sbuf", (1, 4), "int32")
    k.dma_copy(src="idx", dst="i", queue=0, signal={"ld": 1})
    k.dma_copy(src="table", dst="out", indices="i", queue=1, wait={"ld": 1})
    return k.spec()


def gather(dev, rows):
    """Launch the gather of `rows` of a [10, 6] table (0..59); returns (table, out)."""
    tab, out = views(dev, (10, 6), (4, 6))
    (idx,) = views(dev, (1, 4), dt="int32")
    tab.array[...] = np.arange(60).reshape(10, 6)
    idx.array[...] = rows
    dev.launch(gather_into_hbm(), {"table": tab, "idx": idx, "out": out})
    return tab, out


def copy_works(dev):
    """`copy_times`: y = x launched, its values checked; (start, duration) in ps."""
    return copy_times(dev, SHAPE)


def test_the_gather_into_hbm_computes_the_rows_its_indices_name():
    dev = Device(TRN2)
    tab, out = gather(dev, [9, 0, 3, 3])
    dev.synchronize()
    np.testing.assert_array_equal(out.numpy(), tab.numpy()[[9, 0, 3, 3]])


def test_a_bad_gather_into_hbm_raises_once_and_the_next_dma_runs_as_on_a_fresh_device():
    dev = Device(TRN2)
    gather(dev, [0, 1, 10, 2])
    with pytest.raises(SimError, match=r"gather index 10 is out of range 0\.\.9"):
        dev.synchronize()
    dev.synchronize()  # once only
    assert dev.default_stream.query()
    dma = dev.ctx.chip.dma
    assert dma.in_flight == 0 and dma.idle()
    assert copy_works(dev) == copy_works(Device(TRN2))
    tab, out = gather(dev, [9, 0, 3, 3])  # the same gather with good indices
    dev.synchronize()
    np.testing.assert_array_equal(out.numpy(), tab.numpy()[[9, 0, 3, 3]])
    assert dma.in_flight == 0 and dma.idle()


def test_a_bad_gather_into_sbuf_leaves_nothing_in_flight_either():
    """Into SBUF the gather fails after its completion latency, out of the model's update."""
    t = Trace("gather")
    t.tensor("table", (10, 6), "float32")
    t.tensor("idx", (1, 4), "int32")
    k = t.kernel("gather_sbuf")
    k.tile("i", "sbuf", (1, 4), "int32")
    k.tile("rows", "sbuf", (4, 6), "float32")
    k.dma_copy(src="idx", dst="i", queue=0, signal={"ld": 1})
    k.dma_copy(src="table", dst="rows", indices="i", queue=1, wait={"ld": 1})
    dev = Device(TRN2)
    tab = views(dev, (10, 6))[0]
    (idx,) = views(dev, (1, 4), dt="int32")
    idx.array[...] = [0, 1, 10, 2]
    dev.launch(k.spec(), {"table": tab, "idx": idx})
    with pytest.raises(SimError, match="gather index 10"):
        dev.synchronize()
    assert dev.ctx.chip.dma.in_flight == 0 and dev.ctx.chip.dma.idle()
    assert copy_works(dev) == copy_works(Device(TRN2))


def test_timeline_reuse_applies_again_after_a_bad_gather():
    """Reuse needs an idle DMA: a timing-only launch after the error is recorded, the next one
    replayed, with the times a simulated one has."""
    dev = Device(TRN2)
    dev.ctx.reuse = ReuseState()
    gather(dev, [0, 1, 10, 2])
    with pytest.raises(SimError, match="gather index 10"):
        dev.synchronize()
    x, y = views(dev, SHAPE, SHAPE)
    k = copy_kernel()  # one kernel: reuse is keyed by it
    for _ in range(3):
        dev.launch(k, {"x": x, "y": y}, timing_only=True)
    dev.synchronize()
    assert (dev.ctx.reuse.recordings, dev.ctx.reuse.replays) == (1, 2)
    durations = {la.end_ps - la.start_ps for la in dev.recorder.launches[-3:]}
    assert len(durations) == 1
