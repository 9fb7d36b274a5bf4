"""The PyTorch device `neuron`: `import trnsim.torch`, then `.to("neuron")`."""

from trnsim.torch.register import register
from trnsim.torch.state import configure

register()

__all__ = ["configure"]
