"""The `trnsim` command line (the only code in trnsim that prints): the group and its entry point
in `app`, the commands in `traces`, `sweep`, `configs`, `systems`, `nccom` and `ranks`
(imported here to register them)."""

from trnsim.cli import (  # noqa: F401  (each registers its commands)
    configs,
    nccom,
    ranks,
    sweep,
    systems,
    traces,
)
from trnsim.cli.app import entry, main

__all__ = ["main", "entry"]
