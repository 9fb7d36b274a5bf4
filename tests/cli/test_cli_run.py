"""`trnsim run`, `validate` and `compare` through click's CliRunner, on the bundled traces.

Expected numbers are derived by hand from configs/trn2.yaml (see each trace's header comment):
matmul_gelu's matmul is 544 TensorE cycles at 2.4 GHz = 226.67 ns at full speed (226.667 ns:
every duration rounds up to a whole picosecond), on a cold PE array that starts at 50% of full
speed and ramps to full over 3 us: it takes x with 0.5 x + 0.5 x^2 / (2 x 3 us) = 226.667 ns,
x = 423.45 ns; its GELU is 612 ScalarE cycles at 1.2 GHz = 510 ns.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from trnsim.cli import main
from trnsim.report.perfetto import HOST_PID
from trnsim.report.tracks import DMA_ENGINE_ID_BASE, lane_of

TRACES = Path(__file__).resolve().parents[2] / "traces"
MATMUL_GELU = str(TRACES / "matmul_gelu.yaml")
GEMM = str(TRACES / "gemm_double_buffered.yaml")
TWO_STREAMS = str(TRACES / "two_streams.yaml")
SOFTMAX = str(TRACES / "softmax_rows.yaml")

FULL_PS = math.ceil(544 / 2.4e9 * 1e12)  # 226,667 ps at full speed
_C = 0.5 / (2 * 3e6)  # (1 - a) / (2 T), T = 3 us in ps
MM_PS = math.ceil((-0.5 + math.sqrt(0.25 + 4 * _C * FULL_PS)) / (2 * _C))  # 423,450 ps, cold
GELU_PS = math.ceil(612 / 1.2e9 * 1e12)  # 510,000 ps
LAUNCH_PS = 10_000_000  # host_link.launch_overhead


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def ok(*args):
    result = invoke(*args)
    assert result.exit_code == 0, (result.exit_code, result.stderr, result.exception)
    return result


def run_json(*args) -> dict:
    return json.loads(ok("run", *args, "--json").stdout)


def assert_one_line_error(result, starts: str = "error:"):
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.stdout == ""
    assert result.stderr.startswith(starts), result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("\n"), result.stderr
    assert "Traceback" not in result.output


# -- the summary table -------------------------------------------------------------------------


def _row(out: str, name: str) -> list[str]:
    line = next((ln for ln in out.splitlines() if ln.split()[:1] == [name]), None)
    assert line is not None, f"no row {name!r} in:\n{out}"
    return line.split()


def test_run_prints_summary():
    out = ok("run", MATMUL_GELU).stdout
    assert out.splitlines()[0] == "trace 'matmul-gelu' on trn2 (functional)"
    assert _row(out, "total")[2:4] == ["10.93", "us"]  # 10 us launch + 423.45 + 510 ns
    tensor = _row(out, "core0.tensor")
    assert tensor[1:3] == ["423.4", "ns"] and tensor[-1] == "1"
    scalar = _row(out, "core0.scalar")
    assert scalar[1:3] == ["510", "ns"] and scalar[-1] == "1"
    assert _row(out, "core0.vector")[-1] == "0"
    assert "1.678e+07 FLOP" in out  # 2 x 128 x 128 x 512
    assert "17.97 TFLOP/s" in out  # 16,777,216 FLOP over 933.45 ns of device time


def test_run_summary_dma_and_timings():
    out = ok("run", TWO_STREAMS).stdout
    for queue in ("core0.q0", "core0.q1", "core2.q0", "core2.q1"):
        _row(out, queue)
    assert "start->h_ready" in out and "start->consumer_done" in out
    # the timings the JSON report gives (test_run_json_dma_hbm_timings derives one by hand)
    t = run_json(TWO_STREAMS)["timings"]
    for name in ("start->consumer_done", "start->producer_done"):
        assert f"timing          {name}: {t[name]['ns'] / 1000:.4g} us" in out


# -- --json ----------------------------------------------------------------------------------------


def test_run_json_keys_and_values():
    s = run_json(MATMUL_GELU)
    for key in (
        "trace",
        "chip",
        "mode",
        "total_time_ns",
        "engines",
        "dma",
        "hbm",
        "flops",
        "flops_per_s",
        "peak_fraction",
        "memory",
        "timings",
    ):
        assert key in s, key
    assert (s["trace"], s["chip"], s["mode"]) == ("matmul-gelu", "trn2", "functional")
    assert set(s["engines"]) == {f"core0.{e}" for e in ("tensor", "vector", "scalar", "gpsimd")}
    for e in s["engines"].values():
        assert set(e) >= {"busy_ns", "utilization", "instructions"}
    assert s["engines"]["core0.tensor"] == {
        "busy_ns": MM_PS / 1000,
        "instructions": 1,
        "utilization": MM_PS / (MM_PS + GELU_PS),
    }
    assert s["engines"]["core0.scalar"]["busy_ns"] == GELU_PS / 1000 == 510.0
    assert s["total_time_ns"] == (LAUNCH_PS + MM_PS + GELU_PS) / 1000 == 10933.45
    assert s["flops"] == 2 * 128 * 128 * 512
    assert s["flops_per_s"] == pytest.approx(s["flops"] / ((MM_PS + GELU_PS) * 1e-12))
    # one core, bf16 at 128 x 128 MACs x 2.4 GHz = 78.64 TFLOP/s
    assert s["peak_fraction"] == pytest.approx(s["flops_per_s"] / 78.6432e12)
    assert s["dma"] == {}
    assert s["hbm"] == {"bytes_read": 0, "bytes_written": 0, "bandwidth_bytes_per_s": 0.0}
    assert s["memory"] == {
        "sbuf_peak_bytes": 128 * (256 + 1024 + 1024),
        "psum_peak_bytes": 128 * 2048,
        "hbm_peak_bytes": 0,
    }
    assert s["timings"] == {}


def test_run_json_dma_hbm_timings():
    s = run_json(GEMM)
    assert set(s["dma"]) == {"core0.q0", "core0.q1", "core0.q2", "core0.q3"}
    for d in s["dma"].values():
        assert set(d) >= {"busy_ns", "bytes", "transfers"} and d["busy_ns"] > 0
    assert s["dma"]["core0.q1"]["bytes"] == s["dma"]["core0.q2"]["bytes"] == 2**20
    assert s["dma"]["core0.q3"] == {**s["dma"]["core0.q3"], "bytes": 2**19, "transfers": 4}
    assert s["hbm"]["bytes_read"] == 2**17 + 2**21 and s["hbm"]["bytes_written"] == 2**19
    assert s["hbm"]["bandwidth_bytes_per_s"] > 0
    t = run_json(TWO_STREAMS)["timings"]
    assert set(t) == {
        "start->h_ready",
        "h_ready->consumer_done",
        "start->producer_done",
        "start->consumer_done",
    }
    assert all(set(v) >= {"ns"} for v in t.values())
    # start -> producer_done by hand from configs/trn2.yaml (see two_streams.yaml's header), in ps:
    # each stream is a host thread; its copy costs it 2 us, then the two host copies start
    # after the link's 2 us latency and keep the 64 GB/s link busy until both are in, host_x
    # (512 KiB) and host_w (128 KiB) back to back;
    copy_call = 2_000_000
    copies = copy_call + 2_000_000 + (2**19 + 2**17) / 0.064  # = 14.24 us
    # act_x (launched by 12 us, so it waits for the copy): load x, gelu, store h. A [128, 2048]
    # bf16 copy gives each of the 16 DMA engines 8 partitions of 4 KiB (8 descriptors): a
    # setup of 615 + 15 x 16 ns, then 8 x 2 ns + 32 KiB at 23 B/ns (a load, then 300 ns to its
    # completion) or 26.9 B/ns (the store, at once); GELU waits on the load: max(64, 2048) + 100
    # ScalarE cycles at 1.2 GHz
    load = 855_000 + math.ceil(8 * 2_000 + 2**15 / 0.023) + 300_000
    store = 855_000 + math.ceil(8 * 2_000 + 2**15 / 0.0269)
    act_x = load + math.ceil((2048 + 100) / 1.2e9 * 1e12) + store
    assert copies + act_x < copy_call + 2 * LAUNCH_PS
    # more_work: GELU over [128, 24576] fp32 without a wait: 24576 ScalarE cycles; its launch
    # returns to the host at copy + 2 launches, after h_ready, so it starts then
    more_work = math.ceil(24576 / 1.2e9 * 1e12)
    assert abs(t["start->h_ready"]["ns"] * 1000 - (copies + act_x)) <= 2  # the fluid model's ps
    assert t["start->producer_done"]["ns"] == (copy_call + 2 * LAUNCH_PS + more_work) / 1000


@pytest.mark.parametrize("trace", [GEMM, TWO_STREAMS, SOFTMAX])
def test_run_json_is_deterministic(trace):
    first = ok("run", trace, "--json").stdout
    assert ok("run", trace, "--json").stdout == first


def test_chip_and_set_change_results():
    trn2 = run_json(GEMM)
    trn3 = run_json(GEMM, "--chip", "trn3")
    assert trn3["chip"] == "trn3"
    assert trn3["total_time_ns"] != trn2["total_time_ns"]
    slow = run_json(
        MATMUL_GELU, "--set", "core.tensor.clock_hz=1.2GHz", "--set", "core.tensor.warmup=false"
    )
    assert slow["engines"]["core0.tensor"]["busy_ns"] == math.ceil(544 / 1.2e9 * 1e12) / 1000
    assert slow["total_time_ns"] == 10000 + 453.334 + 510.0
    hbm = run_json(GEMM, "--set", "core.dma.engine_bandwidth=46B/ns")
    assert hbm["total_time_ns"] < trn2["total_time_ns"]


def test_mode_timing():
    functional = run_json(GEMM)
    timing = run_json(GEMM, "--mode", "timing")
    assert timing["mode"] == "timing"
    # values are not computed, but the timeline does not depend on them
    assert {k: v for k, v in timing.items() if k != "mode"} == {
        k: v for k, v in functional.items() if k != "mode"
    }


# -- --perfetto and --profile ------------------------------------------------------------------


def _perfetto_and_profile(tmp_path: Path, trace: str):
    pf, prof = tmp_path / "timeline.json", tmp_path / "profile.csv"
    out = ok("run", trace, "--perfetto", pf, "--profile", prof).stdout
    assert str(pf) in out and str(prof) in out
    return json.loads(pf.read_text()), list(csv.DictReader(prof.open()))


@pytest.mark.parametrize("trace", [GEMM, TWO_STREAMS])
def test_perfetto_is_chrome_trace_json(tmp_path, trace):
    doc, _ = _perfetto_and_profile(tmp_path, trace)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    assert events and all("ph" in e for e in events)
    spans = [e for e in events if e["ph"] == "X"]
    assert spans
    for e in spans:
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    meta = [e for e in events if e["ph"] == "M"]
    processes = {e["pid"] for e in meta if e["name"] == "process_name" and e["args"]["name"]}
    threads = {
        (e["pid"], e["tid"]) for e in meta if e["name"] == "thread_name" and e["args"]["name"]
    }
    assert {e["pid"] for e in spans} <= processes
    assert {(e["pid"], e["tid"]) for e in spans} <= threads
    for e in events:
        if e["ph"] == "C":
            assert isinstance(e["ts"], (int, float)) and e["args"]


@pytest.mark.parametrize("trace", [GEMM, TWO_STREAMS, MATMUL_GELU])
def test_perfetto_spans_equal_profile_rows(tmp_path, trace):
    doc, rows = _perfetto_and_profile(tmp_path, trace)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    # the DMA-engine rows show data phases and the host process API calls, not spans (the
    # profile has none of them)
    spans = [
        e
        for e in events
        if e["ph"] == "X" and lane_of(e["tid"])[0] < DMA_ENGINE_ID_BASE and e["pid"] != HOST_PID
    ]
    assert len(spans) == len(rows)

    # per track of the timeline and per track of the profile: the multiset of
    # (core, kernel, index, op, start_ns, duration_ns); ts and dur are microseconds
    by_thread: dict[tuple, Counter] = {}
    for e in spans:
        item = (
            e["pid"],
            e["args"]["kernel"],
            e["args"]["index"],
            e["name"],
            round(e["ts"] * 1000, 3),
            round(e["dur"] * 1000, 3),
        )
        by_thread.setdefault((e["pid"], lane_of(e["tid"])[0]), Counter())[item] += 1
    by_track: dict[tuple, Counter] = {}
    for r in rows:
        item = (
            int(r["core"]),
            r["kernel"],
            int(r["index"]),
            r["op"],
            round(float(r["start_ns"]), 3),
            round(float(r["duration_ns"]), 3),
        )
        by_track.setdefault((int(r["core"]), r["track"]), Counter())[item] += 1
    assert sum(by_thread.values(), Counter()) == sum(by_track.values(), Counter())
    # the same tracks: each profile track is one timeline thread, named after it
    threads = {frozenset(c.items()): key for key, c in by_thread.items()}
    for (core, name), c in by_track.items():
        pid, tid = threads[frozenset(c.items())]
        assert pid == core and name in names[(pid, tid)], (core, name, names[(pid, tid)])
    assert len(by_thread) == len(by_track)


def test_profile_parquet_without_pyarrow(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed
    result = invoke("run", MATMUL_GELU, "--profile", tmp_path / "x.parquet")
    assert_one_line_error(result)
    assert "pyarrow" in result.stderr


# -- --out-dir and --quiet -----------------------------------------------------------------------


def test_out_dir_saves_outputs(tmp_path):
    out = tmp_path / "out"
    result = ok("run", GEMM, "--out-dir", out)
    assert str(out) in result.stdout
    assert sorted(p.name for p in out.iterdir()) == ["y.npy"]  # outputs: [y]
    y = np.load(out / "y.npy")  # bf16 in the trace; saved as float32, which holds it exactly
    assert y.shape == (128, 2048) and y.dtype == np.float32

    ok("run", TWO_STREAMS, "--out-dir", out / "two")
    saved = {p.name: np.load(p) for p in (out / "two").iterdir()}
    assert sorted(saved) == ["h.npy", "y.npy"]
    assert saved["h.npy"].shape == (128, 2048) and saved["y.npy"].shape == (128, 512)


def test_out_dir_values(tmp_path):
    """y.npy holds x @ w (bf16 files may load as raw 2-byte records: view them as bf16)."""
    import ml_dtypes

    ok("run", GEMM, "--out-dir", tmp_path)
    y = np.load(tmp_path / "y.npy")
    if y.dtype.kind == "V":
        y = y.view(ml_dtypes.bfloat16)
    from trnsim.config import load_chip
    from trnsim.runtime.session import run_program
    from trnsim.trace import load

    r = run_program(load(GEMM), load_chip("trn2"))
    np.testing.assert_array_equal(y.astype(np.float32), r.tensor("y").astype(np.float32))


def test_quiet_prints_nothing(tmp_path):
    result = ok("run", GEMM, "--quiet", "--out-dir", tmp_path, "--profile", tmp_path / "p.csv")
    assert result.stdout == "" and result.stderr == ""
    assert (tmp_path / "y.npy").is_file() and (tmp_path / "p.csv").is_file()
    result = ok("run", GEMM, "-q")
    assert result.output == ""


# -- validate and compare --------------------------------------------------------------------------


def test_validate_ok():
    out = ok("validate", GEMM).stdout
    assert out.startswith(f"{GEMM}: ok")
    assert "44" in out and "trn2" in out  # instructions; the chip
    assert out.count("\n") == 1
    assert "trn3" in ok("validate", TWO_STREAMS, "--chip", "trn3").stdout


def test_validate_fails(write_yaml):
    bad = write_yaml(
        "bad.yaml",
        """\
trnsim: 1
tiles:
  a: {memory: sbuf, shape: [128, 512], dtype: bfloat16}
instructions:
  - {op: matmul, stationary: a, moving: b, dst: a}
""",
    )
    result = invoke("validate", bad)
    assert_one_line_error(result, f"error: {bad}:5: ")
    assert "'b'" in result.stderr


def test_validate_fails_on_the_chip(write_yaml):
    """Loads fine, but the matmul cannot run: a PSUM dst is required."""
    bad = write_yaml(
        "chip.yaml",
        """\
trnsim: 1
tiles:
  x: {memory: sbuf, shape: [128, 128], dtype: bfloat16}
  w: {memory: sbuf, shape: [128, 512], dtype: bfloat16}
  o: {memory: sbuf, shape: [128, 512], dtype: float32}
instructions:
  - {op: matmul, stationary: x, moving: w, dst: o}
""",
    )
    result = invoke("validate", bad)
    assert_one_line_error(result)
    assert "PSUM" in result.stderr or "psum" in result.stderr


def test_compare():
    out = ok("compare", GEMM, "--chip", "trn2", "--chip", "trn3").stdout
    head = next(ln for ln in out.splitlines() if "trn2" in ln)
    assert head.split() == ["trn2", "trn3"]
    total = _row(out, "total")
    assert total[-1].endswith("x)") and total[-1].startswith("(")
    ratio = float(total[-1][1:-2])
    two, three = run_json(GEMM)["total_time_ns"], run_json(GEMM, "--chip", "trn3")["total_time_ns"]
    assert ratio == pytest.approx(three / two, abs=0.005)


def test_compare_json():
    data = json.loads(ok("compare", GEMM, "--chip", "trn2", "--chip", "trn3", "--json").stdout)
    assert sorted(data) == ["trn2", "trn3"]
    assert data["trn2"] == run_json(GEMM)


# -- errors ----------------------------------------------------------------------------------------


def test_error_missing_file(tmp_path):
    result = invoke("run", tmp_path / "nope.yaml")
    assert_one_line_error(result)
    assert "nope.yaml" in result.stderr


def test_error_bad_yaml(write_yaml):
    bad = write_yaml("bad.yaml", "trnsim: 1\ninstructions: [\n")
    assert_one_line_error(invoke("run", bad), f"error: {bad}:")


def test_error_unknown_key(write_yaml):
    bad = write_yaml("key.yaml", "trnsim: 1\nname: x\nfrobnicate: 3\n")
    result = invoke("run", bad)
    assert_one_line_error(result, f"error: {bad}:3:")
    assert "frobnicate" in result.stderr


def test_error_unknown_chip():
    result = invoke("run", MATMUL_GELU, "--chip", "trn9")
    assert_one_line_error(result, "error: unknown chip 'trn9'")


@pytest.mark.parametrize("override", ["core.tensor.clock_hz=fast", "nope=1", "no-equals-sign"])
def test_error_bad_set(override):
    result = invoke("run", MATMUL_GELU, "--set", override)
    assert_one_line_error(result)


def test_error_compare_unknown_chip():
    assert_one_line_error(invoke("compare", MATMUL_GELU, "--chip", "trn2", "--chip", "nope"))


def test_out_dir_in_timing_mode_is_refused_before_running(tmp_path):
    result = invoke("run", GEMM, "--mode", "timing", "--out-dir", tmp_path / "o")
    assert_one_line_error(result)
    assert "computes no values to save" in result.stderr
    assert not (tmp_path / "o").exists()


def test_running_out_of_memory_is_a_one_line_error_not_a_bug(monkeypatch):
    import trnsim.cli.traces as traces

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(traces, "run_program", exhausted)
    r = CliRunner().invoke(main, ["run", str(TRACES / "matmul_gelu.yaml")])
    assert r.exit_code == 2
    assert r.output.strip().startswith("error: this machine ran out of memory; try --mode timing")
    assert "internal error" not in r.output and len(r.output.strip().splitlines()) == 1
