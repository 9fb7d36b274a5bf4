"""A small CNN's training step on `neuron` (Conv2d, BatchNorm2d, LeakyReLU, Hardswish, ELU,
MaxPool2d, AvgPool2d): its activations, batch norm and pooling ops, forward and backward, are
timed by the kernel library (each launch `modelled`, at least its writes through HBM), and
the step's values are CPU's."""

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import trnsim.torch  # noqa: E402,F401
from trnsim.torch import timing  # noqa: E402
from trnsim.torch.listeners import Listener  # noqa: E402


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.b1 = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.b2 = nn.BatchNorm2d(32)
        self.head = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.leaky_relu(self.b1(self.c1(x)), 0.1), 2)  # 32 -> 16
        x = F.avg_pool2d(F.hardswish(self.b2(self.c2(x))), 2)  # 16 -> 8
        x = F.max_pool2d(F.elu(x), 3, 2, 1)  # 8 -> 4
        return self.head(x.flatten(1))


MODELLED = [
    "leaky_relu.default", "leaky_relu_backward.default", "hardswish.default",
    "hardswish_backward.default", "elu.default", "elu_backward.default",
    "native_batch_norm.default", "native_batch_norm_backward.default",
    "max_pool2d_with_indices.default", "max_pool2d_with_indices_backward.default",
    "avg_pool2d.default", "avg_pool2d_backward.default",
]  # fmt: skip


def _step(device, x, y, n=2):
    torch.manual_seed(0)
    model = CNN().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(n):
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()], loss.item()


@pytest.fixture(scope="module")
def step():
    """Per aten op: (launches, modelled launches, device ps, bytes written by its first
    launch) of two training steps on neuron; and the parameters on neuron and on CPU."""
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 3, 32, 32, generator=gen), torch.randint(0, 10, (8,), generator=gen)
    t = timing.timer()
    written = {}

    class Spy(Listener):
        def op(self, run):
            r = run.result
            outs = r if isinstance(r, (list, tuple)) else [r]
            written.setdefault(run.name, sum(o.numel() * o.element_size() for o in outs
                                             if isinstance(o, torch.Tensor)))  # fmt: skip

    before = {k: (s.count, s.modelled, s.device_ps) for k, s in t.stats.items()}
    spy = Spy()
    t.listeners.add(spy)
    try:
        got = _step("neuron", x, y)
    finally:
        t.listeners.remove(spy)
    stats = {}
    for k, s in t.stats.items():
        c0, m0, d0 = before.get(k, (0, 0, 0))
        if s.count > c0:
            stats[k] = (s.count - c0, s.modelled - m0, s.device_ps - d0, written.get(k, 0))
    return stats, got, _step("cpu", x, y)


def test_the_step_matches_cpu(step):
    _, (got, loss), (want, want_loss) = step
    assert loss == want_loss
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.parametrize("name", MODELLED)
def test_the_cnn_ops_are_modelled(step, name):
    stats, *_ = step
    count, modelled, device_ps, written = stats[name]
    assert modelled == count, f"{name}: {timing.timer().refused.get(name)}"
    bw = timing.timer().measure.hbm_bw
    assert device_ps / count >= written / bw * 1e12 > 0  # at least its writes through HBM
