"""The engines read their hardware limits and generation switches from the config: changing a
field (partition-start steps, bn_stats limit, ScalarE's switches) changes what they accept."""

import numpy as np
import pytest

from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.engines.scalar import ScalarEngine
from trnsim.engines.tensor import TensorEngine
from trnsim.engines.vector import VectorEngine
from trnsim.errors import SimError
from trnsim.isa import Activation, Ap, BnStats, TensorCopy, TensorScalar, Transpose
from trnsim.memory.buffer import Buffer, bind


def tile(name, shape, dt="float32", memory="sbuf", rows=None):
    """A Ref to a fresh zero buffer; `rows` = (p0, p1) views partitions p0:p1 only."""
    d = dtype(dt)
    buf = Buffer(name, memory, shape, d, np.zeros(shape, d.np))
    if rows is None:
        return bind(Ap(name), buf, "test")
    p0, p1 = rows
    return bind(Ap(name, ((p0, p1, None),), f"{name}[{p0}:{p1}]"), buf, "test")


def core(chip="trn2", *overrides):
    return load_chip(chip, list(overrides)).core


def accepts(engine, ins) -> bool:
    try:
        engine.check(ins)
    except SimError:
        return False
    return True


FINE = "core.partition_start_steps=[16, 32, 64, 128]"
COARSE = "core.partition_start_steps=[64, 128]"


def test_partition_start_steps_on_vector():
    at16 = TensorCopy(src=tile("s", (128, 8), rows=(16, 32)), dst=tile("d", (16, 8)))
    at32 = TensorCopy(src=tile("s", (128, 8), rows=(32, 64)), dst=tile("d", (32, 8)))
    assert not accepts(VectorEngine(core()), at16)
    assert accepts(VectorEngine(core("trn2", FINE)), at16)
    assert accepts(VectorEngine(core()), at32)
    with pytest.raises(
        SimError,
        match=r"'s\[32:64\]' spans 32 partitions starting at partition "
        r"32; it must start at 0, 64$",
    ):
        VectorEngine(core("trn2", COARSE)).check(at32)


def test_partition_start_steps_on_tensor():
    ins = Transpose(src=tile("s", (128, 8), rows=(16, 32)), dst=tile("d", (8, 16), memory="psum"))
    with pytest.raises(SimError, match="it must start at 0, 32, 64, 96$"):
        TensorEngine(core()).check(ins)
    TensorEngine(core("trn2", FINE)).check(ins)


def test_bn_stats_limit():
    ins = BnStats(src=tile("s", (128, 1024)), dst=tile("d", (128, 6)))
    with pytest.raises(SimError, match="more than bn_stats' limit of 512$"):
        VectorEngine(core()).check(ins)
    VectorEngine(core("trn2", "core.vector.bn_stats_max_free=1024")).check(ins)
    small = VectorEngine(core("trn2", "core.vector.bn_stats_max_free=256"))
    assert not accepts(small, BnStats(src=tile("s", (128, 512)), dst=tile("d", (128, 6))))


def test_tensor_scalar_any_ops():
    s, d = tile("s", (8, 8)), tile("d", (8, 8))
    ins = TensorScalar(src=s, dst=d, op0="subtract", operand0=1.0, op1="max", operand1=0.0)
    flag = "core.scalar.tensor_scalar_any_ops"
    assert not accepts(ScalarEngine(core("trn2")), ins)
    assert accepts(ScalarEngine(core("trn2", f"{flag}=true")), ins)
    assert accepts(ScalarEngine(core("trn3")), ins)
    assert not accepts(ScalarEngine(core("trn3", f"{flag}=false")), ins)


@pytest.mark.parametrize(
    "chip, flag, exact",
    [("trn1", None, False), ("trn1", True, True), ("trn2", None, True), ("trn2", False, False)],
)
def test_copy_bit_exact(chip, flag, exact):
    sets = [] if flag is None else [f"core.scalar.copy_bit_exact={str(flag).lower()}"]
    src, dst = tile("s", (1, 2), "int32"), tile("d", (1, 2), "int32")
    src.buf.array[...] = [[2**24 + 1, 7]]  # not an fp32 value: a round trip changes it
    ScalarEngine(core(chip, *sets)).execute(TensorCopy(src=src, dst=dst))
    assert (dst.read().tolist() == [[2**24 + 1, 7]]) == exact


def test_activation_switches():
    s, d, r = tile("s", (128, 16)), tile("d", (128, 16)), tile("r", (128, 1))
    reduce_max = Activation(func="exp", src=s, dst=d, reduce="max", reduce_dst=r)
    biased = Activation(func="reciprocal", src=s, dst=d, bias=1.0)
    for ins, flag in ((reduce_max, "reduce_max"), (biased, "reciprocal_bias")):
        assert not accepts(ScalarEngine(core("trn1")), ins)
        assert accepts(ScalarEngine(core("trn1", f"core.scalar.{flag}=true")), ins)
        assert accepts(ScalarEngine(core("trn2")), ins)
        with pytest.raises(SimError, match="NC-v3"):  # the message names the core's version
            ScalarEngine(core("trn2", f"core.scalar.{flag}=false")).check(ins)
