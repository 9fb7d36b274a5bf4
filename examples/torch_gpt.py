"""A small GPT-style model (vocabulary 1,000) trained a few steps on the `neuron` device in
bfloat16 autocast, with the simulated step time, tokens/s and MFU, for trn2 and trn3.

    python examples/torch_gpt.py                  # both chips, one process each
    python examples/torch_gpt.py --chip trn3      # one

MFU is the model's FLOPs per step (6 x parameters x tokens, plus attention's 12 x layers x
width x context x tokens) over the step time at the logical core's bf16 peak. The model is far
too small to fill the chip: the step is bound by the host's launches, as small eager models are
on real hardware (torch.neuron.report() shows it).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

VOCAB, WIDTH, HEADS, LAYERS, CONTEXT, BATCH, STEPS = 1000, 128, 4, 2, 64, 8, 3


def build(torch, nn):
    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, WIDTH)
            self.pos = nn.Embedding(CONTEXT, WIDTH)
            layer = nn.TransformerEncoderLayer(
                WIDTH, HEADS, 4 * WIDTH, dropout=0.0, batch_first=True, norm_first=True
            )
            self.blocks = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(WIDTH)
            self.head = nn.Linear(WIDTH, VOCAB)

        def forward(self, ids):
            t = ids.shape[1]
            mask = nn.Transformer.generate_square_subsequent_mask(t, device=ids.device)
            h = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
            return self.head(self.norm(self.blocks(h, mask=mask, is_causal=True)))

    return GPT()


def run(chip: str) -> None:
    import torch
    from torch import nn

    import trnsim.torch

    trnsim.torch.configure(chip)
    torch.manual_seed(0)
    model = build(torch, nn).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    params = sum(p.numel() for p in model.parameters())
    tokens = BATCH * CONTEXT
    flops = 6 * params * tokens + 12 * LAYERS * WIDTH * CONTEXT * tokens
    peak = torch.neuron.get_device_properties().peak_flops["bfloat16"]
    data = torch.randint(0, VOCAB, (BATCH, CONTEXT + 1))
    ids, target = data[:, :-1].to("neuron"), data[:, 1:].to("neuron")
    for step in range(STEPS):
        start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
        start.record()
        opt.zero_grad()
        with torch.autocast("neuron", dtype=torch.bfloat16):
            logits = model(ids)
        loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), target.flatten())
        loss.backward()
        opt.step()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        print(
            f"{chip} step {step}: loss {loss.item():.3f}, {ms:.3f} ms simulated, "
            f"{tokens / ms * 1e3:,.0f} tokens/s, MFU {flops / (ms / 1e3) / peak:.2%}"
        )
    rep = torch.neuron.report()
    print(f"{chip}: {params:,} parameters; {rep.modelled} op launches modelled by the kernel "
          f"library, {rep.estimated} estimated")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chip", help="one chip (default: trn2, then trn3, each in its process)")
    args = ap.parse_args()
    if args.chip:
        run(args.chip)
        return
    for chip in ("trn2", "trn3"):
        subprocess.run([sys.executable, __file__, "--chip", chip], check=True)


if __name__ == "__main__":
    main()
