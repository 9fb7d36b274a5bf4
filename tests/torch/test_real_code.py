"""What real code found on `neuron`, each reproduced: a Python number where an op takes a Tensor
(`x % 5`), zero-size matmuls, a negative dimension, views under inference_mode, the fused
LSTM/GRU cells' ops themselves."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import trnsim.torch  # noqa: E402,F401


def _same(f, *xs, **kw):
    want = f(*xs)
    got = f(*[x.to("neuron") if isinstance(x, torch.Tensor) else x for x in xs])
    assert got.device.type == "neuron" and got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True, **kw)


@pytest.mark.parametrize(
    "f",
    [
        lambda x: x % 5,
        lambda x: x % 2.5,  # int tensor, float number: float32, as on CPU
        lambda x: 7 % (x.abs() + 1),
        lambda x: x // 3,
        lambda x: torch.remainder(x, 3),
        lambda x: torch.fmod(x, -3),
        lambda x: torch.take_along_dim(x.view(3, 4), (x.view(3, 4) % 4).long(), 1),
    ],
)
def test_a_python_number_where_an_op_takes_a_tensor(f):
    _same(f, torch.arange(-6, 6))


@pytest.mark.parametrize(
    "f",
    [
        lambda: (torch.randn(2, 0), torch.randn(0, 4)),  # K = 0: zeros
        lambda: (torch.randn(0, 3), torch.randn(3, 4)),
        lambda: (torch.randn(5, 3, 0), torch.randn(5, 0, 2)),
    ],
)
def test_zero_size_matmuls_give_cpus_result(f):
    a, b = f()
    _same(torch.matmul, a, b)
    _same(lambda x: torch.linalg.pinv(x), torch.randn(0, 3))
    _same(lambda x, y: x + y, torch.randn(0, 3), torch.randn(1, 3))


@pytest.mark.parametrize("make", [torch.randn, torch.empty, torch.zeros, torch.rand])
def test_a_negative_dimension_is_cpus_error(make):
    with pytest.raises(RuntimeError) as cpu:
        make(2, -1)
    with pytest.raises(RuntimeError) as dev:
        make(2, -1, device="neuron")
    assert str(dev.value) == str(cpu.value)


@pytest.mark.parametrize("compiled", [False, True])
def test_views_of_normal_tensors_under_inference_mode(compiled):
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    dev = torch.nn.Linear(4, 3).to("neuron")
    dev.load_state_dict(lin.state_dict())
    run = torch.compile(dev, backend="neuron") if compiled else dev
    with torch.inference_mode():
        want = lin(x)
        got = run(x.to("neuron"))
        view = dev.weight[0]
    assert got.is_inference() and not view.is_inference()  # PyTorch's rule, as on CPU
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_the_fused_cells_against_their_unfused_math():
    torch.manual_seed(0)
    b, h = 3, 5
    ig, hg = torch.randn(b, 4 * h), torch.randn(b, 4 * h)
    cx, ib, hb = torch.randn(b, h), torch.randn(4 * h), torch.randn(4 * h)
    hy, cy, _ = torch.ops.aten._thnn_fused_lstm_cell(
        *(t.to("neuron") for t in (ig, hg, cx, ib, hb))
    )
    i, f, g, o = (ig + hg + ib + hb).chunk(4, 1)
    want_c = f.sigmoid() * cx + i.sigmoid() * g.tanh()
    torch.testing.assert_close(cy.cpu(), want_c)
    torch.testing.assert_close(hy.cpu(), o.sigmoid() * want_c.tanh())
    gig, ghg, hx = torch.randn(b, 3 * h), torch.randn(b, 3 * h), torch.randn(b, h)
    hy, _ = torch.ops.aten._thnn_fused_gru_cell(*(t.to("neuron") for t in (gig, ghg, hx)))
    r = (gig[:, :h] + ghg[:, :h]).sigmoid()
    z = (gig[:, h : 2 * h] + ghg[:, h : 2 * h]).sigmoid()
    n = (gig[:, 2 * h :] + r * ghg[:, 2 * h :]).tanh()
    torch.testing.assert_close(hy.cpu(), (1 - z) * n + z * hx)
