"""rms_norm at row lengths of real models that are not powers of two (issue 26), 1000 elements
and more: rows that fit a partition but are few blocks a core go in two lanes (fp32 4544, bf16
6144) or in pieces, or with a remainder column (fp32 5120, 6144; bf16 10240 to 20000), where the
estimate says so (`rms_plan`); rows with a remainder column (`norm_ragged`) keep 12 units
resident and load the weight's copies on every load queue (`rms_plan.RMS_RAGGED`); rows a partition keep their rows a partition with an odd count of rows (bf16
1536, `layout.row_tiles`): each within 80% of its bound (they reached 47% to 79%); --check holds
on those paths at LNC 1 and 2, with the same values."""

from __future__ import annotations

import pytest

from tests.kernels.helpers import checked_at_both_lncs
from tests.kernels.test_rows_families import case, reached
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.kernels import norms
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.rms_plan import IN_PIECES
from trnsim.trace.program import OpSpec, TensorSpec

LENGTHS = (
    ("bfloat16", 1536),  # rows a partition, 5461 (odd) in all: `layout.row_tiles` (73.3% before)
    ("float32", 4544),  # two lanes (78.5% before)
    ("float32", 5120),  # Llama-2-13B's hidden size: 70.9% before
    ("float32", 6144),
    ("float32", 7168),  # rows cut evenly between the cores (`rows.even_norm`): 56.9 -> 52.1 us
    ("float32", 20000),
    ("bfloat16", 6144),  # two lanes (74.7% before)
    ("bfloat16", 10000),  # rows cut evenly (`rows.even_norm`): 58.3 -> 54.3 us (79% before)
    ("bfloat16", 10240),
    ("bfloat16", 14336),  # Llama-3-70B's FFN width: 56.1% before
    ("bfloat16", 20000),
    ("bfloat16", 50257),
    ("bfloat16", 100000),
)


@pytest.mark.parametrize("dt,d", LENGTHS)
def test_rms_norm_irregular_rows_reach_80_percent_of_their_bound(dt, d):
    got, row, engines = reached(*case("rms_norm", d, dt), "rms_norm", dt, d)
    assert got >= 0.8, (row["time_ns"], row["roofline_ns"], engines)


# (dtype, shape, the plan `rms_plan` chooses): fp32 [640, 5120] (rows that fit, in pieces: 13
# MiB, above `norms.TRIAL_BYTES`), bf16 [300, 20000] (rows that fit, with a remainder column,
# `norm_ragged`), fp32 [1001, 3000] (two lanes); the check also runs bf16 [3001, 1536] (rows a
# partition, an odd count)
CHECKS = (("float32", (640, 5120), IN_PIECES), ("bfloat16", (300, 20000), IN_PIECES),
          ("float32", (1001, 3000), norms.RMS_LANES))  # fmt: skip


@pytest.mark.parametrize("dt,shape,plan", CHECKS)
def test_rms_norm_irregular_rows_plan(dt, shape, plan):
    """The estimate's plan of CHECKS' rows (the paths the check below runs)."""
    t, d = dtype(dt), shape[-1]
    b = KernelBuilder({"x": TensorSpec("x", shape, t, None), "w": TensorSpec("w", (d,), t, None),
                       "out": TensorSpec("out", shape, t, None)})  # fmt: skip
    got = norms._rms_variant(b, load_chip("trn2"), "rms_norm", "x", "out", "w", None, 1e-5)
    assert got == plan


@pytest.mark.parametrize("dt,shape", [c[:2] for c in CHECKS] + [("bfloat16", (3001, 1536))])
def test_rms_norm_irregular_rows_check(dt, shape):
    """--check holds at LNC 1 (a core's rows all) and 2, on the plan `rms_plan` chose, with the
    same values."""
    t, d = dtype(dt), shape[-1]
    specs = {"x": TensorSpec("x", shape, t, "normal"), "w": TensorSpec("w", (d,), t, "normal"),
             "out": TensorSpec("out", shape, t, None)}  # fmt: skip
    args = {"x": "x", "out": "out", "weight": "w", "eps": 1e-5}
    checked_at_both_lncs(specs, [OpSpec("rms_norm", args, 1)])


def test_rms_norm_rows_cut_evenly_between_the_cores():
    """rms_norm's rows that fit, four blocks of 128 a core or fewer, go evenly between the cores
    where `layout.core_rows`' cut at 128 rows is uneven (fp32 [819, 5120]: 384 and 435 rows ->
    409 and 410; the op is then isolated); not more rows (fp32 [1638, 2560]), an even cut
    ([1024, 4096]). layer_norm's rows go evenly too: fp32 of 2048 or more
    (`rows.EVEN_LAYER_FP32`), 16-bit longer than 4096 (`rows.EVEN_LAYER_16`: a core's last rows
    in segments, `norm_tail`; bf16 [1638, 5120], which ran as long either way before)."""
    from trnsim.kernels import isolated
    from trnsim.kernels.rows import even_norm, norm_share

    cfg, t = load_chip("trn2"), dtype("float32")

    def x(*shape, t=t):
        return TensorSpec("x", shape, t, None)

    assert even_norm(cfg, "rms_norm", x(819, 5120))
    assert not even_norm(cfg, "rms_norm", x(1638, 2560))
    assert not even_norm(cfg, "rms_norm", x(1024, 4096))
    assert even_norm(cfg, "layer_norm", x(1638, 5120, t=dtype("bfloat16")))
    assert even_norm(cfg, "layer_norm", x(819, 5120))
    b = KernelBuilder({"x": x(819, 5120)})
    got = []
    for c in (0, 1):
        b.part = (c, 2)
        got.append(norm_share(b, cfg, "rms_norm", b.tensors["x"]))
    assert got == [(0, 409), (409, 819)]
    specs = {"x": x(819, 5120), "out": TensorSpec("out", (819, 5120), t, None)}
    assert isolated(OpSpec("rms_norm", {"x": "x", "out": "out"}, 1), specs, cfg)
    bf = {n: TensorSpec(n, (1638, 5120), dtype("bfloat16"), None) for n in ("x", "out")}
    assert isolated(OpSpec("layer_norm", {"x": "x", "out": "out"}, 1), bf, cfg)
