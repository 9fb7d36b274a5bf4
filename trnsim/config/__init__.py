"""Chip configuration: `load_chip("trn2")` reads `configs/trn2.yaml` into a frozen `ChipConfig`.

The one place to import config names from. The parts: `tree` (the dataclass tree, every field
with its unit and help), `load` (reading the YAML: `base:` inheritance, `--set` overrides,
per-field validation, `ConfigError`), `figures` (`to_dict`, `derived`, `peak_flops_per_core`)
and `rules` (`load_chip`, and the rules that involve more than one field).
"""

from trnsim.config.figures import derived, peak_flops_per_core, to_dict
from trnsim.config.load import ConfigError, configs_dir, list_chips
from trnsim.config.rules import load_chip
from trnsim.config.tree import (
    ChipConfig,
    ChipLinkConfig,
    CoreConfig,
    DmaConfig,
    GpSimdEngineConfig,
    HbmConfig,
    HostLinkConfig,
    PeakFlopsConfig,
    PsumConfig,
    SbufConfig,
    ScalarEngineConfig,
    TensorEngineConfig,
    VectorEngineConfig,
    q,
)

__all__ = [
    "load_chip",
    "list_chips",
    "configs_dir",
    "ConfigError",
    "to_dict",
    "derived",
    "peak_flops_per_core",
    "q",
    "ChipConfig",
    "CoreConfig",
    "TensorEngineConfig",
    "VectorEngineConfig",
    "ScalarEngineConfig",
    "GpSimdEngineConfig",
    "SbufConfig",
    "PsumConfig",
    "DmaConfig",
    "HbmConfig",
    "HostLinkConfig",
    "ChipLinkConfig",
    "PeakFlopsConfig",
]
