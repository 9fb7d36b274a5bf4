"""The announcement's one-line move: an ordinary PyTorch training loop, run on the simulated
Trainium chip by changing the device. Values are PyTorch's; time is the chip's.

    python examples/torch_move.py
"""

import torch
from torch import nn

import trnsim.torch  # noqa: F401  (registers the neuron device)

device = "neuron"  # the one line: was "cuda" or "cpu"

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.LayerNorm(512), nn.Linear(512, 10))
model = model.to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(256, 128), torch.randint(0, 10, (256,))

start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
start.record()
for step in range(5):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.4f}")
end.record()
end.synchronize()
print(f"5 steps: {start.elapsed_time(end):.3f} ms of simulated time")
print(torch.neuron.report())
