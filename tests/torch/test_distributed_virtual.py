"""A virtual world size (TRNSIM_VIRTUAL_WORLD_SIZE, configure(virtual_world_size=N)): one
process is rank 0 of N, the others replicas of it (docs/distributed.md, "Virtual world size").
Values against the replicas' definitions, times against the System model's own (`World`) for
the same collective over 64 ranks, DDP and FSDP2 of an MLP at 8 ranks against single-process
training, a recording replicated to 8 ranks and replayed, an FSDP2 step of 1 rank replayed, the
errors. One spawned process (dist_virtual_workers) does it all."""

from __future__ import annotations

import json
import os

import pytest
import torch

pytest.importorskip("torch.distributed")
import dist_virtual_workers as workers  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from trnsim.collectives import World  # noqa: E402
from trnsim.config import load_system  # noqa: E402


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    out = tmp_path_factory.mktemp("virtual")
    ctx = mp.start_processes(workers.main, args=(str(out),), nprocs=1, join=False,
                             start_method="spawn")  # fmt: skip
    while not ctx.join(timeout=300):  # guards against a hang only
        pass
    got = torch.load(out / "virtual.pt", weights_only=False)
    got["out"] = out
    return got


def test_init_process_group_gives_rank_0_of_n_in_one_process(seen):
    assert seen["world"] == (64, 0, "VirtualGroup")


def test_values_are_those_of_ranks_that_all_hold_this_ranks_data(seen):
    """At 8 ranks: all_reduce SUM 8 x, AVG / MAX / MIN x, PREMUL_SUM(f) 8 f x, AVG of integers
    x; an all_gather 8 copies; a reduce_scatter rank 0's chunk times 8 (AVG: the chunk); a
    broadcast from any root leaves x; all_to_all gives rank 0's chunk from every replica."""
    vals = seen["values"]
    for name, pair in vals.items():
        if name == "objects":
            continue
        got, want = pair
        assert torch.equal(got, want), (name, got, want)
    assert vals["objects"] == [{"rank": 0}] * 8


def _world(op: str, nbytes: int) -> int:
    w = World.from_config(load_system(workers.SYSTEM))
    return w.collective(op, range(64), nbytes, "float32").time_ps


def test_a_collective_takes_the_systems_time_for_64_ranks_arriving_together(seen):
    """The event pair around a synchronous collective = the World's time for it on the 64
    ranks of trn2-48xl (16 chips), every rank arriving at once, + the host's collective call
    (costs.event): all_reduce of B = 64 KiB, all_gather of B a rank (64 B out: the World's
    bytes are the output), reduce_scatter to B a rank (its input, 64 B, is the World's)."""
    t = seen["timing"]
    c = t["event_cost"]
    b = workers.BYTES
    assert t["all_reduce"] == _world("all_reduce", b) + c
    assert t["all_gather"] == _world("all_gather", 64 * b) + c
    assert t["reduce_scatter"] == _world("reduce_scatter", 64 * b) + c
    infos = t["infos"][:3]  # (the listener stays: later groups' collectives follow)
    ops = {i["world_op"]: i for op, stream, i in infos}
    assert {stream for _, stream, _ in infos} == {"cc 0"}
    assert ops["all_gather"]["nbytes"] == ops["reduce_scatter"]["nbytes"] == 64 * b
    assert all(i["ranks"] == tuple(range(64)) for i in ops.values())


def test_sub_groups_and_a_2d_mesh(seen):
    """init_device_mesh (16, 4): rank 0's dp group is every 4th rank, its tp group 0-3; an
    all_reduce SUM on each gives the group's size; new_group([0, 1, 2]) likewise."""
    m = seen["mesh"]
    want = {"dp": (list(range(0, 64, 4)), 16.0), "tp": (list(range(4)), 4.0),
            "new_group": ([0, 1, 2], 3.0)}  # fmt: skip
    for name, (ranks, value) in want.items():
        assert m[name][0] == ranks
        assert torch.equal(m[name][1], torch.full((4,), value))


def test_ddp_at_8_virtual_ranks_equals_plain_training(seen):
    """DDP averages 8 equal gradients (g / 8 each, summed: exactly g): bit for bit."""
    losses, plain = seen["ddp"]["losses"]
    assert losses == plain
    for p, q in seen["ddp"]["params"]:
        assert torch.equal(p, q)


def test_fsdp2_at_8_virtual_ranks_equals_training_on_rank_0s_shard_repeated(seen):
    """Rank 0's shards after 3 SGD steps equal the single-device run that, before each step,
    makes every parameter its first eighth (dim 0) repeated 8 times (what the replicas'
    all-gather gives), within float rounding (the unsharded gradient's reduce-scatter)."""
    losses, ref = seen["fsdp2"]["losses"]
    assert losses == pytest.approx(ref, rel=1e-6)
    for got, want in seen["fsdp2"]["shards"]:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


def test_a_virtual_recording_replicated_to_8_ranks_replays_the_live_step(seen, tmp_path):
    """The DDP step recorded at a virtual 8 ranks (one file, rank 0's, `world_size: 8`),
    written for ranks 0-7 by `trnsim ranks replicate`, replayed on trn2-48xl: every rank's step
    equals the live step to the picosecond (the 8 ranks are chips 0 and 1's logical cores; the
    replicas' programs are the same and arrive together, as the live path assumes)."""
    from click.testing import CliRunner

    from trnsim.cli import main

    rec = seen["record"]
    text = open(rec["file"]).read()
    assert "world_size: 8" in text and "rank: 0" in text
    r = CliRunner().invoke(main, ["ranks", "replicate", rec["file"], "--ranks", "0-7", "-o",
                                  str(tmp_path)])  # fmt: skip
    assert r.exit_code == 0, r.output
    files = sorted(str(p) for p in tmp_path.glob("*.yaml"))
    assert len(files) == 8
    r = CliRunner().invoke(main, ["run", "--system", workers.SYSTEM, *files, "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    steps = {round(v["ns"] * 1000) for v in res["timings"].values()}
    assert steps == {rec["step_ps"]}


def test_fsdp_x_tp_recorded_at_8_virtual_ranks_replays_on_each_ranks_mesh_groups(seen, tmp_path):
    """A (4, 2) mesh's recording (rank 0's: dp group [0, 2, 4, 6], tp [0, 1]) written for ranks
    0-7: rank 5's dp group is [1, 3, 5, 7], its tp group [4, 5]; the replay runs every group's
    collectives with the live sizes and times to the picosecond: the live path times rank 0's
    dp group [0, 2, 4, 6] together with its replicas' [1, 3, 5, 7] (both cross from chip 0 to
    chip 1 and share the link; alone it would be 8.5 ns shorter), as the replay runs them."""
    from click.testing import CliRunner

    from trnsim.cli import main

    rec = seen["tp"]
    groups = {ranks for _, ranks, _, _ in rec["collectives"]}
    assert groups == {(0, 2, 4, 6), (0, 1)}
    r = CliRunner().invoke(main, ["ranks", "replicate", rec["file"], "--ranks", "0-7", "-o",
                                  str(tmp_path)])  # fmt: skip
    assert r.exit_code == 0, r.output
    text = (tmp_path / "tp_rank5.yaml").read_text()
    assert "group: [1, 3, 5, 7]" in text and "group: [4, 5]" in text
    files = sorted(str(p) for p in tmp_path.glob("*.yaml"))
    r = CliRunner().invoke(main, ["run", "--system", workers.SYSTEM, *files, "--json"])
    assert r.exit_code == 0, r.output
    got = {(c["op"], c["ranks"], c["bytes"], round(c["time_ns"] * 1000))
           for c in json.loads(r.output)["collectives"]}  # fmt: skip
    live = {(op, len(ranks), b, t) for op, ranks, b, t in rec["collectives"]}
    assert got == live


def test_an_fsdp2_recording_of_1_rank_replays_the_live_step(seen):
    """FSDP2 of the MLP in a world of 1 rank, its third step recorded and replayed: the step
    equals the live step to the picosecond (258,519.090 ns on 2026-12-05). SGD's `_foreach_add_` reads the
    gradients, views of the reduce-scatters' outputs that do not overlap: the replay's lowering
    shares them between the LNC 2 pair by elements, as the live measurement does on tensors of
    their own (until `flat_split` told overlapping views from disjoint ones, it kept them on
    one core and the replay was 53.6 ns longer)."""
    from click.testing import CliRunner

    from trnsim.cli import main

    rec = seen["fsdp2_record"]
    text = open(rec["file"]).read()
    assert "world_size: 1" in text and "_foreach_add" in text
    r = CliRunner().invoke(main, ["run", "--system", workers.SYSTEM, rec["file"], "--json"])
    assert r.exit_code == 0, r.output
    steps = [round(v["ns"] * 1000) for v in json.loads(r.output)["timings"].values()]
    assert steps == [rec["step_ps"]]


def test_errors_name_the_variable(seen):
    e = seen["errors"]
    assert e["too_many"] == ("TRNSIM_VIRTUAL_WORLD_SIZE=65: the system trn2-48xl has 64 ranks; "
                             "choose a larger system (TRNSIM_SYSTEM) or fewer ranks")  # fmt: skip
    assert e["backend"].startswith("TRNSIM_VIRTUAL_WORLD_SIZE=64: init_process_group(backend="
                                   "'gloo')")  # fmt: skip
    assert e["world_size"].startswith("TRNSIM_VIRTUAL_WORLD_SIZE=64: init_process_group("
                                      "world_size=2) disagrees")  # fmt: skip
    assert "send/recv under TRNSIM_VIRTUAL_WORLD_SIZE" in e["send"]
    assert os.environ.get("TRNSIM_VIRTUAL_WORLD_SIZE") is None  # (the test process: untouched)
