"""torch.compile with the "neuron" backend: the captured graph runs on the device, equal to
eager, captured once."""

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import trnsim.torch  # noqa: E402,F401
from trnsim.torch import compile as neuron_compile  # noqa: E402


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.b(nn.functional.gelu(self.a(x)))


def test_a_compiled_module_runs_on_neuron_as_eager_does():
    neuron_compile.register()
    torch._dynamo.reset()
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
