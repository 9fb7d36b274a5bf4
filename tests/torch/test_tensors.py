"""Tensors on the `neuron` device: plain torch.Tensors over the simulated chip's memory, values
computed by PyTorch's CPU kernels on zero-copy views."""

import io

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import trnsim.torch  # noqa: E402,F401


def test_to_and_from_the_device_keeps_values_and_dtype():
    for dt in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        x = (torch.randn(5, 7) * 10).to(dt)
        y = x.to("neuron")
        assert y.device == torch.device("neuron", 0)
        assert y.dtype == dt
        assert type(y) is torch.Tensor
        assert torch.equal(y.cpu(), x)


def test_factories_and_printing():
    assert torch.equal(torch.zeros(2, 3, device="neuron").cpu(), torch.zeros(2, 3))
    assert torch.equal(
        torch.ones(4, device="neuron", dtype=torch.int32).cpu(), torch.ones(4, dtype=torch.int32)
    )
    assert torch.equal(torch.arange(6, device="neuron").cpu(), torch.arange(6))
    torch.manual_seed(3)
    a = torch.randn(3, 3, device="neuron")
    torch.manual_seed(3)
    assert torch.equal(a.cpu(), torch.randn(3, 3))  # random ops draw from the CPU generator
    assert repr(torch.arange(3, device="neuron")) == "tensor([0, 1, 2], device='neuron:0')"


def test_views_and_in_place_ops_write_device_memory():
    x = torch.arange(12.0).reshape(3, 4)
    y = x.to("neuron")
    v = y[1]  # a view
    v.add_(100)
    t = y.t()
    assert t.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    x[1] += 100
    assert torch.equal(y.cpu(), x)
    assert torch.equal(t.contiguous().cpu(), x.t())
    a, b = y.split(2)
    assert torch.equal(b.cpu(), x[2:])


def test_item_and_results():
    x = torch.tensor([1.5, 2.5], device="neuron")
    assert x.sum().item() == 4.0
    assert (x > 2).any().item() is True
    vals, idx = torch.topk(x, 1)
    assert vals.item() == 2.5 and idx.item() == 1


def test_out_arguments_are_resized_and_written():
    a = torch.randn(4, 5)
    out = torch.empty(0, device="neuron")
    torch.add(a.to("neuron"), 1, out=out)
    assert out.shape == (4, 5)
    assert torch.equal(out.cpu(), a + 1)


def test_mixing_devices_raises_like_cuda():
    a = torch.ones(3, device="neuron")
    with pytest.raises(
        RuntimeError,
        match="Expected all tensors to be on the same device, but found at least two devices, neuron:0 and cpu!",
    ):
        a + torch.ones(3)
    assert torch.equal((a + torch.tensor(2.0)).cpu(), torch.full((3,), 3.0))  # a 0-dim CPU scalar


def test_save_and_load_round_trip():
    x = torch.randn(3, 4).to("neuron")
    buf = io.BytesIO()
    torch.save({"x": x}, buf)
    buf.seek(0)
    back = torch.load(buf)
    assert back["x"].device.type == "neuron"
    assert torch.equal(back["x"].cpu(), x.cpu())
    buf.seek(0)
    assert torch.equal(torch.load(buf, map_location="cpu")["x"], x.cpu())


def test_other_logical_cores_cannot_hold_tensors():
    with pytest.raises(RuntimeError, match=r"neuron:1: .*torch.neuron.set_device\(1\)"):
        torch.zeros(2, device="neuron:1")


def _mlp_run(device):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4)).to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    torch.manual_seed(1)
    x, y = torch.randn(8, 16).to(device), torch.randn(8, 4).to(device)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = nn.functional.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in m.parameters()]


def test_mlp_trains_three_adamw_steps_bit_for_bit_as_on_cpu():
    cpu_losses, cpu_params = _mlp_run("cpu")
    losses, params = _mlp_run("neuron")
    assert losses == cpu_losses
    assert losses[2] < losses[0]
    for a, b in zip(params, cpu_params):
        assert torch.equal(a, b)
