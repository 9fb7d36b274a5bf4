"""A whole model's forward pass: the Llama-70B prefill layer launched N times in a row.

    python benchmarks/bench_layers.py               # 80 layers (Llama-3-70B), timing mode
    python benchmarks/bench_layers.py --layers 3    # fewer
    python benchmarks/bench_layers.py --no-reuse    # every launch simulated (TRNSIM_REUSE=0)
    /usr/bin/time -f '%e s %M KB' python benchmarks/bench_layers.py

The trace is traces/llama70b_prefill_ops.yaml with a `streams:` entry launching its 12 kernels,
in order, `--layers` times on one stream of logical core 0 (the same weights each time: a
layer's timeline does not depend on which layer's weights it reads, only on where they are).
It runs as `trnsim run TRACE --mode timing --no-race-check --json` in this process (the race
check looks at each kernel once, however often it is launched: it is not what this measures).

The first layer is simulated; each later launch starts on an idle chip in a state already seen
and replays the first one's timeline (docs/runtime.md, "Timeline reuse"). Figures: wall time of
the run, this process's peak RSS, the simulated time and device time per layer, and how many
launches were replayed.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from trnsim.cli import main as cli_main  # noqa: E402

LAYER = ROOT / "traces" / "llama70b_prefill_ops.yaml"


def trace(layers: int) -> str:
    """The prefill layer's trace with its kernels launched `layers` times on one stream."""
    text = LAYER.read_text()
    if re.search(r"^streams:", text, re.M):
        raise SystemExit(f"{LAYER} has its own streams: expected none")
    names = re.findall(r"^  (\w+):\n    ops:", text, re.M)
    steps = ", ".join(f"launch: {k}" for k in names)
    do = ", ".join([steps] * layers)
    return text + f"streams:\n  - name: layers\n    core: 0\n    do: [{do}]\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=80)
    ap.add_argument("--no-reuse", action="store_true", help="simulate every launch")
    args = ap.parse_args()
    if args.no_reuse:
        os.environ["TRNSIM_REUSE"] = "0"
    gc.disable()  # as the `trnsim` program does (`trnsim.cli.app.entry`)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"llama70b_prefill_x{args.layers}.yaml"
        path.write_text(trace(args.layers))
        out = io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(out):
            cli_main(["run", str(path), "--mode", "timing", "--no-race-check", "--json"],
                     standalone_mode=False)  # fmt: skip
        wall = time.perf_counter() - t0
    s = json.loads(out.getvalue())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux
    launches = sum(r["launches"] for r in s.get("ops", []) if r["index"] == 0)
    print(f"layers            {args.layers} ({launches} kernel launches, reuse "
          f"{'off' if args.no_reuse else 'on'})")  # fmt: skip
    print(f"wall time         {wall:.1f} s")
    print(f"peak RSS          {rss / 1024:.0f} MB")
    print(f"simulated total   {s['total_time_ns'] / 1e6:.3f} ms "
          f"({s['total_time_ns'] / 1e6 / args.layers:.3f} ms per layer)")  # fmt: skip
    print(f"device time       {s['device_time_ns'] / 1e6:.3f} ms")
    print(f"FLOPs             {s['flops']:.4g} ({s['peak_fraction']:.1%} of peak)")


if __name__ == "__main__":
    main()
