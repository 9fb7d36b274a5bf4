"""DMA: copies cut into descriptors, spread over each core's engines, sharing HBM bandwidth.

`DmaSystem` is the chip's DMA (all cores); `descriptors` cuts copies into per-engine pieces;
`fluid` is the max-min fair bandwidth-sharing model they run on (its flows and groups in
`flows`, the rate computation in `filling`); `checks` holds the rules.
"""

from trnsim.dma.descriptors import Piece, cut
from trnsim.dma.fluid import Flow, FluidModel
from trnsim.dma.system import DmaSystem

__all__ = ["DmaSystem", "Flow", "FluidModel", "Piece", "cut"]
