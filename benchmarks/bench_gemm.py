"""A full 1024 x 1024 x 1024 bf16 GEMM on one NeuronCore: the workload SCALE-Sim needs 40-56 s
for on this machine (array only, no values). We simulate DMA, PSUM accumulation, evacuation and
stores, and check the values against numpy.

    python benchmarks/bench_gemm.py            # trn2; --chip trn3, --size 2048 ...

Prints wall-clock time per mode, the simulated time, and the TensorE roofline for comparison.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]  # measure this checkout, not an installed trnsim
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from trnsim.api import Trace  # noqa: E402
from trnsim.config import load_chip, peak_flops_per_core  # noqa: E402


def gemm(size: int, mode: str) -> Trace:
    """y[M, N] = x[M, K] @ w[K, N], with xT = x transposed in HBM ([K, M]).

    Every K-tile of xT and w is loaded once into SBUF (16 queues, round-robin); each 128 x 512
    output tile accumulates 8 matmuls over K in a PSUM bank, is copied to SBUF by VectorE and
    stored by DMA. Two PSUM banks alternate so evacuation overlaps the next tile's matmuls."""
    kt, mt, nt = size // 128, size // 128, size // 512
    t = Trace(f"gemm{size}", mode=mode)
    t.tensor("xT", [size, size], "bfloat16", init="normal")
    t.tensor("w", [size, size], "bfloat16", init="normal")
    t.tensor("y", [size, size], "bfloat16")
    k = t.kernel("gemm")
    for i in range(kt):
        k.tile(f"x{i}", "sbuf", [128, size], "bfloat16")
        k.tile(f"w{i}", "sbuf", [128, size], "bfloat16")
    for b in range(2):
        k.tile(f"acc{b}", "psum", [128, 512], "float32")
        k.tile(f"o{b}", "sbuf", [128, 512], "bfloat16")
    q = 0
    for i in range(kt):
        for name, src in ((f"x{i}", "xT"), (f"w{i}", "w")):
            k.dma_copy(
                src=f"{src}[{128 * i}:{128 * (i + 1)}, :]", dst=name, queue=q % 16, signal={"ld": 1}
            )
            q += 1
    tile = 0
    for m in range(mt):
        for n in range(nt):
            b, use = tile % 2, tile // 2
            for i in range(kt):
                extra = {}
                if i == 0:
                    extra["wait"] = {"ld": 2 * kt, **({f"ev{b}": use} if use else {})}
                if i == kt - 1:
                    extra["signal"] = {f"mm{b}": 1}
                k.matmul(
                    stationary=f"x{i}[:, {128 * m}:{128 * (m + 1)}]",
                    moving=f"w{i}[:, {512 * n}:{512 * (n + 1)}]",
                    dst=f"acc{b}",
                    accumulate=i > 0,
                    **extra,
                )
            k.tensor_copy(
                src=f"acc{b}",
                dst=f"o{b}",
                wait={f"mm{b}": use + 1, **({f"st{b}": use} if use else {})},
                signal={f"ev{b}": 1},
            )
            k.dma_copy(
                src=f"o{b}",
                dst=f"y[{128 * m}:{128 * (m + 1)}, {512 * n}:{512 * (n + 1)}]",
                queue=tile % 16,
                wait={f"ev{b}": use + 1},
                signal={f"st{b}": 1},
            )
            tile += 1
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=1024, help="M = K = N (a multiple of 512)")
    ap.add_argument("--chip", default="trn2")
    a = ap.parse_args()
    cfg = load_chip(a.chip)
    peak = peak_flops_per_core(cfg, "bfloat16")
    roofline_us = 2 * a.size**3 / peak * 1e6
    print(f"{a.size}^3 bf16 GEMM on one {cfg.name} core; TensorE roofline {roofline_us:.2f} us")
    for mode in ("timing", "functional"):
        t0 = time.perf_counter()
        trace = gemm(a.size, mode)
        r = trace.run(cfg)
        wall = time.perf_counter() - t0
        s = r.summary
        line = (
            f"{mode:<11} wall {wall:6.2f} s   simulated {s['device_time_ns'] / 1e3:8.2f} us   "
            f"{s['peak_fraction']:.1%} of peak   {r.device.recorder.span_count} spans"
        )
        if mode == "functional":
            x = r.tensor("xT").astype(np.float32).T
            w = r.tensor("w").astype(np.float32)
            ref = x @ w
            err = np.abs(r.tensor("y").astype(np.float32) - ref).max() / np.abs(ref).max()
            line += f"   max |y - x@w| / max |x@w| = {err:.2g} (bf16 output)"
        print(line)


if __name__ == "__main__":
    main()
