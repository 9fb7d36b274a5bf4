"""What produced a report: the trnsim version and a short hash of the effective chip config
(after `base:` and `--set`), so that results of different models never mix unnoticed. Every
report carries it: the summary (`--json`), the profile table and the Perfetto trace."""

from __future__ import annotations

import hashlib
import json

from trnsim import __version__
from trnsim.config import ChipConfig, SystemConfig, to_dict

__all__ = ["provenance", "config_hash"]


def config_hash(cfg: ChipConfig | SystemConfig) -> str:
    """12 hex digits of the SHA-256 of the config's fields (name, values), canonical JSON: two
    configs with any field different hash differently; where the file lies does not count (the
    same config from a checkout or an installed package, or another machine, hashes the same).
    A system config's hash covers its chip's config (where that file lies does not count
    either)."""
    data = {k: v for k, v in to_dict(cfg).items() if k != "source"}
    if isinstance(cfg, SystemConfig):
        data["chip"] = {k: v for k, v in data["chip"].items() if k != "source"}
    text = json.dumps(data, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def provenance(cfg: ChipConfig | SystemConfig) -> dict[str, str]:
    return {"trnsim_version": __version__, "config_hash": config_hash(cfg)}
