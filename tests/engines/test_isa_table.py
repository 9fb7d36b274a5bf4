"""The ISA's engine table (`Instr.ENGINE` + `Instr.ENGINES`) and the engine models' `OPS` agree:
every instruction the ISA sends to an engine is implemented by that engine's model, and no model
runs an instruction the ISA does not send to it."""

import pytest

from trnsim.config import load_chip
from trnsim.engines.gpsimd import GpSimdEngine
from trnsim.engines.scalar import ScalarEngine
from trnsim.engines.tensor import TensorEngine
from trnsim.engines.vector import VectorEngine
from trnsim.errors import SimError
from trnsim.isa import INSTRUCTIONS, Engine

MODELS = (TensorEngine, VectorEngine, ScalarEngine, GpSimdEngine)


def isa_table() -> dict[Engine, set[str]]:
    """Engine -> the ops the ISA lets a trace put on it."""
    table: dict[Engine, set[str]] = {e: set() for e in Engine}
    for op, cls in INSTRUCTIONS.items():
        for engine in (cls.ENGINE, *cls.ENGINES):
            table[engine].add(op)
    return table


def test_one_model_per_compute_engine():
    assert sorted(m.engine for m in MODELS) == [e for e in Engine if e != Engine.DMA]


def test_dma_runs_only_dma_copy():
    # the DMA queues are served by trnsim.dma, not by an engine model
    assert isa_table()[Engine.DMA] == {"dma_copy"}
    assert all("dma_copy" not in m.OPS for m in MODELS)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.engine.label)
def test_model_ops_are_the_isa_ops(model):
    assert len(set(model.OPS)) == len(model.OPS), f"{model.__name__}.OPS lists an op twice"
    assert set(model.OPS) == isa_table()[model.engine]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.engine.label)
def test_model_implements_every_op(model):
    for op in model.OPS:
        for prefix in ("check", "cost", "exec"):
            name = f"{prefix}_{op}"
            assert callable(getattr(model, name, None)), f"{model.__name__} lacks {name}"


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.engine.label)
def test_model_rejects_the_other_ops(model):
    # even ops whose methods it inherits (AluEngine defines memset for Scalar too)
    engine = model(load_chip("trn2").core)
    for op, cls in INSTRUCTIONS.items():
        if op in model.OPS:
            continue
        for method in (engine.check, engine.execute, lambda ins: engine.cost(ins, None)):
            with pytest.raises(SimError, match=f"not supported on the {model.engine.label} "):
                method(cls(index=3))
