"""What users coming from CUDA call, found failing on `neuron` and fixed (docs/torch.md, "CUDA
habits", "Device indices"): rng state and fork_rng, pinned memory, non-blocking copies to the
host, record_stream, memory summaries and limits, torch.accelerator, torch.compile's modes and
inductor's error, the autoload entry point; and what PyTorch 2.13 does not allow from Python,
pinned down so that a PyTorch that allows it shows here."""

import os
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
import trnsim.torch  # noqa: E402,F401
from trnsim.torch import state  # noqa: E402


@pytest.fixture
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


@pytest.fixture
def core0():
    """Leave the current logical core as it was."""
    before = torch.neuron.current_device()
    yield
    torch.neuron.set_device(before)


# -- random numbers ------------------------------------------------------------------------------


def test_rng_state_is_the_cpu_generators(no_warnings):
    torch.neuron.manual_seed(3)
    st = torch.neuron.get_rng_state()
    assert torch.equal(st, torch.get_rng_state())
    a = torch.randn(4, device="neuron")
    torch.neuron.set_rng_state(st)
    assert torch.equal(torch.randn(4, device="neuron").cpu(), a.cpu())
    states = torch.neuron.get_rng_state_all()
    assert len(states) == torch.neuron.device_count()
    torch.neuron.set_rng_state_all(states)
    torch.neuron.manual_seed_all(5)
    assert torch.neuron.initial_seed() == 5
    torch.neuron.seed()


def test_fork_rng_on_neuron_restores_the_state_without_a_warning(no_warnings):
    """torch.random.fork_rng(device_type="neuron") raised AttributeError (no get_rng_state);
    on a chip of several logical cores it must not warn that it initialises each."""
    assert torch.neuron.device_count() > 1
    torch.manual_seed(0)
    with torch.random.fork_rng(device_type="neuron"):
        inside = torch.randn(8, device="neuron").cpu()
    after = torch.randn(8, device="neuron").cpu()
    assert torch.equal(inside, after)
    with torch.random.fork_rng():  # the current accelerator's: neuron
        torch.randn(8, device="neuron")
    assert not torch.equal(torch.randn(8, device="neuron").cpu(), after)


def test_checkpoint_replays_dropout_with_the_same_random_numbers():
    """torch.utils.checkpoint recomputes with the random numbers of the forward (the CPU
    generator's state, which it restores, is neuron's)."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16).to("neuron")
    x = torch.randn(4, 16, device="neuron", requires_grad=True)

    def f(x):
        return torch.nn.functional.dropout(lin(x), 0.5, training=True)

    torch.manual_seed(1)
    f(x).sum().backward()
    want = x.grad.cpu()
    x.grad = None
    torch.manual_seed(1)
    checkpoint(f, x, use_reentrant=False).sum().backward()
    assert torch.equal(x.grad.cpu(), want)


# -- pinned memory and non-blocking copies --------------------------------------------------------


def test_pin_memory_is_a_copy_marked_pinned(no_warnings):
    t = torch.arange(12.0).reshape(3, 4).t()
    p = t.pin_memory()
    assert p.is_pinned() and not t.is_pinned()
    assert torch.equal(p, t) and p.stride() == t.stride()
    assert p.pin_memory() is p  # pinned already: itself
    d = p.to("neuron", non_blocking=True)
    assert torch.equal(d.cpu(), t)
    with pytest.raises(RuntimeError, match="cannot pin"):
        d.pin_memory()  # as CUDA: only CPU tensors


def test_dataloader_pins_its_batches(no_warnings):
    ds = torch.utils.data.TensorDataset(torch.arange(10.0), torch.arange(10))
    batches = list(torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True))
    assert [len(b[0]) for b in batches] == [4, 4, 2]
    assert all(x.is_pinned() for b in batches for x in b)
    assert torch.equal(torch.cat([b[0] for b in batches]), torch.arange(10.0))


def test_non_blocking_copy_to_the_host():
    """`.to("cpu", non_blocking=True)` raised NotImplementedError (a pinned host buffer)."""
    x = torch.randn(5, 6, device="neuron")
    y = x.to("cpu", non_blocking=True)
    torch.neuron.synchronize()
    assert y.device.type == "cpu" and y.is_pinned()  # as CUDA's
    assert torch.equal(y, x.cpu())
    z = x.to("cpu", torch.float64, non_blocking=True)
    assert z.dtype == torch.float64 and torch.equal(z, x.cpu().double())
    assert torch.equal(x.to(torch.float16).cpu(), x.cpu().half())  # other moves unchanged


def test_a_non_blocking_copy_to_the_host_does_not_make_the_host_wait():
    """As CUDA's into pinned memory (FSDP2's offloaded gradients): the host goes on while the
    device still runs the work before the copy (its values are there at once; an event after
    it is what to wait on). A blocking `.cpu()` waits for the device."""
    from trnsim.torch import state

    host = state.get().devices[0].ctx.host
    a = torch.randn(1024, 1024, device="neuron")
    torch.neuron.synchronize()
    mark = torch.neuron.Event(enable_timing=True)
    a @ a @ a @ a
    mark.record()  # the device's end of the matmuls
    y = a.to("cpu", non_blocking=True)
    issued = host.now
    mark.synchronize()
    assert issued < mark.rt.time_ps  # the host went on before the device got there
    assert torch.equal(y, a.cpu()) and y.is_pinned()
    a @ a @ a @ a
    mark.record()
    a.cpu()
    assert host.now > mark.rt.time_ps  # a blocking copy: the host waited


# -- streams --------------------------------------------------------------------------------------


def test_record_stream_takes_a_neuron_stream(no_warnings):
    s = torch.neuron.Stream()
    assert isinstance(s, torch.Stream) and s.device == torch.device("neuron", 0)
    assert s.stream_id != torch.neuron.Stream().stream_id
    x = torch.ones(64, device="neuron")
    with torch.neuron.stream(s):
        y = x * 2
    y.record_stream(s)
    x.record_stream(torch.neuron.current_stream())
    del y
    s.synchronize()
    assert torch.accelerator.current_stream() == torch.neuron.current_stream()
    torch.accelerator.set_stream(s)
    try:
        assert torch.neuron.current_stream() == s
    finally:
        torch.neuron.set_stream(torch.neuron.default_stream())


# -- memory ---------------------------------------------------------------------------------------


def test_memory_summary_and_snapshot():
    x = torch.empty(1000, device="neuron")
    text = torch.neuron.memory_summary()
    assert "neuron memory summary, device ID 0" in text
    assert "Allocated memory" in text and "Reserved memory" in text
    segments = torch.neuron.memory_snapshot()
    ptr = x.untyped_storage().data_ptr()
    (seg,) = [s for s in segments if s["address"] == ptr]
    assert seg["allocated_size"] == seg["total_size"] >= 4000
    assert seg["blocks"][0]["state"] == "active_allocated"
    del x
    (seg,) = [s for s in torch.neuron.memory_snapshot() if s["address"] == ptr]
    assert seg["blocks"][0]["state"] == "inactive" and seg["allocated_size"] == 0
    torch.neuron.reset_accumulated_memory_stats()
    assert torch.neuron.memory_stats()["allocated_bytes.all.allocated"] == 0


def test_per_process_memory_fraction_limits_what_the_shim_reserves():
    alloc = state.get().allocator
    total = alloc.device.memory
    torch.neuron.empty_cache()
    try:
        torch.neuron.set_per_process_memory_fraction((alloc.reserved + 2**20) / total)
        a = torch.empty(2**19, dtype=torch.uint8, device="neuron")  # within the limit
        with pytest.raises(torch.OutOfMemoryError, match=r"set_per_process_memory_fraction"):
            torch.empty(2 * 2**20, dtype=torch.uint8, device="neuron")
        del a
        b = torch.empty(2**19, dtype=torch.uint8, device="neuron")  # the pooled block
        del b
    finally:
        torch.neuron.set_per_process_memory_fraction(1.0)
    assert torch.neuron.get_per_process_memory_fraction() == 1.0
    with pytest.raises(ValueError, match="Allowed range"):
        torch.neuron.set_per_process_memory_fraction(1.5)
    with pytest.raises(TypeError, match="float"):
        torch.neuron.set_per_process_memory_fraction(1)


# -- torch.accelerator ----------------------------------------------------------------------------


def test_accelerator_memory_functions_answer_for_neuron():
    """torch.accelerator.memory.memory_allocated() hit an INTERNAL ASSERT (not a
    DeviceAllocator); empty_host_cache crashed the process."""
    x = torch.empty(300, device="neuron")
    mem = torch.accelerator.memory
    assert mem.memory_allocated() == torch.neuron.memory_allocated() > 0
    assert torch.accelerator.memory_allocated(0) == torch.neuron.memory_allocated()
    assert mem.max_memory_reserved() == torch.neuron.max_memory_reserved()
    assert mem.memory_stats("neuron")["allocated_bytes.all.current"] > 0
    assert mem.get_memory_info() == torch.neuron.mem_get_info()
    mem.reset_peak_memory_stats()
    mem.reset_accumulated_memory_stats()
    mem.empty_cache()
    mem.empty_host_cache()
    del x


def test_accelerator_device_index_moves_the_current_core(core0):
    """torch.accelerator.set_device_index(1) was silently ignored."""
    torch.accelerator.set_device_index(1)
    assert torch.neuron.current_device() == torch.accelerator.current_device_index() == 1
    with torch.accelerator.device_index(2):
        assert torch.neuron.current_device() == 2
    assert torch.neuron.current_device() == 1
    n = torch.neuron.device_count()
    with pytest.raises(RuntimeError) as mine:
        torch.neuron.set_device(n)
    with pytest.raises(RuntimeError) as acc:
        torch.accelerator.set_device_index(n)
    want = f"neuron:{n}: invalid device ordinal; the chip has {n} logical cores"
    assert str(acc.value) == str(mine.value) == want
    torch.accelerator.set_device_index(-1)  # negative: no change, as documented by torch
    assert torch.neuron.current_device() == 1


# -- device indices -------------------------------------------------------------------------------


def test_a_plain_process_drives_every_logical_core(core0):
    n = len(state.get().devices)
    assert torch.neuron.device_count() == torch.accelerator.device_count() == n
    torch.neuron.set_device(n - 1)
    assert torch.neuron.current_device() == n - 1


def test_a_rank_of_a_distributed_job_drives_one_core(monkeypatch, core0, no_warnings):
    """torchrun's environment: device_count() is 1, set_device(LOCAL_RANK) is accepted and
    current_device() stays 0 (the only index PyTorch places a Python device's tensors on)."""
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert torch.neuron.device_count() == torch.accelerator.device_count() == 1
    torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
    assert torch.neuron.current_device() == torch.accelerator.current_device_index() == 0
    x = torch.ones(2, device=torch.device("neuron", torch.neuron.current_device()))
    torch.neuron.synchronize(3)
    assert torch.neuron.memory_allocated(3) == torch.neuron.memory_allocated()
    with pytest.raises(RuntimeError, match=r"neuron:4: invalid device ordinal; .* 0 to 3"):
        torch.neuron.set_device(4)
    with torch.random.fork_rng(device_type="neuron"):
        x.normal_()


def test_a_process_group_makes_the_process_a_rank(core0):
    """A job started without a launcher's environment (mp.spawn) is a rank once its default
    process group is up."""
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not built")
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        assert torch.neuron.device_count() == 1
    finally:
        dist.destroy_process_group()
    assert torch.neuron.device_count() == len(state.get().devices)


# -- torch.compile --------------------------------------------------------------------------------


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))) * 2 + 1


def _host_launches(fn, x) -> int:
    """Host launches (of kernels or graphs) while `fn(x)` runs, after a warm-up call."""
    dev = state.get().device
    fn(x)
    torch.neuron.synchronize()
    before = len(dev.recorder.host_calls)
    fn(x)
    torch.neuron.synchronize()
    return len([c for c in dev.recorder.host_calls[before:] if c.op in ("launch", "graph.replay")])


@pytest.fixture
def compiler():
    from trnsim.torch import compile as neuron_compile

    neuron_compile.register()
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compile_modes(compiler):
    """mode= raised TypeError (unexpected keyword 'mode'): every mode captures the graph and
    replays it with one launch, but "max-autotune-no-cudagraphs", which launches each
    kernel."""
    torch.manual_seed(0)
    m = MLP().to("neuron")
    x = torch.randn(8, 16, device="neuron")
    want = m(x).cpu()
    counts = {}
    for mode in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        torch._dynamo.reset()
        f = torch.compile(m, backend="neuron", mode=mode)
        with torch.no_grad():
            assert torch.equal(f(x).cpu(), want)
            counts[mode] = _host_launches(f, x)
    assert counts["default"] == counts["reduce-overhead"] == counts["max-autotune"] == 1
    assert counts["max-autotune-no-cudagraphs"] > 1
    torch._dynamo.reset()
    with torch.no_grad():
        g = torch.compile(m, backend="neuron", options={"triton.cudagraphs": False})
        assert _host_launches(g, x) == counts["max-autotune-no-cudagraphs"]
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match="'epilogue_fusion' are inductor's"):
        torch.compile(m, backend="neuron", options={"epilogue_fusion": True})(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="Unrecognized mode=fastest"):
        torch.compile(m, backend="neuron", mode="fastest")(x)


def test_the_default_backend_on_neuron_is_a_clear_error(compiler):
    """inductor failed with `KeyError: 'neuron'` deep in its code generation."""
    m = MLP().to("neuron")
    with pytest.raises(Exception, match=r'inductor, cannot compile .*backend="neuron"'):
        torch.compile(m)(torch.randn(2, 16, device="neuron"))


# -- scripts that cannot be edited ----------------------------------------------------------------


def _run(code: str, **env) -> subprocess.CompletedProcess:
    env = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_autoload_gives_neuron_to_a_plain_import_torch():
    from importlib.metadata import entry_points

    if not any(e.value == "trnsim.torch_autoload:autoload"
               for e in entry_points(group="torch.backends")):  # fmt: skip
        pytest.skip("trnsim is not installed with its entry points (pip install -e .)")
    code = "import torch; print(torch.ones(2, device='neuron').sum().item())"
    on = _run(code, TRNSIM_TORCH_AUTOLOAD="1")
    assert on.returncode == 0, on.stderr
    assert on.stdout.split() == ["2.0"]
    off = _run(
        "import sys, torch; print('trnsim.torch' in sys.modules, "
        "torch._C._get_privateuse1_backend_name())",
        TRNSIM_TORCH_AUTOLOAD=None,
    )
    assert off.stdout.split() == ["False", "privateuseone"], off.stderr
    bad = _run("import torch", TRNSIM_TORCH_AUTOLOAD="yes")
    assert bad.returncode != 0 and "TRNSIM_TORCH_AUTOLOAD='yes': expected 1" in bad.stderr


# -- not possible from Python in PyTorch 2.13 (docs/torch.md, "Limits") ---------------------------


def test_what_pytorch_does_not_allow_from_python_still_fails():
    """Each needs a C++ hook of PrivateUse1HooksInterface that Python cannot override."""
    hook = "implement `{}` at the same time for PrivateUse1"
    with pytest.raises(NotImplementedError, match=hook.format("getNewGenerator")):
        torch.Generator(device="neuron")
    with pytest.raises(NotImplementedError, match=hook.format("getPinnedMemoryAllocator")):
        torch.empty(4, pin_memory=True)
    x = torch.ones(4, device="neuron")
    with pytest.raises(NotImplementedError, match=hook.format("resizePrivateUse1Bytes")):
        x.untyped_storage().resize_(0)
