"""core_barrier on the compute engines that take it (`engines.base.BarrierOps`): checked
against the core's generation and its data's memory, no engine time, no values."""

import numpy as np
import pytest

from tests.engines.helpers import rejects
from tests.engines.test_gpsimd import tile
from trnsim.config import load_chip
from trnsim.engines.gpsimd import GpSimdEngine
from trnsim.engines.scalar import ScalarEngine
from trnsim.engines.vector import VectorEngine
from trnsim.isa import CoreBarrier, Engine

MODELS = (GpSimdEngine, VectorEngine, ScalarEngine)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.engine.label)
@pytest.mark.parametrize("chip", ["trn2", "trn3"])
def test_takes_no_engine_time_and_changes_nothing(model, chip):
    eng = model(load_chip(chip).core)
    data = tile("y", (128, 64), memory="hbm", values=np.ones((128, 64)))
    ins = CoreBarrier(index=4, engine=model.engine, data=data)
    eng.check(ins)
    assert eng.cost(ins, None) == 0 and eng.stall(ins, None) == 0 and eng.flops(ins) == 0
    eng.execute(ins)
    assert (data.buf.array == 1).all()


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.engine.label)
def test_nc_v2_has_no_core_barrier(model):
    eng = model(load_chip("trn1").core)
    ins = CoreBarrier(index=4, engine=model.engine, data=tile("y", (128, 64), memory="hbm"))
    rejects(eng, ins, "core_barrier is not supported on NC-v2", "NC-v3 or later")


def test_data_must_be_an_hbm_tensor():
    eng = GpSimdEngine(load_chip("trn2").core)
    ins = CoreBarrier(index=4, engine=Engine.GPSIMD, data=tile("t", (128, 64)))
    rejects(eng, ins, "data 't' is in SBUF, expected HBM")
