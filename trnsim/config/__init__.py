"""Chip configuration: `load_chip("trn2")` reads `configs/trn2.yaml` into a frozen `ChipConfig`.

The one place to import config names from. The parts: `tree` (the dataclass tree, every field
with its unit and help), `load` (reading the YAML: `base:` inheritance, `--set` overrides,
per-field validation, `ConfigError`), `figures` (`to_dict`, `derived`, `peak_flops_per_core`)
and `rules` (`load_chip`, and the rules that involve more than one field).
"""

from trnsim.config.rules import (
    ChipConfig,
    ChipLinkConfig,
    ConfigError,
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
    configs_dir,
    derived,
    list_chips,
    load_chip,
    peak_flops_per_core,
    q,
    to_dict,
)

__all__ = [
    "load_chip", "list_chips", "configs_dir", "ConfigError", "to_dict", "derived",
    "peak_flops_per_core", "q", "ChipConfig", "CoreConfig", "TensorEngineConfig",
    "VectorEngineConfig", "ScalarEngineConfig", "GpSimdEngineConfig", "SbufConfig",
    "PsumConfig", "DmaConfig", "HbmConfig", "HostLinkConfig", "ChipLinkConfig",
    "PeakFlopsConfig",
]
