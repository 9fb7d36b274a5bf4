"""Hardware facts that live in the config, not in code: the partition-start steps, the bn_stats
limit, ScalarE's per-generation switches and the allowed logical-core sizes. Each field is in all
three bundled configs with a source or a labelled assumption; the rules around them hold."""

import dataclasses
import re

import pytest

from trnsim.config import ConfigError, configs_dir, list_chips, load_chip
from trnsim.errors import TrnsimError
from trnsim.memory.onchip import place_tiles
from trnsim.runtime import Device

# path -> value per chip (trn1, trn2, trn3)
FIELDS = {
    "core.partition_start_steps": ((32, 64, 128),) * 3,
    "core.vector.bn_stats_max_free": (512, 512, 512),
    "core.scalar.copy_bit_exact": (False, True, True),
    "core.scalar.tensor_scalar_any_ops": (False, False, True),
    "core.scalar.reduce_max": (False, True, True),
    "core.scalar.reciprocal_bias": (False, True, True),
    "lnc_allowed": ((1,), (1, 2), (1, 2)),
}


def get(obj, path: str):
    for key in path.split("."):
        obj = getattr(obj, key)
    return obj


@pytest.mark.parametrize("path", FIELDS)
def test_values_per_chip(path):
    assert list_chips() == ["trn1", "trn2", "trn3"]
    assert tuple(get(load_chip(c), path) for c in list_chips()) == FIELDS[path]


@pytest.mark.parametrize("path", FIELDS)
def test_declared_with_unit_and_help(path):
    *parents, leaf = path.split(".")
    section = get(load_chip("trn2"), ".".join(parents)) if parents else load_chip("trn2")
    field = {f.name: f for f in dataclasses.fields(section)}[leaf]
    assert field.metadata["unit"] in ("count", "bool", "list")
    assert len(field.metadata["help"]) > 10


@pytest.mark.parametrize("chip", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("path", FIELDS)
def test_each_chip_file_sources_the_field(chip, path):
    leaf = path.split(".")[-1]
    lines = (configs_dir() / f"{chip}.yaml").read_text().splitlines()
    found = [line for line in lines if re.match(rf"\s*{leaf}:", line)]
    assert len(found) == 1, f"{chip}.yaml: {leaf} appears {len(found)} times"
    assert "# source:" in found[0] or "# assumption:" in found[0], found[0]


def error(overrides) -> str:
    with pytest.raises(ConfigError) as info:
        load_chip("trn2", overrides)
    return str(info.value)


def test_partition_start_steps_must_nest():
    for bad in ("[32, 48, 128]", "[64, 32, 128]", "[32, 32, 128]"):
        assert error([f"core.partition_start_steps={bad}"]) == (
            f"--set core.partition_start_steps={bad}: core.partition_start_steps: each step must "
            f"be a larger multiple of the one before, got {bad}"
        )
    load_chip("trn2", ["core.partition_start_steps=[16, 32, 64, 128]"])
    load_chip("trn2", ["core.partition_start_steps=[128]"])


def test_the_largest_step_bounds_the_partitions():
    # MAX_PARTITIONS used to be a constant; now the start rule's span bounds the memories
    assert error(["core.partition_start_steps=[32, 64]"]) == (
        "--set core.partition_start_steps=[32, 64]: core.partition_start_steps: "
        "core.sbuf.partitions (128) exceeds the largest of core.partition_start_steps (64)"
    )
    cfg = load_chip(
        "trn2",
        [
            "core.partition_start_steps=[32, 64, 128, 256]",
            "core.sbuf.partitions=256",
            "core.psum.partitions=256",
        ],
    )
    assert cfg.core.sbuf.partitions == 256


def test_tiles_are_bounded_by_the_chip_not_the_trace_format():
    tile = [("t", "sbuf", 129, 4)]
    with pytest.raises(TrnsimError, match="tile t has 129 partitions; SBUF has 128"):
        place_tiles(tile, load_chip("trn2").core)
    wide = load_chip(
        "trn2",
        [
            "core.partition_start_steps=[32, 64, 128, 256]",
            "core.sbuf.partitions=256",
            "core.psum.partitions=256",
        ],
    )
    assert place_tiles(tile, wide.core)[0] == {"t": 0}


def test_lnc_is_bounded_by_lnc_allowed():
    with pytest.raises(TrnsimError, match="lnc 4 is not supported on trn2; expected one of 1, 2"):
        Device(load_chip("trn2"), mode="timing", lnc=4)
    dev = Device(load_chip("trn2", ["lnc_allowed=[1, 2, 4]"]), mode="timing", lnc=4)
    assert dev.chip.logical_cores == 2
