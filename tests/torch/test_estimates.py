"""Estimates by op, never by shape (trnsim/torch/measure.py, `roofline_figures`): only the
matmul family and convolutions count multiply-adds; any other op costs its bytes at the logical
core's HBM bandwidth (one FLOP per output element, far below the peak), whatever its shapes;
`torch.neuron.report()` warns when estimates are over 10% of the device time."""

import math
import warnings

import pytest
import torch
from torch import nn

import trnsim.torch  # noqa: F401
from trnsim.torch import timing
from trnsim.torch.listeners import Listener
from trnsim.torch.measure import roofline_figures
from trnsim.torch.report import Report


class Runs(Listener):
    def __init__(self):
        self.runs = []

    def op(self, run):
        self.runs.append(run)


def _ops(fn):
    """The OpRuns `fn` makes on the device."""
    t = timing.timer()
    log = Runs()
    t.listeners.add(log)
    try:
        fn()
    finally:
        t.listeners.remove(log)
    return log.runs


def _bytes_ps(nbytes: int) -> int:
    return math.ceil(nbytes / timing.timer().measure.hbm_bw * 1e12)


@pytest.mark.parametrize("square, other", [((512, 512), (512, 500)), ((8, 64, 64), (8, 64, 60))])
def test_a_square_non_matmul_op_costs_what_its_neighbour_of_equal_bytes_costs(square, other):
    """torch.eq on two same-shape tensors whose dims chain was costed as a matmul (4096^3 for
    4096 x 4096); now both shapes are bytes / bandwidth."""
    got = {}
    for shape in (square, other):
        a = torch.randn(shape, device="neuron")
        b = torch.randn(shape, device="neuron")
        runs = _ops(lambda a=a, b=b: torch.eq(a, b))
        (run,) = [r for r in runs if r.name.startswith("eq")]
        m = run.measurement
        assert not m.modelled
        n = math.prod(shape)
        assert m.bytes == n * 4 * 2 + n * 1 and m.flops == n
        assert abs(m.duration_ps - _bytes_ps(m.bytes)) <= 1
        got[shape] = m.duration_ps / m.bytes
    assert got[square] == pytest.approx(got[other], rel=1e-3)


def test_a_backward_of_four_dims_is_its_bytes_not_a_convolution():
    """An estimated op of two 4-D tensors of one shape (a pooling or activation backward) was
    costed as a convolution: 2 x out x prod(weight[1:])."""
    g = torch.randn(4, 8, 16, 16, device="neuron")
    x = torch.randn(4, 8, 16, 16, device="neuron")
    runs = _ops(lambda: torch.ops.aten.softshrink_backward(g, x, 0.5))
    (run,) = [r for r in runs if r.name.startswith("softshrink_backward")]
    m = run.measurement
    assert not m.modelled and m.flops == g.numel()
    assert abs(m.duration_ps - _bytes_ps(3 * g.numel() * 4)) <= 1


def test_a_convolution_follows_its_flop_formula():
    conv = nn.Conv2d(16, 32, kernel_size=3, padding=1, groups=2).to("neuron")
    x = torch.randn(2, 16, 20, 20, device="neuron", requires_grad=True)
    runs = _ops(lambda: conv(x).sum().backward())
    (fwd,) = [r for r in runs if r.name == "convolution_overrideable"]
    (bwd,) = [r for r in runs if r.name == "convolution_backward_overrideable"]
    out_elems = 2 * 32 * 20 * 20
    per = 2 * out_elems * (16 // 2) * 3 * 3  # 2 x out x (in channels per group x kernel)
    assert fwd.measurement.flops == per
    assert bwd.measurement.flops == 2 * per + out_elems  # grad input, grad weight, grad bias
    t = timing.timer()
    peak = t.chip.devices[0].peak_flops["float32"]
    m = fwd.measurement
    assert (
        abs(m.duration_ps - math.ceil(max(m.flops / peak, m.bytes / t.measure.hbm_bw) * 1e12)) <= 1
    )


def test_a_transposed_convolution_counts_its_input():
    conv = nn.ConvTranspose2d(8, 4, kernel_size=2, stride=2).to("neuron")
    x = torch.randn(1, 8, 10, 10, device="neuron")
    (fwd,) = [r for r in _ops(lambda: conv(x)) if r.name == "convolution_overrideable"]
    assert fwd.measurement.flops == 2 * x.numel() * 4 * 2 * 2  # weight [8, 4, 2, 2]


@pytest.mark.parametrize("name, args, k", [
    ("mm.default", ((64, 32), (32, 48)), 32),
    ("addmm.default", ((64, 48), (64, 32), (32, 48)), 32),
    ("baddbmm.default", ((4, 64, 48), (4, 64, 32), (4, 32, 48)), 32),
    ("mv.default", ((64, 32), (32,)), 32),
])  # fmt: skip
def test_the_matmul_family_counts_its_multiply_adds(name, args, k):
    ts = [torch.randn(s) for s in args]
    op = getattr(torch.ops.aten, name.split(".")[0])
    out = op(*ts)
    flops, nbytes, dt = roofline_figures(name, ts, {}, out)
    assert flops == 2 * out.numel() * k
    assert nbytes == sum(t.numel() * 4 for t in [*ts, out]) and dt == "float32"


@pytest.mark.parametrize(
    "dt, peak",
    [
        (torch.float32, "float32"),
        (torch.bfloat16, "bfloat16"),
        (torch.float16, "bfloat16"),
        (torch.int32, "float32"),
    ],
)
def test_the_peak_is_the_first_inputs_dtypes(dt, peak):
    """A bf16 matmul or convolution the library refuses was bounded by the fp32 peak (the
    dtype table was keyed by names and looked up by torch dtypes): 3.7x too slow on trn2."""
    a, b = torch.ones(64, 32, dtype=dt), torch.ones(32, 48, dtype=dt)
    assert roofline_figures("mm.default", (a, b), {}, a @ b)[2] == peak


@pytest.mark.parametrize("name, fill", [("zero_.default", lambda x: x.zero_()),
                                        ("fill_.Scalar", lambda x: x.fill_(2.0)),
                                        ("normal_.default", lambda x: x.normal_())])  # fmt: skip
def test_a_fill_writes_self_without_reading_it(name, fill):
    """zero_ of a [2, 128, 50257] fp32 gradient (a slice's backward) was costed at read +
    write: 142 us on trn2 at LNC 2 for 71 us of writes."""
    x = torch.empty(64, 48)
    flops, nbytes, _ = roofline_figures(name, (x,), {}, fill(x))
    assert nbytes == x.numel() * 4 and flops == x.numel()


def test_an_op_of_two_chained_matrices_is_not_a_matmul():
    a, b = torch.randn(64, 32), torch.randn(32, 64)
    r = torch.randn(64, 32)
    assert roofline_figures("some_op.default", (a, b), {}, r)[0] == r.numel()


def test_the_report_warns_when_estimates_exceed_a_tenth_of_the_device_time():
    rep = Report("trn2", 2, 0, 0, ops={
        "mm.default": {"count": 1, "device_ps": 800, "modelled": 1, "estimated": 0,
                       "estimated_ps": 0},
        "cumsum.default": {"count": 2, "device_ps": 200, "modelled": 0, "estimated": 2,
                           "estimated_ps": 200},
    }, copies={"count": 0, "bytes": 0, "device_ps": 0, "modelled": 0, "estimated": 0},
        memory={"allocated": 0, "peak": 0, "reserved": 0})  # fmt: skip
    assert rep.estimated_share == pytest.approx(0.2)
    assert "20% of the ops' device time is roofline estimates" in str(rep)
    assert "cumsum.default" in rep.estimate_warning()
    rep.ops["cumsum.default"]["estimated_ps"] = 50
    assert rep.estimate_warning() is None


def test_report_warns_exactly_when_estimates_dominate():
    x = torch.randn(256, 256, device="neuron")
    for _ in range(20):
        x = torch.cumsum(x, dim=0)  # estimated
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rep = torch.neuron.report()
    warned = [w for w in caught if "roofline estimates" in str(w.message)]
    assert rep.ops["cumsum.default"]["estimated_ps"] > 0
    assert bool(warned) == (rep.estimated_share > 0.1)


def test_inference_batch_norm_is_modelled_though_its_saved_statistics_are_empty():
    """aten's inference batch norm returns empty save_mean / save_invstd: the op is still
    lowered (an empty first result, or an empty input, is what leaves nothing to lower)."""
    bn = nn.BatchNorm2d(16).to("neuron").eval()
    x = torch.randn(4, 16, 8, 8, device="neuron")
    runs = _ops(lambda: bn(x))
    (run,) = [r for r in runs if "batch_norm" in r.name]
    assert run.measurement.modelled, timing.timer().refused.get(run.name)
    torch.testing.assert_close(bn(x).cpu(), bn.cpu()(x.cpu()))


def test_rows_of_gpt2_vocabulary_are_lowered_not_estimated():
    """softmax, log_softmax, layer_norm, cross_entropy, argmax and sum over rows of 50257
    (GPT-2's vocabulary: past a partition and not a multiple of 128, `kernels.ragged`) are
    simulated, not refused to a roofline estimate (softmax, log_softmax and argmax were); their
    values are CPU's."""
    from torch.nn import functional as F

    torch.manual_seed(0)
    x = torch.randn(4, 50257)
    w, b = torch.randn(50257), torch.randn(50257)
    target = torch.randint(0, 50257, (4,))
    calls = {
        "_softmax": lambda x, w, b, t: torch.softmax(x, -1),
        "_log_softmax": lambda x, w, b, t: torch.log_softmax(x, -1),
        "native_layer_norm": lambda x, w, b, t: F.layer_norm(x, (50257,), w, b),
        "nll_loss_forward": lambda x, w, b, t: F.cross_entropy(x, t),
        "argmax": lambda x, w, b, t: torch.argmax(x, -1),
        "sum": lambda x, w, b, t: x.sum(-1),
    }
    on = [v.to("neuron") for v in (x, w, b, target)]
    for name, f in calls.items():
        runs = [r for r in _ops(lambda f=f: f(*on)) if r.name.startswith(name)]
        assert runs and all(r.measurement.modelled for r in runs), (
            name,
            [timing.timer().refused.get(r.name) for r in runs],
        )
        torch.testing.assert_close(f(*on).cpu(), f(x, w, b, target))
