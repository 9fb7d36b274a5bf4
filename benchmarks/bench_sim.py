"""Simulated instructions per wall-clock second, timing-only and functional.

    python benchmarks/bench_sim.py            # default sizes
    python benchmarks/bench_sim.py --n 300000 # more instructions

Two kernels: `pipeline`, a software pipeline over three engines where every instruction crosses
a semaphore (per step a matmul on TensorE, an activation on ScalarE that waits for it, a
tensor_tensor on VectorE that waits for that, and that the next activation waits for before
overwriting its input), the worst case; and `chains`, accumulation chains
of 8 matmuls and a PSUM->SBUF copy, where most instructions wait on nothing. `build s` is the
Python API making the instructions; `run s` is everything `trnsim run` does after loading:
binding, checks, costs, simulation, summary.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # measure this checkout, not an installed trnsim
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from trnsim.api import Trace  # noqa: E402
from trnsim.config import load_chip  # noqa: E402


def pipeline(n_instr: int, free: int) -> Trace:
    t = Trace("bench")
    k = t.kernel("pipe")
    k.tile("x", "sbuf", [128, 128], "bfloat16", init="normal")
    k.tile("w", "sbuf", [128, free], "bfloat16", init="normal")
    k.tile("acc", "psum", [128, free], "float32")
    k.tile("h", "sbuf", [128, free], "bfloat16")
    k.tile("y", "sbuf", [128, free], "bfloat16")
    for i in range(n_instr // 3):
        k.matmul(
            stationary="x",
            moving="w",
            dst="acc",
            signal={"mm": 1},
            **({"wait": {"act": i}} if i else {}),
        )
        # the activation overwrites h: it waits for the previous step's add to have read it
        k.activation(
            func="gelu", src="acc", dst="h", wait={"mm": i + 1, "add": i}, signal={"act": 1}
        )
        k.tensor_tensor(
            alu="add", src0="h", src1="y", dst="y", wait={"act": i + 1}, signal={"add": 1}
        )
    return t


def back_to_back(n_instr: int, free: int) -> Trace:
    """Accumulation chains: 8 matmuls into one PSUM bank, then one copy out that waits for
    them — most instructions wait on nothing, as in a well-scheduled GEMM."""
    t = Trace("bench")
    k = t.kernel("chain")
    k.tile("x", "sbuf", [128, 128], "bfloat16", init="normal")
    k.tile("w", "sbuf", [128, free], "bfloat16", init="normal")
    k.tile("acc", "psum", [128, free], "float32")
    k.tile("y", "sbuf", [128, free], "bfloat16")
    for i in range(n_instr // 9):
        for j in range(8):
            k.matmul(
                stationary="x",
                moving="w",
                dst="acc",
                accumulate=j > 0,
                **({"signal": {"mm": 1}} if j == 7 else {}),
                **({"wait": {"cp": i}} if j == 0 and i else {}),
            )
        k.tensor_copy(src="acc", dst="y", wait={"mm": i + 1}, signal={"cp": 1})
    return t


WORKLOADS = {"pipeline": pipeline, "chains": back_to_back}


def measure(n: int, mode: str, free: int, workload: str) -> dict:
    cfg = load_chip("trn2")
    t0 = time.perf_counter()
    trace = WORKLOADS[workload](n, free)
    t1 = time.perf_counter()
    result = trace.run(cfg, mode=mode)
    t2 = time.perf_counter()
    count = result.device.recorder.span_count
    return {
        "mode": mode,
        "workload": workload,
        "instructions": count,
        "api_s": t1 - t0,
        "run_s": t2 - t1,
        "instr_per_s": count / (t2 - t1),
        "sim_time_us": result.summary["device_time_ns"] / 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=300_000, help="instructions, timing-only run")
    ap.add_argument("--n-functional", type=int, default=3_000, help="instructions, functional run")
    ap.add_argument("--free", type=int, default=512, help="free size of the tiles")
    a = ap.parse_args()
    print(
        f"{'workload':<10}{'mode':<11}{'instrs':>9}{'build s':>9}{'run s':>9}{'instr/s':>11}"
        f"{'sim us':>11}"
    )
    for workload in WORKLOADS:
        for n, mode in ((a.n, "timing"), (a.n_functional, "functional")):
            m = measure(n, mode, a.free, workload)
            print(
                f"{workload:<10}{m['mode']:<11}{m['instructions']:>9}{m['api_s']:>9.2f}"
                f"{m['run_s']:>9.2f}{m['instr_per_s']:>11,.0f}{m['sim_time_us']:>11.1f}"
            )
    print("instr/s counts the run (bind, check, cost, simulate, summarise); build is the API.")


if __name__ == "__main__":
    main()
