"""examples/ddp.py as a user runs it: `torchrun --standalone --nproc-per-node 2` with
TRNSIM_TORCH_AUTOLOAD=1 and TRNSIM_SYSTEM (the script never imports trnsim), small sizes by
its flags: it exits 0 and rank 0 prints finite figures per step (docs/distributed.md,
"Examples")."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "ddp.py"
NUM = r"([0-9][0-9,.]*)"


def test_examples_ddp_runs_under_torchrun_and_prints_finite_figures(tmp_path):
    env = {**os.environ, "TRNSIM_TORCH_AUTOLOAD": "1", "TRNSIM_SYSTEM": "trn2-48xl",
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", str(SCRIPT), "--steps", "2", "--batch", "2", "--context", "16", "--width", "64",
           "--layers", "1", "--base-ms", "1"]  # fmt: skip
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    steps = re.findall(rf"DDP step (\d): loss {NUM}, {NUM} ms simulated, {NUM} tokens/s "
                       rf"\(2 ranks\), MFU {NUM}%, scaling efficiency {NUM}%", p.stdout)  # fmt: skip
    assert [s[0] for s in steps] == ["0", "1"], p.stdout
    for s in steps:
        vals = [float(v.replace(",", "")) for v in s[1:]]
        assert all(math.isfinite(v) and v > 0 for v in vals), s
    assert "DDP: " in p.stdout and "2 ranks on trn2-48xl" in p.stdout
    table = p.stdout.split("collectives\n", 1)[1].strip().splitlines()
    assert len(table) == 2
    for line in table:
        _, time, compute, comm, exposed, overlapped, idle, n = (float(v) for v in line.split())
        assert all(math.isfinite(v) for v in (time, compute, comm, exposed, overlapped, idle))
        assert time > 0 and compute > 0 and comm > 0 and n >= 1
        assert abs(exposed + overlapped - comm) < 0.15  # (printed to 0.1 us)
        assert abs(compute + exposed + idle - time) < 0.2


def test_examples_fsdp2_runs_at_a_virtual_16_chips_from_one_process(tmp_path):
    """`TRNSIM_VIRTUAL_WORLD_SIZE=16` with one rank per chip (TRNSIM_SYSTEM_SET): plain
    `python examples/fsdp2.py`, no torchrun; rank 0 of 16 prints its figures over 16 ranks."""
    env = {**os.environ, "TRNSIM_TORCH_AUTOLOAD": "1", "TRNSIM_SYSTEM": "trn2-48xl",
           "TRNSIM_SYSTEM_SET": "ranks_per_chip=1", "TRNSIM_VIRTUAL_WORLD_SIZE": "16",
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR"):
        env.pop(k, None)
    cmd = [sys.executable, str(SCRIPT.with_name("fsdp2.py")), "--steps", "2", "--batch", "2",
           "--context", "16", "--width", "64", "--layers", "1"]  # fmt: skip
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    steps = re.findall(rf"FSDP2 step (\d): loss {NUM}, {NUM} ms simulated, {NUM} tokens/s "
                       rf"\(16 ranks\)", p.stdout)  # fmt: skip
    assert [s[0] for s in steps] == ["0", "1"], p.stdout
    assert "16 ranks on trn2-48xl" in p.stdout
    table = p.stdout.split("collectives\n", 1)[1].strip().splitlines()
    assert len(table) == 2 and all(int(line.split()[-1]) >= 1 for line in table)


def test_examples_scaling_prints_a_row_per_size_with_its_efficiency(tmp_path):
    """examples/scaling.py runs examples/ddp.py once per chip count as a virtual world of the
    system's ranks a chip (one rank per chip here, `--ranks-per-chip 1`): a row per size, the
    tokens/s those ranks' tokens over the step, the efficiency the first size's step over
    this one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRNSIM_")}
    cmd = [sys.executable, str(SCRIPT.with_name("scaling.py")), "--chips", "1,2", "--examples",
           "ddp", "--ranks-per-chip", "1", "--", "--steps", "2", "--batch", "2", "--context",
           "16", "--width", "64", "--layers", "1"]  # fmt: skip
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = re.findall(rf"\| ddp \| (\d+) \| (\d+) \| {NUM} ms \| {NUM} \| {NUM}% \| {NUM}% \|",
                      p.stdout)  # fmt: skip
    assert [(r[0], r[1]) for r in rows] == [("1", "1"), ("2", "2")], p.stdout
    base = float(rows[0][2])
    for _, ranks, ms, tps, _, eff in rows:
        ms, tps = float(ms), float(tps.replace(",", ""))
        assert tps == pytest.approx(int(ranks) * 2 * 16 / ms * 1e3, rel=1e-3)
        assert float(eff) == pytest.approx(100 * base / ms, abs=0.06)


def test_examples_scaling_rejects_bad_chip_counts(tmp_path):
    cmd = [sys.executable, str(SCRIPT.with_name("scaling.py")), "--chips", "1,two"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode != 0
    assert p.stderr.strip() == "examples/scaling.py: --chips '1,two': expected numbers, e.g. 1,2,4"
