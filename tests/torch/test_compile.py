"""torch.compile with the "neuron" backend: forward and backward graphs (aot_autograd) run on the
device with eager's values; their kernels replay as one runtime Graph (one host launch), runs
of elementwise ops of one shape fused; captured once per input signature."""

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import trnsim.torch  # noqa: E402,F401
from trnsim.torch import compile as neuron_compile  # noqa: E402
from trnsim.torch import graph, state, timing  # noqa: E402
from trnsim.units import seconds_to_ps  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    neuron_compile.register()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.b(nn.functional.gelu(self.a(x)))


class GatedMLP(nn.Module):
    """gelu(a(x)) * g(x): the gelu and the multiply fuse once `graph` moves the gelu down."""

    def __init__(self, d=32, h=64):
        super().__init__()
        self.a, self.g, self.b = nn.Linear(d, h), nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.b(F.gelu(self.a(x)) * self.g(x))


class TransformerBlock(nn.Module):
    """A GPT-style pre-norm block: causal attention (scaled_dot_product_attention), a GELU MLP."""

    def __init__(self, c=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.out = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = [y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v)]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


def _clock() -> int:
    """The host's simulated clock (ps) once the device is idle."""
    torch.neuron.synchronize()
    return state.get().device.host_time_ps


def _timed(fn, *args):
    t0 = _clock()
    r = fn(*args)
    return r, _clock() - t0


def test_a_compiled_module_runs_on_neuron_as_eager_does():
    torch.manual_seed(0)
    m = Block().to("neuron")
    x = torch.randn(8, 16, device="neuron")
    eager = m(x)
    compiled = torch.compile(m, backend="neuron")
    y = compiled(x)
    assert y.device.type == "neuron"
    assert torch.equal(y.cpu(), eager.cpu())
    y.sum().backward()
    assert m.a.weight.grad.device.type == "neuron"
    for _ in range(3):
        compiled(x)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def _train_both(make, x, steps=2):
    """Outputs and gradients of `steps` forward+backward passes, eager and compiled, of two
    copies of one model."""
    torch.manual_seed(0)
    eager = make().to("neuron")
    comp = copy.deepcopy(eager)
    compiled = torch.compile(comp, backend="neuron")
    got = {}
    for name, model, fn in (("eager", eager, eager), ("compiled", comp, compiled)):
        outs = []
        for _ in range(steps):
            model.zero_grad()
            y = fn(x)
            (y * y).mean().backward()
            outs.append(y.detach().cpu())
        got[name] = outs, {k: p.grad.cpu() for k, p in model.named_parameters()}
    return got


@pytest.mark.parametrize(
    "make, shape", [(GatedMLP, (16, 32)), (TransformerBlock, (2, 16, 32))], ids=["mlp", "block"]
)
def test_training_through_a_compiled_model_matches_eager(make, shape):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1)).to("neuron")
    got = _train_both(make, x)
    (ye, ge), (yc, gc) = got["eager"], got["compiled"]
    for a, b in zip(ye, yc):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert ge.keys() == gc.keys()
    for k in ge:
        torch.testing.assert_close(gc[k], ge[k], rtol=1e-5, atol=1e-6)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_the_default_backend_compiles_to_neuron_graphs(monkeypatch):
    made = []
    monkeypatch.setattr(graph.CompiledGraph, "__init__", _spy_init(made))
    torch.compiler.set_default_backend("neuron")
    try:
        m = Block().to("neuron")
        x = torch.randn(8, 16, device="neuron")
        with torch.no_grad():
            y = torch.compile(m)(x)
            torch.testing.assert_close(y.cpu(), m(x).cpu(), rtol=0, atol=0)
    finally:
        torch.compiler.set_default_backend("inductor")
    assert len(made) == 1  # the inference graph


def _spy_init(made):
    orig = graph.CompiledGraph.__init__

    def init(self, gm):
        made.append(gm)
        orig(self, gm)

    return init


@pytest.mark.parametrize("brk", ["graph_break", "shim"])
def test_a_graph_break_runs_both_graphs_and_the_python_between_eagerly(brk):
    """An explicit break, or a call into the shim (whose files Dynamo skips, rather than
    tracing the simulator): two graphs, values as eager."""

    def f(x):
        y = torch.relu(x) * 2
        torch._dynamo.graph_break() if brk == "graph_break" else torch.neuron.synchronize()
        return torch.sigmoid(y) + 1

    x = torch.randn(8, 8, device="neuron")
    with torch.no_grad():
        y = torch.compile(f, backend="neuron")(x)
    torch.testing.assert_close(y.cpu(), f(x).cpu(), rtol=0, atol=0)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2
    if brk == "shim":
        (reason,) = torch._dynamo.utils.counters["graph_break"]
        assert "`synchronize` in file" in reason and "trnsim/torch/module.py" in reason


def test_a_graph_is_planned_once_per_input_signature(monkeypatch):
    plans = []
    orig = graph.plan
    monkeypatch.setattr(graph, "plan", lambda *a: plans.append(1) or orig(*a))
    m = torch.compile(GatedMLP().to("neuron"), backend="neuron", dynamic=False)
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(16, 32, device="neuron"))
        assert len(plans) == 1
        m(torch.randn(8, 32, device="neuron"))  # a new shape: a new graph, planned once
    assert len(plans) == 2


def _costs():
    link = state.get().cfg.host_link
    return seconds_to_ps(link.launch_overhead), seconds_to_ps(link.graph_launch_overhead)


def _deltas(before: dict) -> dict:
    """name -> (launches, device ps) of the ops run since `before`."""
    out = {}
    for k, s in timing.timer().stats.items():
        c, d = before.get(k, (0, 0))
        if s.count > c:
            out[k] = (s.count - c, s.device_ps - d)
    return out


def _snapshot() -> dict:
    return {k: (s.count, s.device_ps) for k, s in timing.timer().stats.items()}


def test_a_compiled_forward_saves_host_launches_as_derived():
    """Eagerly, op i's launch ends on the host at (i + 1) x launch_overhead and its kernel
    starts then or when the one before ends; replayed, the host pays one launch_overhead and
    kernel i starts at launch_overhead + (i + 1) x graph_launch_overhead or when the one before
    ends (`trnsim.runtime.graph`). The block's kernels are the
    same both ways (nothing here fuses), so the saving follows from the launch counts and the
    kernels' times alone."""
    launch, per_kernel = _costs()
    torch.manual_seed(0)
    m = TransformerBlock().to("neuron")
    x = torch.randn(1, 16, 32, device="neuron")
    compiled = torch.compile(m, backend="neuron")
    with torch.no_grad():
        m(x)
        compiled(x)  # captured
        durations, eager = _launches(lambda: _timed(m, x)[1])
        before = _snapshot()
        _, comp = _timed(compiled, x)
        kernels = _deltas(before)
    n = len(durations)
    assert sum(c for c, _ in kernels.values()) == n  # one kernel per op: nothing fused
    assert sum(d for _, d in kernels.values()) == sum(durations)
    end = 0
    for i, d in enumerate(durations):
        end = max((i + 1) * launch, end) + d
    graph_end = launch
    for i, d in enumerate(durations):
        graph_end = max(launch + (i + 1) * per_kernel, graph_end) + d
    derived = end - graph_end
    assert eager - comp == pytest.approx(derived, rel=0.01)
    assert derived > 0.3 * eager


def _launches(fn):
    """(device time of each kernel `fn` launches, in order; what `fn` returns)."""
    seen = []
    stream = timing.timer().stream()
    orig = stream.launch_timed

    def spy(name, duration_ps, *args, **kwargs):
        seen.append(duration_ps)
        return orig(name, duration_ps, *args, **kwargs)

    stream.launch_timed = spy
    try:
        r = fn()
    finally:
        del stream.launch_timed
    return seen, r


def test_fusion_saves_the_hbm_traffic_between_elementwise_ops():
    """gelu(x + u) * u on [N, N] float32, large enough that each kernel outlasts a host launch
    (eager is device-bound: launch_overhead + the kernels). Eager's three kernels read x, u; h;
    g, u and write h; g; y: 8 tensors of N x N x 4 bytes. The fused kernel reads x and u and
    writes y (h and g are read by no other op: never stored): 3. The saving is the 5 tensors'
    bytes at the HBM bandwidth the library's roofline gives one logical core (one stack's),
    less the graph's per-kernel launch cost: within 10% (the kernels are not all exactly at
    their roofline)."""
    n = 1024
    cfg = state.get().cfg
    launch, per_kernel = _costs()

    def f(x, u):
        return F.gelu(x + u) * u

    gen = torch.Generator().manual_seed(2)
    x, u = (torch.randn(n, n, generator=gen).to("neuron") for _ in range(2))
    compiled = torch.compile(f, backend="neuron")
    f(x, u)
    compiled(x, u)
    before = _snapshot()
    ye, eager = _timed(f, x, u)
    ops = _deltas(before)
    before = _snapshot()
    yc, comp = _timed(compiled, x, u)
    kernels = _deltas(before)
    torch.testing.assert_close(yc.cpu(), ye.cpu(), rtol=0, atol=0)
    assert list(kernels) == ["add.Tensor+gelu.default+mul.Tensor"]
    assert min(d for _, d in ops.values()) > launch  # device-bound, as assumed
    avoided = 5 * n * n * 4
    derived = seconds_to_ps(avoided / (cfg.hbm.bandwidth / cfg.hbm.stacks)) - per_kernel
    assert eager - comp == pytest.approx(derived, rel=0.10), (eager, comp, derived)


class SkipGelu(nn.Module):
    """LayerNorm, Linear, gelu(h) + 0.5 * h, Linear, a residual (issue 26: the fused run
    gelu+mul+add crashed the lowering, `AssertionError: lowering bug: tensor_scalar writes ...
    over a write not yet read`: both dead intermediates were renamed to the add's output)."""

    def __init__(self, d=32, h=64):
        super().__init__()
        self.ln, self.a, self.b = nn.LayerNorm(d), nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        h = self.a(self.ln(x))
        return x + self.b(F.gelu(h) + 0.5 * h)


def test_a_fused_run_reading_two_intermediates_at_once_compiles_and_matches_cpu():
    """Forward and backward of SkipGelu compiled on neuron equal eager on the CPU; the gelu, the
    multiply and the add are one lowered kernel (not estimated)."""
    torch.manual_seed(0)
    cpu = SkipGelu()
    dev = copy.deepcopy(cpu).to("neuron")
    compiled = torch.compile(dev, backend="neuron")
    x = torch.randn(4, 16, 32, generator=torch.Generator().manual_seed(3))
    for _ in range(2):
        cpu.zero_grad()
        dev.zero_grad()
        want = cpu(x)
        (want * want).mean().backward()
        before = _snapshot()
        got = compiled(x.to("neuron"))
        (got * got).mean().backward()
        kernels = _deltas(before)
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
        for (k, p), q in zip(dev.named_parameters(), cpu.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-6, msg=k)
    fused = "gelu.default+mul.Tensor+add.Tensor"
    assert kernels[fused][0] == 1
    assert timing.timer().stats[fused].estimated == 0
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize(
    "run, kept",
    [
        # gelu(h) + 0.5 * h: the add reads both intermediates; one of them keeps its name
        ([("gelu", "h", None, "g"), ("mul", "h", 0.5, "m"), ("add", "g", "m", "y")], {"m"}),
        # gelu(x + u) * u: one intermediate at a time; both take y's name
        ([("add", "x", "u", "s"), ("gelu", "s", None, "g"), ("mul", "g", "u", "y")], set()),
        # y is read before the run writes it: nothing may take its name before that read
        ([("exp", "x", None, "e"), ("add", "e", "y", "y")], {"e"}),
        # an intermediate of another dtype keeps its name (the values would round otherwise)
        ([("exp", "x", None, "b16"), ("mul", "b16", 2.0, "y")], {"b16"}),
    ],
)
def test_dead_intermediates_take_the_last_outputs_name_where_values_do_not_overlap(run, kept):
    """`graph._drop_dead` renames the intermediates no later op reads to the run's last output
    where that keeps the run's values: evaluated op after op, the renamed run gives y the
    values of the run."""
    from types import SimpleNamespace

    import numpy as np

    from trnsim.dtypes import dtype
    from trnsim.kernels import reference
    from trnsim.trace.program import OpSpec, TensorSpec

    def spec(op, a, b, out):
        args = {"x": a} if b is None else {"a": a, "b": b}
        return OpSpec(op, {**args, "out": out})

    ops = [spec(*r) for r in run]
    names = {v for op in ops for v in op.args.values() if isinstance(v, str)}
    dts = {n: "bfloat16" if n == "b16" else "float32" for n in names}
    c = SimpleNamespace(
        specs={n: TensorSpec(n, (4, 8), dtype(dts[n])) for n in names},
        storage={n: i for i, n in enumerate(sorted(names))},
    )
    renamed = graph._drop_dead(ops, [], c, live=set())
    rng = np.random.default_rng(0)
    start = {n: rng.standard_normal((4, 8)) for n in names}

    def evaluate(ops):
        vals = dict(start)
        for op in ops:
            vals[op.args["out"]] = reference(op.op, op.args, vals)
        return vals

    np.testing.assert_array_equal(evaluate(renamed)["y"], evaluate(ops)["y"])
    written = {op.args["out"] for op in renamed}
    assert written - {"y"} == kept


def test_inside_a_profile_or_a_recording_a_compiled_graph_runs_op_by_op(tmp_path):
    """Each op of the graph is profiled and recorded with its own launch (docs/torch.md)."""
    torch.manual_seed(0)
    m = GatedMLP().to("neuron")
    cm = torch.compile(m, backend="neuron", dynamic=False)
    x = torch.randn(16, 32, device="neuron")
    with torch.no_grad():
        want = m(x).cpu()
        cm(x)  # captured outside: a later call would replay the graph
        with torch.neuron.profiler.profile() as prof:
            got = cm(x)
        with trnsim.torch.record(tmp_path / "run.yaml"):
            cm(x)
    torch.testing.assert_close(got.cpu(), want)
    names = [e.name for e in prof.events()]
    assert names.count("aten::addmm") == 3 and "aten::gelu" in names and "aten::mul" in names
    text = (tmp_path / "run.yaml").read_text()
    assert text.count("{launch: ") == 5, text  # addmm, gelu, addmm, mul, addmm: one each
    assert text.count("- {addmm: ") == 3 and "- {gelu: " in text and "- {mul: " in text, text


def test_a_refused_op_in_a_compiled_graph_is_estimated_with_the_reason():
    """As in eager (test_training_timing): the report says why the library did not time it."""
    timing.timer().refused.pop("add.Tensor", None)

    def f(y, b):
        return y + b  # a column of a middle dim: not lowered

    y, b = torch.randn(8, 6, 7, device="neuron"), torch.randn(6, 1, device="neuron")
    before = _snapshot()
    got = torch.compile(f, backend="neuron")(y, b)
    assert _deltas(before)["add.Tensor"][0] == 1  # the graph's one kernel, not an eager op
    assert timing.timer().stats["add.Tensor"].estimated >= 1
    assert "this broadcast is not lowered yet" in timing.timer().refused["add.Tensor"]
    torch.testing.assert_close(got.cpu(), (y + b).cpu())
