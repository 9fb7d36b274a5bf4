"""The device runtime's own overhead per call, in wall-clock microseconds of this machine.

    python benchmarks/bench_runtime.py              # 20,000 calls of each kind, best of 3
    python benchmarks/bench_runtime.py --n 100000   # more

Each figure is the best of `--repeat` rounds of `--n` calls on a fresh timing-only trn2 device:
- malloc + free: a 4 KiB buffer allocated and freed again (the allocator and the statistics);
- launch: enqueueing a one-instruction kernel (checks, binding, the host clock, the stream),
  then the simulation of all of them by one synchronize, per launch;
- event record: enqueueing a record, then the simulation of all of them, per record;
- query: Event.query on an event not yet complete (runs the device to the host's present).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trnsim.api import Trace  # noqa: E402
from trnsim.runtime import Device  # noqa: E402


def tiny_kernel():
    t = Trace("tiny")
    k = t.kernel("tiny")
    k.tile("a", "sbuf", [128, 64], "float32")
    k.memset(dst="a", value=0.0)
    return k.spec()


def per_call(fn, n: int, repeat: int) -> tuple[float, float]:
    """Best of `repeat` runs of fn(device, n): (enqueue us per call, total us per call)."""
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        dev = Device("trn2", mode="timing")
        gc.collect()
        t0 = time.perf_counter()
        fn(dev, n)
        t1 = time.perf_counter()
        dev.synchronize()
        t2 = time.perf_counter()
        cur = ((t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6)
        best = min(best, cur)
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000, help="calls per round")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the best is printed")
    args = ap.parse_args(argv)
    kernel = tiny_kernel()

    def malloc_free(dev, n):
        malloc, free = dev.malloc, dev.free
        for _ in range(n):
            free(malloc(4096))

    def launch(dev, n):
        run = dev.launch
        for _ in range(n):
            run(kernel)

    def record(dev, n):
        e, s = dev.event(), dev.default_stream
        for _ in range(n):
            s.record_event(e)

    def query(dev, n):
        dev.launch(kernel)
        e = dev.event()
        e.record()
        for _ in range(n):
            e.query()

    print(f"trnsim runtime overhead per call (timing-only trn2; best of {args.repeat} x {args.n})")
    print(f"{'call':<16}{'enqueue':>12}{'with simulation':>18}")
    for name, fn in (
        ("malloc + free", malloc_free),
        ("launch", launch),
        ("event record", record),
        ("event query", query),
    ):
        enq, total = per_call(fn, args.n, args.repeat)
        print(f"{name:<16}{enq:>9.2f} us{total:>15.2f} us")


if __name__ == "__main__":
    main()
