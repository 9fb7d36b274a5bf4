"""FSDP2's memory and mixed precision, DTensor, tensor parallelism, torch.compile with DDP and
functional collectives, and a 2-D mesh on neuron, under torchrun: one spawn of 2 rank
processes runs the 1-D checks, one of 4 the 2-D mesh (tests/torch/dist_checks.py; its CPU
references run in the same processes over a gloo group). Live lockstep path
(docs/distributed.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("dist_checks.py")
CHECKS_2 = (
    "fsdp_memory",
    "mixed_precision",
    "dtensor",
    "tp",
    "compile_ddp",
    "compile_fsdp",
    "funcol",
    "fsdp_timing",
    "fsdp_offload",
)


def _torchrun(tmp: Path, nproc: int, checks) -> list[dict]:
    env = {**os.environ, "OUT": str(tmp), "CHECKS": ",".join(checks),
           "TRNSIM_SYSTEM": "trn2-48xl", "OMP_NUM_THREADS": "1"}  # fmt: skip
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           str(nproc), str(SCRIPT)]  # fmt: skip
    # the timeout guards against a hang only
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp)
    assert p.returncode == 0, p.stderr[-4000:]
    return [torch.load(tmp / f"rank{r}.pt", weights_only=False) for r in range(nproc)]


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    return _torchrun(tmp_path_factory.mktemp("two"), 2, CHECKS_2)


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    return _torchrun(tmp_path_factory.mktemp("four"), 4, ("mesh2d",))


# -- FSDP2 memory ---------------------------------------------------------------------------------

# a Linear(64, 64) unsharded: its 64 x 64 fp32 weight, 16 KiB, and its 64 fp32 biases, 256 bytes
# in a 512-byte block (the allocator's smallest)
LINEAR_BYTES = 64 * 64 * 4 + 512


def test_fsdp2_frees_each_linears_parameters_at_its_reshard(two):
    """reshard_after_forward=True: memory_allocated() drops by the Linear's unsharded bytes at
    its post-forward reshard; with False it does not move there."""
    for seen in two:
        on, off = seen["fsdp_memory"][True], seen["fsdp_memory"][False]
        for i in (0, 2):
            assert on[f"fwd{i}"] - on[f"resharded{i}"] == LINEAR_BYTES
            assert off[f"fwd{i}"] == off[f"resharded{i}"]


def test_fsdp2_memory_after_forward_is_lower_by_the_parameters(two):
    """After forward, both Linears' unsharded parameters (33,792 bytes) are freed: the same
    forward without resharding holds exactly that much more (activations are the same)."""
    for seen in two:
        on, off = seen["fsdp_memory"][True], seen["fsdp_memory"][False]
        grew = {raf: log["after_forward"] - log["start"] for raf, log in ((True, on), (False, off))}
        assert grew[False] - grew[True] == 2 * LINEAR_BYTES
        assert on["after_forward"] < on["fwd2"]


def test_fsdp2_regrows_parameters_before_backward_uses_them(two):
    """In backward, at each Linear's output gradient (after FSDP2's pre-backward all-gather),
    memory is what it is when nothing was freed: the parameters are back."""
    for seen in two:
        on, off = seen["fsdp_memory"][True], seen["fsdp_memory"][False]
        for key in ("bwd2", "bwd0", "after_backward"):
            assert on[key] - on["start"] == off[key] - off["start"], key
        assert on["bwd2"] - on["after_forward"] >= LINEAR_BYTES


def test_fsdp2_mixed_precision_equals_cpu_with_gloo(two):
    """MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), 2 SGD steps: losses,
    gradients (fp32, reduce-scattered in fp32) and parameters equal the CPU/gloo run's bit for
    bit; the sharded parameters stay fp32."""
    for seen in two:
        mine, ref = seen["mixed_precision"]["neuron"], seen["mixed_precision"]["cpu"]
        assert mine["losses"] == ref["losses"]
        assert mine["dtypes"] == ["torch.float32"] * 4
        for gm, gr in zip(mine["grads"], ref["grads"]):
            for a, b in zip(gm, gr):
                assert a.dtype == torch.float32 and torch.equal(a, b)
        for a, b in zip(mine["params"], ref["params"]):
            assert torch.equal(a, b)


def _mixed_precision_single_device() -> list:
    """The same 2 steps in one process doing FSDP2's casts: bf16 copies of the parameters for
    each rank's batch, their gradients to fp32, averaged over the ranks, SGD on fp32."""
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    params = list(model.parameters())
    for s in range(2):
        grads = []
        for r in range(2):
            low = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
            low.load_state_dict(model.state_dict())
            low = low.to(torch.bfloat16)
            x = torch.randn(8, 16, generator=torch.Generator().manual_seed(10 * s + r))
            low(x.to(torch.bfloat16)).float().pow(2).mean().backward()
            grads.append([p.grad.float() for p in low.parameters()])
        with torch.no_grad():
            for p, g0, g1 in zip(params, *grads):
                p -= 0.1 * (g0 + g1) / 2
    return [p.detach() for p in params]


def test_fsdp2_mixed_precision_matches_a_single_device_run(two):
    """At bf16's tolerance (gradients computed in bf16)."""
    for a, b in zip(two[0]["mixed_precision"]["neuron"]["params"],
                    _mixed_precision_single_device()):  # fmt: skip
        torch.testing.assert_close(a, b, rtol=1.6e-2, atol=1e-3)


# -- DTensor, tensor parallel ------------------------------------------------------------------


def test_dtensor_redistributions_equal_cpu_with_gloo_and_the_tensor(two):
    """distribute_tensor on init_device_mesh("neuron", (2,)), Shard(0) -> Replicate,
    Replicate -> Shard(1), Shard(0) -> Shard(1), Partial -> Replicate and -> Shard(0),
    full_tensor, a matmul of DTensors: each rank's local tensors equal the CPU/gloo mesh's bit
    for bit, and the values are the tensor's own (exact: nothing is summed but Partial's)."""
    for r, seen in enumerate(two):
        mine, ref, t = seen["dtensor"]["neuron"], seen["dtensor"]["cpu"], seen["dtensor"]["input"]
        assert mine.keys() == ref.keys()
        for k in mine:
            assert torch.equal(mine[k], ref[k]), (r, k)
        assert torch.equal(mine["shard0_local"], t.chunk(2, 0)[r])
        assert torch.equal(mine["shard_to_replicate"], t)
        assert torch.equal(mine["replicate_to_shard1"], t.chunk(2, 1)[r])
        assert torch.equal(mine["shard0_to_shard1"], t.chunk(2, 1)[r])
        assert torch.equal(mine["full_tensor"], t)
        partial = sum(torch.randn(4, 3, generator=torch.Generator().manual_seed(20 + q))
                      for q in range(2))  # fmt: skip
        assert torch.equal(mine["partial_to_replicate"], partial)
        assert torch.equal(mine["partial_to_shard0"], partial.chunk(2, 0)[r])


def _mlp():
    import torch.nn as nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))


def test_tensor_parallel_linear_pair_equals_cpu_with_gloo(two):
    """parallelize_module(ColwiseParallel on the first Linear, RowwiseParallel on the second)
    on init_device_mesh("neuron", (2,)): output and full gradients equal the CPU/gloo run's bit
    for bit; each rank holds half of each weight."""
    for seen in two:
        mine, ref = seen["tp"]["neuron"], seen["tp"]["cpu"]
        assert torch.equal(mine["y"], ref["y"])
        for a, b in zip(mine["grads"], ref["grads"]):
            assert torch.equal(a, b)
        assert mine["local_shapes"] == [(16, 16), (16,), (16, 16), (16,)]


def test_tensor_parallel_matches_a_single_device_run(two):
    """Within 1e-6 (the second Linear's sum is split over the ranks, then all-reduced)."""
    model = _mlp()
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(3))
    y = model(x)
    y.pow(2).sum().backward()
    mine = two[0]["tp"]["neuron"]
    torch.testing.assert_close(mine["y"], y.detach(), rtol=1e-6, atol=1e-6)
    for a, p in zip(mine["grads"], model.parameters()):
        torch.testing.assert_close(a, p.grad, rtol=1e-6, atol=1e-5)


# -- torch.compile --------------------------------------------------------------------------------


def test_compiled_ddp_equals_eager_ddp(two):
    """3 SGD steps: torch.compile(DDP(model), backend="neuron") and DDP(torch.compile(model,
    backend="neuron")) give eager DDP's losses and parameters bit for bit, with as many timed
    collectives (DDP's all-reduces stay in its reducer, outside the graph). The second compiles
    the model's graph; the first compiles none: in torch 2.13 Dynamo breaks the graph in DDP's
    forward and runs the model eagerly, on CPU with gloo too. The first with Dynamo's "eager"
    backend too (trnsim's Python is on Dynamo's skip list whatever the backend)."""
    for seen in two:
        c = seen["compile_ddp"]
        for how in ("outer_eager", "outer", "inner"):
            assert c[how]["losses"] == c["eager"]["losses"], how
            for a, b in zip(c[how]["params"], c["eager"]["params"]):
                assert torch.equal(a, b), how
            assert c[how]["collectives"] == c["eager"]["collectives"] > 3
        assert c["inner"]["graphs"] == 1 and c["outer"]["graphs"] == 0


def test_compiled_fsdp2_blocks_equal_eager_fsdp2(two):
    """3 SGD steps of FSDP2 over two Linears: each Linear compiled with backend "neuron" before
    fully_shard wraps it (torchtitan's order) gives eager FSDP2's losses and parameters bit for
    bit, one graph per Linear, with as many timed collectives (FSDP2's all-gathers and
    reduce-scatters run in its hooks, outside the graphs). torch.compile of the fully_shard
    root compiles no graph in torch 2.13 (FSDP2's hooks are `torch._dynamo.disable`d, so
    Dynamo breaks at the root's first hook and the Linears run eagerly) and gives the same."""
    for seen in two:
        c = seen["compile_fsdp"]
        for how in ("blocks", "root"):
            assert c[how]["losses"] == c["eager"]["losses"], how
            for a, b in zip(c[how]["params"], c["eager"]["params"]):
                assert torch.equal(a, b), how
            assert c[how]["collectives"] == c["eager"]["collectives"] > 3
        assert c["blocks"]["graphs"] == 2 and c["root"]["graphs"] == 0


def test_compiled_functional_collectives_equal_eager(two):
    """all_reduce, all_gather_tensor and reduce_scatter_tensor of
    torch.distributed._functional_collectives in one graph (fullgraph=True): equal to eager,
    each collective timed."""
    for seen in two:
        f = seen["funcol"]
        assert torch.equal(f["compiled"], f["eager"])
        assert f["eager_collectives"] == f["compiled_collectives"] == 3
        assert f["graphs"] == 1


# -- FSDP2's step timing ---------------------------------------------------------------------------


def _covered(lo: int, hi: int, windows) -> int:
    """ps of [lo, hi) inside the union of `windows` ((start, end, ...), one core: disjoint)."""
    return sum(max(0, min(hi, b) - max(lo, a)) for a, b, *_ in windows)


def test_fsdp2_streams_are_neuron_streams(two):
    """FSDP2 makes its streams with the device's handle (torch.neuron.Stream(priority=-1)), and
    its copy-in runs on its own one (the all-gather's copy into the flat buffer)."""
    for seen in two:
        t = seen["fsdp_timing"]
        assert {k: v[0] for k, v in t["streams"].items()} == dict.fromkeys(
            ("all_gather_copy_in_stream", "all_gather_stream", "reduce_scatter_stream"),
            "trnsim.torch.module.Stream",
        )
        copy_in = t["streams"]["all_gather_copy_in_stream"][1]
        assert sum(s == copy_in for _, _, s in t["launches"]) == 6  # one per all-gather


def test_fsdp2_overlaps_its_collectives_with_compute_as_derived(two):
    """Live lockstep path, ranks 0 and 1 of trn2-48xl (chip 0), FSDP2 on 3 blocks of
    Linear(512, 512) + ReLU, batch 1024, fp32: a step has 6 all-gathers of a block's 1 MiB
    weight (3 in forward, 3 in backward: reshard_after_forward) and 3 reduce-scatters of its
    1 MiB gradient, on the group's CC stream. The step is device-bound (no idle time), so by
    hand, with T_AG and T_RS the World's times for them and c the copy-in's launch (FSDP2's
    copy of the shard into the all-gather's buffer, on its copy-in stream):
        communication = 6 T_AG + 3 T_RS
        exposed       = (T_AG - c) + T_RS: the step's first all-gather, beside which only the
                        next block's copy-in runs (FSDP2's prefetch: the forward waits for the
                        first block's weights), and the last reduce-scatter, which the optimizer
                        waits for; every other all-gather runs under the previous block's
                        compute (forward prefetch, backward prefetch) and every other
                        reduce-scatter under the next block's backward
        step          = compute + exposed < compute + communication
    (2026-12-05: step 447.901 us = compute 427.747 + exposed 20.154; communication 105.186 us,
    85.032 us of it overlapped.)"""
    from trnsim.collectives import World
    from trnsim.config import load_system

    w = World.from_config(load_system("trn2-48xl"))
    nbytes = 512 * 512 * 4
    t_ag = w.collective("all_gather", range(2), nbytes, "float32").time_ps
    t_rs = w.collective("reduce_scatter", range(2), nbytes, "float32").time_ps
    for seen in two:
        t = seen["fsdp_timing"]
        (row,) = t["step"]
        assert row["start_ps"] == t["start_ps"] and row["time_ps"] == t["end_ps"] - t["start_ps"]
        colls = t["collectives"]
        ops = [(op, n) for _, _, op, n, _ in colls]
        assert sorted(ops) == [("all_gather", nbytes)] * 6 + [("reduce_scatter", nbytes)] * 3
        assert all(b - a == (t_ag if op == "all_gather" else t_rs) for a, b, op, _, _ in colls)
        copy_in = t["streams"]["all_gather_copy_in_stream"][1]
        (c,) = {b - a for a, b, s in t["launches"] if s == copy_in}
        assert row["idle_ps"] == 0 and row["collectives"] == 9
        assert row["communication_ps"] == 6 * t_ag + 3 * t_rs
        assert row["exposed_ps"] == (t_ag - c) + t_rs
        assert row["overlapped_ps"] == row["communication_ps"] - row["exposed_ps"] > 0
        assert row["time_ps"] == row["compute_ps"] + row["exposed_ps"]
        assert row["time_ps"] < row["compute_ps"] + row["communication_ps"]
        # which ones: the first all-gather and the last reduce-scatter are the exposed ones
        first, last = min(colls), max(colls)
        assert first[2] == "all_gather" and last[2] == "reduce_scatter"
        for a, b, *_ in colls:
            covered = _covered(a, b, t["launches"])
            want = c if (a, b) == first[:2] else 0 if (a, b) == last[:2] else b - a
            assert covered == want, (a, b, covered)


def test_fsdp2_cpu_offload_keeps_the_reduce_scatters_under_backward(two):
    """The same step with CPUOffloadPolicy: each all-gather first copies the block's shard to
    the device (on the copy-in stream), each reduced gradient shard goes back to the host
    non-blocking (on the reduce-scatter stream; the host does not wait for it, as CUDA's into
    pinned memory), so every reduce-scatter but the last still runs under backward compute
    whole, and the step pays the copies: longer than without offloading (2026-12-05: 519.910
    us against 447.901; 572.790 us while a copy to the host made the host wait)."""
    for seen in two:
        t, off = seen["fsdp_timing"], seen["fsdp_timing"]["offload"]
        rs = sorted(c for c in off["collectives"] if c[2] == "reduce_scatter")
        assert len(rs) == 3
        for a, b, *_ in rs[:-1]:
            assert _covered(a, b, off["launches"]) == b - a
        assert _covered(*rs[-1][:2], off["launches"]) == 0
        rs_stream = off["streams"]["reduce_scatter_stream"][1]
        back = [x for x in off["launches"] if x[2] == rs_stream]
        assert len(back) == 3 and all(any(a >= c[1] for c in rs) for a, _, _ in back)
        assert off["end_ps"] - off["start_ps"] > t["end_ps"] - t["start_ps"]


def test_fsdp2_cpu_offload_equals_cpu(two):
    """CPUOffloadPolicy (pinned memory): the sharded parameters live on the CPU, each
    all-gather copies them to the device first, the gradients come back, the optimizer steps on
    the CPU; losses and parameters equal the CPU/gloo run without offloading bit for bit, and
    the collectives (on the copied neuron tensors) are FSDP2's usual ones."""
    for seen in two:
        o = seen["fsdp_offload"]
        assert o["neuron"]["losses"] == o["cpu"]["losses"]
        for a, b in zip(o["neuron"]["params"], o["cpu"]["params"]):
            assert torch.equal(a, b)
        assert set(o["neuron"]["devices"]) == {"cpu"}
        assert o["neuron"]["collectives"].count("_allgather_base") >= 4
        assert o["neuron"]["collectives"].count("_reduce_scatter_base") == 4


# -- 2-D mesh --------------------------------------------------------------------------------------


def test_2d_mesh_runs_its_dims_on_two_cc_streams(four):
    """FSDP over "dp" x TP over "tp" on init_device_mesh("neuron", (2, 2)): each rank's TP
    collectives (all-gather, all-reduce) run on its TP group's CC stream and FSDP's (all-gather,
    reduce-scatter) on its DP group's: two streams, one per dim."""
    for rank, seen in enumerate(four):
        m = seen["mesh2d"]
        dp, tp = m["groups"]["dp"], m["groups"]["tp"]
        assert dp != tp
        by_group = {}
        for op, stream, group in m["streams"]:
            assert stream == f"cc {group}"
            by_group.setdefault(group, set()).add(op)
        assert set(by_group) == {dp, tp}
        assert {"_allgather_base", "_reduce_scatter_base"} <= by_group[dp]
        assert "allreduce" in by_group[tp]
        assert m["dp_rank"] == rank // 2


def test_2d_mesh_matches_a_single_device_run(four):
    """One SGD step of the mean over the two DP ranks' batches: ranks of a DP index report its
    batch's loss, every rank the same parameters, within 1e-6 of one device's."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xs = [torch.randn(8, 16, generator=torch.Generator().manual_seed(100 + d)) for d in range(2)]
    losses = [model(x).pow(2).mean() for x in xs]
    (sum(losses) / 2).backward()
    opt.step()
    for rank, seen in enumerate(four):
        m = seen["mesh2d"]
        assert m["loss"] == pytest.approx(losses[rank // 2].item(), rel=1e-6)
        for a, p in zip(m["params"], model.parameters()):
            torch.testing.assert_close(a, p.detach(), rtol=1e-6, atol=1e-6)


# -- the allocator -------------------------------------------------------------------------------


def test_a_storage_emptied_and_regrown_counts_as_freed_and_allocated():
    """The allocator's side of FSDP2's resize_(0) / resize_(n) (one process): the block's device
    memory is given back (allocated and reserved drop by its 512-byte block) and comes back;
    a storage that dies while emptied frees nothing twice."""
    import trnsim.torch  # noqa: F401
    from trnsim.torch import state

    x = torch.arange(100.0, device="neuron")  # 400 bytes: a 512-byte block
    a = state.get().allocator
    ptr = x.untyped_storage().data_ptr()
    used, held = torch.neuron.memory_allocated(), torch.neuron.memory_reserved()
    assert a.free_bytes(ptr) and not a.free_bytes(ptr)
    mem = torch.neuron.memory_allocated, torch.neuron.memory_reserved
    assert (mem[0](), mem[1]()) == (used - 512, held - 512)
    assert all(b["address"] != ptr for b in torch.neuron.memory_snapshot())
    assert a.regrow(ptr) and not a.regrow(ptr)
    assert (mem[0](), mem[1]()) == (used, held)
    x.fill_(2.0)
    assert x.sum().item() == 200.0
    a.free_bytes(ptr)
    del x
    assert torch.neuron.memory_allocated() == used - 512 and ptr not in a.blocks
