"""torch.neuron: devices, streams and events on the simulated clock, memory statistics of the
caching allocator, the report; torch.accelerator answering for neuron."""

import pytest

torch = pytest.importorskip("torch")
import trnsim.torch  # noqa: E402
from trnsim.runtime import devices  # noqa: E402
from trnsim.torch import state  # noqa: E402
from trnsim.torch.allocator import rounded  # noqa: E402


def test_devices_are_the_logical_cores_of_the_chip():
    n = len(devices(state.get().cfg, "timing", state.get().lnc))
    assert torch.neuron.is_available()
    assert torch.neuron.device_count() == n
    with torch.neuron.device(n - 1):
        assert torch.neuron.current_device() == n - 1
    assert torch.neuron.current_device() == 0
    props = torch.neuron.get_device_properties(0)
    assert props.total_memory == state.get().devices[0].memory
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.device_count() == n


def test_set_device_chooses_the_logical_core_that_runs_the_ops():
    a = torch.randn(256, 256, device="neuron")
    torch.neuron.synchronize()
    core1 = state.get().devices[1]
    before = len([c for c in core1.recorder.host_calls if c.op == "launch"])
    with torch.neuron.device(1):
        a @ a
        assert torch.neuron.current_stream().device_index == 1
    assert not state.get().devices[0].default_stream._queue
    assert core1.default_stream._queue  # enqueued on logical core 1's default stream
    torch.neuron.synchronize(1)
    assert len([c for c in core1.recorder.host_calls if c.op == "launch"]) == before + 1


def test_configure_after_first_use_is_refused():
    torch.zeros(1, device="neuron")
    with pytest.raises(RuntimeError, match="already in use"):
        trnsim.torch.configure("trn3")


def _roofline_ps(m, k, n, dtype_bytes=4):
    chip = state.get()
    dev = chip.devices[0]
    flops = 2 * m * k * n / dev.peak_flops["float32"]
    hbm = chip.cfg.hbm.bandwidth * chip.lnc / chip.cfg.cores
    return max(flops, (m * k + k * n + m * n) * dtype_bytes / hbm) * 1e12


def test_event_timing_of_a_matmul_is_at_or_above_its_roofline_and_within_3x():
    a = torch.randn(512, 512, device="neuron")
    b = torch.randn(512, 512, device="neuron")
    a @ b  # the lowering is simulated once here
    torch.neuron.synchronize()
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    n = 10  # enough that the device, not the host's launches, is the bound
    start.record()
    for _ in range(n):
        a @ b
    end.record()
    end.synchronize()
    per = start.elapsed_time(end) * 1e9 / n  # ps
    roof = _roofline_ps(512, 512, 512)
    assert roof <= per <= 3 * roof


def test_streams_order_work_and_query_the_simulated_clock():
    a = torch.randn(512, 512, device="neuron")
    s = torch.neuron.Stream()
    torch.neuron.synchronize()
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream() == s
        a @ a
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    assert not s.query()  # the host is 10 us past the launch; the matmul takes longer
    s.synchronize()
    assert s.query()
    e = torch.neuron.Event()
    e.record(s)
    e.synchronize()
    assert e.query()
    with pytest.raises(RuntimeError, match="enable_timing=False"):
        e.elapsed_time(e)


def test_memory_statistics_follow_the_caching_allocator():
    torch.neuron.synchronize()
    torch.neuron.empty_cache()
    rt = state.get().devices[0]
    base = torch.neuron.memory_allocated()
    x = torch.empty(1000, 1000, device="neuron")  # 4,000,000 bytes
    size = rounded(4_000_000)
    assert torch.neuron.memory_allocated() == base + size
    assert torch.neuron.max_memory_allocated() >= base + size
    reserved = torch.neuron.memory_reserved()
    mallocs = rt.memory_stats()["allocation.all.allocated"]
    del x
    assert torch.neuron.memory_allocated() == base
    assert torch.neuron.memory_reserved() == reserved  # pooled, not given back
    y = torch.empty(1000, 1000, device="neuron")
    assert rt.memory_stats()["allocation.all.allocated"] == mallocs  # reused, no runtime call
    del y
    stats = torch.neuron.memory_stats()
    assert stats["allocated_bytes.all.current"] == base
    assert stats["reserved_bytes.all.current"] == reserved
    torch.neuron.empty_cache()
    assert torch.neuron.memory_reserved() == reserved - size
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == base
    assert torch.accelerator.memory_allocated() == base
    assert torch.accelerator.memory_reserved() == torch.neuron.memory_reserved()


def test_out_of_memory_is_torch_s_error_with_the_figures():
    before = torch.neuron.memory_stats()["num_ooms"]
    with pytest.raises(
        torch.OutOfMemoryError, match=r"Tried to allocate 1 TiB\. .* total capacity of 96 GiB"
    ):
        torch.empty(2**40, dtype=torch.uint8, device="neuron")
    assert torch.neuron.memory_stats()["num_ooms"] == before + 1


def test_accelerator_synchronize_runs_the_simulated_device():
    a = torch.randn(256, 256, device="neuron")
    a @ a
    rt = state.get().devices[0]
    assert rt.default_stream._queue  # enqueued, not yet simulated
    torch.accelerator.synchronize()
    assert not rt.default_stream._queue
    assert rt.host_time_ps == rt.env.now


def test_the_report_writes_a_perfetto_trace(tmp_path):
    import json

    (torch.ones(4, 4, device="neuron") * 3).sum()
    path = tmp_path / "run.json"
    torch.neuron.report(perfetto=path)
    events = json.loads(path.read_text())["traceEvents"]
    assert any(
        e.get("args", {}).get("detail") == "mul.Tensor" or "mul.Tensor" in str(e) for e in events
    )


def test_the_report_counts_modelled_and_estimated_ops():
    x = torch.randn(128, 256, device="neuron")
    stats = trnsim.torch.timing.timer().stats.get("cumsum.default")
    before = stats.estimated if stats else 0  # a number: the stats object counts on
    (x.exp() + 1).cumsum(-1)
    copies = trnsim.torch.timing.timer().copies
    before_copies = (copies.modelled, copies.estimated)
    x.to(torch.bfloat16)  # a cast: the library's copy
    x.t().contiguous()  # a permuted view made contiguous: the library's permute
    x[:, ::2].contiguous()  # a strided copy with gaps: estimated
    rep = torch.neuron.report()
    assert (rep.copies["modelled"], rep.copies["estimated"]) == (
        before_copies[0] + 2,
        before_copies[1] + 1,
    )
    assert rep.ops["exp.default"]["modelled"] >= 1
    assert rep.ops["cumsum.default"]["estimated"] == before + 1
    text = str(rep)
    assert f"{rep.modelled} modelled by the kernel library, {rep.estimated} estimated" in text
    # each op row shown says how it was timed (the table shows the 25 longest ops so far)
    for name, o in rep.ops.items():
        row = next((line for line in text.splitlines() if line.startswith(f"{name} ")), None)
        if row is not None:
            how = ("kernel library" if not o["estimated"] else
                   "roofline (estimated)" if not o["modelled"] else "both")  # fmt: skip
            assert row.endswith(how), row
    assert rep.device_ps == state.get().devices[0].env.now


def test_a_refused_allocation_empties_the_cache_and_retries():
    rt = state.get().devices[0]
    torch.neuron.empty_cache()
    saved = rt.max_backing_bytes
    rt.max_backing_bytes = rt.ctx.backed + 3 * 2**20  # room for 3 MiB of values more
    try:
        x = torch.empty(2 * 2**20, dtype=torch.uint8, device="neuron")
        del x  # pooled: still held from the runtime
        assert torch.neuron.memory_reserved() >= 2 * 2**20
        y = torch.empty(2 * 2**20 + 2**19, dtype=torch.uint8, device="neuron")  # 2.5 MiB
        assert torch.neuron.memory_reserved() == torch.neuron.memory_allocated()  # pool given back
        with pytest.raises(torch.OutOfMemoryError, match="functional-mode limit"):
            torch.empty(2 * 2**20, dtype=torch.uint8, device="neuron")
        del y
    finally:
        rt.max_backing_bytes = saved


def test_the_chip_comes_from_the_environment_when_not_configured():
    import os
    import subprocess
    import sys

    code = (
        "import torch, trnsim.torch; p = torch.neuron.get_device_properties(); "
        "print(p.chip, p.physical_cores, torch.neuron.device_count())"
    )
    env = {**os.environ, "TRNSIM_CHIP": "trn3", "TRNSIM_LNC": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    chip = devices("trn3", "timing", 1)
    assert out.stdout.split() == ["trn3", "1", str(len(chip))]


def test_simulate_timing_runs_each_launch_and_agrees_with_replay():
    """timing="simulate" runs every launch's lowered program on the chip: alone on the chip,
    a matmul takes what its replayed duration says."""
    import os
    import subprocess
    import sys

    code = (
        "import torch, trnsim.torch\n"
        "a = torch.randn(512, 512, device='neuron')\n"
        "a @ a\n"
        "torch.neuron.synchronize()\n"
        "s, e = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)\n"
        "s.record()\n"
        "for _ in range(4): a @ a\n"
        "e.record(); e.synchronize()\n"
        "rt = trnsim.torch.state.get().devices[0]\n"
        "print(s.elapsed_time(e), len(rt.recorder.spans) > 0)\n"
    )
    out = {}
    for timing in ("replay", "simulate"):
        env = {**os.environ, "TRNSIM_TIMING": timing}
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        ms, spans = run.stdout.split()
        out[timing] = (float(ms), spans)
    assert out["replay"][1] == "False" and out["simulate"][1] == "True"  # engines ran
    assert out["simulate"][0] == pytest.approx(out["replay"][0], rel=0.02)


def test_without_torch_the_import_says_how_to_install(tmp_path):
    """A `torch` that cannot be imported (a shadowing module here) gives one clear ImportError."""
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "torch.py").write_text("raise ImportError('no torch here')\n")
    code = "import trnsim.torch"
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[2]}"},
    )
    assert r.returncode == 1
    assert "ImportError: trnsim.torch needs PyTorch: pip install torch==2.13.0" in r.stderr
