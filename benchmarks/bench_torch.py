"""The `neuron` device's host overhead: wall-clock time per small op against CPU eager, and one
small training step (an MLP with AdamW), on this machine.

    python benchmarks/bench_torch.py [--chip trn2] [--n 2000]

Everything is included: PyTorch's dispatch, the shim's kernel, the cached lowering and the
simulation of the launch (each op is simulated on the chip's clock, synchronized at the end).
Each figure is the best of 5 runs, in this process's CPU time (wall time on a loaded machine
counts other processes too; on an idle one the two agree).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import trnsim.torch


def best(run, reps: int = 5) -> float:
    """The least process CPU time of `reps` calls of `run`, in seconds."""
    out = []
    for _ in range(reps):
        t0 = time.process_time()
        run()
        out.append(time.process_time() - t0)
    return min(out)


def per_op(device: str, n: int) -> float:
    """µs per `y = x + x` on [16, 16] fp32 (simulation included, synchronized at the end)."""
    x = torch.randn(16, 16, device=device)
    for _ in range(50):  # warm: the lowering is cached, the allocator has blocks
        x + x
    _sync(device)

    def run():
        for _ in range(n):
            x + x
        _sync(device)

    return best(run) / n * 1e6


def make_step(device: str):
    """One training step of a small MLP (Linear, GELU, LayerNorm, Linear; AdamW), warmed up."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.LayerNorm(256), nn.Linear(256, 64))
    m = m.to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64, device=device), torch.randn(32, 64, device=device)

    def once():
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()

    for _ in range(3):
        once()
    _sync(device)
    return once


def step(device: str, n: int) -> float:
    """ms per training step."""
    once = make_step(device)

    def run():
        for _ in range(n):
            once()
        _sync(device)

    return best(run, 3) / n * 1e3


def _sync(device: str) -> None:
    if device == "neuron":
        torch.neuron.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chip", default="trn2")
    ap.add_argument("--n", type=int, default=2000, help="small ops timed")
    args = ap.parse_args()
    trnsim.torch.configure(args.chip)
    torch.set_num_threads(1)
    cpu, dev = per_op("cpu", args.n), per_op("neuron", args.n)
    print(f"small op (x + x, [16, 16] fp32): cpu {cpu:.1f} us, neuron {dev:.1f} us")
    steps = max(3, args.n // 200)
    cpu, dev = step("cpu", steps), step("neuron", steps)
    print(f"MLP training step (AdamW):      cpu {cpu:.2f} ms, neuron {dev:.2f} ms")
    once = make_step("neuron")
    t0 = torch.neuron.Event(enable_timing=True)
    t1 = torch.neuron.Event(enable_timing=True)
    t0.record()
    once()
    t1.record()
    t1.synchronize()
    print(f"simulated {args.chip} time of that step: {t0.elapsed_time(t1) * 1e3:.1f} us")


if __name__ == "__main__":
    main()
