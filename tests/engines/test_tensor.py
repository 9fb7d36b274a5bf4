"""TensorE: cost table by hand, values against numpy, and the hardware's rejections."""

import ml_dtypes
import numpy as np
import pytest

from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.engines.tensor import TensorEngine
from trnsim.errors import SimError
from trnsim.isa import Ap, Matmul, Transpose
from trnsim.memory.buffer import Buffer, bind

TRN1, TRN2, TRN3 = (load_chip(n) for n in ("trn1", "trn2", "trn3"))


def tile(name, memory, shape, dt, values=None, offset=0):
    d = dtype(dt)
    arr = np.zeros(shape, d.np) if values is None else np.asarray(values).astype(d.np)
    return bind(Ap(name), Buffer(name, memory, tuple(shape), d, arr, offset), "test")


def mm(st, mv, dst, **kw):
    return Matmul(stationary=st, moving=mv, dst=dst, **kw)


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- cost ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "m,n,dt,cycles",
    [
        (128, 512, "bfloat16", 512),  # max(min(64, 128), 512)
        (128, 32, "bfloat16", 64),  # max(min(64, 128), 32): stationary-bound
        (16, 32, "float16", 64),  # max(min(64, 16), 32) = 32, floored at MM_INIT_LATENCY 64
        (128, 512, "float32", 2048),  # fp32 at a quarter rate: 4 x 512
        (128, 512, "float8_e4m3", 512),  # plain fp8 (2-D operands): bf16 speed
    ],
)
def test_matmul_back_to_back_cycles(m, n, dt, cycles):
    e = TensorEngine(TRN2.core)
    ins = mm(
        tile("s", "sbuf", [128, m], dt),
        tile("m", "sbuf", [128, n], dt),
        tile("d", "psum", [m, n], "float32"),
    )
    assert e.cost(ins, prev=ins) == cycles


def test_matmul_cold_start_pays_load_stationary_not_init():
    # first instruction on the queue: + LoadStationary 32 = 512 + 32; MM_INIT_LATENCY is a
    # floor of the initiation interval, max(N, 64), not an addition (trainium.md 3.5)
    e = TensorEngine(TRN2.core)
    t = TRN2.core.tensor
    ins = mm(
        tile("s", "sbuf", [128, 128], "bfloat16"),
        tile("m", "sbuf", [128, 512], "bfloat16"),
        tile("d", "psum", [128, 512], "float32"),
    )
    assert e.cost(ins, prev=None) == 512 + t.load_stationary_cycles
    waiting = Matmul(stationary=ins.stationary, moving=ins.moving, dst=ins.dst, wait=(("a", 1),))
    # waits on a semaphore but reuses the previous stationary: nothing is exposed
    assert e.cost(waiting, prev=ins) == 512


def test_fp8_double_row_does_twice_the_flops_in_the_same_time():
    e = TensorEngine(TRN2.core)
    bf = mm(
        tile("s", "sbuf", [128, 128], "bfloat16"),
        tile("m", "sbuf", [128, 512], "bfloat16"),
        tile("d", "psum", [128, 512], "float32"),
    )
    f8 = mm(
        tile("s", "sbuf", [128, 2, 128], "float8_e4m3"),
        tile("m", "sbuf", [128, 2, 512], "float8_e4m3"),
        tile("d", "psum", [128, 512], "float32"),
    )
    e.check(f8)
    assert e.cost(f8, prev=f8) == e.cost(bf, prev=bf) == 512
    assert e.flops(bf) == 2 * 128 * 128 * 512
    assert e.flops(f8) == 2 * 256 * 128 * 512


def test_transpose_cycles():
    e = TensorEngine(TRN2.core)
    t = Transpose(
        src=tile("s", "sbuf", [128, 32], "bfloat16"), dst=tile("d", "psum", [32, 128], "bfloat16")
    )
    assert e.cost(t, prev=t) == max(128, min(64, 32))
    t32 = Transpose(
        src=tile("s", "sbuf", [64, 128], "float32"), dst=tile("d", "psum", [128, 64], "float32")
    )
    assert e.cost(t32, prev=t32) == max(64, min(64, 128)) / 0.5  # fp32 at half rate on NC-v3
    assert TensorEngine(TRN1.core).cost(t32, prev=t32) == 64 / 0.25


# -- values --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", ["bfloat16", "float16", "float32", "float8_e4m3", "float8_e5m2"])
def test_matmul_values_match_numpy(dt):
    a, b = rand((128, 64), 1), rand((128, 256), 2)
    s, m = tile("s", "sbuf", [128, 64], dt, a), tile("m", "sbuf", [128, 256], dt, b)
    d = tile("d", "psum", [64, 256], "float32")
    ins = mm(s, m, d)
    e = TensorEngine(TRN2.core)
    e.check(ins)
    e.execute(ins)
    ref = s.read().astype(np.float64).T @ m.read().astype(np.float64)
    np.testing.assert_allclose(d.read(), ref, rtol=1e-5, atol=1e-4)
    e.execute(Matmul(stationary=s, moving=m, dst=d, accumulate=True))
    np.testing.assert_allclose(d.read(), 2 * ref, rtol=1e-5, atol=2e-4)


@pytest.mark.parametrize("n", [1, 3, 64, 512])
def test_matmul_values_do_not_depend_on_the_moving_operands_width(n):
    """Each output column is the float64 sum of its products rounded once to fp32, whatever
    columns share the instruction: an fp32 BLAS product rounded by the host's SIMD kernel and
    the shapes, and a loss at another LNC (another split of the same columns) differed in its
    last bit (tests/kernels/test_ragged_rows.py, on an AVX-512 host)."""
    a, b = rand((128, 64), 5) * 100, rand((128, 512), 6)
    s = tile("s", "sbuf", [128, 64], "float32", a)
    e, whole = TensorEngine(TRN2.core), tile("d", "psum", [64, 512], "float32")
    e.execute(mm(s, tile("m", "sbuf", [128, 512], "float32", b), whole))
    ref = (a.astype(np.float64).T @ b.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(whole.read(), ref)
    for c in range(0, 512, n):  # the same columns n at a time
        w = min(n, 512 - c)
        part = tile("p", "psum", [64, w], "float32")
        e.execute(mm(s, tile("m", "sbuf", [128, w], "float32", b[:, c : c + w]), part))
        np.testing.assert_array_equal(part.read(), ref[:, c : c + w])


def test_double_row_values_contract_both_rows():
    a, b = rand((128, 2, 64), 3), rand((128, 2, 100), 4)
    s = tile("s", "sbuf", [128, 2, 64], "float8_e5m2", a)
    m = tile("m", "sbuf", [128, 2, 100], "float8_e5m2", b)
    d = tile("d", "psum", [64, 100], "float32")
    TensorEngine(TRN2.core).execute(mm(s, m, d))
    ref = np.einsum("kli,klj->ij", s.read().astype(np.float64), m.read().astype(np.float64))
    np.testing.assert_allclose(d.read(), ref, rtol=1e-5, atol=1e-4)


def test_bf16_psum_destination_on_trn3_rounds():
    a, b = rand((32, 16), 5), rand((32, 8), 6)
    s, m = tile("s", "sbuf", [32, 16], "bfloat16", a), tile("m", "sbuf", [32, 8], "bfloat16", b)
    d = tile("d", "psum", [16, 8], "bfloat16")
    e = TensorEngine(TRN3.core)
    e.check(mm(s, m, d))
    e.execute(mm(s, m, d))
    ref = (s.read().astype(np.float32).T @ m.read().astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(d.read(), ref)


def test_transpose_is_exact():
    a = rand((96, 40), 7)
    s, d = tile("s", "sbuf", [96, 40], "bfloat16", a), tile("d", "psum", [40, 96], "bfloat16")
    TensorEngine(TRN2.core).execute(Transpose(src=s, dst=d))
    np.testing.assert_array_equal(d.read(), s.read().T)


# -- rejections ----------------------------------------------------------------------------------


def bad(engine_cfg, ins, text):
    with pytest.raises(SimError, match=text):
        TensorEngine(engine_cfg).check(ins)


def test_rejections():
    s = tile("s", "sbuf", [128, 128], "bfloat16")
    m = tile("m", "sbuf", [128, 512], "bfloat16")
    d = tile("d", "psum", [128, 512], "float32")
    bad(
        TRN2.core,
        mm(
            s,
            tile("big", "sbuf", [128, 1024], "bfloat16"),
            tile("d2", "psum", [128, 1024], "float32"),
        ),
        "N=1024, more than",
    )
    bad(TRN2.core, mm(s, m, tile("d3", "sbuf", [128, 512], "float32")), r"dst 'd3' is in SBUF")
    bad(TRN2.core, mm(s, tile("m2", "sbuf", [64, 512], "bfloat16"), d), "K must match")
    bad(TRN2.core, mm(tile("s32", "sbuf", [128, 128], "float32"), m, d), "fp32 can only")
    bad(TRN2.core, mm(s, m, tile("db", "psum", [128, 512], "bfloat16")), "writes float32")
    bad(TRN2.core, mm(s, m, tile("dd", "psum", [128, 256], "float32")), "M x N = 128 x 512")
    # a [128, 512] fp32 output placed 1 KiB into PSUM straddles two 2 KiB banks
    bad(
        TRN2.core,
        mm(s, m, tile("off", "psum", [128, 512], "float32", offset=1024)),
        "crosses a bank boundary",
    )
    assert "instruction 0 (matmul)" in str(
        pytest.raises(
            SimError,
            TensorEngine(TRN2.core).check,
            mm(s, m, tile("x", "sbuf", [128, 512], "float32")),
        ).value
    )


def test_trn3_allows_wide_moving():
    s = tile("s", "sbuf", [128, 128], "bfloat16")
    m = tile("m", "sbuf", [128, 4096], "bfloat16")
    d = tile("d", "psum", [128, 4096], "float32")
    e = TensorEngine(TRN3.core)
    e.check(mm(s, m, d))
    assert e.cost(mm(s, m, d), prev=mm(s, m, d)) == 4096
