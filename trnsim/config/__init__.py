"""Chip and system configuration: `load_chip("trn2")` reads `configs/trn2.yaml` into a frozen
`ChipConfig`; `load_system("trn2-48xl")` reads `systems/trn2-48xl.yaml` (and its chip's config)
into a frozen `SystemConfig`.

The one place to import config names from. The parts: `tree` (the chip's dataclass tree, every
field with its unit and help), `system` (the system's tree, and its rank numbering), `load`
(reading the YAML files: bundled names, `base:` inheritance, `ConfigError`), `build` (`--set`
overrides, the dataclass tree built with per-field validation), `figures` (`to_dict`,
`derived`, `peak_flops_per_core`, `system_derived`), `rules` (`load_chip`, and the rules that
involve more than one field) and `system_rules` (`load_system`, its rules, the one owner of link
figures).
"""

from trnsim.config.figures import (
    derived,
    peak_flops_per_core,
    system_derived,
    system_dict,
    to_dict,
    topology_text,
)
from trnsim.config.load import ConfigError, configs_dir, list_chips
from trnsim.config.rules import load_chip
from trnsim.config.system import (
    ALGORITHMS,
    CollectiveConfig,
    EfaConfig,
    LinkConfig,
    RankError,
    SwitchLevelConfig,
    SystemConfig,
    TopologyConfig,
)
from trnsim.config.system_rules import list_systems, load_system, systems_dir
from trnsim.config.tree import (
    CcConfig,
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
    "load_system",
    "list_systems",
    "systems_dir",
    "ConfigError",
    "RankError",
    "to_dict",
    "derived",
    "peak_flops_per_core",
    "system_derived",
    "system_dict",
    "topology_text",
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
    "CcConfig",
    "SystemConfig",
    "TopologyConfig",
    "LinkConfig",
    "SwitchLevelConfig",
    "EfaConfig",
    "CollectiveConfig",
    "ALGORITHMS",
]
