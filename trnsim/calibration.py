"""AWS's published mechanism figures beside what trnsim simulates for the same experiments.

Each `Figure` names a published measurement (trainium.md 3.5, as carried into `docs/
calibration.md`), the value read off AWS's figures, the tolerance the tests hold the model to,
and the simulated value, measured by running small traces built with `trnsim.api`:

- the DMA throughput curve: one queue of back-to-back `[128, B]` bf16 loads HBM -> SBUF; the
  steady-state time per transfer (between completions) gives the throughput, relative to
  B = 32 KiB per partition;
- single transfers on Trn2: one transfer on an idle core, its span (trigger to completion) and
  its data phase (`Recorder.dma_moves`);
- engine chains on Trn1: 1,000 ScalarE activations of one element per partition, each reading
  the previous one's output (dependent) or not (independent); matmul spacing; the VectorE
  dependent cost; the TensorE warm-up.

`python benchmarks/calibration.py` prints the table; `tests/test_calibration.py` checks each
figure against its tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.api import Trace
from trnsim.config import load_chip
from trnsim.report.tracks import dma_track

KIB = 1024
CURVE_BYTES = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
# relative throughput read off N-DMAO's figure (trainium.md 3.5): (low, high) of the reading
CURVE_PUBLISHED = {
    32: (0.014, 0.017),
    64: (0.026, 0.026),
    128: (0.050, 0.053),
    256: (0.10, 0.10),
    512: (0.21, 0.21),
    1024: (0.42, 0.43),
    2048: (0.80, 0.81),
    4096: (0.97, 0.97),
    8192: (0.98, 0.98),
    16384: (0.99, 0.99),
    32768: (1.0, 1.0),
}
# the acceptance bands (relative throughput on trn2); others: published +-25%
CURVE_BANDS = {256: (0.07, 0.14), 1024: (0.33, 0.52), 2048: (0.68, 0.92), 4096: (0.87, 1.0)}


@dataclass(frozen=True)
class Figure:
    """One published figure and the simulated one."""

    name: str
    published: str  # as published (a value or a range, with its unit)
    low: float  # the band the simulated value must fall in (the tolerance)
    high: float
    simulated: float
    unit: str

    @property
    def ok(self) -> bool:
        return self.low <= self.simulated <= self.high


# -- DMA -------------------------------------------------------------------------------------


def _dma_run(chip: str, copies: list[tuple[str, str]], shapes: dict, store_first=False):
    """Run one kernel whose queue 0 issues `copies` (src, dst names) back to back, in timing
    mode; returns the recorder."""
    t = Trace("calibration", chip=chip, mode="timing")
    k = t.kernel("k")
    for name, (memory, shape) in shapes.items():
        if memory == "hbm":
            t.tensor(name, shape, "bfloat16")
        else:
            k.tile(name, "sbuf", shape, "bfloat16", init="zeros")
    for src, dst in copies:
        k.dma_copy(src=src, dst=dst, queue=0)
    return t.run().device.recorder


def transfer_time_ps(chip: str, bytes_per_partition: int, n: int = 24) -> float:
    """Steady-state ps per transfer of one queue of `n` back-to-back [128, B] bf16 loads."""
    free = bytes_per_partition // 2
    shapes = {"a": ("hbm", [128, free]), "s": ("sbuf", [128, free])}
    rec = _dma_run(chip, [("a", "s")] * n, shapes)
    ends = sorted(s.end_ps for s in rec.recorded if s.track == dma_track(0))
    return (ends[-1] - ends[0]) / (len(ends) - 1)


def curve(chip: str = "trn2", points=CURVE_BYTES) -> dict[int, float]:
    """Bytes per partition -> throughput relative to the 32 KiB point, one queue of loads."""
    ref = 32 * KIB / transfer_time_ps(chip, 32 * KIB)
    return {b: b / transfer_time_ps(chip, b) / ref for b in points}


def single_transfer(chip: str, shape: list[int], store: bool = False) -> dict[str, float]:
    """One transfer of a bf16 `shape` between HBM and SBUF on an idle core: ns from trigger to
    first byte, of the data phase, from trigger to completion."""
    shapes = {"a": ("hbm", shape), "s": ("sbuf", shape)}
    rec = _dma_run(chip, [("s", "a") if store else ("a", "s")], shapes)
    span = next(s for s in rec.recorded if s.track == dma_track(0))
    move = rec.dma_moves[0]
    return {
        "first_byte_ns": (move.start_ps - span.start_ps) / 1000,
        "data_ns": (move.end_ps - move.start_ps) / 1000,
        "total_ns": span.duration_ps / 1000,
        "engines": len(move.engines),
    }


# -- engines ---------------------------------------------------------------------------------


def activation_chain_ns(chip: str = "trn1", dependent: bool = True, n: int = 1000) -> float:
    """ns per instruction of `n` back-to-back ScalarE activations on [128, 1] fp32 tiles, each
    reading the previous one's output (dependent) or a tile nobody writes."""
    t = Trace("chain", chip=chip, mode="timing")
    k = t.kernel("k")
    for name in ("a", "b", "x"):
        k.tile(name, "sbuf", [128, 1], "float32", init="zeros")
    for i in range(n):
        src, dst = ("a", "b") if i % 2 == 0 else ("b", "a")
        k.activation(func="copy", src=src if dependent else "x", dst=dst)
    return t.run().summary["device_time_ns"] / n


def vector_chain_cycles(chip: str = "trn2", free: int = 512, n: int = 200) -> float:
    """VectorE cycles between the starts of `n` dependent fp32 tensor_scalar on [128, free]."""
    t = Trace("vchain", chip=chip, mode="timing")
    k = t.kernel("k")
    for name in ("a", "b"):
        k.tile(name, "sbuf", [128, free], "float32", init="zeros")
    for i in range(n):
        src, dst = ("a", "b") if i % 2 == 0 else ("b", "a")
        k.tensor_scalar(src=src, dst=dst, op0="add", operand0=1.0)
    spans = [s for s in t.run().device.recorder.recorded if s.track == "vector"]
    ns = (spans[-1].start_ps - spans[0].start_ps) / (n - 1) / 1000
    return ns * load_chip(chip).core.vector.clock_hz / 1e9


def matmul_spacing_cycles(chip: str = "trn2", moving: int = 32, n: int = 200) -> float:
    """TensorE cycles between back-to-back bf16 matmuls with a [128, moving] moving tile,
    measured after the warm-up (the last half of the run)."""
    t = Trace("mm", chip=chip, mode="timing")
    k = t.kernel("k")
    k.tile("s", "sbuf", [128, 128], "bfloat16", init="zeros")
    k.tile("m", "sbuf", [128, moving], "bfloat16", init="zeros")
    k.tile("p", "psum", [128, moving], "float32")
    for _ in range(n):
        k.matmul(stationary="s", moving="m", dst="p")
    spans = [s for s in t.run().device.recorder.recorded if s.track == "tensor"]
    half = spans[n // 2 :]
    ns = (half[-1].end_ps - half[0].start_ps) / len(half) / 1000
    return ns * load_chip(chip).core.tensor.clock_hz / 1e9


def warmup_fraction(chip: str = "trn2", window_us: float = 3.0) -> float:
    """Work a cold PE array does in its first `window_us` of back-to-back 512-column matmuls,
    relative to the same time at full speed."""
    t = Trace("warm", chip=chip, mode="timing")
    k = t.kernel("k")
    k.tile("s", "sbuf", [128, 128], "bfloat16", init="zeros")
    k.tile("m", "sbuf", [128, 512], "bfloat16", init="zeros")
    k.tile("p", "psum", [128, 512], "float32")
    n = 200
    for _ in range(n):
        k.matmul(stationary="s", moving="m", dst="p")
    spans = [s for s in t.run().device.recorder.recorded if s.track == "tensor"]
    full = spans[-1].duration_ps  # a warm instruction's duration
    t0, window = spans[0].start_ps, window_us * 1e6
    done = 0.0  # instructions' work done by the end of the window (the one it cuts: in part)
    for s in spans:
        if s.end_ps - t0 <= window:
            done += 1
        elif s.start_ps - t0 < window:
            done += (t0 + window - s.start_ps) / s.duration_ps
    return done * full / window


# -- the table ---------------------------------------------------------------------------------


def figures() -> list[Figure]:
    """Every published mechanism figure with its simulated value (trn2 unless named)."""
    out = []
    rel = curve("trn2")
    for b in CURVE_BYTES:
        lo, hi = CURVE_PUBLISHED[b]
        band = CURVE_BANDS.get(b, (lo * 0.75, min(1.0, hi * 1.25)) if b < 32 * KIB else (1, 1))
        pub = f"{lo:.3g}" if lo == hi else f"{lo:.3g}-{hi:.3g}"
        out.append(Figure(f"trn2 DMA curve, {b} B/partition", pub, *band, rel[b], "x 32 KiB"))
    one = single_transfer("trn2", [4, 4096])
    out += [
        Figure("A[4,4096] load: data phase", "1,416 ns", 1274, 1558, one["data_ns"], "ns"),
        Figure(
            "A[4,4096] load: to first byte", "600-1,000 ns", 600, 1000, one["first_byte_ns"], "ns"
        ),
        Figure("A[4,4096] load: to completion", "~2,400 ns", 1920, 2880, one["total_ns"], "ns"),
    ]
    st = single_transfer("trn2", [4, 4096], store=True)
    out.append(Figure("A[4,4096] store: data phase", "~1,217 ns", 1095, 1339, st["data_ns"], "ns"))
    sixteen = single_transfer("trn2", [128, 128])
    out += [
        Figure(
            "A[128,128] load: data per engine", "~97 ns (80-165)", 80, 165, sixteen["data_ns"], "ns"
        ),
        Figure("A[128,128] load: to completion", "~1,200 ns", 960, 1440, sixteen["total_ns"], "ns"),
    ]
    st16 = single_transfer("trn2", [128, 128], store=True)
    out.append(
        Figure("A[128,128] store: to completion", "~860 ns", 688, 1032, st16["total_ns"], "ns")
    )
    out += [
        Figure(
            "trn1 ScalarE dependent chain", "~189 ns", 170, 210, activation_chain_ns("trn1"), "ns"
        ),
        Figure(
            "trn1 ScalarE independent",
            "~MIN_II = 45.7 ns",
            44,
            48,
            activation_chain_ns("trn1", dependent=False),
            "ns",
        ),
        Figure(
            "matmul spacing, N = 32",
            "max(N, 64) = 64",
            63.5,
            64.5,
            matmul_spacing_cycles(),
            "cycles",
        ),
        Figure(
            "VectorE dependent, N = 512", "N + 144 = 656", 655, 657, vector_chain_cycles(), "cycles"
        ),
        Figure(
            "TensorE warm-up: work in first 3 us",
            "~0.75 (50% -> 100% over 3 us)",
            0.7,
            0.8,
            warmup_fraction(),
            "x full",
        ),
    ]
    return out


def table(figs: list[Figure]) -> str:
    """The figures as a Markdown table."""
    rows = [
        "| figure | published | tolerance | simulated | |",
        "|---|---|---|---|---|",
    ]
    for f in figs:
        ratio = f.unit.startswith("x")
        sim = f"{f.simulated:.3f}" if ratio else f"{f.simulated:,.1f}"
        tol = f"{f.low:.3g}-{f.high:.3g}" if ratio else f"{f.low:,.4g}-{f.high:,.4g}"
        rows.append(
            f"| {f.name} | {f.published} | {tol} | {sim} {f.unit} | {'ok' if f.ok else 'OFF'} |"
        )
    return "\n".join(rows)
