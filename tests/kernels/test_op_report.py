"""The per-op rows of the run summary (`ops`): each op's span, its roofline, the fraction."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from trnsim.cli import main
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.report.text import _format_ops
from trnsim.runtime.session import run_program
from trnsim.trace.program import KernelSpec, OpSpec, Program, Step, StreamSpec, TensorSpec


def run_ops(tensors: dict, ops: list, chip="trn2", lnc=1, launches=1, mode="timing"):
    """tensors: name -> (shape, dtype); ops: (op, args) pairs, one kernel launched `launches`
    times on one stream."""
    prog, cfg = ops_program(tensors, ops, chip, lnc, launches, mode)
    return run_program(prog, cfg, mode), cfg


def ops_program(tensors: dict, ops: list, chip="trn2", lnc=1, launches=1, mode="timing"):
    """`run_ops`'s (program, chip config)."""
    cfg = load_chip(chip)
    specs = {n: TensorSpec(n, tuple(s), dtype(d), "normal") for n, (s, d) in tensors.items()}
    prog = Program(
        "ops",
        chip,
        0,
        mode,
        lnc,
        [],
        specs,
        {"k": KernelSpec("k", ops=[OpSpec(o, a, i + 1) for i, (o, a) in enumerate(ops)])},
        [StreamSpec("s", 0, [Step("launch", "k")] * launches)],
    )
    return prog, cfg


def test_matmul_roofline_by_hand():
    m, k, n = 512, 1024, 2048
    r, cfg = run_ops(
        {"a": ((m, k), "bfloat16"), "b": ((k, n), "bfloat16"), "out": ((m, n), "bfloat16")},
        [("matmul", {"a": "a", "b": "b", "out": "out"})],
    )
    (row,) = r.summary["ops"]
    t = cfg.core.tensor
    peak = t.rows * t.cols * 2 * t.clock_hz  # bf16 FLOP/s of one core
    assert row["op"] == "matmul" and row["flops"] == 2 * m * n * k
    assert row["compute_bound_ns"] == pytest.approx(2 * m * n * k / peak * 1e9, rel=1e-12)
    d = cfg.core.dma
    read, written = (m * k + k * n) * 2, m * n * 2
    assert (row["bytes_read"], row["bytes_written"]) == (read, written)
    dma = (read / d.engine_bandwidth + written / d.store_bandwidth) / d.engines * 1e9
    assert row["dma_bound_ns"] == pytest.approx(dma, rel=1e-12)
    hbm = (read + written) / (cfg.hbm.bandwidth / cfg.hbm.stacks) * 1e9
    assert row["hbm_bound_ns"] == pytest.approx(hbm, rel=1e-12)
    assert row["bound"] == "compute" and row["roofline_ns"] == row["compute_bound_ns"]
    assert row["fraction"] == row["roofline_ns"] / row["time_ns"] < 1
    assert row["shapes"] == {"a": [m, k], "b": [k, n], "out": [m, n]}
    assert row["dtypes"] == dict.fromkeys(("a", "b", "out"), "bfloat16")
    # one op alone: its span is the launch's, which is the whole device time
    assert row["time_ns"] == r.summary["device_time_ns"]


def test_rows_lie_within_the_kernel_span_and_split_its_ops():
    """Three ops in one kernel, launched twice, on both cores of LNC 2: each op's span lies
    within the launch, and the ops (each waiting for the one before) follow one another."""
    tensors = {
        "x": ((256, 512), "bfloat16"),
        "w": ((512, 640), "bfloat16"),
        "h": ((256, 640), "float32"),
        "y": ((256, 640), "float32"),
        "p": ((256, 640), "float32"),
    }
    ops = [
        ("matmul", {"a": "x", "b": "w", "out": "h"}),
        ("gelu", {"x": "h", "out": "y"}),
        ("softmax", {"x": "y", "out": "p"}),
    ]
    r, cfg = run_ops(tensors, ops, lnc=2, launches=2)
    rows = r.summary["ops"]
    assert [x["op"] for x in rows] == ["matmul", "gelu", "softmax"]
    windows = r.device.recorder.launches
    assert len(windows) == 2 and all(w.cores == (0, 1) for w in windows)
    longest = max(w.end_ps - w.start_ps for w in windows) / 1000
    for x in rows:
        assert x["launches"] == 2 and 0 < x["time_ns"] <= longest
        assert x["fraction"] == pytest.approx(x["roofline_ns"] / x["time_ns"], rel=1e-12)
    # the ops wait for one another: their spans add up to about the launch (and no more
    # than it plus the overlaps of one op's tail with the next one's start)
    assert sum(x["time_ns"] for x in rows) >= 0.9 * longest
    assert rows[1]["flops"] == rows[2]["flops"] == 0 and rows[1]["bound"] in ("dma", "hbm")
    # two cores: twice the DMA engines and the TensorE peak of one
    t = cfg.core.tensor
    assert rows[0]["compute_bound_ns"] == pytest.approx(
        2 * 256 * 640 * 512 / (2 * t.rows * t.cols * 2 * t.clock_hz) * 1e9, rel=1e-12
    )


def test_a_fused_run_is_one_row():
    shape = (256, 1024)
    r, _ = run_ops(
        {"h": (shape, "bfloat16"), "x": (shape, "bfloat16"), "y": (shape, "bfloat16")},
        [
            ("add", {"a": "h", "b": "x", "out": "h"}),
            ("gelu", {"x": "h", "out": "h"}),
            ("mul", {"a": "h", "b": 2.0, "out": "y"}),
        ],
    )
    (row,) = r.summary["ops"]
    nbytes = 256 * 1024 * 2
    assert row["op"] == "add+gelu+mul" and row["lines"] == [1, 2, 3]
    assert (row["bytes_read"], row["bytes_written"]) == (2 * nbytes, 2 * nbytes)  # h, x; h, y
    assert row["time_ns"] == r.summary["device_time_ns"]


def test_causal_attention_counts_the_unmasked_pairs():
    b, h, s, d = 1, 2, 384, 64
    shape = (b, h, s, d)
    r, _ = run_ops(
        {n: (shape, "bfloat16") for n in ("q", "k", "v", "out")},
        [
            (
                "scaled_dot_product_attention",
                {"q": "q", "k": "k", "v": "v", "out": "out", "is_causal": True},
            )
        ],  # fmt: skip
    )
    (row,) = r.summary["ops"]
    assert row["flops"] == 2 * 2 * d * (s * (s + 1) // 2) * h


def test_cli_json_and_table_have_the_ops():
    result = CliRunner().invoke(main, ["run", "traces/mlp_ops.yaml", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["ops"]
    assert [x["op"] for x in rows] == ["matmul", "add", "gelu"]
    text = CliRunner().invoke(main, ["run", "traces/mlp_ops.yaml"]).stdout
    assert "main[0] matmul" in text and "compute" in text


def test_a_low_level_trace_has_no_ops_key():
    result = CliRunner().invoke(main, ["run", "traces/matmul_gelu.yaml", "--json"])
    assert result.exit_code == 0, result.output
    assert "ops" not in json.loads(result.stdout)


def test_trnsim_run_lowers_the_ops_once(monkeypatch):
    """`trnsim run` lowers for its race check, then runs: the second lowering is the first's
    (same program, config and lnc), unless the program changed in place."""
    import trnsim.runtime.session as session

    calls = []
    real = session.lower_cores
    monkeypatch.setattr(session, "lower_cores", lambda *a: calls.append(1) or real(*a))
    result = CliRunner().invoke(main, ["run", "traces/mlp_ops.yaml", "--json"])
    assert result.exit_code == 0, result.output
    assert len(calls) == 1
    program, cfg = ops_program({"a": ((128, 256), "bfloat16"), "out": ((128, 256), "bfloat16")},
                               [("exp", {"x": "a", "out": "out"})])  # fmt: skip
    calls.clear()
    first = session.lowered(program, cfg, 1)
    assert session.lowered(program, cfg, 1) is first and len(calls) == 1
    program.kernels["k"].ops[0].op = "sigmoid"  # changed in place: lowered afresh
    assert session.lowered(program, cfg, 1) is not first and len(calls) == 2
    session.lowered(program, cfg, 2)  # another lnc
    assert len(calls) == 3


@pytest.mark.parametrize("op,shape,dt,plan", [
    ("rms_norm", (256, 64), "float32", "rms_short"),  # short rows, several to a partition
    ("layer_norm", (256, 64), "float32", "rows"),  # a row slot at a time, the default knobs
    ("layer_norm", (4, 65536), "float32", "pieces"),  # rows over the partitions
    ("layer_norm", (2, 1 << 18), "bfloat16", "norm_long"),  # even bf16 rows 2^18..2^20: rule
    ("layer_norm", (2, 10**6), "float32", "norm_columns"),  # few rows too long for SBUF
])  # fmt: skip
def test_a_norm_row_names_the_plan_its_lowering_chose(op, shape, dt, plan):
    """The norms, lowered many ways, name theirs in the op row (`KernelBuilder.plan`), at LNC
    1 and 2 alike; an op lowered one way (add) has no `plan`."""
    d = shape[-1]
    tensors = {"x": (shape, dt), "out": (shape, dt), "w": ((d,), dt), "b": ((d,), dt)}
    args = {"x": "x", "out": "out", "weight": "w"} | ({"bias": "b"} if op == "layer_norm" else {})
    for lnc in (1, 2):
        r, _ = run_ops(tensors, [(op, args), ("add", {"a": "x", "b": "x", "out": "x"})],
                       lnc=lnc, mode="functional")  # fmt: skip
        norm, add = r.summary["ops"]
        assert (norm["plan"], "plan" in add) == (plan, False)


def test_the_op_table_shows_a_plan_where_a_row_has_one():
    rows = [{"kernel": "k", "index": i, "op": op, "time_ns": 2e3, "roofline_ns": 1e3,
             "bound": "dma", "fraction": 0.5, "shapes": {"x": [4, 8]}, "dtypes": {"x": "float32"}}
            for i, op in enumerate(("layer_norm", "add"))]  # fmt: skip
    rows[0]["plan"] = "norm_wide"
    norm, add, foot = _format_ops(rows)[1:]
    assert norm.endswith("x 4x8 float32  plan norm_wide") and add.endswith("x 4x8 float32")
    assert "plan: the lowering chosen" in foot
    assert "plan" not in _format_ops(rows[1:])[-1]
