"""sweep.quick_exit: a LocalCluster worker's teardown freezes the collector's objects, so the
interpreter's exit does not collect the cycles the simulations left."""

import gc

import pytest

pytest.importorskip("distributed")

from trnsim.sweep.quick_exit import QuickExit  # noqa: E402


def test_teardown_freezes_what_the_collector_tracks():
    gc.unfreeze()
    try:
        QuickExit().teardown(worker=None)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
