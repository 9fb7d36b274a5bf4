"""Trace loading time: YAML and JSON of the same written-out trace, and the bundled Llama trace.

    python benchmarks/bench_load.py                  # 32,768 steps: 98,304 instructions
    python benchmarks/bench_load.py --steps 65536    # more
    python benchmarks/bench_load.py --keep out/      # keep big.yaml and big.json in out/
    python benchmarks/bench_load.py --run            # also `trnsim run big.json` end to end

The generated trace is written out in full (no `repeat:` blocks): a weight-streaming loop on
one NeuronCore where step i loads a [128, 512] bf16 slice of `w` into one of four rotating SBUF
buffers (DMA queue i % 2), multiplies it into a PSUM bank (TensorE) and copies the buffer back
out to `y` (DMA queue 2): per step two DMA copies and one matmul, each with its own operands and
semaphore values (so 32,768 steps are 65,536 DMA copies and 32,768 matmuls, every instruction
mapping distinct). `big.json` is the same document as `big.yaml`.

Figures are the best of `--repeats` loads (`trnsim.trace.load`, in this process, the operand
cache emptied before each). With `--run`, `cli.py run big.json --mode timing --json` runs in a
fresh process, and its time is split into start-up (`import trnsim.cli`), load (both measured
in a fresh process too) and the rest: plan, simulate, report.

What each speed path of the loader saves (2-core machine shared with other work: process CPU
seconds, best of 3-8 interleaved loads, one path switched off at a time; "llama" is
traces/llama70b_layer_timing.yaml, 16,590 instructions after repeat expansion):

    path switched off                          llama     big.yaml    big.json
    none                                       0.23 s    3.8 s       0.89-1.0 s
    libyaml events (reference loader instead)  0.50 s    63-81 s     -
    plain-scalar cache of the event builder    0.29 s    4.8-6.1 s   -
    operand cache                              0.62 s    5.3 s       2.3 s
    build/copy instructions without __init__   0.35 s    4.3 s       1.4 s
    {expression} compiled once (repeat as:)    1.13 s    -           -
    GC paused while loading                    0.30 s    5.4 s       1.8 s
    json module for JSON (YAML reader instead) -         -           4.1 s

Removed, as they saved less than ~20% (measured before removal): the repeat expander's memo of
identical mappings (llama 0.25 s without vs 0.27 s with, big.yaml 3.1 vs 3.6 s, big.json 0.93
vs 0.93 s), the first-use take-over of parsed instructions in `_materialize` (0.26 vs 0.27,
3.5 vs 3.6, 1.05 vs 0.93 s), the digits-only shortcut of the event builder's scalars (0.25 vs
0.27, 3.4 vs 3.6, 1.04 vs 0.93 s), and a memo of valid semaphore names (0.25 vs 0.22 s, -, 0.92
vs 0.89 s). Before the instruction parsers were merged, the fast parser saved 22-51% on llama
and 42-61% on big.yaml against the full parser alone; the one parser keeps its valid path.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from trnsim.trace import load  # noqa: E402
from trnsim.trace.instructions import _AP_CACHE  # noqa: E402

NBUF = 4  # rotating weight buffers
KT, NT = 64, 16  # K-tiles of 128 rows and N-tiles of 512 columns in `w`


def document(steps: int) -> dict:
    """The trace as plain data (tensors, tiles, `steps` x 3 instructions)."""
    instructions = []
    for i in range(steps):
        b, k, n = i % NBUF, i % KT, (i // KT) % NT
        rows, cols = f"{k * 128}:{(k + 1) * 128}", f"{n * 512}:{(n + 1) * 512}"
        done = i // NBUF  # earlier steps that used buffer b: each signalled use<b> twice
        load_ = {
            "op": "dma_copy",
            "src": f"w[{rows}, {cols}]",
            "dst": f"wb{b}",
            "queue": b % 2,
            "signal": {f"ld{b}": 1},
        }
        if done:
            load_["wait"] = {f"use{b}": 2 * done}
        bank = i % 4
        instructions += [
            load_,
            {
                "op": "matmul",
                "stationary": f"x[:, {(k % 4) * 128}:{(k % 4 + 1) * 128}]",
                "moving": f"wb{b}",
                "dst": f"acc[:, {bank * 512}:{(bank + 1) * 512}]",
                "accumulate": k % 4 > 0,
                "wait": {f"ld{b}": done + 1},
                "signal": {f"use{b}": 1},
            },
            {
                "op": "dma_copy",
                "src": f"wb{b}",
                "dst": f"y[{rows}, {cols}]",
                "queue": 2,
                "wait": {f"ld{b}": done + 1},
                "signal": {f"use{b}": 1},
            },
        ]
    tiles = {
        "x": {"memory": "sbuf", "shape": [128, 512], "dtype": "bfloat16"},
        "acc": {"memory": "psum", "shape": [128, 2048], "dtype": "float32"},
    }
    for b in range(NBUF):
        tiles[f"wb{b}"] = {"memory": "sbuf", "shape": [128, 512], "dtype": "bfloat16"}
    shape = [KT * 128, NT * 512]
    return {
        "trnsim": 1,
        "name": "bench-load",
        "chip": "trn2",
        "mode": "timing",
        "tensors": {
            "w": {"shape": shape, "dtype": "bfloat16"},
            "y": {"shape": shape, "dtype": "bfloat16"},
        },
        "tiles": tiles,
        "instructions": instructions,
    }


def _flow(value) -> str:
    """`value` in YAML flow style (strings with brackets, colons or commas quoted)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and any(c in value for c in "[]{}:,#"):
        return json.dumps(value)
    return str(value)


def write_yaml(doc: dict, path: Path) -> None:
    """`doc` as YAML the way people write traces: block style on top, one flow mapping per
    instruction per line."""
    lines = [f"{k}: {_flow(doc[k])}" for k in ("trnsim", "name", "chip", "mode")]
    for section in ("tensors", "tiles"):
        lines.append(f"{section}:")
        lines += [f"  {name}: {_flow(v)}" for name, v in doc[section].items()]
    lines.append("instructions:")
    lines += [f"  - {_flow(ins)}" for ins in doc["instructions"]]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_json(doc: dict, path: Path) -> None:
    """`doc` as JSON, one instruction per line."""
    head = {k: v for k, v in doc.items() if k != "instructions"}
    text = json.dumps(head)[:-1] + ', "instructions": [\n'
    text += ",\n".join(json.dumps(ins) for ins in doc["instructions"]) + "\n]}\n"
    path.write_text(text, encoding="utf-8")


def best_load(path: Path, repeats: int) -> tuple[float, int]:
    """The best load time of `path` in seconds, and its instruction count."""
    best, count = float("inf"), 0
    for _ in range(repeats):
        _AP_CACHE.clear()  # each load starts as in a fresh process: no operand parsed yet
        t0 = time.perf_counter()
        program = load(path)
        best = min(best, time.perf_counter() - t0)
        count = sum(len(p.instructions) for k in program.kernels.values() for p in k.per_core)
    return best, count


def best_wall(args: list[str], repeats: int) -> float:
    """The best wall time of running `args` in a fresh process (output discarded)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - t0)
    return best


_PROBE = """\
import sys, time
t0 = time.perf_counter()
import trnsim.cli
from trnsim.trace import load
t1 = time.perf_counter()
load(sys.argv[1])
print(t1 - t0, time.perf_counter() - t1)
"""


def run_split(path: Path, repeats: int) -> None:
    """Print the end-to-end time of `cli.py run PATH --mode timing --json` (a fresh process)
    and its split: start-up (Python and `import trnsim.cli`) and load, both measured in a fresh
    process, and the rest (plan, simulate, report)."""
    startup = load_s = float("inf")
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", _PROBE, str(path)],
            check=True,
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.split()
        startup, load_s = min(startup, float(out[0])), min(load_s, float(out[1]))
    total = best_wall(
        [sys.executable, str(ROOT / "cli.py"), "run", str(path), "--mode", "timing", "--json"],
        repeats,
    )
    print(
        f"run  {path.name:16} {total:7.3f} s end to end (fresh process): start-up "
        f"{startup:.3f} s, load {load_s:.3f} s (fresh process), plan + simulate + report "
        f"{total - startup - load_s:.3f} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=32_768, help="steps of 3 instructions")
    ap.add_argument("--repeats", type=int, default=3, help="loads per file (the best counts)")
    ap.add_argument("--keep", metavar="DIR", help="write big.yaml and big.json into DIR")
    ap.add_argument("--run", action="store_true", help="also time `cli.py run big.json`")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(a.keep) if a.keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        doc = document(a.steps)
        write_yaml(doc, folder / "big.yaml")
        write_json(doc, folder / "big.json")
        rows = [
            ("llama (repeat:)", ROOT / "traces" / "llama70b_layer_timing.yaml"),
            ("big.yaml", folder / "big.yaml"),
            ("big.json", folder / "big.json"),
        ]
        times = {}
        for label, path in rows:
            t, count = best_load(path, a.repeats)
            times[label] = t
            size = path.stat().st_size / 2**20
            print(
                f"load {label:16} {t:7.3f} s  {count:>8,} instructions  {size:6.1f} MiB  "
                f"{count / t:>10,.0f} instructions/s"
            )
        if a.run:
            run_split(folder / "big.json", a.repeats)


if __name__ == "__main__":
    main()
