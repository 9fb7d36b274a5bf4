"""runtime.communicator and runtime.multichip: collectives between ranks of a system on the
device API. Values against numpy, times against the collectives engine run alone
(`World.collective`), CC streams beside compute, waits and events across chips, and the errors:
bad calls at the call, order mismatches and groups never completed at the next synchronize."""

import numpy as np
import pytest

from tests.runtime.helpers import memset_kernel, memset_ps
from trnsim.collectives import World
from trnsim.config import load_system
from trnsim.errors import DeadlockError, TrnsimError
from trnsim.runtime import Communicator, InvalidValueError

SYSTEM = load_system("trn2-48xl")  # 4 ranks a chip: ranks 0-3 on chip 0, 4-7 on chip 1
N = 4096  # elements a rank


def filled(comm, n=N, dt="float32", scale=1.0):
    """A view of `n` elements per rank, rank r holding r + 1 + i * scale at element i."""
    out = []
    for r in comm.ranks:
        v = comm.device(r).malloc(n * np.dtype(dt).itemsize).view(dt, (n,))
        v.array[...] = (r + 1 + np.arange(n) * scale).astype(dt)
        out.append(v)
    return out


def inputs(comm, n=N, scale=1.0):
    return [(r + 1 + np.arange(n) * scale).astype(np.float64) for r in comm.ranks]


def test_all_reduce_values_and_time_against_the_engine():
    comm = Communicator(SYSTEM, ranks=range(8))  # two chips, one link between them
    xs = filled(comm)
    works = [comm.all_reduce(r, x) for r, x in zip(comm.ranks, xs)]
    works[5].synchronize()
    want = np.sum(inputs(comm), axis=0)
    for x in xs:
        np.testing.assert_allclose(x.numpy(), want, rtol=1e-6)
    res = works[0].result
    alone = World.from_config(SYSTEM).collective("all_reduce", range(8), N * 4, "float32")
    assert (res.time_ps, res.algorithm) == (alone.time_ps, alone.algorithm)
    assert res.start_ps == 0 and all(w.result is res for w in works)


@pytest.mark.parametrize("in_place", [True, False], ids=["in_place", "out"])
def test_gather_scatter_values(in_place):
    comm = Communicator(SYSTEM, ranks=range(4))
    n = len(comm.ranks)
    if in_place:
        xs = filled(comm, N)
        gathered = [comm.all_gather(r, x) for r, x in zip(comm.ranks, xs)]
        gathered[0].synchronize()
        want = np.concatenate(
            [x[i * N // n : (i + 1) * N // n] for i, x in enumerate(inputs(comm))]
        )
        for x in xs:
            np.testing.assert_array_equal(x.numpy(), want)
        return
    parts = filled(comm, N // n)
    outs = [comm.device(r).malloc(N * 4).view("float32", (N,)) for r in comm.ranks]
    for r, p, o in zip(comm.ranks, parts, outs):
        comm.all_gather(r, p, o)
    wholes = filled(comm, N)
    scattered = [comm.device(r).malloc(N).view("float32", (N // n,)) for r in comm.ranks]
    works = [
        comm.reduce_scatter(r, w, s, op="max") for r, w, s in zip(comm.ranks, wholes, scattered)
    ]
    works[0].synchronize()
    np.testing.assert_array_equal(outs[2].numpy(), np.concatenate(inputs(comm, N // n)))
    top = np.max(inputs(comm), axis=0)
    for i, s in enumerate(scattered):
        np.testing.assert_array_equal(s.numpy(), top[i * N // n : (i + 1) * N // n])


def test_broadcast_and_all_to_all_values():
    comm = Communicator(SYSTEM, ranks=range(4))
    xs = filled(comm)
    for r, x in zip(comm.ranks, xs):
        comm.broadcast(r, x, root=2)
    ys = filled(comm, scale=2.0)
    outs = [comm.device(r).malloc(N * 4).view("float32", (N,)) for r in comm.ranks]
    works = [comm.all_to_all(r, y, o) for r, y, o in zip(comm.ranks, ys, outs)]
    works[3].synchronize()
    for x in xs:
        np.testing.assert_array_equal(x.numpy(), inputs(comm)[2])
    src = inputs(comm, scale=2.0)
    u = N // 4
    for j, o in enumerate(outs):
        np.testing.assert_array_equal(
            o.numpy(), np.concatenate([s[j * u : (j + 1) * u] for s in src])
        )


def test_a_cc_stream_holds_no_compute_queue():
    """A kernel on rank 0's default stream runs while its collective is in flight on the CC
    stream; a stream that waits for the collective's Work starts after it."""
    comm = Communicator(SYSTEM, ranks=range(4), mode="timing")
    works = [comm.collective(r, "all_reduce", nbytes=64 << 20) for r in comm.ranks]
    dev = comm.device(0)
    dev.launch(memset_kernel("beside"))
    after = dev.stream("after")
    works[0].wait(after)
    after.launch(memset_kernel("after"))
    comm.synchronize()
    res = works[0].result
    beside, later = dev.recorder.launches
    assert (beside.kernel, later.kernel) == ("beside", "after")
    assert beside.end_ps - beside.start_ps == memset_ps()
    assert res.start_ps < beside.start_ps < beside.end_ps < res.end_ps  # overlapped
    assert later.start_ps >= res.end_ps
    span = dev.recorder.collectives[0]
    assert (span.stream, span.rank, span.op, span.start_ps, span.end_ps) == (
        "cc", 0, "all_reduce", res.start_ps, res.end_ps)  # fmt: skip


def test_events_order_streams_across_chips():
    comm = Communicator(SYSTEM, ranks=range(8), mode="timing")
    a, b = comm.device(0), comm.device(5)  # chips 0 and 1
    a.launch(memset_kernel("first"))
    done = a.event(enable_timing=True)
    done.record()
    b.default_stream.wait_event(done)
    b.launch(memset_kernel("second"))
    comm.synchronize()
    first, second = a.recorder.launches[0], b.recorder.launches[0]
    assert a.recorder is not b.recorder and second.start_ps >= first.end_ps


def test_ranks_issuing_different_ops_is_an_error_naming_them():
    comm = Communicator(SYSTEM, ranks=range(4), mode="timing")
    works = [comm.collective(r, "all_reduce", nbytes=4096) for r in (0, 1, 2)]
    comm.collective(3, "all_gather", nbytes=4096)
    with pytest.raises(TrnsimError) as e:
        works[0].synchronize()
    assert "collective #0 on group (0, 1, 2, 3): rank 3 issued all_gather of 4096 bytes" in str(
        e.value
    )
    assert "but rank 0 issued all_reduce" in str(e.value)


def test_a_group_never_completed_is_a_deadlock_naming_the_ranks():
    comm = Communicator(SYSTEM, ranks=range(8), mode="timing")
    works = [comm.collective(r, "all_reduce", nbytes=4096) for r in range(7)]
    with pytest.raises(DeadlockError) as e:
        works[0].synchronize()
    msg = str(e.value)
    assert msg.startswith(
        "deadlock: nothing can run but work is pending: collective all_reduce #0 on group (0, 1, "
        "2, 3, 4, 5, 6, 7): ranks (7) never reached it; ranks (0, 1, 2, 3, 4, 5, 6) wait for "
        "them (streams cc, cc, cc, cc, cc, cc, cc)"
    )
    assert "stream cc waits for collective all_reduce #0 on group" in msg


def test_bad_calls_are_refused_at_the_call():
    comm = Communicator(SYSTEM, ranks=range(8))
    x = comm.device(0).malloc(N * 4).view("float32", (N,))
    bad = [
        (lambda: comm.all_reduce(8, x), "all_reduce: rank 8 is not in this communicator"),
        (lambda: comm.all_reduce(5, x), "belongs to another chip"),  # chip 0's memory
        (lambda: comm.all_gather(0, x, x), "all_gather on 8 ranks: out has 16384 bytes"),
        (lambda: comm.all_reduce(0, x.buffer.view("float32", (N // 2,), (2,))), "is strided"),
        (lambda: comm.collective(0, "all_reduce", nbytes=4097), "4097 bytes is not a whole"),
        (lambda: comm.collective(0, "allreduce", nbytes=4096), "unknown collective 'allreduce'"),
        (lambda: comm.broadcast(0, x, root=9), "root 9 is not in the group"),
        (lambda: Communicator(SYSTEM, ranks=[0, 64]), "expected distinct ranks of trn2-48xl"),
    ]
    for call, text in bad:
        with pytest.raises(InvalidValueError) as e:
            call()
        assert text in str(e.value)
