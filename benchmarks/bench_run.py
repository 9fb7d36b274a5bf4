"""`trnsim run` end to end on a generated trace of >= 100,000 instructions.

    python benchmarks/bench_run.py                 # 100,000 instructions, timing mode
    python benchmarks/bench_run.py --n 300000      # more
    python benchmarks/bench_run.py --keep out/     # keep the generated trace in out/

The trace is a weight-streaming GEMM on one NeuronCore: per step, four [128, 2048] bf16 weight
tiles are loaded by DMA into four rotating SBUF buffers (two queues), each feeds four matmuls
(one per PSUM bank, accumulating over the four K-tiles), then ScalarE copies the four banks to
SBUF and a DMA stores the result: 25 instructions per step, every dependency a semaphore
(buffer reuse included). The step is written once inside a `repeat:` block when the trace loader
supports it, otherwise written out step by step with the semaphore values it implies.

Figures: `load` is `trnsim.trace.load` alone (YAML parsing, validation, repeat expansion);
`run` is the whole `trnsim run TRACE --mode timing --json` in this process (load, bind, checks,
costs, simulation, summary, JSON), through `trnsim.cli.main`; instructions/s divides the
instruction count by `run`, and by `run - load` for the simulation alone.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from trnsim.cli import main as cli_main  # noqa: E402
from trnsim.errors import TrnsimError  # noqa: E402
from trnsim.trace import load, loads  # noqa: E402

NBUF, BANKS = 4, 4  # weight buffers (= K-tiles per step); PSUM banks (= N-tiles of 512)
PER_STEP = NBUF * (1 + BANKS) + BANKS + 1

HEADER = f"""\
trnsim: 1
name: bench-run
chip: trn2
mode: timing
tensors:
  w: {{shape: [{128 * NBUF}, {512 * BANKS}], dtype: bfloat16}}
  y: {{shape: [128, {512 * BANKS}], dtype: bfloat16}}
tiles:
  x:   {{memory: sbuf, shape: [128, {128 * NBUF}], dtype: bfloat16}}
  acc: {{memory: psum, shape: [128, {512 * BANKS}], dtype: float32}}
  o:   {{memory: sbuf, shape: [128, {512 * BANKS}], dtype: bfloat16}}
""" + "".join(
    f"  w{b}:  {{memory: sbuf, shape: [128, {512 * BANKS}], dtype: bfloat16}}\n"
    for b in range(NBUF)
)


def step(i: int | None) -> list[str]:
    """One step's instructions. `i` None: for a repeat body (iteration 0's values, waits of 0
    kept); else step i written out (values + i x the per-step increment, waits of 0 dropped)."""
    base = 0 if i is None else i  # every semaphore is signalled once per step

    def wait(**sems: int) -> str:
        sems = {k: v + base for k, v in sems.items() if i is None or v + base > 0}
        return f", wait: {{{', '.join(f'{k}: {v}' for k, v in sems.items())}}}" if sems else ""

    out = []
    for b in range(NBUF):
        k = f"{b * 128}:{(b + 1) * 128}"
        out.append(
            f'{{op: dma_copy, queue: {b % 2}, src: "w[{k}, :]", dst: w{b}'
            f"{wait(**{f'use{b}': 0})}, signal: {{ld{b}: 1}}}}"
        )
        for t in range(BANKS):
            n = f"{t * 512}:{(t + 1) * 512}"
            waits = {}
            if t == 0:
                waits[f"ld{b}"] = 1
                if b == 0:
                    waits["act"] = 0  # the previous step's copies have read acc
            sig = {f"use{b}": 1} if t == BANKS - 1 else {}
            if t == BANKS - 1 and b == NBUF - 1:
                sig["mm"] = 1
            sig_text = (
                ", signal: {" + ", ".join(f"{s}: {v}" for s, v in sig.items()) + "}" if sig else ""
            )
            out.append(
                f'{{op: matmul, stationary: "x[:, {k}]", moving: "w{b}[:, {n}]", '
                f'dst: "acc[:, {n}]", accumulate: {str(b > 0).lower()}'
                f"{wait(**waits)}{sig_text}}}"
            )
    for t in range(BANKS):
        n = f"{t * 512}:{(t + 1) * 512}"
        w = wait(mm=1, st=0) if t == 0 else ""
        sig = ", signal: {act: 1}" if t == BANKS - 1 else ""
        out.append(f'{{op: activation, func: copy, src: "acc[:, {n}]", dst: "o[:, {n}]"{w}{sig}}}')
    out.append(f"{{op: dma_copy, queue: 2, src: o, dst: y{wait(act=1)}, signal: {{st: 1}}}}")
    return out


def repeat_supported() -> bool:
    probe = """\
trnsim: 1
tiles: {a: {memory: sbuf, shape: [1, 1], dtype: float32}}
instructions:
  - repeat: 2
    instructions:
      - {op: memset, dst: a, value: 0, wait: {s: 0}, signal: {s: 1}}
"""
    try:
        loads(probe)
    except TrnsimError:
        return False
    return True


def write_trace(path: Path, n: int, use_repeat: bool) -> int:
    """Write a trace of at least `n` instructions; returns the instruction count."""
    steps = -(-n // PER_STEP)
    lines = [HEADER, "instructions:\n"]
    if use_repeat:
        lines.append(f"  - repeat: {steps}\n    instructions:\n")
        lines += [f"      - {ins}\n" for ins in step(None)]
    else:
        for i in range(steps):
            lines += [f"  - {ins}\n" for ins in step(i)]
    path.write_text("".join(lines), encoding="utf-8")
    return steps * PER_STEP


def bench(path: Path, count: int, mode: str) -> dict:
    t0 = time.perf_counter()
    program = load(path)
    t1 = time.perf_counter()
    loaded = sum(len(p.instructions) for k in program.kernels.values() for p in k.per_core)
    assert loaded == count, (loaded, count)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli_main(["run", str(path), "--mode", mode, "--json"], standalone_mode=False)
    t2 = time.perf_counter()
    summary = json.loads(out.getvalue())
    ran = sum(e["instructions"] for e in summary["engines"].values()) + sum(
        d["transfers"] for d in summary["dma"].values()
    )
    assert ran == count, (ran, count)
    return {"load_s": t1 - t0, "run_s": t2 - t1, "summary": summary}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="instructions (at least)")
    ap.add_argument("--mode", choices=("timing", "functional"), default="timing")
    ap.add_argument(
        "--no-repeat",
        action="store_true",
        help="write every step out even if the loader supports repeat:",
    )
    ap.add_argument("--keep", metavar="DIR", help="write the trace into DIR and keep it")
    a = ap.parse_args()
    use_repeat = not a.no_repeat and repeat_supported()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(a.keep) if a.keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "bench_run.yaml"
        count = write_trace(path, a.n, use_repeat)
        size = path.stat().st_size
        m = bench(path, count, a.mode)
    s = m["summary"]
    sim = m["run_s"] - m["load_s"]
    print(
        f"trace           {path if a.keep else 'bench_run.yaml (temporary)'}: {count:,} "
        f"instructions, {size / 1024:,.1f} KiB, "
        f"{'one repeat: block' if use_repeat else 'written out (no repeat: support)'}"
    )
    print(
        f"simulated       {s['total_time_ns'] / 1e3:,.1f} us on {s['chip']} ({s['mode']}), "
        f"{s['flops'] / 1e12:,.2f} TFLOP, {s['peak_fraction']:.1%} of peak"
    )
    print(f"load            {m['load_s']:8.2f} s   {count / m['load_s']:>12,.0f} instructions/s")
    print(f"run (end to end){m['run_s']:8.2f} s   {count / m['run_s']:>12,.0f} instructions/s")
    print(f"  without load  {sim:8.2f} s   {count / sim:>12,.0f} instructions/s")


if __name__ == "__main__":
    main()
