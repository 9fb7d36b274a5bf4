"""A read after write on one engine waits for the pipeline to commit (`EngineModel.stall`), and
the PE array's warm-up (`Warmup`): values derived by hand from the configs."""

import math

import numpy as np
import pytest

from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.engines.base import reads_after_write
from trnsim.engines.scalar import ScalarEngine
from trnsim.engines.tensor import TensorEngine
from trnsim.engines.vector import VectorEngine
from trnsim.engines.warmup import Warmup
from trnsim.isa import Activation, Ap, Matmul, TensorScalar
from trnsim.memory.buffer import Buffer, bind

TRN1, TRN2 = load_chip("trn1"), load_chip("trn2")


def buffer(name, shape, memory="sbuf"):
    return Buffer(name, memory, shape, dtype("float32"), np.zeros(shape, np.float32))


def view(buf, *index):
    return bind(Ap(buf.name, tuple(index)), buf, "test")


def act(src, dst):
    return Activation(func="copy", src=src, dst=dst)


def test_a_read_of_what_the_previous_one_wrote_waits_the_commit_latency():
    a, b, c = buffer("a", (128, 4)), buffer("b", (128, 4)), buffer("c", (128, 4))
    e = ScalarEngine(TRN1.core)
    first = act(view(a), view(b))
    assert e.stall(act(view(b), view(c)), first) == TRN1.core.scalar.commit_latency_cycles == 200
    assert e.stall(act(view(a), view(c)), first) == 0  # reads a, which nobody wrote
    assert e.stall(act(view(b), view(c)), None) == 0  # first on its queue


def test_overlap_is_per_dimension():
    b = buffer("b", (128, 8))
    write = act(view(buffer("a", (128, 8))), view(b, (0, 64, None)))
    # partitions 64.. do not overlap 0..64; columns 0..4 of partitions 0..64 do
    assert not reads_after_write(act(view(b, (64, 128, None)), view(buffer("c", (64, 8)))), write)
    assert reads_after_write(
        act(view(b, (0, 64, None), (0, 4, None)), view(buffer("c", (64, 4)))), write
    )


def test_vector_commit_latency_and_none_on_tensor():
    a, b = buffer("a", (128, 4)), buffer("b", (128, 4))
    v = VectorEngine(TRN2.core)
    w = TensorScalar(src=view(a), dst=view(b), op0="add", operand0=1.0)
    r = TensorScalar(src=view(b), dst=view(a), op0="add", operand0=1.0)
    assert v.stall(r, w) == TRN2.core.vector.commit_latency_cycles == 144  # NKL: N + 144
    s, m = buffer("s", (128, 128)), buffer("m", (128, 512))
    p = buffer("p", (128, 512), "psum")
    mm = Matmul(stationary=view(s), moving=view(m), dst=view(p))
    assert TensorEngine(TRN2.core).stall(mm, mm) == 0


def test_warmup_from_cold_and_after_idle():
    """a = 0.5, T = 1000 ps: from cold x ps do 0.5 x + x^2 / 4000 of work; 1000 ps of busy time
    do 750 ps of work; idle for T cools the array back to cold."""
    w = Warmup(0.5, 1000)
    x = w.stretch(0, 100)  # 0.5 x + x^2 / 4000 = 100: x = 183.3
    assert x == math.ceil(-1000 + math.sqrt(1000**2 + 4000 * 100))
    w2 = Warmup(0.5, 1000)
    assert w2.stretch(0, 750) == 1000  # exactly the ramp
    assert w2.stretch(1000, 300) == 300  # warm: full speed
    assert w2.stretch(1300 + 1000, 100) == x  # idle T: cold again


def test_no_warmup_at_full_start_rate():
    w = Warmup(1.0, 3_000_000)
    assert w.stretch(0, 12345) == 12345


@pytest.mark.parametrize("chip", ["trn2", "trn3"])
def test_warm_up_is_on_by_default_where_published(chip):
    t = load_chip(chip).core.tensor
    assert t.warmup and t.warmup_start_rate == 0.5 and t.warmup_time == 3e-6
