"""trnsim.sweep: points, rows, errors, resuming, and the same table bit for bit whether the points
run in this process, on a Dask LocalCluster (`workers=2`), or on a scheduler and workers started
as separate processes on 127.0.0.1 (`scheduler=`).

Kept fast: small traces in timing mode, a dozen points; the external cluster is started once for
the module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from trnsim import __version__
from trnsim.config import load_chip
from trnsim.errors import TrnsimError
from trnsim.runtime.session import run_program
from trnsim.sweep import parse_grid, run, run_sweep, table
from trnsim.sweep.bundle import TraceBundle, forget
from trnsim.sweep.points import config_hash
from trnsim.sweep.worker import simulate
from trnsim.trace import load

ROOT = Path(__file__).resolve().parents[2]
GEMM = str(ROOT / "traces" / "gemm_double_buffered.yaml")
STREAM = str(ROOT / "traces" / "weight_stream.yaml")
TWO_STREAMS = str(ROOT / "traces" / "two_streams.yaml")
GOLDEN = ROOT / "tests" / "golden"

# 2 traces x 2 chips x 3 SBUF sizes = 12 points: 8KiB fails while running (the tiles do not fit
# in SBUF), 4XB before (not a size); the others complete
SWEEP = dict(
    traces=[GEMM, STREAM],
    chips=["trn2", "trn3"],
    grid=["core.sbuf.partition_bytes=224KiB,8KiB,4XB"],
    mode="timing",
)


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The reference: SWEEP run in this process, and its CSV bytes."""
    out = tmp_path_factory.mktemp("serial") / "t.csv"
    result = run_sweep(**SWEEP, out=out)
    return result, out.read_bytes()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A Dask scheduler and one worker process (2 worker threads would share the GIL: 2
    processes of 1 thread), started as separate programs on 127.0.0.1, in a folder of their own
    (the workers get every file they need with the tasks). Yields the scheduler's address."""
    pytest.importorskip("distributed")
    home = tmp_path_factory.mktemp("cluster")
    info = home / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's trnsim, not an installed one
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(info),
            ],
            cwd=home,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    "--scheduler-file",
                    str(info),
                    "--nworkers",
                    "2",
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                    "--local-directory",
                    str(home),
                ],
                cwd=home,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        from distributed import Client

        address = json.loads(info.read_text())["address"]
        with Client(address, timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)
        assert address.startswith("tcp://127.0.0.1:")
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


# -- the table ------------------------------------------------------------------------------------


def test_rows_come_in_grid_order_with_their_columns(serial):
    result, _ = serial
    assert result.columns == table.columns(["core.sbuf.partition_bytes"])
    assert result.columns[:3] == ["trace", "chip", "core.sbuf.partition_bytes"]
    got = [(r["trace"], r["chip"], r["core.sbuf.partition_bytes"]) for r in result.rows]
    assert got == [
        (t, c, v)
        for t in (GEMM, STREAM)
        for c in ("trn2", "trn3")
        for v in ("224KiB", "8KiB", "4XB")
    ]
    assert (result.points, result.ran, result.skipped, result.failed) == (12, 8, 0, 8)
    for r in result.rows:
        assert (r["mode"], r["set"], r["trnsim_version"]) == ("timing", "", __version__)


def test_a_row_holds_the_runs_figures(serial):
    """The gemm point on trn2 at its own SBUF size is the golden run, in timing mode."""
    result, _ = serial
    row = result.rows[0]
    golden = json.loads((GOLDEN / "gemm_double_buffered.json").read_text())
    assert row["error"] is None
    assert row["device_time_ns"] == golden["device_time_ns"] == 14581.838
    assert row["total_time_ns"] == golden["total_time_ns"]
    assert row["flops"] == 2 * 128 * 512 * 2048
    assert row["peak_fraction"] == golden["peak_fraction"]
    assert (row["hbm_bytes_read"], row["hbm_bytes_written"]) == (
        128 * 512 * 2 + 512 * 2048 * 2,
        128 * 2048 * 2,
    )
    assert row["hbm_bandwidth_bytes_per_s"] == golden["hbm"]["bandwidth_bytes_per_s"]
    assert (row["dma_bytes"], row["dma_transfers"]) == (2752512, 24)
    util = golden["engines"]["core0.tensor"]["utilization"]
    assert row["tensor_util_mean"] == row["tensor_util_max"] == util
    assert row["vector_util_max"] == 0.0
    assert row["sbuf_peak_bytes"] == golden["memory"]["sbuf_peak_bytes"]
    assert row["config_hash"] == config_hash(
        load_chip("trn2", ["core.sbuf.partition_bytes=224KiB"])
    )
    assert row["config_hash"] == config_hash(load_chip("trn2"))  # 224KiB is trn2's own
    assert row["trace_hash"] == TraceBundle.read(GEMM, [{}])[0].digest
    stream = result.rows[6]  # weight_stream, trn2, 224KiB, its default params
    assert stream["flops"] == 2 * 8 * 512 * 512 * 16


def test_failed_points_carry_their_error_and_the_others_complete(serial):
    result, _ = serial
    by = {
        (Path(r["trace"]).stem, r["chip"], r["core.sbuf.partition_bytes"]): r for r in result.rows
    }
    for trace in ("gemm_double_buffered", "weight_stream"):
        for chip in ("trn2", "trn3"):
            assert by[trace, chip, "224KiB"]["error"] is None
            assert by[trace, chip, "224KiB"]["device_time_ns"] > 0
            small, bad = by[trace, chip, "8KiB"], by[trace, chip, "4XB"]
            assert "SBUF" in small["error"] and small["device_time_ns"] is None
            assert small["config_hash"] == config_hash(
                load_chip(chip, ["core.sbuf.partition_bytes=8KiB"])
            )
            assert bad["error"] == (
                "--grid core.sbuf.partition_bytes=4XB: core.sbuf.partition_bytes: expected a "
                "size like '224KiB' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got '4XB'"
            )
            assert bad["config_hash"] == "" and bad["flops"] is None
            assert "\n" not in small["error"]


def test_engines_are_aggregated_by_kind_over_cores():
    """two_streams runs on physical cores 0 and 2: each kind's mean and max over both."""
    result = run_sweep([TWO_STREAMS], ["trn2"], mode="timing")
    golden = json.loads((GOLDEN / "two_streams.json").read_text())["engines"]
    row = result.rows[0]
    scalar = [golden["core0.scalar"]["utilization"], golden["core2.scalar"]["utilization"]]
    assert row["scalar_util_mean"] == sum(scalar) / 2
    assert row["scalar_util_max"] == max(scalar) == golden["core0.scalar"]["utilization"]
    assert row["tensor_util_max"] == golden["core2.tensor"]["utilization"]
    assert row["tensor_util_mean"] == golden["core2.tensor"]["utilization"] / 2


def test_param_grid_sets_the_traces_params():
    result = run_sweep([STREAM], ["trn2"], ["param.batch=4,16"], params=["tiles=2"], mode="timing")
    assert [r["param.batch"] for r in result.rows] == ["4", "16"]
    assert [r["flops"] for r in result.rows] == [2 * b * 512 * 512 * 2 for b in (4, 16)]
    assert [r["set"] for r in result.rows] == ["param.tiles=2"] * 2
    bad = run_sweep([STREAM], ["trn2"], ["param.bach=4"], mode="timing").rows[0]
    assert bad["error"].startswith(f"{STREAM}:")
    assert "--param bach=4: unknown param 'bach' (did you mean 'batch'?)" in bad["error"]


def test_default_chip_and_mode_come_from_the_trace():
    result = run_sweep([GEMM], grid={"hbm.bandwidth": ["2TB/s"]})
    row = result.rows[0]
    assert (row["chip"], row["mode"], row["error"]) == ("trn2", "functional", None)
    assert row["config_hash"] == config_hash(load_chip("trn2", ["hbm.bandwidth=2TB/s"]))


def test_an_unreadable_or_broken_trace_fails_its_points_only(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("trnsim: 1\ntensors: [\n")
    result = run_sweep([str(tmp_path / "missing.yaml"), str(broken), GEMM], ["trn2"], mode="timing")
    missing, bad, good = result.rows
    assert missing["error"].startswith(f"{tmp_path / 'missing.yaml'}:1: trace: cannot read")
    assert bad["error"].startswith(f"{broken}:") and "syntax" in bad["error"]
    assert good["error"] is None and result.failed == 2


# -- the same table wherever it runs ---------------------------------------------------------------


def test_a_local_cluster_gives_the_same_table_bit_for_bit(serial, tmp_path):
    pytest.importorskip("distributed")
    out = tmp_path / "t.csv"
    result = run_sweep(**SWEEP, out=out, workers=2)
    assert out.read_bytes() == serial[1]
    assert result.rows == serial[0].rows and result.failed == 8


def test_a_scheduler_with_workers_gives_the_same_table_bit_for_bit(serial, cluster, tmp_path):
    out = tmp_path / "t.csv"
    seen = []
    result = run_sweep(**SWEEP, out=out, scheduler=cluster, progress=lambda *a: seen.append(a))
    assert out.read_bytes() == serial[1]
    assert result.rows == serial[0].rows
    # 4 points fail before running; the 8 others complete one by one, 4 of them with an error
    assert seen[0] == (4, 12, 4) and seen[-1] == (12, 12, 8)
    assert [s[0] for s in seen] == list(range(4, 13))


def test_init_files_travel_with_the_trace(tmp_path, cluster):
    """A trace whose tiles start from .npy files (one beside it, one in a sibling folder, which
    --allow-outside-files allows) runs on the workers with no access to the files: they are
    moved before the sweep."""
    folder, data = tmp_path / "traces", tmp_path / "data"
    folder.mkdir()
    data.mkdir()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 128)).astype(np.float32)
    w = rng.standard_normal((128, 512)).astype(np.float32)
    np.save(folder / "x.npy", x)
    np.save(data / "w.npy", w)
    trace = folder / "mm.yaml"
    trace.write_text(
        "trnsim: 1\nmode: functional\ntiles:\n"
        "  x: {memory: sbuf, shape: [128, 128], dtype: float32, init: {file: x.npy}}\n"
        "  w: {memory: sbuf, shape: [128, 512], dtype: float32, init: {file: ../data/w.npy}}\n"
        "  acc: {memory: psum, shape: [128, 512], dtype: float32}\n"
        "instructions:\n  - {op: matmul, stationary: x, moving: w, dst: acc}\n"
    )
    refused, _ = TraceBundle.read(str(trace), [{}])  # the file outside is neither read nor loaded
    assert [name for name, _ in refused.files] == ["x.npy"]
    with pytest.raises(TrnsimError, match=r"mm\.yaml:5: .*'\.\./data/w\.npy' is outside"):
        refused.load({})
    bundle, _ = TraceBundle.read(str(trace), [{}], allow_outside_files=True)
    assert [name for name, _ in bundle.files] == ["../data/w.npy", "x.npy"]
    want = run_program(load(trace, allow_outside_files=True), load_chip("trn2"))
    want_figures = table.figures(want.summary)
    shutil.rmtree(data)
    (folder / "x.npy").unlink()
    try:  # here, from the bundle alone
        got = bundle.load({})
        np.testing.assert_array_equal(
            run_program(got, load_chip("trn2")).tile("main", "acc"), want.tile("main", "acc")
        )
        assert simulate(bundle, {}, load_chip("trn2"), None)["figures"] == want_figures
    finally:
        forget()
    from distributed import Client

    with Client(cluster) as client:  # on a worker
        res = client.submit(simulate, bundle, {}, load_chip("trn2"), None, pure=False).result()
    assert res == {"version": __version__, "figures": want_figures, "error": None}


def test_the_trace_hash_covers_text_and_init_files(tmp_path):
    (tmp_path / "x.npy").write_bytes(b"")
    np.save(tmp_path / "x.npy", np.zeros((128, 64), np.float32))
    trace = tmp_path / "t.yaml"
    text = (
        "trnsim: 1\ntiles:\n  x: {memory: sbuf, shape: [128, 64], dtype: float32, "
        "init: {file: x.npy}}\ninstructions:\n  - {op: activation, func: copy, src: x, "
        "dst: x}\n"
    )
    trace.write_text(text)
    first = TraceBundle.read(str(trace), [{}])[0].digest
    np.save(tmp_path / "x.npy", np.ones((128, 64), np.float32))
    second = TraceBundle.read(str(trace), [{}])[0].digest
    trace.write_text(text + "# a comment\n")
    third = TraceBundle.read(str(trace), [{}])[0].digest
    assert len({first, second, third}) == 3
    assert TraceBundle.read(str(trace), [{}])[0].digest == third  # and it is deterministic


# -- resuming -------------------------------------------------------------------------------------


def test_resuming_runs_only_the_missing_and_failed_points(tmp_path, monkeypatch):
    import trnsim.sweep.execute as runner

    calls = []

    def counting(bundle, params, cfg, mode):
        calls.append(cfg.hbm.bandwidth)
        return simulate(bundle, params, cfg, mode)

    monkeypatch.setattr(runner, "simulate", counting)
    out = tmp_path / "t.csv"
    grid = ["hbm.bandwidth=1TB/s,2TB/s"]
    first = run_sweep(
        [GEMM], ["trn2"], grid + ["core.sbuf.partition_bytes=224KiB,8KiB"], mode="timing", out=out
    )
    assert (first.ran, first.failed, len(calls)) == (4, 2, 4)
    calls.clear()
    # the same sweep with a third bandwidth: 2 new points and the 2 failed ones run
    again = run_sweep(
        [GEMM],
        ["trn2"],
        ["hbm.bandwidth=1TB/s,2TB/s,4TB/s", "core.sbuf.partition_bytes=224KiB,8KiB"],
        mode="timing",
        out=out,
    )
    assert (again.points, again.ran, again.skipped, again.failed) == (6, 4, 2, 3)
    assert sorted(calls) == [1e12, 2e12, 4e12, 4e12]
    # ... and its table is the one a fresh sweep writes
    fresh = tmp_path / "fresh.csv"
    run_sweep(
        [GEMM],
        ["trn2"],
        ["hbm.bandwidth=1TB/s,2TB/s,4TB/s", "core.sbuf.partition_bytes=224KiB,8KiB"],
        mode="timing",
        out=fresh,
    )
    assert out.read_bytes() == fresh.read_bytes()
    calls.clear()
    # another --set, mode or trace content is another point
    assert (
        run_sweep(
            [GEMM],
            ["trn2"],
            ["hbm.bandwidth=1TB/s,2TB/s,4TB/s", "core.sbuf.partition_bytes=224KiB,8KiB"],
            sets=["core.dma.transfer_setup=1us"],
            mode="timing",
            out=out,
        ).ran
        == 6
    )
    assert len(out.read_text().splitlines()) == 1 + 12  # the other sweep's rows are kept
    done = run_sweep(
        [GEMM],
        ["trn2"],
        ["hbm.bandwidth=4TB/s", "core.sbuf.partition_bytes=224KiB"],
        mode="timing",
        out=out,
    )
    assert (done.ran, done.skipped) == (0, 1)


def test_an_interrupted_sweep_keeps_the_points_done(tmp_path, monkeypatch):
    import trnsim.sweep.execute as runner

    calls = []

    def interrupted(*task):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(task)
        return simulate(*task)

    monkeypatch.setattr(runner, "simulate", interrupted)
    out = tmp_path / "t.csv"
    grid = ["hbm.bandwidth=1TB/s,2TB/s,3TB/s,4TB/s"]
    with pytest.raises(KeyboardInterrupt):
        run_sweep([GEMM], ["trn2"], grid, mode="timing", out=out)
    _, rows = table.read(out)
    assert [r["hbm.bandwidth"] for r in rows] == ["1TB/s", "2TB/s"]
    monkeypatch.setattr(runner, "simulate", simulate)
    again = run_sweep([GEMM], ["trn2"], grid, mode="timing", out=out)
    assert (again.ran, again.skipped) == (2, 2)
    assert [r["hbm.bandwidth"] for r in table.read(out)[1]] == ["1TB/s", "2TB/s", "3TB/s", "4TB/s"]


def test_a_worker_with_another_trnsim_fails_its_points(monkeypatch):
    import trnsim.sweep.execute as runner

    monkeypatch.setattr(runner, "simulate", lambda *task: {**simulate(*task), "version": "0.0"})
    row = run_sweep([GEMM], ["trn2"], mode="timing").rows[0]
    assert row["error"] == (
        f"the worker runs trnsim 0.0, this sweep {__version__}; expected "
        "the same trnsim on every worker"
    )
    assert row["device_time_ns"] is None


def test_resuming_reads_a_table_cut_short(tmp_path):
    out = tmp_path / "t.csv"
    run_sweep([GEMM], ["trn2"], ["hbm.bandwidth=1TB/s,2TB/s"], mode="timing", out=out)
    full = out.read_bytes()
    out.write_bytes(full[:-40])  # killed while writing the last row
    again = run_sweep([GEMM], ["trn2"], ["hbm.bandwidth=1TB/s,2TB/s"], mode="timing", out=out)
    assert (again.ran, again.skipped) == (1, 1)
    assert out.read_bytes() == full


def test_resuming_needs_the_same_columns(tmp_path):
    out = tmp_path / "t.csv"
    run_sweep([GEMM], ["trn2"], ["hbm.bandwidth=1TB/s"], mode="timing", out=out)
    with pytest.raises(
        TrnsimError,
        match=r"t.csv: the table's columns are not this sweep's "
        r"\(it lacks param.batch; it has hbm.bandwidth\); "
        r"expected a table of a sweep with the same --grid",
    ):
        run_sweep([GEMM], ["trn2"], ["param.batch=1"], mode="timing", out=out)
    out.write_text("")
    with pytest.raises(TrnsimError, match="t.csv: the file is empty"):
        run_sweep([GEMM], ["trn2"], ["hbm.bandwidth=1TB/s"], mode="timing", out=out)


def test_parquet_tables_hold_the_same_rows(tmp_path, serial):
    pytest.importorskip("pyarrow")
    out = tmp_path / "t.parquet"
    result = run_sweep(**SWEEP, out=out)
    cols, rows = table.read(out)
    assert cols == serial[0].columns and rows == serial[0].rows == result.rows
    assert run_sweep(**SWEEP, out=out).ran == 4  # resumed: the 4 failed points again


def test_parquet_without_pyarrow_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(
        TrnsimError,
        match=r"t.parquet: a Parquet table needs pyarrow \(pip "
        r"install 'trnsim\[parquet\]'\)",
    ):
        run_sweep([GEMM], ["trn2"], mode="timing", out=tmp_path / "t.parquet")


# -- options --------------------------------------------------------------------------------------


def test_parse_grid():
    axes = parse_grid(["hbm.bandwidth=1TB/s, 2TB/s", "core.lnc_allowed=[1,2],[2]"])
    assert [(a.key, a.values) for a in axes] == [
        ("hbm.bandwidth", ("1TB/s", "2TB/s")),
        ("core.lnc_allowed", ("[1,2]", "[2]")),
    ]
    assert parse_grid({"param.batch": [8, 64], "x.flag": [True]})[1].values == ("true",)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(grid=["hbm.bandwidth"]), "--grid hbm.bandwidth: expected KEY=V1,V2,..."),
        (
            dict(grid=["hbm.bandwidth=1TB/s,,2TB/s"]),
            "--grid hbm.bandwidth=1TB/s,,2TB/s: an empty value",
        ),
        (dict(grid=["a=1", "a=2"]), "--grid a=2: key a is swept twice"),
        (dict(grid=["a=1,1"]), "--grid a=1,1: a value is given twice"),
        (dict(grid=["chip=trn1"]), "--grid chip=trn1: chip is a column of the table"),
        (
            dict(grid=["hbm.bandwidth=1TB/s"], sets=["hbm.bandwidth=2TB/s"]),
            "--grid hbm.bandwidth: also set with --set or --param",
        ),
        (dict(grid=["param.batch=1"], params=["batch=2"]), "--grid param.batch: also set"),
        (dict(sets=["hbm.bandwidth"]), "--set hbm.bandwidth: expected KEY=VALUE"),
        (dict(workers=0), "--workers 0: expected a number of processes >= 1"),
        (dict(workers=2, scheduler="tcp://127.0.0.1:1"), "--workers 2 with --scheduler"),
        (dict(mode="fast"), "--mode fast: expected functional or timing"),
    ],
)
def test_option_errors(kw, message):
    with pytest.raises(TrnsimError) as info:
        run_sweep([GEMM], **kw)
    assert str(info.value).startswith(message), str(info.value)


def test_no_scheduler_there_is_a_one_line_error(monkeypatch):
    pytest.importorskip("distributed")
    import trnsim.sweep.execute as runner

    monkeypatch.setattr(runner, "CONNECT_TIMEOUT", "1s")
    with pytest.raises(
        TrnsimError,
        match=r"^--scheduler tcp://127.0.0.1:9: cannot connect .*; "
        r"expected the address of a running Dask scheduler",
    ):
        run_sweep([GEMM], ["trn2"], mode="timing", scheduler="tcp://127.0.0.1:9")


def test_without_dask_workers_are_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(
        TrnsimError,
        match=r"--workers 2 runs the sweep on Dask, which is not "
        r"installed; expected pip install 'trnsim\[sweep\]'",
    ):
        run_sweep([GEMM], ["trn2"], mode="timing", workers=2)
    assert run_sweep([GEMM], ["trn2"], mode="timing").rows[0]["error"] is None  # 1 needs none


def test_run_returns_a_dataframe():
    pd = pytest.importorskip("pandas")
    df = run(GEMM, "trn2", {"hbm.bandwidth": ["1TB/s", "2TB/s"]}, mode="timing")
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns) == table.columns(["hbm.bandwidth"])
    assert list(df["hbm.bandwidth"]) == ["1TB/s", "2TB/s"]
    assert df["device_time_ns"].iloc[1] == 14581.838  # trn2's own 2.9TB/s gives the same
