"""Opt-in `neuron` for scripts that cannot be edited: PyTorch calls `autoload` on every
`import torch` (the `torch.backends` entry point group, TORCH_DEVICE_BACKEND_AUTOLOAD, on by
default in 2.13), and it registers the device only when TRNSIM_TORCH_AUTOLOAD=1, so that
installing trnsim changes no other torch import. Kept outside `trnsim.torch`, whose import
registers the device. docs/torch.md, "Scripts that cannot be edited"."""

import os

ENV = "TRNSIM_TORCH_AUTOLOAD"


def autoload() -> None:
    """Register `neuron` (import trnsim.torch) if TRNSIM_TORCH_AUTOLOAD=1; else nothing."""
    value = os.environ.get(ENV, "")
    if value in ("", "0"):
        return
    if value != "1":
        raise RuntimeError(f"{ENV}={value!r}: expected 1 (register neuron) or 0")
    import trnsim.torch  # noqa: F401
