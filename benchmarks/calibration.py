"""AWS's published mechanism figures beside trnsim's, as the table in docs/calibration.md.

    python benchmarks/calibration.py                    # the table (Markdown) and the curves
    python benchmarks/calibration.py --plot curve.png   # also plot the DMA curve (matplotlib)

Every figure is measured by simulating the published experiment (`trnsim.calibration`): the
DMA throughput curve point by point (one queue of [128, B] bf16 loads, relative to 32 KiB per
partition), the Trn2 single-transfer profiles, the engine chains. A figure outside its
tolerance is marked OFF and the command exits with status 1. The DMA curve is also printed for
trn1 and trn3: what the same mechanism predicts with their configs (no curve is published for
them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from trnsim import calibration as cal  # noqa: E402


def curves_table(curves: dict[str, dict[int, float]]) -> str:
    """Relative throughput per chip and bytes per partition, beside the published Trn2 curve."""
    head = "| bytes per partition | published (Trn2) | " + " | ".join(curves) + " |"
    rows = [head, "|---" * (2 + len(curves)) + "|"]
    for b in cal.CURVE_BYTES:
        lo, hi = cal.CURVE_PUBLISHED[b]
        pub = f"{lo:.3g}" if lo == hi else f"{lo:.3g}-{hi:.3g}"
        cells = " | ".join(f"{c[b]:.3f}" for c in curves.values())
        rows.append(f"| {b} | {pub} | {cells} |")
    return "\n".join(rows)


def plot(curves: dict[str, dict[int, float]], out: str) -> None:
    """The curves (simulated) over the published points, log-log; needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("--plot needs matplotlib: pip install matplotlib")
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    xs = list(cal.CURVE_BYTES)
    pub = [sum(cal.CURVE_PUBLISHED[b]) / 2 for b in xs]
    ax.plot(xs, pub, "ko", label="published (N-DMAO, Trn2)", zorder=3)
    for chip, c in curves.items():
        ax.plot(xs, [c[b] for b in xs], "-", marker=".", label=f"trnsim {chip}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("bytes per partition (one queue of [128, B] loads)")
    ax.set_ylabel("throughput relative to 32 KiB")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plot", metavar="FILE", help="also plot the DMA curve (matplotlib)")
    args = ap.parse_args(argv)
    figs = cal.figures()
    print(cal.table(figs))
    print()
    curves = {chip: cal.curve(chip) for chip in ("trn1", "trn2", "trn3")}
    print(curves_table(curves))
    if args.plot:
        plot(curves, args.plot)
    off = [f.name for f in figs if not f.ok]
    if off:
        print(f"\noutside tolerance: {', '.join(off)}", file=sys.stderr)
    return 1 if off else 0


if __name__ == "__main__":
    sys.exit(main())
