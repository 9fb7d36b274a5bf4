"""Real model definitions (tests/torch/models.py: GPT-2 with tied embeddings, Llama tied and
untied, a BERT classifier, a T5-style encoder-decoder, a ViT, a CNN with BatchNorm and
dropout, bidirectional LSTM and GRU) trained 3 steps with AdamW on `neuron` and on CPU: every
parameter's gradient and value compared after each step, and shared weights kept shared."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import trnsim.torch  # noqa: E402,F401
from tests.torch.models import GPT2, MODELS, Llama  # noqa: E402

EXACT = {"cnn_batchnorm"}
"""Models whose every op runs PyTorch's own CPU kernel on the same bytes on both devices:
bit for bit, through three AdamW steps."""
SCALE = 1e-5
"""The others, within 1e-5 of each gradient's largest element (1e-4 relative), at the same
parameters each step: CPU runs attention through its fused flash kernel, the device through
the math path (softmax(QK^T)V, what PyTorch runs on a device without a fused kernel), and
CPU runs LSTM/GRU cells unfused where the device runs the fused cells; both are float
rounding, measured at most 2e-6 of the largest gradient. The parameters are synced from CPU
after each step: AdamW divides by sqrt(v), so a rounding-sized difference in a near-zero
gradient grows into a full-size difference of the update."""


def _shared(model) -> list[list[str]]:
    """Groups of parameter names that are one Parameter object (ties)."""
    by_id: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    return sorted(g for g in by_id.values() if len(g) > 1)


def _step(model, opt, x, loss_fn, seed: int):
    opt.zero_grad()
    torch.manual_seed(seed)  # dropout draws the same mask on both devices
    loss = loss_fn(model(x), x)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    opt.step()
    return loss.detach(), grads


@pytest.mark.parametrize("name", sorted(MODELS))
def test_three_adamw_steps_match_cpu(name):
    make, batch, loss_fn = MODELS[name]
    torch.manual_seed(0)
    cpu = make()
    dev = copy.deepcopy(cpu).to("neuron")
    assert _shared(dev) == _shared(cpu)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (cpu, dev)]
    for step in range(3):
        x = batch(step)
        want_loss, want = _step(cpu, opts[0], x, loss_fn, step)
        got_loss, got = _step(dev, opts[1], x.to("neuron"), loss_fn, step)
        assert got.keys() == want.keys()
        if name in EXACT:
            torch.testing.assert_close(got_loss.cpu(), want_loss, rtol=0, atol=0)
            for n in want:
                torch.testing.assert_close(
                    got[n].cpu(), want[n], rtol=0, atol=0, msg=lambda m, n=n: f"{n}: {m}"
                )
            continue
        torch.testing.assert_close(got_loss.cpu(), want_loss, rtol=1e-5, atol=1e-6)
        for n in want:
            atol = SCALE * float(want[n].abs().max())
            torch.testing.assert_close(
                got[n].cpu(), want[n], rtol=1e-4, atol=atol, msg=lambda m, n=n: f"{n}: {m}"
            )
        with torch.no_grad():
            for p, q in zip(cpu.parameters(), dev.parameters()):
                q.copy_(p)
    if name in EXACT:
        for (n, p), q in zip(cpu.named_parameters(), dev.parameters()):
            torch.testing.assert_close(
                q.detach().cpu(), p.detach(), rtol=0, atol=0, msg=lambda m, n=n: f"{n}: {m}"
            )


@pytest.mark.parametrize("make", [lambda: GPT2(tied=True), lambda: Llama(tied=True)])
def test_tied_weights_stay_one_parameter_through_moves(make):
    torch.manual_seed(0)
    model = make()
    tied = _shared(model)
    assert tied, "the model ties its embedding and output projection"
    head = model.lm_head.weight
    model.to("neuron")
    assert model.lm_head.weight is head  # the same Parameter object, its data swapped
    assert head.device.type == "neuron" and _shared(model) == tied
    head.data = torch.zeros_like(head)  # p.data = a neuron tensor works
    assert float(model.lm_head.weight.detach().abs().sum().cpu()) == 0.0
    model.to("cpu")
    assert model.lm_head.weight is head and head.device.type == "cpu"
    assert _shared(model) == tied
    empty = make().to_empty(device="neuron")
    assert _shared(empty) == tied
    for device in ("cpu", "neuron"):  # assign=True wraps each entry anew: untied, as on CPU
        fresh = make()
        fresh.load_state_dict(make().to(device).state_dict(), assign=True)
        assert fresh.lm_head.weight.device.type == device
        if device == "cpu":
            on_cpu = _shared(fresh)
    assert _shared(fresh) == on_cpu


def test_lstm_cell_runs_the_fused_cell_within_rounding_of_cpu():
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(6, 5)
    dev = copy.deepcopy(cell).to("neuron")
    x, h, c = torch.randn(3, 6), torch.randn(3, 5), torch.randn(3, 5)
    want = cell(x, (h, c))
    got = dev(x.to("neuron"), (h.to("neuron"), c.to("neuron")))
    (want[0].sum() + 2 * want[1].sum()).backward()
    (got[0].sum() + 2 * got[1].sum()).backward()
    for w, g in zip(want, got):
        torch.testing.assert_close(g.detach().cpu(), w.detach(), rtol=1e-5, atol=1e-6)
    for p, q in zip(cell.parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6)
