"""The kernel library's ops against their rooflines, on one physical NeuronCore, in timing mode.

    python benchmarks/bench_kernels.py              # trn2
    python benchmarks/bench_kernels.py --chip trn3  # another chip
    python benchmarks/bench_kernels.py --small      # smaller shapes, a few seconds in all
    python benchmarks/bench_kernels.py --only backward  # the rows whose label has this
    python benchmarks/bench_kernels.py --rows       # the row ops over rows of 64 to 2^20
    python benchmarks/bench_kernels.py --widths --only layer_norm  # over real models' widths
    python benchmarks/bench_kernels.py --shapes     # x * 2 on 64 MiB in shapes of the same bytes

For each op, on one physical core (or both cores of an LNC 2 logical core, where the label says
so): the simulated time, its two bounds (FLOPs / the cores' TensorE peak for the input
dtype, and HBM bytes read / the core's DMA load bandwidth plus bytes written / its store
bandwidth, each engines x the engine's rate),
which one binds, the fraction of that bound the lowered kernel reaches, the instruction count
and the wall-clock time of lowering and simulating it here.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from trnsim.config import load_chip, peak_flops_per_core  # noqa: E402
from trnsim.dtypes import dtype  # noqa: E402
from trnsim.runtime.session import run_program  # noqa: E402
from trnsim.trace.program import (  # noqa: E402
    KernelSpec,
    OpSpec,
    Program,
    Step,
    StreamSpec,
    TensorSpec,
)

BF16 = "bfloat16"
F32 = "float32"


def cases(small: bool) -> list[tuple]:
    """(label, tensors name -> (shape, dtype), op args, FLOPs[, LNC: physical cores])."""
    m, k, n = (1024, 2048, 2048) if small else (4096, 8192, 8192)
    r, d = (2048, 4096) if small else (8192, 8192)
    h, sq = (4, 1024) if small else (32, 4096)
    return [
        (
            f"matmul {m}x{k}x{n}",
            {"a": ((m, k), BF16), "b": ((k, n), BF16), "out": ((m, n), BF16)},
            {"op": "matmul", "a": "a", "b": "b", "out": "out"},
            2.0 * m * k * n,
        ),
        (
            f"matmul {m}x{k}x{n} lnc 2",
            {"a": ((m, k), BF16), "b": ((k, n), BF16), "out": ((m, n), BF16)},
            {"op": "matmul", "a": "a", "b": "b", "out": "out"},
            2.0 * m * k * n,
            2,
        ),
        (
            f"add [{r}, {d}]",
            {"a": ((r, d), BF16), "b": ((r, d), BF16), "out": ((r, d), BF16)},
            {"op": "add", "a": "a", "b": "b", "out": "out"},
            0.0,
        ),
        (
            f"gelu [{r}, {d}]",
            {"x": ((r, d), BF16), "out": ((r, d), BF16)},
            {"op": "gelu", "x": "x", "out": "out"},
            0.0,
        ),
        (
            f"softmax [{r}, {d}]",
            {"x": ((r, d), BF16), "out": ((r, d), BF16)},
            {"op": "softmax", "x": "x", "out": "out"},
            0.0,
        ),
        (
            f"layer_norm [{r}, {d}]",
            {"x": ((r, d), BF16), "out": ((r, d), BF16), "w": ((d,), BF16), "b": ((d,), BF16)},
            {"op": "layer_norm", "x": "x", "out": "out", "weight": "w", "bias": "b"},
            0.0,
        ),
        (
            f"rms_norm [{r}, {d}]",
            {"x": ((r, d), BF16), "out": ((r, d), BF16), "w": ((d,), BF16)},
            {"op": "rms_norm", "x": "x", "out": "out", "weight": "w"},
            0.0,
        ),
        (
            f"attention causal h{h} s{sq} d128",
            {
                "q": ((1, h, sq, 128), BF16),
                "k": ((1, h, sq, 128), BF16),
                "v": ((1, h, sq, 128), BF16),
                "out": ((1, h, sq, 128), BF16),
            },
            {
                "op": "scaled_dot_product_attention",
                "q": "q",
                "k": "k",
                "v": "v",
                "out": "out",
                "is_causal": True,
            },
            2 * 2 * sq * sq * 128 * h / 2,  # the unmasked half of QK^T and PV
        ),
        *more_cases(small),
        *training_cases(small),
    ]


def more_cases(small: bool) -> list[tuple]:
    """Data movement and the embedding gather (HBM -> HBM: the DMA bound counts each byte
    written once, at the store rate, or twice on its HBM stack, whichever binds), argmax and
    cross_entropy."""
    r, d = (2048, 4096) if small else (8192, 8192)
    b, s, h = (4, 512, 1024) if small else (8, 2048, 4096)
    n, c = (1024, 32000) if small else (4096, 128256)
    half = (r, d // 2)
    return [
        (
            f"cat 2 x [{r}, {d // 2}] dim 1",
            {"a": (half, BF16), "b": (half, BF16), "out": ((r, d), BF16)},
            {"op": "cat", "tensors": ["a", "b"], "out": "out", "dim": 1},
            0.0,
            1,
            "copy",
        ),
        (
            f"permute [{b}, {s}, {h}] (1, 0, 2)",
            {"x": ((b, s, h), BF16), "out": ((s, b, h), BF16)},
            {"op": "permute", "x": "x", "out": "out", "dims": [1, 0, 2]},
            0.0,
            1,
            "copy",
        ),
        (
            f"embedding {n} of [{c}, {d}]",
            {"w": ((c, d), BF16), "i": ((n,), "int32"), "out": ((n, d), BF16)},
            {"op": "embedding", "weight": "w", "indices": "i", "out": "out"},
            0.0,
            1,
            "copy",
        ),
        (
            f"sum [{r}, {d}] dim 0",
            {"x": ((r, d), BF16), "out": ((d,), "float32")},
            {"op": "sum", "x": "x", "out": "out", "dim": 0},
            0.0,
        ),
        (
            f"argmax [{r}, {d}]",
            {"x": ((r, d), BF16), "out": ((r,), "int32")},
            {"op": "argmax", "x": "x", "out": "out", "dim": -1},
            0.0,
        ),
        (
            f"cross_entropy [{n}, {c}]",
            {"x": ((n, c), BF16), "t": ((n,), "int32"), "out": ((1,), "float32")},
            {"op": "cross_entropy", "input": "x", "target": "t", "out": "out"},
            0.0,
        ),
    ]


def training_cases(small: bool) -> list[tuple]:
    """Backward and optimizer ops (kernels.training)."""
    r, d = (2048, 4096) if small else (8192, 8192)
    n = (1 << 22) if small else (1 << 26)  # an optimizer's flat parameter count
    h, sq = (2, 1024) if small else (4, 2048)
    rows = (r, 1)
    return [
        (
            f"gelu_backward [{r}, {d}]",
            {"g": ((r, d), BF16), "x": ((r, d), BF16), "out": ((r, d), BF16)},
            {"op": "gelu_backward", "grad_output": "g", "x": "x", "out": "out"},
            0.0,
        ),
        (
            f"_softmax_backward_data [{r}, {d}]",
            {"g": ((r, d), BF16), "y": ((r, d), BF16), "out": ((r, d), BF16)},
            {"op": "_softmax_backward_data", "grad_output": "g", "output": "y", "out": "out"},
            0.0,
        ),
        (
            f"native_layer_norm_backward [{r}, {d}]",
            {
                "g": ((r, d), BF16),
                "x": ((r, d), BF16),
                "m": (rows, F32),
                "s": (rows, F32),
                "w": ((d,), F32),
                "out": ((r, d), BF16),
                "dw": ((d,), F32),
                "db": ((d,), F32),
            },
            {
                "op": "native_layer_norm_backward",
                "grad_out": "g",
                "input": "x",
                "mean": "m",
                "rstd": "s",
                "weight": "w",
                "bias": "w",
                "out": ["out", "dw", "db"],
            },
            0.0,
        ),  # fmt: skip
        (
            f"attention backward causal h{h} s{sq} d128",
            {n_: ((1, h, sq, 128), BF16) for n_ in ("q", "k", "v", "g", "o", "dq", "dk", "dv")},
            {
                "op": "scaled_dot_product_attention_backward",
                "grad_out": "g",
                "q": "q",
                "k": "k",
                "v": "v",
                "output": "o",
                "is_causal": True,
                "out": ["dq", "dk", "dv"],
            },
            # the unmasked half of the scores (twice), dP, dq, dk and dv
            5 * 2 * sq * sq * 128 * h / 2,
        ),  # fmt: skip
        (
            f"addcdiv [{n}] fp32 (Adam's update)",
            {"p": ((n,), F32), "m": ((n,), F32), "v": ((n,), F32), "out": ((n,), F32)},
            {
                "op": "addcdiv",
                "x": "p",
                "tensor1": "m",
                "tensor2": "v",
                "value": -1e-3,
                "out": "out",
            },
            0.0,
        ),  # fmt: skip
    ]


def run_case(chip: str, tensors: dict, args: dict, lnc: int = 1):
    cfg = load_chip(chip)
    specs = {n: TensorSpec(n, s, dtype(dt)) for n, (s, dt) in tensors.items()}
    op = OpSpec(args["op"], {k: v for k, v in args.items() if k != "op"})
    prog = Program(
        "bench",
        chip,
        0,
        "timing",
        lnc,
        [],
        specs,
        {"k": KernelSpec("k", ops=[op])},
        [StreamSpec("s", 0, [Step("launch", "k")])],
    )
    start = time.perf_counter()
    result = run_program(prog, cfg, "timing")
    return cfg, specs, result, time.perf_counter() - start


ROW_OPS = ("softmax", "log_softmax", "layer_norm", "rms_norm", "sum", "mean", "amax", "argmax",
           "cross_entropy")  # fmt: skip


ROW_LENGTHS = (64, 512, 4096, 65536, 1 << 20)
# real models' row widths (heads, hidden sizes, vocabularies), most not powers of two
WIDTHS = (96, 100, 200, 384, 768, 1000, 1536, 1600, 2560, 3072, 4544, 5120, 6144, 10240, 12288,
          14336, 20000, 24576, 32000, 50257, 100000, 128256, 151936, 1000000)  # fmt: skip


def row_family(chip: str, total: int = 16 << 20, lengths=ROW_LENGTHS, only: str = "") -> None:
    """The row ops (those whose name contains `only`) over rows of `lengths` elements, `total`
    bytes of x each, fp32 and bf16, at the chip's default LNC, printed as a table: the simulated
    time, the roofline (the DMA and HBM bounds), the engine-throughput bound
    (`kernels.row_bounds`) and the fraction of the larger reached (the acceptance of issue 26,
    tests/kernels/test_rows_families.py), the plan its lowering chose (the op report's `plan`,
    norms only), and the wall time the op took to lower and simulate
    (a layer_norm of 2 MiB or more tries its plan variants, then lowers the one chosen with a
    search over the list schedule's choices: `kernels.schedule`)."""
    from trnsim.kernels.row_bounds import engine_bound_ns

    cfg = load_chip(chip)
    print(
        f"| op | dtype | row | simulated | roofline | engines | reached | plan | wall |\n"
        f"{'|---' * 9}|"
    )
    for op in (o for o in ROW_OPS if only in o):
        for dt in (F32, BF16):
            for d in lengths:
                isz = dtype(dt).itemsize
                rows = total // isz // d
                x = ((rows, d), dt)
                args = {"op": op, "x": "x", "out": "out"}
                tensors = {"x": x, "out": x}
                if op == "layer_norm":
                    tensors |= {"w": ((d,), dt), "b": ((d,), dt)}
                    args |= {"weight": "w", "bias": "b"}
                elif op == "rms_norm":
                    tensors["w"], args["weight"] = ((d,), dt), "w"
                elif op == "cross_entropy":
                    tensors = {"x": x, "t": ((rows,), "int32"), "out": ((1,), F32)}
                    args = {"op": op, "input": "x", "target": "t", "out": "out"}
                elif op not in ("softmax", "log_softmax"):
                    tensors["out"] = ((rows,), "int32" if op == "argmax" else dt)
                    args["dim"] = -1
                start = time.perf_counter()
                try:
                    _, _, result, _ = run_case(chip, tensors, args, cfg.lnc)
                except Exception as e:  # an op this checkout does not lower
                    print(f"| {op} | {dt} | {d} | {str(e).split(': ')[-1][:60]} | | | | | |")
                    continue
                row = result.summary["ops"][0]
                eng = engine_bound_ns(cfg, op, d, isz, rows / cfg.lnc, d < 65536)
                bound = max(row["roofline_ns"], eng)
                print(f"| {op} | {dt} | {d} | {row['time_ns'] / 1e3:.1f} us | "
                      f"{row['roofline_ns'] / 1e3:.1f} us | {eng / 1e3:.1f} us | "
                      f"{bound / row['time_ns']:.1%} | {row.get('plan', '')} | "
                      f"{time.perf_counter() - start:.1f} s |")  # fmt: skip


SHAPES = [(4096, 4096), (16, 1 << 20), (1 << 24,), (1 << 20, 16), (4097, 4095),
          (16, 1024, 1024), (4, 8, 4096, 128), ((1 << 24) - 1,)]  # fmt: skip


def shape_family(chip: str) -> None:
    """`x * 2` on 64 MiB of fp32 in shapes holding the same bytes (1-D, 2-D wide and skinny,
    sizes not a multiple of 128, 3-D, 4-D; issue 26, item 1), at the chip's default LNC and on
    one core, printed as a table: the simulated time and the fraction of the DMA bound reached
    (docs/kernels.md, "Elementwise layouts"; tests/kernels/test_shape_families.py)."""
    cfg = load_chip(chip)
    lncs = sorted({cfg.lnc, 1}, reverse=True)
    print("| shape | " + " | ".join(f"LNC {n}" for n in lncs) + f" |\n{'|---' * (1 + len(lncs))}|")
    for shape in SHAPES:
        cells = []
        for lnc in lncs:
            tensors = {"x": (shape, F32), "out": (shape, F32)}
            args = {"op": "mul", "a": "x", "b": 2.0, "out": "out"}
            row = run_case(chip, tensors, args, lnc)[2].summary["ops"][0]
            t = row["time_ns"]
            cells.append(f"{t / 1e3:,.1f} us ({row['dma_bound_ns'] / t:.0%} of DMA)")
        print(f"| {list(shape)} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chip", default="trn2")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--only", default="", help="run only the ops whose label contains this")
    ap.add_argument("--rows", action="store_true", help="the row ops over rows of 64 to 2^20")
    widths = "the row ops (--only: those so named) over real models' row widths"
    ap.add_argument("--widths", action="store_true", help=widths)
    ap.add_argument("--shapes", action="store_true", help="x * 2 on 64 MiB in every shape")
    a = ap.parse_args()
    if a.rows or a.widths:
        row_family(a.chip, lengths=WIDTHS if a.widths else ROW_LENGTHS, only=a.only)
        return
    if a.shapes:
        shape_family(a.chip)
        return
    print(
        f"{'op':<34}{'sim time':>12}{'compute':>12}{'DMA':>12}  bound{'reached':>9}"
        f"{'instrs':>9}{'wall':>8}"
    )
    for label, tensors, args, flops, *more in cases(a.small):
        if a.only not in label:
            continue
        lnc = more[0] if more else 1
        copy = more[1:] == ["copy"]
        cfg, specs, result, wall = run_case(a.chip, tensors, args, lnc)
        s = result.summary
        ns = s["device_time_ns"]
        d = cfg.core.dma
        nbytes = {n: math.prod(t.shape) * t.dtype.itemsize for n, t in specs.items()}
        out = args.get("outs", args.get("out"))
        written = sum(nbytes[o] for o in (out if isinstance(out, list) else [out]))
        # the cores' DMA engines together: loads at engine_bandwidth, stores at store_bandwidth
        # (a matmul's B, which every core reads, counted once)
        t_dma = (
            ((sum(nbytes.values()) - written) / d.engine_bandwidth + written / d.store_bandwidth)
            / d.engines
            / lnc
            * 1e9
        )
        if copy:  # HBM -> HBM: each byte crosses an engine once, at the store rate, and its
            # stack twice (all of a bench's tensors share the first logical core's stack)
            stack = cfg.hbm.bandwidth / cfg.hbm.stacks
            t_dma = max(written / d.store_bandwidth / d.engines / lnc, 2 * written / stack) * 1e9
        t_fl = flops / peak_flops_per_core(cfg, BF16) / lnc * 1e9
        bound, which = max((t_fl, "compute"), (t_dma, "DMA"))
        instrs = sum(e["instructions"] for e in s["engines"].values()) + sum(
            q["transfers"] for q in s["dma"].values()
        )
        print(
            f"{label:<34}{ns / 1e3:>10.1f}us{t_fl / 1e3:>10.1f}us{t_dma / 1e3:>10.1f}us"
            f"  {which:<7}{bound / ns:>8.0%}{instrs:>9,}{wall:>7.1f}s"
        )


if __name__ == "__main__":
    main()
