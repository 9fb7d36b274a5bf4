"""An unmodified DDP script under torchrun (2 rank processes) on neuron: `neuron` exists
through the `torch.backends` entry point (TRNSIM_TORCH_AUTOLOAD=1), the default backend is
trnsim's; the parameters equal the same script's on CPU with gloo, bit for bit, on both ranks,
and a single-process run on the whole batch within SGD's rounding (docs/distributed.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("ddp_mlp.py")


def _torchrun(tmp_path: Path, device: str, wrap: str = "ddp,fsdp2") -> list[dict]:
    """Each rank's {wrapper: what it saw}: DDP, then FSDP2, in one spawn."""
    out = tmp_path / device
    out.mkdir()
    # (the CPU run without neuron: FSDP2 would take the registered accelerator for its mesh)
    autoload = "1" if device == "neuron" else "0"
    env = {**os.environ, "DEVICE": device, "OUT": str(out), "TRNSIM_TORCH_AUTOLOAD": autoload,
           "WRAP": wrap,
           "TRNSIM_SYSTEM": "trn2-48xl", "OMP_NUM_THREADS": "1"}  # fmt: skip
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", str(SCRIPT)]  # fmt: skip
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    return {d: _torchrun(tmp, d) for d in ("cpu", "neuron")}


def test_ddp_on_neuron_equals_ddp_on_cpu_with_gloo(runs):
    for r in range(2):
        mine, ref = runs["neuron"][r]["ddp"], runs["cpu"][r]["ddp"]
        assert mine["losses"] == ref["losses"]
        for a, b in zip(mine["params"], ref["params"]):
            assert torch.equal(a, b)


def test_ranks_agree_bit_for_bit(runs):
    for a, b in zip(runs["neuron"][0]["ddp"]["params"], runs["neuron"][1]["ddp"]["params"]):
        assert torch.equal(a, b)


def _single_process() -> list:
    """The same MLP trained in one process on both ranks' batches (the mean over 16 samples is
    the average of the ranks' gradients): its parameters."""
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gens = [torch.Generator().manual_seed(1 + r) for r in range(2)]
    for _ in range(3):
        xs, ys = zip(*[(torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g))
                       for g in gens])  # fmt: skip
        loss = ((model(torch.cat(xs)) - torch.cat(ys)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach() for p in model.parameters()]


def test_ddp_matches_single_process_training(runs):
    for a, b in zip(runs["neuron"][0]["ddp"]["params"], _single_process()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7)


def test_steps_are_timed_and_equal_on_both_ranks(runs):
    t0, t1 = runs["neuron"][0]["ddp"]["times"], runs["neuron"][1]["ddp"]["times"]
    assert len(t0) == 3 and all(t > 0 for t in t0)
    assert t0 == t1


def test_fsdp2_on_neuron_equals_fsdp2_on_cpu_with_gloo(runs):
    """FSDP2 (fully_shard per Linear and on the model; AVG reduce-scatters): the same script's
    parameters as on CPU with gloo, bit for bit, and single-process training within 1e-7.
    (Its memory figures: test_distributed_parallel.)"""
    for r in range(2):
        mine, ref = runs["neuron"][r]["fsdp2"], runs["cpu"][r]["fsdp2"]
        assert mine["losses"] == ref["losses"]
        for a, b in zip(mine["params"], ref["params"]):
            assert torch.equal(a, b)
    for a, b in zip(runs["neuron"][0]["fsdp2"]["params"], _single_process()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7)
