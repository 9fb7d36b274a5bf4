"""Functional mode: every collective's values against numpy (sums in fp32; bf16 outputs within
the rounding of one cast per hop)."""

import ml_dtypes
import numpy as np
import pytest

from tests.collectives.helpers import Efa, torus_world
from trnsim.collectives.schedule import chunk_units

N_ELEMS = 1000


def _inputs(n, count, dt, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(count).astype(np.float32).astype(dt) for _ in range(n)]


def _tol(dt):
    # bf16: a cast per hop, up to 31 of them, each within 2^-9 of a partial sum of magnitude ~6
    return dict(rtol=1e-5, atol=1e-5) if dt == np.float32 else dict(rtol=5e-2, atol=0.25)


CASES = [  # (dims, ranks a chip, algorithm, units, efa)
    ((4,), 1, "ring", 1, None),
    ((4, 4), 2, "ring", 1, None),
    ((4,), 2, "mesh", 1, None),
    ((4, 4), 2, "rdh", 1, None),
    ((4, 4), 4, "kangaring", 1, None),
    ((2,), 2, "hierarchical:ring+rdh", 2, Efa(25e9, 15e-6)),
]


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("dims, rpc, alg, units, efa", CASES)
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter"])
def test_reducing_ops(op, dims, rpc, alg, units, efa, dt):
    w = torus_world(
        dims, rings=2, ranks_per_chip=rpc, units=units, efa=efa, functional=True, slices=2
    )
    n = w.system.ranks
    name = "float32" if dt == np.float32 else "bfloat16"
    size = np.dtype(dt).itemsize
    parts = chunk_units(N_ELEMS, n)
    if op == "all_gather":
        xs = [x[: hi - lo] for x, ((lo, hi),) in zip(_inputs(n, N_ELEMS, dt), parts)]
        want = [np.concatenate(xs)] * n
    else:
        xs = _inputs(n, N_ELEMS, dt)
        total = np.sum([x.astype(np.float32) for x in xs], axis=0)
        want = [total] * n if op == "all_reduce" else [total[lo:hi] for ((lo, hi),) in parts]
    r = w.collective(op, range(n), N_ELEMS * size, name, algorithm=alg, inputs=xs)
    for got, ref in zip(r.outputs, want):
        np.testing.assert_allclose(got.astype(np.float32), np.asarray(ref, np.float32), **_tol(dt))


@pytest.mark.parametrize("reduce_op, ref", [("max", np.max), ("min", np.min), ("prod", np.prod)])
def test_other_reductions(reduce_op, ref):
    w = torus_world((4,), functional=True)
    xs = _inputs(4, N_ELEMS, np.float32)
    r = w.collective(
        "all_reduce", range(4), N_ELEMS * 4, reduce_op=reduce_op, inputs=xs, algorithm="ring"
    )
    for got in r.outputs:
        np.testing.assert_allclose(got, ref(xs, axis=0), rtol=1e-5)


def test_single_step_mesh():
    w = torus_world((4,), ranks_per_chip=2, functional=True)
    xs = _inputs(8, N_ELEMS, np.float32)
    r = w.collective("all_reduce", range(8), N_ELEMS * 4, inputs=xs, algorithm="mesh1")
    for got in r.outputs:
        np.testing.assert_allclose(got, np.sum(xs, axis=0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16], ids=["fp32", "bf16"])
def test_all_to_all_and_v(dt):
    name = "float32" if dt == np.float32 else "bfloat16"
    w = torus_world((2, 2), ranks_per_chip=2, functional=True)
    n, count = 8, 800
    xs = _inputs(n, count, dt)
    r = w.collective("all_to_all", range(n), count * np.dtype(dt).itemsize, name, inputs=xs)
    parts = chunk_units(count, n)
    for i, got in enumerate(r.outputs):
        want = np.concatenate([xs[j][parts[i][0][0] : parts[i][0][1]] for j in range(n)])
        np.testing.assert_array_equal(got, want)
    counts = [[(i + j) % 3 + 1 for j in range(n)] for i in range(n)]
    xs = [x[: sum(counts[i])] for i, x in enumerate(xs)]
    r = w.collective("all_to_allv", range(n), 0, name, inputs=xs, counts=counts)
    for j, got in enumerate(r.outputs):
        want = np.concatenate(
            [xs[i][sum(counts[i][:j]) : sum(counts[i][: j + 1])] for i in range(n)]
        )
        np.testing.assert_array_equal(got[: want.size], want)


def test_broadcast_send_recv_permute():
    w = torus_world((4,), ranks_per_chip=1, functional=True)
    xs = _inputs(4, 256, np.float32)
    r = w.collective("broadcast", range(4), 1024, inputs=xs, root=2)
    for got in r.outputs:
        np.testing.assert_array_equal(got, xs[2])
    r = w.collective("send_recv", (3, 1), 1024, inputs=[xs[3], xs[1]])
    np.testing.assert_array_equal(r.outputs[1], xs[3])
    pairs = ((0, 1), (1, 2), (2, 3), (3, 0))
    r = w.collective("permute", range(4), 1024, inputs=xs, pairs=pairs)
    for s, d in pairs:
        np.testing.assert_array_equal(r.outputs[d], xs[s])
