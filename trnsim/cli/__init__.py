"""The `trnsim` command line (the only code in trnsim that prints): the group and its entry point
in `app`, the commands in `traces`, `sweep`, `configs` and `systems` (imported here to register
them)."""

from trnsim.cli import configs, sweep, systems, traces  # noqa: F401  (each registers its commands)
from trnsim.cli.app import entry, main

__all__ = ["main", "entry"]
