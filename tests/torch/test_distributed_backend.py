"""The process-group backend "neuron" with real rank processes (torch.multiprocessing, a
FileStore): values against gloo on the CPU, AVG and PREMUL_SUM by their definitions, the
object collectives, a collective some rank never reaches; times against the System model's
own (`World`) for the same collective, on the live lockstep path (docs/distributed.md)."""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("torch.distributed")
import dist_workers  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from trnsim.collectives import World  # noqa: E402
from trnsim.config import load_system  # noqa: E402

SIZE = 2


def _run(tmp_path, fn, size=SIZE):
    store = str(tmp_path / "store")
    out = str(tmp_path)
    ctx = mp.start_processes(fn, args=(size, store, out), nprocs=size, join=False,
                             start_method="spawn")  # fmt: skip
    while not ctx.join(timeout=300):  # guards against a hang only
        pass
    return [torch.load(os.path.join(out, f"rank{r}.pt"), weights_only=False)
            for r in range(size)]  # fmt: skip


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("dist"), dist_workers.collectives)


def test_the_default_group_is_neuron(ranks):
    assert {r["backend"] for r in ranks} == {"NeuronGroup"}


def test_values_equal_gloo_on_cpu(ranks):
    """(reduce: on the root; other ranks' tensors are left as given, as NCCL leaves them,
    where gloo leaves partial sums.)"""
    for r, seen in enumerate(ranks):
        for name, (mine, ref) in seen["values"].items():
            if name == "reduce" and r != 0:
                continue
            for m, x in zip(mine, ref):
                assert torch.equal(m, x), (r, name, m, x)


def test_avg_and_premul_sum_as_nccl_defines_them(ranks):
    for seen in ranks:
        for name in ("avg", "premul", "rs_avg"):
            got, want = seen[name]
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_object_collectives(ranks):
    for seen in ranks:
        assert seen["objects"] == [{"rank": r} for r in range(SIZE)]
        assert seen["broadcast_object"] == "from 0"


def test_a_collective_a_rank_never_reaches_fails_naming_it(ranks):
    msg = ranks[0]["missing"]
    assert "rank(s) [1] did not reach it" in msg and "allreduce" in msg, msg


def _world_ps(op, nbytes, delays=None):
    w = World.from_config(load_system(dist_workers.SYSTEM))
    r = w.collective(
        op,
        range(SIZE),
        nbytes,
        "float32",
        start_delays=None if delays is None else [d / 1e12 for d in delays],
    )
    return r


def test_a_synchronous_all_reduce_takes_the_systems_time(ranks):
    """Live lockstep: the event pair around a synchronous all_reduce of 4 MiB on ranks 0 and
    1 (one trn2 chip of a trn2.48xlarge) = World's time for it alone, start cost included."""
    want = _world_ps("all_reduce", 4 << 20).time_ps
    for seen in ranks:
        assert round(seen["sync_ms"] * 1e9) == want


def test_an_async_all_reduce_overlaps_a_matmul(ranks):
    """Between the larger of the two and their sum (the lockstep path models no DMA sharing
    between them: the larger, here)."""
    ar = _world_ps("all_reduce", 4 << 20).time_ps
    for seen in ranks:
        mm = round(seen["mm_ms"] * 1e9)
        both = round(seen["async_ms"] * 1e9)
        assert max(ar, mm) <= both <= ar + mm + 10**6, (ar, mm, both)


def test_a_straggler_delays_the_others_at_the_collective(ranks):
    """Rank 1 arrives late (three matmuls more); both ranks end together, at the World's end
    for those arrivals."""
    infos = [[i for op, _, i in seen["infos"] if op == "allreduce"][-1] for seen in ranks]
    arrivals = [i["arrival_ps"] for i in infos]
    assert arrivals[1] > arrivals[0]
    r = _world_ps("all_reduce", 4 << 20, [a - min(arrivals) for a in arrivals])
    end = min(arrivals) + r.rank_end_ps[0] - r.start_ps
    assert [i["end_ps"] for i in infos] == [end, end]
    assert ranks[0]["straggler_ms"] == pytest.approx(ranks[1]["straggler_ms"])
    assert ranks[0]["straggler_ms"] > ranks[0]["sync_ms"]


def test_an_async_all_reduce_beside_compute_takes_the_longer_of_the_two_exactly(ranks):
    """Derived by hand, to the picosecond (live lockstep, ranks 0 and 1 arriving together): an
    async all_reduce of 4 MiB, then a matmul on the same rank's compute stream, `work.wait()`,
    an event. The model's fixed cost of the collective is its host call (`lockstep.arrive`:
    an event's cost, `costs.event`) before the matmul's launch; the World's time includes the
    system's start cost. So, with T the World's time for the collective alone:
        the collective alone (sync, measured)   = T + costs.event
        the compute stream's end (before wait)  = compute alone + costs.event  (not delayed
                                                  by the collective: only by its host call)
        the whole (after wait)                  = max(compute alone + costs.event,
                                                      the collective alone)
    once with a 512x512 matmul (longer than the collective) and once with a 128x128 one
    (shorter): both sides of the max. Each compute is measured alone in the same process."""
    t = _world_ps("all_reduce", 4 << 20).time_ps
    for seen in ranks:
        p = seen["ps"]
        c = p["event_cost"]
        assert p["sync"] == t + c
        cases = [(p["mm"], p["async_compute"], p["async"]),
                 (p["small"], p["async_small_compute"], p["async_small"])]  # fmt: skip
        for compute, stream_end, both in cases:
            assert stream_end == compute + c
            assert both == max(compute + c, p["sync"])
        assert p["mm"] > p["sync"] > p["small"]  # one case on each side


def test_a_straggler_s_extra_compute_adds_to_everyone_s_collective_exactly(ranks):
    """Derived by hand, to the picosecond: both ranks record an event at the same moment
    (their clocks meet at every collective and they ran the same ops since), rank 1 then runs
    three matmuls (D: the same chain measured alone in this process) before a synchronous
    all_reduce of 4 MiB. Rank 1 arrives D after the start (the chain's device end: the host's
    launches and the collective's call come before it); a 2-rank World's all_reduce ends the
    time alone (T) after its last arrival. So each rank's event pair around it takes D + T: rank
    0 waits the whole of D at the collective."""
    t = _world_ps("all_reduce", 4 << 20).time_ps
    assert ranks[0]["ps"]["straggler_start"] == ranks[1]["ps"]["straggler_start"]
    for seen in ranks:
        p = seen["ps"]
        assert p["straggler"] == p["extra"] + t


def test_collectives_are_on_the_groups_cc_stream(ranks):
    streams = {name for seen in ranks for _, name, _ in seen["infos"]}
    assert streams == {"cc 0"}, streams
