"""A small GPT-style model on the `neuron` device: eager against `torch.compile`, a profile, and
a recording replayed without PyTorch on another chip.

    python examples/torch_compile.py               # trn2 and trn3, one process each
    python examples/torch_compile.py --chip trn3   # one chip
    python examples/torch_compile.py --out out/    # where the profile and recording go

For each chip it prints the simulated time of a forward pass and of a training step (forward,
backward, AdamW), eager and compiled (`backend="neuron"`: each graph one host launch, runs of
elementwise ops fused; docs/torch.md). On the first chip it also profiles an eager step
(`torch.neuron.profiler`: a Chrome trace for ui.perfetto.dev, Parquet tables, the per-op
table), records one (`trnsim.torch.record`) and replays the recording with `trnsim run` on
the recorded chip and on trn3, without PyTorch.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

VOCAB, WIDTH, HEADS, LAYERS, CONTEXT, BATCH = 512, 64, 4, 2, 64, 4


def build(torch, nn):
    F = nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
            self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
            self.fc, self.out = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = [y.view(b, t, HEADS, c // HEADS).transpose(1, 2) for y in (q, k, v)]
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, WIDTH)
            self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
            self.norm, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB)

        def forward(self, ids):
            return self.head(self.norm(self.blocks(self.tok(ids))))

    return GPT()


def simulated_ms(torch, fn) -> float:
    """The simulated time of fn() on the device, from a pair of timing events, from an idle
    device (else the start event fires only when the device reaches it)."""
    torch.neuron.synchronize()
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def run(chip: str, out: Path | None) -> None:
    import torch
    from torch import nn

    import trnsim.torch
    from trnsim.torch import compile as neuron_compile

    trnsim.torch.configure(chip)
    neuron_compile.register()  # for a source tree; an installed trnsim declares the backend
    torch.manual_seed(0)
    model = build(torch, nn).to("neuron")
    compiled = torch.compile(model, backend="neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, VOCAB, (BATCH, CONTEXT + 1))
    ids, target = data[:, :-1].to("neuron"), data[:, 1:].to("neuron")

    def step(m):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(m(ids).flatten(0, 1), target.flatten())
        loss.backward()
        opt.step()

    def forward(m):
        with torch.no_grad():
            m(ids)

    for what, fn in (("forward", forward), ("training step", step)):
        fn(model), fn(compiled)  # the first calls lower, measure and capture
        eager = simulated_ms(torch, lambda fn=fn: fn(model))
        comp = simulated_ms(torch, lambda fn=fn: fn(compiled))
        print(f"{chip} {what}: eager {eager:.3f} ms, compiled {comp:.3f} ms simulated "
              f"({eager / comp:.2f}x)")  # fmt: skip
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    with torch.neuron.profiler.profile(record_shapes=True) as prof:
        step(model)
    prof.export_chrome_trace(str(out / "profile.json"))
    print(prof.key_averages().table(sort_by="device_time_total", row_limit=8))
    try:
        prof.export_parquet(str(out / "profile"))
    except Exception as e:  # pyarrow is an optional extra
        print(f"(no Parquet tables: {e})")
    with trnsim.torch.record(out / "step.yaml"):
        step(model)
    print(f"wrote {out / 'profile.json'} (open in ui.perfetto.dev) and {out / 'step.yaml'}")


def replay(trace: Path, chip: str) -> None:
    """`trnsim run` of the recording on `chip`, in a process without PyTorch's device."""
    cmd = [sys.executable, "-c", "from trnsim.cli import entry; entry()", "run", str(trace)]
    print(f"$ trnsim run {trace} --chip {chip}")
    subprocess.run([*cmd, "--chip", chip], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chip", help="one chip (default: trn2, then trn3, each in its process)")
    ap.add_argument("--out", type=Path, help="folder for the profile and the recording "
                    "(default: torch_compile_out; with --chip: none written)")  # fmt: skip
    args = ap.parse_args()
    if args.chip:
        run(args.chip, args.out)
        return
    args.out = args.out or Path("torch_compile_out")
    first = True
    for chip in ("trn2", "trn3"):
        cmd = [sys.executable, __file__, "--chip", chip]
        subprocess.run([*cmd, "--out", str(args.out)] if first else cmd, check=True)
        first = False
    for chip in ("trn2", "trn3"):
        replay(args.out / "step.yaml", chip)


if __name__ == "__main__":
    main()
